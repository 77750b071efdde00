"""Exact laws computed by enumeration in float64: sequences and accepted lengths.

These are the references of the exact checks: where ``V ** L`` is small, the law of the
first L generated tokens is enumerated prefix by prefix through the same logits pipeline
the samplers use (penalties per prefix included), in float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from specexact.decoders import SamplingParams, batch_params, process_logits
from specexact.decoders.processing import BUILTIN_PROCESSING, LogitsProcessing
from specexact.exactness.labels import SequenceLabels

__all__ = [
    "SequenceLaw",
    "sequence_law",
    "acceptance_law",
    "encode_sequences",
    "count_sequences",
]


@dataclass(frozen=True)
class SequenceLaw:
    """Exact law of generated sequences of at most ``length`` tokens.

    Attributes
    ----------
    sequences : np.ndarray
        Shape ``[M, length]``, int64; outcome ``m`` left-aligned, ``-1`` after an EOS.
    probs : np.ndarray
        Shape ``[M]``, float64, positive, sums to 1 (within float64 rounding).
    codes : np.ndarray
        Shape ``[M]``, int64, sorted: :func:`encode_sequences` of ``sequences``.
    vocab_size : int
    """

    sequences: np.ndarray
    probs: np.ndarray
    codes: np.ndarray
    vocab_size: int

    @property
    def num_outcomes(self) -> int:
        return int(self.probs.shape[0])

    def collision_probability(self) -> float:
        """``sum_s P(s)^2``: chance that two independent draws are equal."""
        return float(np.sum(self.probs**2))

    def labels(self) -> SequenceLabels:
        """Readable outcome labels, e.g. ``"3 1 7"``, formatted when read
        (:class:`~specexact.exactness.labels.SequenceLabels`)."""
        return SequenceLabels(self.sequences)


def encode_sequences(tokens: np.ndarray | torch.Tensor, vocab_size: int) -> np.ndarray:
    """Map each ``-1``-padded row to one int64 code (base ``V + 1``, ``-1`` -> 0).

    Shape: ``[N, L] -> [N]``.

    Raises
    ------
    ValueError
        If ``(V + 1) ** L`` does not fit in int64.
    """
    tokens = tokens.cpu().numpy() if isinstance(tokens, torch.Tensor) else np.asarray(tokens)
    L = tokens.shape[1]
    if L * np.log2(vocab_size + 1) >= 62:
        raise ValueError(f"cannot encode sequences of length {L} over vocab_size={vocab_size} in int64")
    weights = (vocab_size + 1) ** np.arange(L, dtype=np.int64)
    return ((tokens.astype(np.int64) + 1) * weights).sum(axis=1)


def sequence_law(
    model,
    prompt_ids: torch.Tensor,
    params: SamplingParams,
    *,
    length: int,
    eos_token_id: int | None = None,
    max_outcomes: int = 2_000_000,
    processing: LogitsProcessing | None = None,
    min_tokens: int = 0,
) -> SequenceLaw:
    """Enumerate the exact law of the first ``length`` tokens naive sampling produces.

    Parameters
    ----------
    model : ToyLM-like
        ``model(input_ids [B, T], positions [B, n]) -> logits [B, n, V]``; evaluated in
        float64 via ``model.to(dtype=torch.float64)`` when it has ``to``.
    prompt_ids : torch.LongTensor
        Shape ``[T0]``: one prompt.
    params : SamplingParams
        Sampling parameters (penalties count the generated tokens, as the samplers do).
    length : int
        L >= 1 generated tokens (fewer when an EOS ends the sequence).
    eos_token_id : int, optional
        Ends a sequence (kept as its last token).
    max_outcomes : int
        Refuse to enumerate more prefixes than this at any depth.
    processing : LogitsProcessing, optional
        The order of operations (default: the built-in
        :func:`~specexact.decoders.process_logits`); a logits-level sampler's own order.
    min_tokens : int, default 0
        EOS is masked for the first ``min_tokens`` tokens: its raw logit is set to
        ``-inf`` before the processing (as vLLM's and Hugging Face's min-tokens logits
        processors do), so it has probability 0 there. No effect without ``eos_token_id``.

    Returns
    -------
    SequenceLaw
        Outcomes of positive probability only.

    Raises
    ------
    ValueError
        If the enumeration would exceed ``max_outcomes``, ``length < 1`` or
        ``min_tokens < 0``.
    """
    if length < 1:
        raise ValueError(f"length must be >= 1, got {length!r}")
    if int(min_tokens) != min_tokens or min_tokens < 0:
        raise ValueError(f"min_tokens must be an integer >= 0, got {min_tokens!r}")
    processing = BUILTIN_PROCESSING if processing is None else processing
    m64 = model.to(dtype=torch.float64) if hasattr(model, "to") else model
    V = m64.vocab_size
    device = m64.device
    prompt = prompt_ids.to(device).reshape(1, -1)
    T0 = prompt.shape[1]
    prefixes = torch.empty(1, 0, dtype=torch.int64, device=device)
    weights = torch.ones(1, dtype=torch.float64, device=device)
    finished_seqs: list[torch.Tensor] = []
    finished_probs: list[torch.Tensor] = []
    for t in range(length):
        N = prefixes.shape[0]
        if N * V > max_outcomes:
            raise ValueError(
                f"enumerating {N * V} prefixes at depth {t + 1} exceeds max_outcomes={max_outcomes}"
            )
        inputs = torch.cat([prompt.expand(N, -1), prefixes], 1)
        positions = torch.full((N, 1), T0 + t - 1, dtype=torch.int64, device=device)
        logits = m64(inputs, positions)[:, 0].to(torch.float64)  # [N, V]
        if eos_token_id is not None and t < min_tokens:
            logits = logits.clone()
            logits[:, eos_token_id] = -torch.inf
        probs = processing(logits, batch_params(params, N, device), prefixes, prompt.expand(N, -1))  # [N, V]
        child = weights[:, None] * probs  # [N, V]
        parent, token = (child > 0).nonzero(as_tuple=True)
        prefixes = torch.cat([prefixes[parent], token[:, None]], 1)
        weights = child[parent, token]
        if eos_token_id is not None:
            ended = token == eos_token_id
            if t < length - 1 and bool(ended.any()):
                pad = torch.full((int(ended.sum()), length - t - 1), -1, dtype=torch.int64, device=device)
                finished_seqs.append(torch.cat([prefixes[ended], pad], 1))
                finished_probs.append(weights[ended])
                prefixes, weights = prefixes[~ended], weights[~ended]
    finished_seqs.append(prefixes)
    finished_probs.append(weights)
    seqs = torch.cat(finished_seqs).cpu().numpy()
    probs = torch.cat(finished_probs).cpu().numpy()
    probs = probs / probs.sum()
    codes = encode_sequences(seqs, V)
    order = np.argsort(codes)
    return SequenceLaw(sequences=seqs[order], probs=probs[order], codes=codes[order], vocab_size=V)


def count_sequences(law: SequenceLaw, tokens: torch.Tensor | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Count sampled sequences per outcome of ``law``.

    Parameters
    ----------
    law : SequenceLaw
    tokens : array
        Shape ``[N, L']`` with ``L' >= law length``, ``-1``-padded; only the first
        ``length`` columns are used.

    Returns
    -------
    counts : np.ndarray
        Shape ``[M]``, int64, aligned with ``law.probs``.
    unexpected : np.ndarray
        Shape ``[U, length]``: the distinct sampled sequences that are not outcomes of
        positive probability (each one is evidence of inexactness on its own).
    """
    L = law.sequences.shape[1]
    tokens = tokens.cpu().numpy() if isinstance(tokens, torch.Tensor) else np.asarray(tokens)
    tokens = tokens[:, :L]
    codes = encode_sequences(tokens, law.vocab_size)
    idx = np.searchsorted(law.codes, codes)
    idx_c = np.minimum(idx, law.num_outcomes - 1)
    known = law.codes[idx_c] == codes
    counts = np.bincount(idx_c[known], minlength=law.num_outcomes).astype(np.int64)
    unexpected = np.unique(tokens[~known], axis=0) if (~known).any() else np.empty((0, L), np.int64)
    return counts, unexpected


