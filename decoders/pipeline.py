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

from .law_chunk import TOP_P, has_penalty, penalise_, process_chunk, signatures
from .nucleus import nucleus_reference as _nucleus_reference
from .params import BatchedParams
from .sampling import SMALL_ELEMENTS

__all__ = ["process_logits", "process_logits_reference", "token_counts"]


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
    _check_history_ids(history, vocab_size)
    valid = history >= 0
    counts.scatter_add_(1, history.clamp_min(0), valid.to(torch.float32))
    return counts


def _check_history_ids(history: torch.Tensor, vocab_size: int) -> None:
    if int(history.max()) >= vocab_size or int(history.min()) < -1:
        raise ValueError(
            f"history ids must be in [0, {vocab_size}) or -1 (padding), got range "
            f"[{int(history.min())}, {int(history.max())}]"
        )


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


_OVERFLOW_GUARD = 1e37  # well below float32's max (3.4e38)


def _widen_if_overflow(logits: torch.Tensor, params: BatchedParams,
                       largest: float | None = None) -> tuple[torch.Tensor, torch.dtype | None]:
    """Compute in float64 when a penalty or the temperature could push a finite float32
    logit past the float32 range (which would turn a row into NaN). Returns the logits to
    use and the dtype to give the result back in (None: unchanged). ``largest``: the
    largest finite ``|logit|`` when the caller already has it (computed here otherwise)."""
    if logits.dtype == torch.float64:
        return logits, None
    rep = params.repetition_penalty
    temp = params.temperature
    factor = torch.maximum(rep, 1 / rep) / torch.where(temp > 0, temp, torch.ones_like(temp))
    if largest is None:
        finite = torch.where(torch.isfinite(logits), logits, 0) if bool(torch.isneginf(logits).any()) else logits
        largest = float(finite.abs().amax())
    magnitude = largest * float(factor.max()) + float(params.frequency_penalty.abs().max()
                                                                          + params.presence_penalty.abs().max()) * logits.shape[-1]
    if magnitude < _OVERFLOW_GUARD:
        return logits, None
    return logits.to(torch.float64), logits.dtype


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


def process_logits_reference(
    logits: torch.Tensor,
    params: BatchedParams,
    history: torch.Tensor | None = None,
) -> torch.Tensor:
    """The readable reference of :func:`process_logits` (same output, bit for bit).

    It states the pipeline one tensor operation at a time over the whole ``[B, V]`` batch;
    :func:`process_logits` returns the same tensor with fewer passes over it. Parameters,
    shapes, dtypes, return value and exceptions are those of :func:`process_logits`. Tests
    compare the two on every family of ``specexact.strategies``.
    """
    _validate_logits(logits)
    if params.batch_size != logits.shape[0]:
        raise ValueError(
            f"params has {params.batch_size} rows but logits has {logits.shape[0]}"
        )
    if logits.dtype not in (torch.float32, torch.float64):
        logits = logits.float()
    logits, narrow_to = _widen_if_overflow(logits, params)
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
    return probs if narrow_to is None else probs.to(narrow_to)


# --------------------------------------------------------------------------- fast path
#
# process_logits below returns exactly what process_logits_reference returns (tests compare
# them bit for bit); it only avoids work on [B, V] tensors. On CPU every fresh [B, V]
# tensor costs page faults as well as a pass over memory, and the reference makes about
# a dozen of them even for plain T=1 sampling.


def _validate_logits_fast(logits: torch.Tensor) -> None:
    """:func:`_validate_logits` in one pass: the row max is NaN if the row holds a NaN,
    ``+inf`` if it holds a ``+inf``, ``-inf`` if every entry is ``-inf``. On any doubt the
    reference check runs and raises its own message."""
    if logits.dim() == 2 and logits.shape[-1] >= 1 and logits.is_floating_point():
        row_max = logits.amax(dim=-1)
        if bool(((row_max < torch.inf) & (row_max > -torch.inf)).all()):
            return
    _validate_logits(logits)


def _apply_penalties_sparse(
    logits: torch.Tensor, params: BatchedParams, history: torch.Tensor
) -> torch.Tensor:
    """:func:`_apply_penalties` on the (row, token) pairs of the history only.

    The seen tokens get the reference's arithmetic, operation for operation; an unseen
    token's logit ``x`` is left as is, where the reference computes ``x - f*0 - r*0``: the
    same value (at most the sign of a zero logit differs, which no later step can see).
    """
    _check_history_ids(history, logits.shape[1])
    return penalise_(logits.clone(), params.repetition_penalty, params.frequency_penalty, params.presence_penalty,
                     history)


