"""Drawing token ids from probability rows with an explicit generator.

- :func:`sample_from_probs`: one id per row by inverse CDF, two-level for long rows;
- :func:`sample_from_probs_reference`: the same algorithm spelled out one ``[B, V]``
  operation at a time. Both return the same ids from the same generator state and leave it
  in the same state (``tests/decoders/test_sampling.py`` compares them).

The fast path works on row chunks of about :data:`CHUNK_ELEMENTS` entries so that its
temporaries stay in cache: on CPU each fresh large tensor costs page faults, often more
than the arithmetic. Every per-row result (float64 sums, cumulative sums, searches) is the
reference's, bit for bit, because each is computed row by row in the same order whatever
the number of rows; on other devices, where reductions may be split differently by batch
size, the reference runs.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

__all__ = ["sample_from_probs", "sample_from_probs_reference", "sample_from_table", "uniform", "BLOCK",
           "CHUNK_ELEMENTS", "SMALL_ELEMENTS"]

BLOCK = 1024
"""Vocabulary block of the two-level inverse CDF (rows longer than ``4 * BLOCK``)."""

CHUNK_ELEMENTS = 1 << 19
"""Entries per row chunk of the fast paths (2 MiB of float32). Chosen by timing on a
2-core CPU with 1 MiB of L2 per core: 2**18 to 2**20 are within 20 % of each other."""

SMALL_ELEMENTS = 1 << 15
"""Inputs of at most this many entries take the reference path: there the number of
operations, not memory traffic, sets the cost, and the reference makes fewer (measured:
the two cross between 2**15 and 2**16 entries on a 2-core CPU)."""


def uniform(shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """Float64 uniforms on ``[0, 1)`` drawn from ``generator`` (torch's default if None)."""
    return torch.rand(shape, generator=generator, dtype=torch.float64, device=device)


def chunk_rows(row_length: int) -> int:
    """Rows per chunk for rows of ``row_length`` entries (at least 1)."""
    return max(1, CHUNK_ELEMENTS // max(1, row_length))


def _last_positive(probs: torch.Tensor) -> torch.Tensor:
    """Index of the last positive entry of each row. Shape: ``[B, N] -> [B, 1]``."""
    N = probs.shape[-1]
    return (N - 1) - torch.argmax((probs.flip(-1) > 0).to(torch.int8), dim=-1, keepdim=True)


def _inverse_cdf(probs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """First index whose float64 cumulative mass exceeds ``target`` ``[B, 1]``; clamped to
    the last positive entry (rounding of ``target`` up to the total)."""
    cdf = torch.cumsum(probs.to(torch.float64), dim=-1)  # [B, N]
    idx = torch.searchsorted(cdf, target, right=True)  # [B, 1]
    return torch.minimum(idx, _last_positive(probs))


def _inverse_cdf_fast(probs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """:func:`_inverse_cdf`, scanning a row for its last positive entry only when the
    search did not land on a positive entry (``min(idx, last)`` is ``idx`` otherwise)."""
    N = probs.shape[-1]
    cdf = torch.cumsum(probs.to(torch.float64), dim=-1)  # [B, N]
    idx = torch.searchsorted(cdf, target, right=True)  # [B, 1]
    landed = (idx < N) & (probs.gather(-1, idx.clamp(max=N - 1)) > 0)  # [B, 1]
    if not bool(landed.all()):
        miss = (~landed[:, 0]).nonzero().squeeze(1)
        idx[miss] = torch.minimum(idx[miss], _last_positive(probs[miss]))
    return idx


def _check_mass(total: torch.Tensor) -> None:
    ok = (total > 0) & torch.isfinite(total)
    if not bool(ok.all()):
        raise ValueError(f"probs row {int((~ok[:, 0]).nonzero()[0, 0])} has no positive finite mass")


def sample_from_probs_reference(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token id per row by inverse CDF with float64 accumulation.

    Shape: ``probs [B, V] -> ids [B]``.

    The readable reference of :func:`sample_from_probs` (same ids, same generator draws).

    Parameters
    ----------
    probs : torch.Tensor
        Shape ``[B, V]``, floating point, non-negative, each row with positive finite mass
        (it need not sum to 1: rows are normalised by their own sum).
    generator : torch.Generator, optional
        Source of the one float64 uniform per row (torch's default generator when None); on
        ``probs``' device. Draws ``B`` uniforms, after the mass check.

    Returns
    -------
    torch.LongTensor
        Shape ``[B]``; every id has positive probability in its row and lies in ``[0, V)``.

    Raises
    ------
    ValueError
        If a row has no positive finite mass (its float64 total is zero, negative, infinite
        or NaN); nothing is drawn then.

    Notes
    -----
    ``u * total`` with ``u ~ U[0, 1)`` is located in the float64 cumulative sum with
    ``searchsorted(right=True)``, so an id whose probability is zero (a flat step of the
    CDF) is never returned. For ``V > 4 * BLOCK`` the search is two-level: first among
    float64 block masses, then inside the chosen block, so only one row block is
    converted to float64 (the law is the same up to float64 rounding). A rounding of the
    target up to a block's or row's total maps to its last id of positive mass.
    """
    B, V = probs.shape
    if V <= 4 * BLOCK:
        total = probs.sum(-1, keepdim=True, dtype=torch.float64)  # [B, 1]
        _check_mass(total)
        return _inverse_cdf(probs, uniform((B, 1), generator, probs.device) * total).squeeze(-1)
    pad = (-V) % BLOCK
    blocks = F.pad(probs, (0, pad)).view(B, -1, BLOCK)  # [B, nb, BLOCK]
    block_mass = blocks.sum(-1, dtype=torch.float64)  # [B, nb]
    cdf = block_mass.cumsum(-1)  # [B, nb]
    total = cdf[:, -1:]  # [B, 1]
    _check_mass(total)
    target = uniform((B, 1), generator, probs.device) * total  # [B, 1]
    b = torch.minimum(torch.searchsorted(cdf, target, right=True), _last_positive(block_mass))  # [B, 1]
    offset = target - (cdf.gather(1, b) - block_mass.gather(1, b))  # mass before, inside the block
    rows = torch.arange(B, device=probs.device)
    inner = blocks[rows, b.squeeze(1)]  # [B, BLOCK]
    j = _inverse_cdf(inner, offset.clamp_min(0))  # [B, 1]
    return (b * BLOCK + j).squeeze(-1)


def sample_from_probs(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token id per row by inverse CDF with float64 accumulation.

    Shape: ``probs [B, V] -> ids [B]``.

    Same parameters, law, output and generator draws as
    :func:`sample_from_probs_reference`, which documents the algorithm; this one never
    builds a ``[B, V]`` float64 temporary. On CPU with a contiguous ``probs`` of more than
    :data:`SMALL_ELEMENTS` entries it works on row chunks; otherwise it runs the reference.

    Parameters
    ----------
    probs : torch.Tensor
        Shape ``[B, V]``, floating point, non-negative, each row with positive finite mass.
    generator : torch.Generator, optional
        Source of the one float64 uniform per row; on ``probs``' device.

    Returns
    -------
    torch.LongTensor
        Shape ``[B]``; every id has positive probability in its row and lies in ``[0, V)``.

    Raises
    ------
    ValueError
        If a row has no positive finite mass (the reference's message; nothing is drawn).
    """
    if (probs.device.type != "cpu" or probs.dim() != 2 or not probs.is_contiguous()
            or probs.numel() <= SMALL_ELEMENTS):
        return sample_from_probs_reference(probs, generator)
    B, V = probs.shape
    rows = chunk_rows(V)
    if V <= 4 * BLOCK:
        total = torch.empty(B, 1, dtype=torch.float64)
        for s in range(0, B, rows):
            torch.sum(probs[s:s + rows], -1, keepdim=True, dtype=torch.float64, out=total[s:s + rows])
        _check_mass(total)
        target = uniform((B, 1), generator, probs.device) * total  # [B, 1]
        out = torch.empty(B, 1, dtype=torch.int64)
        for s in range(0, B, rows):
            out[s:s + rows] = _inverse_cdf_fast(probs[s:s + rows], target[s:s + rows])
        return out.squeeze(-1)
    block_mass = torch.empty(B, -(-V // BLOCK), dtype=torch.float64)
    masses = BlockMasses(V, min(B, rows))
    for s in range(0, B, rows):
        masses(probs[s:s + rows], out=block_mass[s:s + rows])
    everything = torch.arange(B)
    return search_blocks(block_mass, lambda s, e, b: blocks_at(probs, (everything[s:e],), b), generator)


def sample_from_table(table: torch.Tensor, index: torch.Tensor,
                      generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token id per row of ``table[index]`` without building it.

    Shape: ``table [U, V]``, ``index [N]`` (int64, values in ``[0, U)``) -> ids ``[N]``.

    Returns what ``sample_from_probs(table[index], generator)`` returns, from the same
    ``N`` draws, and raises what it raises (a row index in the message is a row of
    ``table[index]``). For rows longer than ``4 * BLOCK`` on CPU, each table row's block
    masses are computed once and every row searches its own law's blocks (the same
    float64 sums and searches, row by row, as :func:`sample_from_probs_reference`);
    otherwise ``table[index]`` is built and sampled.

    Parameters
    ----------
    table : torch.Tensor
        Shape ``[U, V]``, floating point, non-negative rows (the laws).
    index : torch.LongTensor
        Shape ``[N]``: the law of each row.
    generator : torch.Generator, optional
        Draws ``N`` float64 uniforms (after the mass check).

    Raises
    ------
    ValueError
        If a row has no positive finite mass (nothing is drawn).
    """
    U, V = table.shape
    N = index.shape[0]
    if (table.device.type != "cpu" or not table.is_contiguous() or V <= 4 * BLOCK
            or N * V <= SMALL_ELEMENTS or U * V <= SMALL_ELEMENTS):
        return sample_from_probs(table.index_select(0, index), generator)
    rows = chunk_rows(V)
    table_mass = torch.empty(U, -(-V // BLOCK), dtype=torch.float64)
    masses = BlockMasses(V, min(U, rows))
    for s in range(0, U, rows):
        masses(table[s:s + rows], out=table_mass[s:s + rows])
    return search_blocks(table_mass.index_select(0, index),
                         lambda s, e, b: blocks_at(table, (index[s:e],), b), generator)


class BlockMasses:
    """Float64 block masses of rows of ``V`` entries, bit for bit as the reference computes
    them (``F.pad(rows, (0, pad)).view(n, -1, BLOCK).sum(-1, dtype=torch.float64)``), through
    one reused zero-padded float64 buffer of ``max_rows`` rows.

    ``masses(rows, out=None)``: Shape ``rows [n, V]`` (any float dtype, ``n <= max_rows``)
    -> ``[n, nb]`` (float64, ``nb = ceil(V / BLOCK)``), written into ``out`` if given.
    """

    def __init__(self, V: int, max_rows: int) -> None:
        self.V, self.nb = V, -(-V // BLOCK)
        self.wide = torch.zeros(max_rows, self.nb * BLOCK, dtype=torch.float64)  # padding stays 0

    def __call__(self, rows: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
        n = rows.shape[0]
        w = self.wide[:n]
        w[:, : self.V].copy_(rows)  # exact conversion to float64
        return torch.sum(w.view(n, self.nb, BLOCK), -1, out=out)


def blocks_at(t: torch.Tensor, index: tuple[torch.Tensor, ...], b: torch.Tensor) -> torch.Tensor:
    """Block ``b`` of the rows ``t[index]``, zero past the row's end.

    Shape: ``t [..., V]`` (one dimension per index tensor), ``index`` tensors ``[n]``,
    ``b [n]`` -> ``[n, BLOCK]`` in ``t``'s dtype, entries ``t[index][i, b_i * BLOCK + j]``.
    Reads only the chosen blocks (any strides; ``V >= BLOCK``).
    """
    V = t.shape[-1]
    full = V // BLOCK  # blocks without padding
    whole = t[..., : full * BLOCK].unflatten(-1, (full, BLOCK))  # a view
    out = whole[(*index, b.clamp(max=full - 1))]  # [n, BLOCK]
    if full * BLOCK < V:
        last = (b == full).nonzero().squeeze(1)
        if last.numel():  # the short last block: its entries, then zeros
            out[last] = F.pad(t[(*(i[last] for i in index), slice(full * BLOCK, None))],
                              (0, (full + 1) * BLOCK - V))
    return out


def search_blocks(block_mass: torch.Tensor, inner: Callable[[int, int, torch.Tensor], torch.Tensor],
                  generator: torch.Generator | None) -> torch.Tensor:
    """The two-level search of :func:`sample_from_probs_reference`, given the rows' block masses.

    Shape: ``block_mass [B, nb]`` (float64) -> ids ``[B]``.

    ``inner(s, e, b)`` returns the entries of blocks ``b [e - s]`` of rows ``s..e-1``
    (``[e - s, BLOCK]``, zero past the row's end). Checks the masses, draws ``B`` float64
    uniforms, chooses each row's block, then searches inside it, a chunk of rows at a time.

    Raises
    ------
    ValueError
        If a row has no positive finite mass (before any draw).
    """
    B = block_mass.shape[0]
    cdf = block_mass.cumsum(-1)  # [B, nb]
    total = cdf[:, -1:]  # [B, 1]
    _check_mass(total)
    target = uniform((B, 1), generator, block_mass.device) * total  # [B, 1]
    b = torch.minimum(torch.searchsorted(cdf, target, right=True), _last_positive(block_mass))  # [B, 1]
    offset = (target - (cdf.gather(1, b) - block_mass.gather(1, b))).clamp_min(0)  # [B, 1]
    b = b.squeeze(1)
    out = torch.empty(B, dtype=torch.int64, device=block_mass.device)
    rows = chunk_rows(BLOCK)
    for s in range(0, B, rows):
        e = min(B, s + rows)
        j = _inverse_cdf_fast(inner(s, e, b[s:e]), offset[s:e])  # [e - s, 1]
        out[s:e] = b[s:e] * BLOCK + j.squeeze(1)
    return out
