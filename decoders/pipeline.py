"""The logits pipeline shared by the naive and the speculative sampler.

Order of operations (matches vLLM v1's ``Sampler``: penalties, temperature, min-p, then
top-k and top-p on what is left):

1. penalties over the history (tokens generated so far): repetition (divide a positive
   logit / multiply a negative one), then frequency (``- f * count``), then presence
   (``- r * [count > 0]``);
2. temperature (``0`` = greedy: a point mass on the argmax, lowest id among ties);
3. min-p: keep tokens with ``prob >= min_p * max(prob)``;
4. top-k: keep tokens whose logit is ``>=`` the k-th largest (ties at the k-th value kept);
5. top-p on the law renormalised after 3-4: keep the smallest set of most probable tokens
   whose mass is ``>= top_p``; ties in probability are ranked lower token id first; the most
   probable token is always kept.

The result is the *actual* sampling law: normalised probabilities, exact zeros where a
token was truncated. That is the law a speculative verifier must receive as the draft's
``draft_probs`` and the target's ``target_probs`` (Leviathan et al. 2023, sec. 2.3).

Difference from vLLM: vLLM's repetition penalty also counts prompt tokens; here every
penalty uses the ``history`` passed in, and the samplers pass the generated tokens only.
"""

from __future__ import annotations

import torch

from .params import BatchedParams

__all__ = ["process_logits", "token_counts"]


