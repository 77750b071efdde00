"""A proposed faster ``verify``: same output on the same generator state (not used by the package).

This is a measured *proposal* for ``decoders/rejection_sampling.py`` and
``decoders/sampling.py``, kept here beside the benchmark that measures it (those two
files are deliberately not edited by the benchmark work). ``python -m benchmarks``
reports it next to :func:`specexact.decoders.verify`;
``tests/benchmarks/test_proposed_verify.py`` checks that it returns the same tokens as
the reference and leaves the generator in the same state.

What it changes, and why (CPU profile of ``verify`` at B=1024, K=1..8, V=32k):

1. **Validation**: per-row ``amin`` and ``amax`` (two vectorised reductions) instead of
   ``torch.aminmax(t, dim=-1)``, whose CPU kernel is 5-7x slower than the two together.
   The checks are the same (NaN propagates through both; ``min >= 0``, ``0 < max < inf``);
   on failure the reference :func:`~specexact.decoders.validate_verify_inputs` runs and
   raises its own message.
2. **Stopping rows**: gathered with ``index_select`` on a flat ``[B*(K+1), V]`` view
   instead of advanced indexing ``t[rows, stop]`` (1.5x faster on CPU).
3. **Residual and block masses in row chunks**: the residual ``max(p - q, 0)``, its
   "no mass" fallback and its float64 block masses are computed a few rows at a time, so
   no ``[B, V]`` temporary is allocated (on CPU each fresh large tensor costs page faults:
   about 1 ms per MiB on a busy machine, more than the arithmetic); the block masses use
   ``x.double().sum(-1)`` instead of ``x.sum(-1, dtype=torch.float64)`` (the latter's CPU
   kernel is ~20x slower; both give the same float64 values in our tests). Only the
   chosen block of the residual is rebuilt for the inner inverse-CDF search.

Unchanged: the acceptance decisions (``p(d)``, ``q(d)``, ``u * q < p`` in float64), the
order and number of generator draws (``B*K`` then ``B`` float64 uniforms), the float
guards and the two-level inverse-CDF search (same functions). For ``V <= 4 * BLOCK`` the
reference one-level path is used as is.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from specexact.decoders.rejection_sampling import PLACEHOLDER_ID, validate_verify_inputs
from specexact.decoders.sampling import BLOCK, _check_mass, _inverse_cdf, _last_positive, sample_from_probs, uniform

__all__ = ["verify", "validate_verify_inputs_fast", "CHUNK_ELEMENTS"]

CHUNK_ELEMENTS = 1 << 19
"""Elements per row chunk of the residual (2 MiB of float32: stays in cache)."""


def _shapes_ok(draft_token_ids, draft_probs, target_probs) -> bool:
    """The reference's cheap checks (types, shapes, dtypes, id range), as one boolean."""
    if not all(isinstance(t, torch.Tensor) for t in (draft_token_ids, draft_probs, target_probs)):
        return False
    if draft_token_ids.dim() != 2 or draft_token_ids.dtype.is_floating_point or draft_token_ids.dtype == torch.bool:
        return False
    B, K = draft_token_ids.shape
    if B == 0 or K == 0 or draft_probs.dim() != 3 or tuple(draft_probs.shape[:2]) != (B, K):
        return False
    V = draft_probs.shape[2]
    if V == 0 or tuple(target_probs.shape) != (B, K + 1, V):
        return False
    if not (draft_probs.is_floating_point() and target_probs.is_floating_point()):
        return False
    return 0 <= int(draft_token_ids.min()) and int(draft_token_ids.max()) < V


def validate_verify_inputs_fast(draft_token_ids, draft_probs, target_probs) -> None:
    """:func:`~specexact.decoders.validate_verify_inputs` with a faster value pass.

    Per row: ``amin`` and ``amax`` (NaN propagates through both; ``min >= 0``,
    ``0 < max < inf``), the reference's checks without ``torch.aminmax(dim=-1)``. Raises
    exactly what the reference raises: the reference runs whenever a check fails.
    """
    ok = _shapes_ok(draft_token_ids, draft_probs, target_probs)
    if ok:
        for t in (draft_probs, target_probs):
            row_min, row_max = t.amin(dim=-1), t.amax(dim=-1)
            if not bool(((row_min >= 0) & (row_max > 0) & (row_max < torch.inf)).all()):
                ok = False
                break
    if not ok:
        validate_verify_inputs(draft_token_ids, draft_probs, target_probs)