_KEY_SHIFT = 19  # bucket key: float32 bits >> 19 (8 exponent bits and 4 mantissa bits)
_KEY_ONE = (127 << 23) >> _KEY_SHIFT  # key of 1.0
_BUCKETS = 16 * 40  # 16 buckets per power of two, down to 2^-40; the last one holds the rest
_MASS_MARGIN = 1e-6  # the bucket masses (float32 keys) only pick the threshold: overshoot a little
_CERTIFY_MARGIN = 1e-12  # far above the float64 rounding of the cumulative sums (~1e-16)


def _nucleus_fast(kept_probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """:func:`_nucleus_reference` without sorting the whole vocabulary.

    Same decision for every token of positive kept probability (a token of probability 0
    may be marked differently; it is 0 in the output either way). Per row, the candidates
    are the tokens at or above a threshold ``t`` (so the set is closed under ties, and is
    a prefix of the reference's order); ``t`` is the highest bucket boundary above which a
    histogram of the row holds ``top_p`` of the mass (buckets of the float32 bit pattern,
    16 per power of two, monotone in the value). Gathered in id order and stable-sorted by
    probability (descending), the candidates are in the reference's order, and their
    cumulative sums are the first terms of the reference's, bit for bit (``cumsum`` adds
    left to right). A row is certified when its candidates' total reaches
    ``top_p + 1e-12``: every later token's mass-before is then above ``top_p`` whatever
    the rounding. Rows with more than V/2 candidates, or not certified, take the full sort.
    """
    R, V = kept_probs.shape
    NB = _BUCKETS
    if R == 0 or V < 256:
        return _nucleus_reference(kept_probs, top_p)
    device = kept_probs.device
    # Histogram per row: bucket b holds float32 keys KEY_ONE - b (b = 0 starts at 1.0),
    # the last bucket everything smaller (and 0); flat bins row * NB + b.
    key = kept_probs.to(torch.float32).view(torch.int32) >> _KEY_SHIFT
    key = key.neg_().add_(_KEY_ONE).clamp_(0, NB - 1)
    key += (torch.arange(R, device=device, dtype=torch.int32) * NB)[:, None]
    mass = torch.bincount(key.view(-1), weights=kept_probs.view(-1), minlength=R * NB).view(R, NB)
    del key
    crossing = (mass.cumsum(-1) < top_p[:, None] + _MASS_MARGIN).sum(-1, keepdim=True)  # [R, 1]
    threshold = ((_KEY_ONE - crossing.to(torch.int32)) << _KEY_SHIFT).view(torch.float32).to(torch.float64)
    candidate = kept_probs >= threshold  # [R, V]
    size = candidate.sum(-1)  # [R]
    usable = (crossing[:, 0] < NB - 1) & (2 * size <= V)
    certified = torch.zeros(R, dtype=torch.bool, device=device)
    out = torch.zeros(R, V, dtype=torch.bool, device=device)
    if bool(usable.any()):
        candidate &= usable[:, None]
        size = size * usable
        k = int(size.max())
        # Candidates in id order, left-aligned; padding: probability -1 (sorts last), id V.
        r_idx, c_idx = candidate.nonzero(as_tuple=True)  # row-major: ids ascending per row
        pos = torch.arange(r_idx.numel(), device=device) - (size.cumsum(0) - size)[r_idx]
        values = torch.full((R, k), -1.0, dtype=torch.float64, device=device)
        ids = torch.full((R, k), V, dtype=torch.int64, device=device)
        values[r_idx, pos] = kept_probs[r_idx, c_idx]
        ids[r_idx, pos] = c_idx
        values, order = torch.sort(values, dim=-1, descending=True, stable=True)
        ids = ids.gather(1, order)
        cumulative = torch.cumsum(values, dim=-1)
        in_nucleus = (cumulative - values) < top_p[:, None]
        in_nucleus[:, 0] = True
        total = cumulative.gather(1, (size - 1).clamp_(min=0)[:, None])[:, 0]
        certified = usable & (total >= top_p + _CERTIFY_MARGIN)  # NaN: False
        marks = torch.zeros(R, V + 1, dtype=torch.bool, device=device)
        marks.scatter_(1, ids, in_nucleus & certified[:, None])
        out = marks[:, :V]
    if not bool(certified.all()):
        rest = (~certified).nonzero().squeeze(1)
        out[rest] = _nucleus_reference(kept_probs[rest], top_p[rest])
    return out


# --------------------------------------------------------------------------- grouped path
#
# _process_grouped returns what process_logits_reference returns, bit for bit, for
# float32 logits on CPU without -inf, when the float32 overflow guard does not widen: rows
# are grouped by the operations they need (min-p, top-k, top-p, greedy) and each group is
# processed a cache-sized chunk of rows at a time, so each operation reads the chunk from
# cache (specexact.decoders.law_chunk.process_chunk; top-p from a histogram and a sort of
# one bin per row, specexact.decoders.nucleus).

GROUPED = True
"""Whether :func:`process_logits` takes the grouped path where it applies (False: the
batched path alone, as before it existed; for benchmarks and tests)."""

GROUP_CHUNK_ELEMENTS = 1 << 18
"""Entries per chunk of the grouped path (1 MiB of float32: an L2 cache's worth)."""

TOP_P_CHUNK_ELEMENTS = 1 << 20
"""Entries per chunk of rows that take top-p: its per-chunk work on small tensors (the
boundary bin's tokens) costs as much as its passes over the rows at 2**18 entries, and
four times fewer chunks outweigh the chunk spilling from L2 (measured on a 2-core CPU)."""

SERIAL_ROW = 32768
"""Longest row the grouped path takes: torch reduces a single row of fewer entries on one
thread, as it reduces each row of a batch, so a chunk's per-row sums are the reference's
whatever the chunk's size (a single longer row is split across threads)."""


def chunk_rows_for(vocab_size: int, signature: int = 0) -> int:
    """Rows per chunk of the grouped path for rows of ``vocab_size`` entries and the given
    signature (:func:`~specexact.decoders.law_chunk.signatures`); at least 1."""
    elements = TOP_P_CHUNK_ELEMENTS if signature & TOP_P else GROUP_CHUNK_ELEMENTS
    return max(1, elements // max(1, vocab_size))


def _process_grouped(logits: torch.Tensor, params: BatchedParams,
                     history: torch.Tensor | None) -> torch.Tensor | None:
    """:func:`process_logits_reference` by groups of rows and cache-sized chunks, or None
    where this path does not apply (then :func:`process_logits` takes its batched path,
    which also raises every error)."""
    B, V = logits.shape
    if (logits.device.type != "cpu" or logits.dtype != torch.float32 or not 256 <= V <= SERIAL_ROW
            or B * V <= SMALL_ELEMENTS or params.batch_size != B or (history is not None and history.shape[0] != B)):
        return None
    lo, hi = torch.aminmax(logits)  # NaN propagates; -inf / +inf are left to the batched path
    if not bool(torch.isfinite(lo) & torch.isfinite(hi)):
        return None
    x, narrow_to = _widen_if_overflow(logits, params, max(abs(float(lo)), abs(float(hi))))
    if narrow_to is not None:
        return None
    penalised = None
    if history is not None and history.numel() > 0 and params.any_penalty:
        _check_history_ids(history, V)
        penalised = has_penalty(params)
    greedy = params.temperature == 0  # [B]
    temperature = torch.where(greedy, torch.ones_like(params.temperature), params.temperature).to(x.dtype)
    signature = signatures(params, V)
    min_p = params.min_p.to(torch.float32)
    top_p = params.top_p.to(torch.float64)
    out = torch.empty(B, V, dtype=x.dtype, device=x.device)
    for sig in torch.unique(signature).tolist():
        rows = (signature == sig).nonzero().squeeze(1)
        step = chunk_rows_for(V, sig)
        for s in range(0, rows.numel(), step):
            idx = rows[s:s + step]
            X = x.index_select(0, idx)  # [R, V], the chunk's logits (a copy)
            if penalised is not None and bool(penalised[idx].any()):
                penalise_(X, params.repetition_penalty[idx], params.frequency_penalty[idx],
                          params.presence_penalty[idx], history.index_select(0, idx))
            out.index_copy_(0, idx, process_chunk(X, sig, temperature[idx], min_p[idx], params.top_k[idx],
                                                  top_p[idx]))
    return out


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
    :func:`process_logits_reference` spells it out one ``[B, V]`` operation at a time; this
    function returns the same tensor, bit for bit, with fewer passes: the input check is
    one row-max reduction; the float32 overflow guard takes its largest ``|logit|`` from
    one min/max reduction (when no logit is ``-inf``); penalties touch only the ``(row, token)`` pairs of the history
    (when ``V >= 8 H``);
    the division by the temperature is skipped when every row has temperature 1 (or 0);
    the kept-set mask is only built once something is cut (a ``-inf`` logit, min-p, top-k
    or top-p); top-k works on the logits in place when every row uses it; top-p sorts only
    the candidate tokens that can reach the ``top_p`` mass (:func:`_nucleus_fast`); the
    final renormalisation is in place.
    """
    if GROUPED and logits.dim() == 2 and logits.is_floating_point():
        grouped = _process_grouped(logits, params, history)
        if grouped is not None:
            return grouped
    _validate_logits_fast(logits)
    if params.batch_size != logits.shape[0]:
        raise ValueError(
            f"params has {params.batch_size} rows but logits has {logits.shape[0]}"
        )
    if logits.dtype not in (torch.float32, torch.float64):
        logits = logits.float()
    largest = None  # the overflow guard's largest finite |logit|, from one min/max pass
    if logits.dtype == torch.float32 and logits.numel():
        lo, hi = torch.aminmax(logits)  # hi is finite (checked above); lo is -inf if any logit is
        if bool(torch.isfinite(lo)):
            largest = max(abs(float(lo)), abs(float(hi)))
    logits, narrow_to = _widen_if_overflow(logits, params, largest)
    B, V = logits.shape
    if history is not None and history.shape[0] != B:
        raise ValueError(f"history has {history.shape[0]} rows but logits has {B}")
    if history is not None and history.numel() > 0 and params.any_penalty:
        # Sparse when the history is short next to the vocabulary (its sort of the (row,
        # token) pairs costs more than the dense passes on tiny vocabularies).
        sparse = V >= 8 * history.shape[1]
        logits = (_apply_penalties_sparse if sparse else _apply_penalties)(logits, params, history)

    greedy = params.temperature == 0  # [B]
    temperature = torch.where(greedy, torch.ones_like(params.temperature), params.temperature)
    if bool((temperature != 1).any()):  # x / 1 == x exactly: skip the pass when all are 1
        logits = logits / temperature.to(logits.dtype)[:, None]
    probs = torch.softmax(logits, dim=-1)  # [B, V]

    # keep: None means "every token kept so far" (all logits finite).
    keep = None
    if logits.numel() == 0:
        keep = torch.isfinite(logits)
    else:
        lo, hi = torch.aminmax(logits)
        if not bool(torch.isfinite(lo) & torch.isfinite(hi)):
            keep = torch.isfinite(logits)
    min_p = params.min_p.to(probs.dtype)
    if (min_p > 0).any():
        max_prob = probs.max(dim=-1, keepdim=True).values
        above = probs >= min_p[:, None] * max_prob
        keep = above if keep is None else keep & above

    top_k = params.top_k
    use_k = (top_k > 0) & (top_k < V)
    use_p = params.top_p < 1
    if use_k.any():
        rows = use_k.nonzero().squeeze(1)
        every_row = rows.numel() == B
        sub = logits if every_row else logits[rows]
        k_rows = top_k[rows]  # [R]
        top_vals = torch.topk(sub, int(k_rows.max()), dim=-1).values  # [R, k_max]
        kth = top_vals.gather(1, (k_rows - 1)[:, None])  # [R, 1]
        in_top = sub >= kth  # ties at the k-th value are all kept
        if every_row:
            keep = in_top if keep is None else keep & in_top
        else:
            if keep is None:
                keep = torch.ones(B, V, dtype=torch.bool, device=logits.device)
            keep[rows] &= in_top
    if use_p.any():
        rows = use_p.nonzero().squeeze(1)
        every_row = rows.numel() == B
        probs_p = probs if every_row else probs[rows]
        if keep is not None:  # (with keep None, the reference's where() is the identity)
            probs_p = torch.where(keep if every_row else keep[rows], probs_p, 0)
        kept_probs = probs_p.to(torch.float64)  # [R, V]
        kept_probs = kept_probs / kept_probs.sum(-1, keepdim=True)
        nucleus = _nucleus_fast(kept_probs, params.top_p[rows].to(torch.float64))
        if every_row:
            keep = nucleus if keep is None else keep & nucleus
        else:
            if keep is None:
                keep = torch.ones(B, V, dtype=torch.bool, device=logits.device)
            keep[rows] &= nucleus

    if keep is not None:
        probs = torch.where(keep, probs, 0)
    probs.div_(probs.sum(-1, keepdim=True))  # probs is a fresh tensor here
    if greedy.any():
        one_hot = torch.zeros_like(probs).scatter_(1, logits.argmax(-1, keepdim=True), 1.0)
        probs = torch.where(greedy[:, None], one_hot, probs)
    return probs if narrow_to is None else probs.to(narrow_to)