def token_counts(history: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Occurrences of each token id in each row of ``history``.

    Parameters
    ----------
    history : torch.LongTensor
        Shape ``[B, H]``; token ids, ``-1`` for padding (ignored).
    vocab_size : int
        V.

    Returns
    -------
    torch.Tensor
        Shape ``[B, V]``, float32 counts, on ``history``'s device.

    Raises
    ------
    ValueError
        If an id is ``>= vocab_size`` or ``< -1``.
    """
    counts = torch.zeros(history.shape[0], vocab_size, dtype=torch.float32, device=history.device)
    if history.numel() == 0:
        return counts
    if int(history.max()) >= vocab_size or int(history.min()) < -1:
        raise ValueError(
            f"history ids must be in [0, {vocab_size}) or -1 (padding), got range "
            f"[{int(history.min())}, {int(history.max())}]"
        )
    valid = history >= 0
    counts.scatter_add_(1, history.clamp_min(0), valid.to(torch.float32))
    return counts


def _apply_penalties(
    logits: torch.Tensor, params: BatchedParams, history: torch.Tensor
) -> torch.Tensor:
    counts = token_counts(history, logits.shape[-1]).to(logits.dtype)  # [B, V]
    seen = counts > 0
    rep = params.repetition_penalty.to(logits.dtype)[:, None]  # [B, 1]
    penalised = torch.where(logits > 0, logits / rep, logits * rep)
    logits = torch.where(seen, penalised, logits)
    logits = logits - params.frequency_penalty.to(logits.dtype)[:, None] * counts
    logits = logits - params.presence_penalty.to(logits.dtype)[:, None] * seen.to(logits.dtype)
    return logits


def _validate_logits(logits: torch.Tensor) -> None:
    if logits.dim() != 2:
        raise ValueError(f"logits must have shape [B, V], got {tuple(logits.shape)}")
    if logits.shape[-1] < 1:
        raise ValueError(f"logits must have a vocabulary of at least 1, got shape {tuple(logits.shape)}")
    if not logits.is_floating_point():
        raise TypeError(f"logits must be floating point, got {logits.dtype}")
    if torch.isnan(logits).any():
        row = int(torch.isnan(logits).any(-1).nonzero()[0, 0])
        raise ValueError(f"logits contain NaN (first in row {row})")
    if torch.isposinf(logits).any():
        row = int(torch.isposinf(logits).any(-1).nonzero()[0, 0])
        raise ValueError(f"logits contain +inf (first in row {row})")
    dead = torch.isneginf(logits).all(-1)
    if dead.any():
        raise ValueError(f"logits of row {int(dead.nonzero()[0, 0])} are all -inf: no token can be sampled")


def process_logits(
    logits: torch.Tensor,
    params: BatchedParams,
    history: torch.Tensor | None = None,
) -> torch.Tensor:
    """Turn raw logits into the actual sampling law, row by row.

    Shape: ``logits [B, V] -> probs [B, V]``.

    Parameters
    ----------
    logits : torch.Tensor
        Shape ``[B, V]``, floating point (half precision is computed in float32; float64
        stays float64). ``-inf`` marks a token as impossible; NaN and ``+inf`` are refused.
    params : BatchedParams
        Per-row parameters, tensors of shape ``[B]`` (see :func:`batch_params`).
    history : torch.LongTensor, optional
        Shape ``[B, H]``; the tokens the penalties count, ``-1`` for padding.

    Returns
    -------
    torch.Tensor
        Shape ``[B, V]``, float32 (float64 for float64 input): non-negative, each row sums
        to 1 within rounding, exact zeros outside the kept set.

    Raises
    ------
    ValueError
        On NaN or ``+inf`` logits, an all ``-inf`` row, a batch size that does not match
        ``params``, or history ids outside ``[0, V)``.

    Notes
    -----
    The order of operations is the module's docstring; it follows vLLM v1.
    """
    _validate_logits(logits)
    if params.batch_size != logits.shape[0]:
        raise ValueError(
            f"params has {params.batch_size} rows but logits has {logits.shape[0]}"
        )
    if logits.dtype not in (torch.float32, torch.float64):
        logits = logits.float()
    B, V = logits.shape
    if history is not None and history.shape[0] != B:
        raise ValueError(f"history has {history.shape[0]} rows but logits has {B}")
    if history is not None and history.numel() > 0 and params.any_penalty:
        logits = _apply_penalties(logits, params, history)

    greedy = params.temperature == 0  # [B]
    temperature = torch.where(greedy, torch.ones_like(params.temperature), params.temperature)
    logits = logits / temperature.to(logits.dtype)[:, None]
    probs = torch.softmax(logits, dim=-1)  # [B, V]

    keep = torch.isfinite(logits)  # [B, V]
    min_p = params.min_p.to(probs.dtype)
    if (min_p > 0).any():
        max_prob = probs.max(dim=-1, keepdim=True).values
        keep &= probs >= min_p[:, None] * max_prob

    top_k = params.top_k
    use_k = (top_k > 0) & (top_k < V)
    use_p = params.top_p < 1
    if use_k.any():
        rows = use_k.nonzero().squeeze(1)
        k_rows = top_k[rows]  # [R]
        top_vals = torch.topk(logits[rows], int(k_rows.max()), dim=-1).values  # [R, k_max]
        kth = top_vals.gather(1, (k_rows - 1)[:, None])  # [R, 1]
        keep[rows] &= logits[rows] >= kth  # ties at the k-th value are all kept
    if use_p.any():
        rows = use_p.nonzero().squeeze(1)
        kept_probs = torch.where(keep[rows], probs[rows], 0).to(torch.float64)  # [R, V]
        kept_probs = kept_probs / kept_probs.sum(-1, keepdim=True)
        # Stable descending sort: ties in probability keep the lower token id first.
        sorted_probs, order = torch.sort(kept_probs, dim=-1, descending=True, stable=True)
        mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs  # exclusive cumsum
        in_nucleus = mass_before < params.top_p[rows].to(torch.float64)[:, None]
        in_nucleus[:, 0] = True  # the most probable token is always kept
        keep[rows] &= torch.zeros_like(in_nucleus).scatter_(1, order, in_nucleus)

    probs = torch.where(keep, probs, 0)
    probs = probs / probs.sum(-1, keepdim=True)
    if greedy.any():
        one_hot = torch.zeros_like(probs).scatter_(1, logits.argmax(-1, keepdim=True), 1.0)
        probs = torch.where(greedy[:, None], one_hot, probs)
    return probs