def verify(
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    generator: torch.Generator | None = None,
    *,
    validate: bool = True,
    chunk_elements: int = CHUNK_ELEMENTS,
) -> torch.Tensor:
    """Same protocol, law, output and generator draws as :func:`specexact.decoders.verify`."""
    if validate:
        validate_verify_inputs_fast(draft_token_ids, draft_probs, target_probs)
    B, K = draft_token_ids.shape
    V = target_probs.shape[2]
    device = target_probs.device
    ids = draft_token_ids.long()
    rows = torch.arange(B, device=device)

    # Acceptance: as the reference.
    p_d = target_probs[:, :K].gather(2, ids[:, :, None]).squeeze(2).to(torch.float64)  # [B, K]
    q_d = draft_probs.gather(2, ids[:, :, None]).squeeze(2).to(torch.float64)  # [B, K]
    u = uniform((B, K), generator, device)  # [B, K]
    accepted = u * q_d < p_d  # [B, K]
    stop = accepted.to(torch.int64).cumprod(dim=1).sum(dim=1)  # [B], in [0, K]
    rejected = stop < K
    dtype = torch.promote_types(target_probs.dtype, torch.float32)

    flat_t = target_probs.reshape(B * (K + 1), V)
    flat_q = draft_probs.reshape(B * K, V)
    t_idx = rows * (K + 1) + stop  # row of target_probs[b, stop_b] in flat_t
    q_idx = rows * K + stop.clamp(max=K - 1)

    if V <= 4 * BLOCK:
        target_row = flat_t.index_select(0, t_idx).to(dtype)
        draft_row = flat_q.index_select(0, q_idx).to(dtype)
        residual = torch.where(rejected[:, None], (target_row - draft_row).clamp_min(0), target_row)
        no_mass = residual.amax(-1) <= 0
        if bool(no_mass.any()):
            residual = torch.where(no_mass[:, None], target_row, residual)
        last = sample_from_probs(residual, generator)
    else:
        last = _sample_residual_chunked(flat_t, flat_q, t_idx, q_idx, rejected, dtype, generator,
                                        max(1, chunk_elements // V))

    out = torch.full((B, K + 1), PLACEHOLDER_ID, dtype=torch.int64, device=device)
    positions = torch.arange(K + 1, device=device)[None, :]
    out[:, :K] = torch.where(positions[:, :K] < stop[:, None], ids, PLACEHOLDER_ID)
    out[rows, stop] = last
    return out


def _residual(target_rows, draft_rows, rejected, no_mass=None):
    """``max(p - q, 0)`` where rejected, ``p`` for the bonus rows; ``p`` where ``no_mass``."""
    residual = torch.where(rejected[:, None], (target_rows - draft_rows).clamp_min(0), target_rows)
    if no_mass is not None:
        residual = torch.where(no_mass[:, None], target_rows, residual)
    return residual


def _sample_residual_chunked(flat_t, flat_q, t_idx, q_idx, rejected, dtype, generator, chunk_rows):
    """The two-level inverse CDF of ``sample_from_probs`` on the residual rows, which are
    never materialised whole: block masses chunk by chunk, then only the chosen block."""
    B = t_idx.shape[0]
    V = flat_t.shape[1]
    device = flat_t.device
    pad = (-V) % BLOCK
    nb = (V + pad) // BLOCK
    full = V // BLOCK  # blocks without padding
    block_mass = torch.empty(B, nb, dtype=torch.float64, device=device)
    no_mass = torch.zeros(B, dtype=torch.bool, device=device)
    # Reused chunk buffers (no allocation per chunk when the inputs are already in `dtype`).
    same = flat_t.dtype == dtype and flat_q.dtype == dtype
    t_buf = torch.empty(chunk_rows, V, dtype=dtype, device=device) if same else None
    d_buf = torch.empty(chunk_rows, V, dtype=dtype, device=device) if same else None
    wide = torch.empty(chunk_rows, full, BLOCK, dtype=torch.float64, device=device)

    def rows_of(flat, idx, buf):
        if buf is None:
            return flat.index_select(0, idx).to(dtype)
        return torch.index_select(flat, 0, idx, out=buf[: idx.numel()])

    # Bonus rows (all K accepted): the residual is the target row itself (and so is the
    # fallback), so the draft rows are read only for the rejected rows.
    for group_rejected in (True, False):
        group = (rejected == group_rejected).nonzero().squeeze(1)
        for start in range(0, group.numel(), chunk_rows):
            sel = group[start:start + chunk_rows]
            c = sel.numel()
            res = rows_of(flat_t, t_idx[sel], t_buf)
            if group_rejected:
                res = torch.sub(res, rows_of(flat_q, q_idx[sel], d_buf), out=res).clamp_min_(0)
                empty = res.amax(-1) <= 0
                if bool(empty.any()):  # rounding left no mass: fall back to the target row
                    no_mass[sel] = empty
                    res[empty] = flat_t.index_select(0, t_idx[sel[empty]]).to(dtype)
            # Float64 block masses, as sample_from_probs: full blocks from a view, the
            # zero-padded last block apart.
            if full:
                w = wide[:c]
                w.copy_(res[:, : full * BLOCK].view(c, full, BLOCK))
                block_mass[sel, :full] = w.sum(-1)
            if pad:
                block_mass[sel, full] = F.pad(res[:, full * BLOCK:], (0, pad)).double().sum(-1)

    # From here on: sample_from_probs's two-level search, with the chosen block rebuilt.
    cdf = block_mass.cumsum(-1)  # [B, nb]
    total = cdf[:, -1:]  # [B, 1]
    _check_mass(total)
    target = uniform((B, 1), generator, device) * total  # [B, 1]
    b = torch.minimum(torch.searchsorted(cdf, target, right=True), _last_positive(block_mass))  # [B, 1]
    offset = target - (cdf.gather(1, b) - block_mass.gather(1, b))
    cols = b * BLOCK + torch.arange(BLOCK, device=device)[None, :]  # [B, BLOCK]
    in_range = cols < V
    cols = cols.clamp(max=V - 1)
    t_block = flat_t.reshape(-1)[t_idx[:, None] * V + cols].to(dtype)  # [B, BLOCK]
    d_block = flat_q.reshape(-1)[q_idx[:, None] * V + cols].to(dtype)
    inner = torch.where(in_range, _residual(t_block, d_block, rejected, no_mass), 0)
    j = _inverse_cdf(inner, offset.clamp_min(0))  # [B, 1]
    return (b * BLOCK + j).squeeze(-1)
