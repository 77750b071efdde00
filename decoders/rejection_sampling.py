"""Modified rejection sampling for a chain of drafted tokens (the ``verify`` protocol).

The protocol is how the built-in decoder and any third-party verifier plug into the audit::

    verify(draft_token_ids: LongTensor[B, K],
           draft_probs: FloatTensor[B, K, V],
           target_probs: FloatTensor[B, K + 1, V],
           generator: torch.Generator | None) -> LongTensor[B, K + 1]
"""

from __future__ import annotations

import torch

from .sampling import sample_from_probs, uniform

__all__ = ["verify", "validate_verify_inputs", "PLACEHOLDER_ID"]

PLACEHOLDER_ID = -1
"""Fills the positions of the output after the last emitted token."""


def validate_verify_inputs(
    draft_token_ids: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor
) -> None:
    """Check the shapes, dtypes and values of the ``verify`` inputs.

    Raises
    ------
    TypeError
        If a tensor has the wrong dtype kind (ids must be integer, probabilities floating).
    ValueError
        On an empty batch, ``K == 0``, mismatched shapes or vocabularies, ids outside
        ``[0, V)``, NaN / infinite / negative probabilities, or a probability row with no
        positive mass. The message names the argument and the offending value.
    """
    for name, t in (("draft_token_ids", draft_token_ids), ("draft_probs", draft_probs),
                    ("target_probs", target_probs)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if draft_token_ids.dim() != 2:
        raise ValueError(f"draft_token_ids must have shape [B, K], got {tuple(draft_token_ids.shape)}")
    if draft_token_ids.dtype.is_floating_point or draft_token_ids.dtype == torch.bool:
        raise TypeError(f"draft_token_ids must be an integer tensor, got {draft_token_ids.dtype}")
    B, K = draft_token_ids.shape
    if B == 0:
        raise ValueError("draft_token_ids has an empty batch (B=0)")
    if K == 0:
        raise ValueError("draft_token_ids has K=0 drafted tokens; verify needs K >= 1")
    if draft_probs.dim() != 3 or tuple(draft_probs.shape[:2]) != (B, K):
        raise ValueError(f"draft_probs must have shape [B={B}, K={K}, V], got {tuple(draft_probs.shape)}")
    V = draft_probs.shape[2]
    if tuple(target_probs.shape) != (B, K + 1, V):
        raise ValueError(
            f"target_probs must have shape [B={B}, K+1={K + 1}, V={V}], got {tuple(target_probs.shape)}"
        )
    if V == 0:
        raise ValueError("draft_probs has an empty vocabulary (V=0)")
    lo, hi = int(draft_token_ids.min()), int(draft_token_ids.max())
    if lo < 0 or hi >= V:
        raise ValueError(f"draft_token_ids must lie in [0, {V}), got values in [{lo}, {hi}]")
    for name, t in (("draft_probs", draft_probs), ("target_probs", target_probs)):
        if not t.is_floating_point():
            raise TypeError(f"{name} must be floating point, got {t.dtype}")
        # One pass over the tensor: per-row min and max catch NaN (propagates), negative
        # values, +inf and rows without mass; the slower diagnosis runs only on failure.
        row_min, row_max = torch.aminmax(t, dim=-1)
        if bool(((row_min >= 0) & (row_max > 0) & (row_max < torch.inf)).all()):
            continue
        if not bool(torch.isfinite(t).all()):
            bad = (~torch.isfinite(t)).nonzero()[0].tolist()
            raise ValueError(f"{name} has a NaN or infinite value at index {bad}: {t[tuple(bad)].item()}")
        if bool((t < 0).any()):
            bad = (t < 0).nonzero()[0].tolist()
            raise ValueError(f"{name} has a negative value at index {bad}: {t[tuple(bad)].item()}")
        empty = t.sum(-1) <= 0
        if bool(empty.any()):
            raise ValueError(f"{name} has a row with no positive mass at [b, k] = {empty.nonzero()[0].tolist()}")


def verify(
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    generator: torch.Generator | None = None,
    *,
    validate: bool = True,
) -> torch.Tensor:
    """Accept or reject K drafted tokens per row; emit the recovered or the bonus token.

    Shape: ``draft_token_ids [B, K], draft_probs [B, K, V], target_probs [B, K+1, V]
    -> emitted [B, K+1]``.

    Drafted token ``d_i ~ draft_probs[:, i]`` is accepted with probability
    ``min(1, target_probs[:, i, d_i] / draft_probs[:, i, d_i])``. At the first rejection the
    row emits a recovered token from the residual distribution
    ``max(target_probs[:, i] - draft_probs[:, i], 0)`` (normalised) and stops; if all K are
    accepted it emits a bonus token from ``target_probs[:, K]``. Every emitted sequence then
    has exactly the target's law (Leviathan et al. 2023, arXiv:2211.17192, Algorithm 1 and
    Theorem 1; Chen et al. 2023, arXiv:2302.01318, Algorithm 2).

    Parameters
    ----------
    draft_token_ids : torch.LongTensor
        Shape ``[B, K]``, ``K >= 1``; ids in ``[0, V)``.
    draft_probs : torch.Tensor
        Shape ``[B, K, V]``; the law each draft token was actually sampled from (after the
        draft's own temperature and truncation). Rows need not be normalised exactly.
    target_probs : torch.Tensor
        Shape ``[B, K+1, V]``; the target's processed law after each candidate prefix: row
        ``i`` is the law of the token after ``d_1 .. d_i`` (row 0: after the context alone).
    generator : torch.Generator, optional
        The only source of randomness (torch's default generator when None); on the
        inputs' device. Draws ``B * K`` float64 uniforms, then ``B``.
    validate : bool, keyword-only
        Check inputs with :func:`validate_verify_inputs` (one pass over the tensors).

    Returns
    -------
    torch.LongTensor
        Shape ``[B, K+1]``: the accepted draft tokens, then the recovered or bonus token,
        left-aligned; :data:`PLACEHOLDER_ID` (``-1``) after the last one. Each row emits
        between 1 and ``K+1`` tokens, all in ``[0, V)``.

    Raises
    ------
    TypeError, ValueError
        From :func:`validate_verify_inputs` on bad input.

    Notes
    -----
    Float guards: a drafted token with ``draft_probs == 0`` (impossible in exact
    arithmetic) is accepted iff its target probability is positive (the ratio is taken as
    ``+inf``, or ``0`` for ``0/0``). The comparison ``u * q < p`` is made in float64 and
    avoids the division. The residual is formed in the inputs' precision (at least
    float32; one subtraction, so each entry is within half an ulp of ``max(p - q, 0)``); if
    rounding leaves it with no mass (target equal to the draft up to ulps) the row falls
    back to the target row, which is then the exact law to within that rounding. Sampling
    is by inverse CDF with float64 accumulation, so a zero-probability id is never emitted.
    """
    if validate:
        validate_verify_inputs(draft_token_ids, draft_probs, target_probs)
    B, K = draft_token_ids.shape
    device = target_probs.device
    ids = draft_token_ids.long()
    rows = torch.arange(B, device=device)

    # Acceptance: only p_i(d_i) and q_i(d_i) are needed for the decisions.
    p_d = target_probs[:, :K].gather(2, ids[:, :, None]).squeeze(2).to(torch.float64)  # [B, K]
    q_d = draft_probs.gather(2, ids[:, :, None]).squeeze(2).to(torch.float64)  # [B, K]
    u = uniform((B, K), generator, device)  # [B, K]
    accepted = u * q_d < p_d  # [B, K]
    num_accepted = accepted.to(torch.int64).cumprod(dim=1).sum(dim=1)  # [B]

    # One full row at the stopping position: residual after a rejection, target for the bonus.
    stop = num_accepted  # [B], in [0, K]
    dtype = torch.promote_types(target_probs.dtype, torch.float32)
    target_row = target_probs[rows, stop].to(dtype)  # [B, V]
    rejected = stop < K
    draft_row = draft_probs[rows, stop.clamp(max=K - 1)].to(dtype)  # [B, V]
    residual = torch.where(rejected[:, None], (target_row - draft_row).clamp_min(0), target_row)
    no_mass = residual.amax(-1) <= 0
    if bool(no_mass.any()):
        residual = torch.where(no_mass[:, None], target_row, residual)
    last = sample_from_probs(residual, generator)  # [B]

    out = torch.full((B, K + 1), PLACEHOLDER_ID, dtype=torch.int64, device=device)
    positions = torch.arange(K + 1, device=device)[None, :]  # [1, K+1]
    out[:, :K] = torch.where(positions[:, :K] < stop[:, None], ids, PLACEHOLDER_ID)
    out[rows, stop] = last
    return out