def acceptance_law(
    target,
    draft,
    prompt_ids: torch.Tensor,
    target_params: SamplingParams,
    draft_params: SamplingParams,
    *,
    num_draft_tokens: int,
    max_paths: int = 2_000_000,
    target_processing: LogitsProcessing | None = None,
    scheme: str = "tokenwise",
) -> np.ndarray:
    """Exact law of the number of drafts accepted in the first round after ``prompt_ids``.

    ``P(N >= i) = sum over draft paths d_1..d_i of prod_j min(p_j(d_j), q_j(d_j))``, where
    ``p_j, q_j`` are the processed target and draft laws after the prompt and
    ``d_1..d_{j-1}`` (Leviathan et al. 2023, sec. 3.1: a token is proposed and accepted with
    probability ``min(p, q)``). The round's verifier does not see EOS, so EOS plays no part.
    ``target_processing`` (default: built-in) is the target side's order of operations;
    the draft side is always the built-in pipeline (the decoder's own).
    ``scheme="sample_compare"`` (the target samples its own token and the draft is kept
    while they agree, as in mlx-lm and llama.cpp) replaces ``min(p, q)`` by ``p q``.

    Returns
    -------
    np.ndarray
        Shape ``[γ + 1]``, float64: ``P(N = k)`` for ``k = 0..γ``. When the paths of depth
        ``i`` would exceed ``max_paths``, the deeper tail is unknown: entries are NaN from
        the first unknown ``k`` on and the last known entry holds ``P(N >= k)``.
    """
    target_processing = BUILTIN_PROCESSING if target_processing is None else target_processing
    accept_mass = {"tokenwise": torch.minimum, "sample_compare": torch.mul}.get(scheme)
    if accept_mass is None:
        raise ValueError(f"scheme must be 'tokenwise' or 'sample_compare', got {scheme!r}")
    t64 = target.to(dtype=torch.float64)
    d64 = draft.to(dtype=torch.float64)
    V = t64.vocab_size
    device = t64.device
    prompt = prompt_ids.to(device).reshape(1, -1)
    T0 = prompt.shape[1]
    gamma = int(num_draft_tokens)
    at_least = np.full(gamma + 1, np.nan)
    at_least[0] = 1.0
    paths = torch.empty(1, 0, dtype=torch.int64, device=device)
    weights = torch.ones(1, dtype=torch.float64, device=device)
    for j in range(gamma):
        N = paths.shape[0]
        inputs = torch.cat([prompt.expand(N, -1), paths], 1)
        positions = torch.full((N, 1), T0 + j - 1, dtype=torch.int64, device=device)
        p = target_processing(t64(inputs, positions)[:, 0], batch_params(target_params, N, device), paths,
                              prompt.expand(N, -1))
        q = process_logits(d64(inputs, positions)[:, 0], batch_params(draft_params, N, device), paths)
        child = weights[:, None] * accept_mass(p, q)  # [N, V]
        at_least[j + 1] = float(child.sum())
        if j + 1 == gamma:
            break
        parent, token = (child > 0).nonzero(as_tuple=True)
        if parent.numel() * V > max_paths:
            break
        paths = torch.cat([paths[parent], token[:, None]], 1)
        weights = child[parent, token]
    law = np.full(gamma + 1, np.nan)
    for k in range(gamma + 1):
        if k == gamma:
            law[k] = at_least[k]
        elif not np.isnan(at_least[k + 1]):
            law[k] = at_least[k] - at_least[k + 1]
        else:
            law[k] = at_least[k]
            break
    return law
