"""The top-p (nucleus) set of rows of probabilities, as the logits pipeline's reference decides it.

- :func:`nucleus_reference`: the reference's rule, a full stable sort of every row;
- :func:`nucleus_of_chunk`: the same set for every token of positive probability, from a
  histogram of each row and a sort of the one histogram bin where the ``top_p`` mass is
  crossed (a few hundred tokens at V = 32000 instead of the whole nucleus);
- :func:`cut_to_nucleus_of_top_k_`: the same for rows already cut to their top-k tokens,
  from those ``k`` tokens alone (no pass over the row).

The reference (:func:`~specexact.decoders.pipeline.process_logits_reference`) normalises the
kept float32 probabilities in float64 (``y = x / sum(x)``), sorts them (descending, ties by
lower id), and keeps the tokens whose mass before them, ``cumsum(y) - y``, is below
``top_p`` (the most probable token always). :func:`nucleus_of_chunk` decides every token
from float64 sums of its own, whose rounding differs from the reference's; where a token's
mass before it lies further than :func:`certify_margin` from ``top_p`` both sides of the
rounding agree, and a row with any token closer than that takes :func:`nucleus_reference`.
"""

from __future__ import annotations

import torch

__all__ = ["nucleus_reference", "nucleus_of_chunk", "cut_to_nucleus_of_top_k_", "TOP_K_MAX", "certify_margin", "sparse_nonzero", "BINS", "KEY_SHIFT"]

KEY_SHIFT = 19
"""Histogram key of a float32 ``x >= 0``: its bit pattern ``>> 19`` (8 exponent bits and
4 mantissa bits: 16 bins per power of two, monotone in ``x``; ``x <= 1`` lies in
``[0, 2032]``)."""

BINS = 2048
"""Histogram bins per row (keys ``0 .. 2047``)."""

_UNIT = 2.0 ** -53  # float64 unit roundoff


def certify_margin(vocab_size: int) -> float:
    """Distance from ``top_p`` beyond which a token's mass-before is decided alike by the
    reference and by :func:`nucleus_of_chunk`.

    Both compute a float64 mass of at most ``V`` non-negative terms, normalised by a float64
    total of ``V`` terms; each computed value lies within ``(2 V + 2 BINS + 16) u`` of the
    exact real mass (``u = 2**-53``; standard bounds for sums of non-negative terms in any
    order, each division and subtraction adding ``u``). The margin is four times their sum.
    """
    return 4.0 * 2.0 * (2.0 * vocab_size + 2.0 * BINS + 16.0) * _UNIT


