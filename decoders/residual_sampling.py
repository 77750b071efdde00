"""The last token of each ``verify`` row: recovered from the residual, or the bonus token.

:func:`sample_last_tokens` returns what the reference ``verify`` draws by materialising the
``[B, V]`` residual rows and calling
:func:`~specexact.decoders.sampling.sample_from_probs_reference` on them, from the same
generator draws; for long rows (``V > 4 * BLOCK``) it reads only the stopping rows, a
cache-sized chunk at a time, and builds no ``[B, V]`` temporary.
"""

from __future__ import annotations

import torch

from .sampling import BLOCK, BlockMasses, blocks_at, chunk_rows, sample_from_probs, search_blocks

__all__ = ["sample_last_tokens"]


def sample_last_tokens(target_probs: torch.Tensor, draft_probs: torch.Tensor, stop: torch.Tensor,
                       generator: torch.Generator | None) -> torch.Tensor:
    """Draw each row's token after its accepted drafts.

    Shape: ``target_probs [B, K+1, V]``, ``draft_probs [B, K, V]``, ``stop [B]`` -> ids ``[B]``.

    Row ``b`` draws from ``p = target_probs[b, stop_b]`` if ``stop_b == K`` (the bonus
    token), else from the residual ``max(p - q, 0)`` with ``q = draft_probs[b, stop_b]``
    (the recovered token), or from ``p`` when rounding leaves the residual without mass
    (Leviathan et al. 2023, arXiv:2211.17192, Algorithm 1; Chen et al. 2023,
    arXiv:2302.01318, Algorithm 2). Rows are taken in
    ``promote_types(target_probs.dtype, float32)``.

    Parameters
    ----------
    target_probs, draft_probs : torch.Tensor
        The ``verify`` inputs (floating point, on CPU).
    stop : torch.LongTensor
        Shape ``[B]``: accepted drafts per row, in ``[0, K]``.
    generator : torch.Generator or None
        Draws ``B`` float64 uniforms (after the mass check).

    Returns
    -------
    torch.LongTensor
        Shape ``[B]``, ids in ``[0, V)`` of positive probability under the row's law.

    Raises
    ------
    ValueError
        If a row's law has no positive finite mass (possible only for inputs
        :func:`~specexact.decoders.validate_verify_inputs` refuses, or float64 rows whose
        sum overflows); nothing is drawn then.
    """
    B, N, V = target_probs.shape
    K = N - 1
    dtype = torch.promote_types(target_probs.dtype, torch.float32)
    rows = torch.arange(B)
    rejected = stop < K  # [B]
    q_stop = stop.clamp(max=K - 1)  # [B]
    if V <= 4 * BLOCK:  # short rows: the reference's [B, V] residual, sampled chunk by chunk
        residual = _take(target_probs, rows, stop).to(dtype)  # [B, V], the target rows
        rej = rejected.nonzero().squeeze(1)
        if rej.numel():  # the draft rows are read for the rejected rows only
            r = residual[rej].sub_(_take(draft_probs, rej, stop[rej]).to(dtype)).clamp_min_(0)
            # rounding left no mass (target = draft up to ulps): keep the target row
            has_mass = r.amax(-1) > 0
            residual[rej[has_mass]] = r[has_mass]
        return sample_from_probs(residual, generator)

    chunk = chunk_rows(V)
    block_mass = torch.empty(B, -(-V // BLOCK), dtype=torch.float64)  # [B, nb]
    masses = BlockMasses(V, min(B, chunk))
    p_rows = _RowReader(target_probs, dtype, min(B, chunk))
    q_rows = _RowReader(draft_probs, dtype, min(B, chunk))

    def fill(group: torch.Tensor, residual: bool) -> None:
        """Block masses of the residual rows (or target rows) of ``group``."""
        n = group.numel()
        target_rows = p_rows.reader(group, stop[group])
        draft_rows = q_rows.reader(group, stop[group]) if residual else None
        group_mass = torch.empty(n, block_mass.shape[1], dtype=torch.float64)  # [n, nb]
        for s in range(0, n, chunk):
            e = min(n, s + chunk)
            x = target_rows(s, e)  # [e - s, V]
            if residual:
                x.sub_(draft_rows(s, e)).clamp_min_(0)
            masses(x, out=group_mass[s:e])
        block_mass[group] = group_mass

    # The draft rows are read for the rejected rows only.
    fill(rejected.nonzero().squeeze(1), True)
    fill((~rejected).nonzero().squeeze(1), False)
    # A residual without mass (the target is the draft up to rounding) falls back to the
    # target row. Its entries are >= 0, so its float64 total is 0 exactly when they all are.
    no_mass = rejected & (block_mass.sum(-1) == 0)
    if bool(no_mass.any()):
        fill(no_mass.nonzero().squeeze(1), False)
    use_residual = (rejected & ~no_mass)[:, None]  # [B, 1]

    def inner(s: int, e: int, b: torch.Tensor) -> torch.Tensor:
        p = blocks_at(target_probs, (rows[s:e], stop[s:e]), b).to(dtype)  # [e - s, BLOCK]
        q = blocks_at(draft_probs, (rows[s:e], q_stop[s:e]), b).to(dtype)
        r = torch.sub(p, q, out=q).clamp_min_(0)  # the residual, in place
        return torch.where(use_residual[s:e], r, p, out=r)

    return search_blocks(block_mass, inner, generator)


def _take(t: torch.Tensor, i: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Rows ``t[i, k]``. Shape: ``t [B, N, V]``, ``i, k [n]`` -> ``[n, V]``."""
    try:
        return t.view(-1, t.shape[-1]).index_select(0, i * t.shape[1] + k)
    except RuntimeError:  # a layout without a [B*N, V] view
        return t[i, k]


class _RowReader:
    """Rows ``t[i, k]`` of ``t [B, N, V]`` in ``dtype``, a chunk at a time, into one reused
    ``[max_rows, V]`` buffer (each chunk overwrites the previous one)."""

    def __init__(self, t: torch.Tensor, dtype: torch.dtype, max_rows: int) -> None:
        self.t, self.N = t, t.shape[1]
        try:
            self.flat = t.view(-1, t.shape[-1])  # [B*N, V]
        except RuntimeError:  # a layout without that view: advanced indexing
            self.flat = None
        self.buf = torch.empty(max_rows, t.shape[-1], dtype=dtype)

    def reader(self, i: torch.Tensor, k: torch.Tensor):
        """``rows(s, e)``: the rows ``t[i[s:e], k[s:e]]`` (``[e - s, V]``, in the buffer)."""
        if self.flat is None:
            return lambda s, e: self.buf[: e - s].copy_(self.t[i[s:e], k[s:e]])
        idx = i * self.N + k
        if self.flat.dtype == self.buf.dtype:
            return lambda s, e: torch.index_select(self.flat, 0, idx[s:e], out=self.buf[: e - s])
        return lambda s, e: self.buf[: e - s].copy_(self.flat.index_select(0, idx[s:e]))