def nucleus_reference(kept_probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """The reference's top-p set.

    Shape: ``kept_probs [R, V]`` (normalised float64 kept probabilities), ``top_p [R]``
    (float64) -> ``[R, V]`` bool.
    """
    # Stable descending sort: ties in probability keep the lower token id first.
    sorted_probs, order = torch.sort(kept_probs, dim=-1, descending=True, stable=True)
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs  # exclusive cumsum
    in_nucleus = mass_before < top_p[:, None]
    in_nucleus[:, 0] = True  # the most probable token is always kept
    return torch.zeros_like(in_nucleus).scatter_(1, order, in_nucleus)


def sparse_nonzero(flags: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``flags[:, :width].view(bool).nonzero(as_tuple=True)`` for a sparse ``flags``.

    Shape: ``flags [R, W]`` uint8 (0 / 1, contiguous, ``W`` a multiple of 8, zero past
    ``width``) -> row and column indices ``[n]``, row-major (columns ascending per row).

    Scans the flags eight at a time as int64 words, then only the words that hold a flag:
    on CPU about five times faster than ``nonzero`` when few flags are set.
    """
    R, W = flags.shape
    r, w = flags.view(torch.int64).nonzero(as_tuple=True)  # words holding a flag, row-major
    i, j = flags.view(R, W // 8, 8)[r, w].view(torch.bool).nonzero(as_tuple=True)
    return r[i], w[i] * 8 + j


def nucleus_of_chunk(kept: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """The top-p set of each row of ``kept`` as a float32 mask, as the reference decides it.

    Shape: ``kept [R, V]`` float32 (the kept probabilities, not normalised: ``softmax``
    times the min-p / top-k mask, zeros where cut; finite, ``>= 0``), ``top_p [R]``
    float64 in ``(0, 1)`` -> float32 ``[R, V]``: ``1.0`` in the set, ``0.0`` elsewhere.

    Equals ``nucleus_reference(kept.double() / kept.sum(-1, dtype=float64), top_p)`` on
    every token with ``kept > 0`` (a token with ``kept == 0`` may be marked differently;
    it has probability 0 in the law either way).

    Per row: a histogram of ``kept`` with float64 bin masses (16 bins per power of two,
    :data:`KEY_SHIFT`) gives the total ``T``, the boundary bin ``b`` where the mass from
    the top first reaches ``top_p T``, and the mass ``M`` of the bins above it. Every token
    above ``b`` comes first in the reference's order and has mass-before below ``M / T``;
    every token below ``b`` has mass-before at least ``(M + mass(b)) / T``; the tokens of
    ``b`` (gathered in id order and stable-sorted, descending: the reference's order, ties
    included) get their mass-before from ``M`` and their own cumulative sum. The row is
    *certified* when ``M / T`` and ``(M + mass(b)) / T`` are, and every token of ``b`` is,
    further than :func:`certify_margin` from ``top_p``: each decision is then the
    reference's whatever either side's rounding. Other rows (and rows whose boundary is
    the bin of zeros) take :func:`nucleus_reference` on the reference's own normalisation.
    """
    R, V = kept.shape
    device = kept.device
    delta = certify_margin(V)
    offsets = torch.arange(0, R * BINS, BINS, device=device, dtype=torch.int32)[:, None]  # [R, 1]
    key = torch.bitwise_right_shift(kept.view(torch.int32), KEY_SHIFT)  # [R, V], in [0, 2032] for kept <= 1
    key += offsets
    weights = torch.empty(R, V, dtype=torch.float64, device=device).copy_(kept)
    mass = torch.bincount(key.view(-1), weights=weights.view(-1), minlength=R * BINS).view(R, BINS)
    del weights
    from_top = mass.flip(-1).cumsum_(-1)  # [R, BINS]: float64 mass of the bins at or above BINS-1-i
    total = from_top[:, -1:]  # [R, 1]
    tp = top_p[:, None]
    crossing = (from_top < tp * total).sum(-1, keepdim=True)  # [R, 1]: bins above the boundary bin
    boundary = (BINS - 1) - crossing  # [R, 1]: its key
    above = from_top.gather(1, (crossing - 1).clamp_(min=0)).masked_fill_(crossing == 0, 0.0)  # [R, 1]
    through = above + mass.gather(1, boundary.clamp(min=0))
    certified = (boundary >= 1) & (above < (tp - delta) * total) & (through >= (tp + delta) * total)  # [R, 1]

    # The boundary bin's tokens, in id order (rows not certified gather none). A comparison
    # into uint8 is several times faster than one into bool on CPU.
    width = -(-V // 8) * 8
    flags = torch.empty(R, width, dtype=torch.uint8, device=device)
    flags[:, V:] = 0
    target = boundary.to(torch.int32).masked_fill_(~certified, -1).add_(offsets)  # [R, 1]
    torch.eq(key, target, out=flags[:, :V])
    del key
    r_idx, c_idx = sparse_nonzero(flags, V)
    del flags
    floor = ((boundary + 1).to(torch.int32) << KEY_SHIFT).view(torch.float32)  # [R, 1]
    out = torch.ge(kept, floor, out=torch.empty(R, V, dtype=torch.float32, device=device))  # tokens above b
    certified = certified[:, 0]
    if r_idx.numel():
        size = torch.bincount(r_idx, minlength=R)  # [R]
        k = int(size.max())
        pos = torch.arange(r_idx.numel(), device=device) - (size.cumsum(0) - size)[r_idx]
        values32 = torch.full((R, k), -1.0, dtype=torch.float32, device=device)
        ids = torch.full((R, k), V, dtype=torch.int64, device=device)
        values32[r_idx, pos] = kept[r_idx, c_idx]
        ids[r_idx, pos] = c_idx
        values32, order = torch.sort(values32, dim=-1, descending=True, stable=True)  # padding last
        values = values32.to(torch.float64).clamp_(min=0)
        before = values.cumsum(-1).sub_(values).add_(above).div_(total).sub_(tp)  # [R, k]: mass before - top_p
        valid = values32 >= 0
        certified &= ~((before.abs() <= delta) & valid).any(-1)
        r_in, j_in = ((before < 0) & valid & certified[:, None]).nonzero(as_tuple=True)
        out[r_in, ids.gather(1, order)[r_in, j_in]] = 1.0  # disjoint from the tokens above b
    if not bool(certified.all()):
        rest = (~certified).nonzero().squeeze(1)
        sub = kept.index_select(0, rest).to(torch.float64)
        sub /= kept.index_select(0, rest).sum(-1, keepdim=True, dtype=torch.float64)
        out.index_copy_(0, rest, nucleus_reference(sub, top_p.index_select(0, rest)).to(torch.float32))
    return out


TOP_K_MAX = 1024
"""Largest ``top_k`` :func:`cut_to_nucleus_of_top_k_` takes (its sorts are ``[R, k]``)."""


def cut_to_nucleus_of_top_k_(kept: torch.Tensor, top_p: torch.Tensor, top_ids: torch.Tensor,
                             top_k: torch.Tensor, tie_free: torch.Tensor) -> torch.Tensor:
    """Zero, in place, the tokens of ``kept`` outside its rows' top-p sets, for rows whose
    kept tokens are among their top-k tokens.

    Shape: ``kept [R, V]`` float32 (as :func:`nucleus_of_chunk` takes it: zero outside the
    top-k set of each row), ``top_p [R]`` float64 in ``(0, 1)``, ``top_ids [R, >= k]``
    int64 (each row's ``k = top_k[r]`` largest logits' ids first, any order among them),
    ``top_k [R]`` int64 in ``[1, TOP_K_MAX]``, ``tie_free [R]`` bool (no token outside
    ``top_ids[r, :k]`` ties the k-th logit: then the top-k mask kept those ``k`` tokens
    only) -> ``kept``.

    Afterwards ``kept`` equals ``kept * nucleus_of_chunk(kept, top_p)`` on every token of
    positive probability: the ``k`` candidates are put in the reference's order (value
    descending, ties by lower id) and each one's mass before it is decided from float64
    sums of its own, certified as :func:`nucleus_of_chunk` certifies the boundary bin
    (further than :func:`certify_margin` from ``top_p``). Rows not tie-free, with no
    positive mass, or with a token too close to ``top_p`` take :func:`nucleus_of_chunk`.
    """
    R, V = kept.shape
    device = kept.device
    m = int(top_k.max())
    valid = torch.arange(m, device=device)[None, :] < top_k[:, None]  # [R, m]
    ids = torch.sort(torch.where(valid, top_ids[:, :m], V), dim=-1).values  # id order, padding (V) last
    real = ids < V
    values32 = kept.gather(1, ids.clamp(max=V - 1)).masked_fill_(~real, -1.0)  # [R, m]
    values32, order = torch.sort(values32, dim=-1, descending=True, stable=True)  # the reference's order
    ids = ids.gather(1, order)
    values = values32.to(torch.float64).clamp_(min=0)
    total = values.sum(-1, keepdim=True)  # [R, 1]
    tp = top_p[:, None]
    before = values.cumsum(-1).sub_(values).div_(total).sub_(tp)  # [R, m]: mass before - top_p
    positive = values32 > 0
    certified = tie_free & (total[:, 0] > 0) & ~((before.abs() <= certify_margin(V)) & positive).any(-1)
    cut = (before >= 0) & positive & certified[:, None]
    cut[:, 0] = False  # the most probable token is always kept
    r, j = cut.nonzero(as_tuple=True)
    kept[r, ids[r, j]] = 0.0
    if not bool(certified.all()):
        rest = (~certified).nonzero().squeeze(1)
        sub = kept.index_select(0, rest)
        kept.index_copy_(0, rest, sub.mul_(nucleus_of_chunk(sub, top_p.index_select(0, rest))))
    return kept
