"""Input checks of the ``verify`` protocol.

- :func:`validate_verify_inputs`: what ``verify(validate=True)`` runs; its value pass reads
  each probability tensor once, a cache-sized chunk of rows at a time;
- :func:`validate_verify_inputs_reference`: the readable checks, which produce every error
  message. The fast check runs the reference whenever one of its conditions fails, so both
  accept the same inputs and raise the same errors.
"""

from __future__ import annotations

import torch

from . import sampling
from .sampling import chunk_rows

__all__ = ["validate_verify_inputs", "validate_verify_inputs_reference"]


def validate_verify_inputs_reference(
    draft_token_ids: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor
) -> None:
    """Check the shapes, dtypes and values of the ``verify`` inputs.

    Shape: ``draft_token_ids [B, K]``, ``draft_probs [B, K, V]``,
    ``target_probs [B, K+1, V]``; returns None.

    Parameters
    ----------
    draft_token_ids : torch.Tensor
        Integer (not bool) dtype, ids in ``[0, V)``.
    draft_probs, target_probs : torch.Tensor
        Floating point; every row ``[..., :]`` finite, non-negative, with positive mass.

    Raises
    ------
    TypeError
        If an argument is not a tensor or has the wrong dtype kind (ids must be integer,
        probabilities floating).
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


def validate_verify_inputs(
    draft_token_ids: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor
) -> None:
    """Check the shapes, dtypes and values of the ``verify`` inputs (fast path).

    Shape: ``draft_token_ids [B, K]``, ``draft_probs [B, K, V]``,
    ``target_probs [B, K+1, V]``; returns None.

    Accepts exactly what :func:`validate_verify_inputs_reference` accepts and raises what
    it raises: the cheap checks (types, shapes, dtypes, id range) and the value checks
    (per row: ``min >= 0``, ``0 < max < inf``, NaN propagating through both) are made
    first, and the reference runs to produce the error if any of them fails.

    Parameters
    ----------
    draft_token_ids : torch.Tensor
        Integer (not bool) dtype, ids in ``[0, V)``.
    draft_probs, target_probs : torch.Tensor
        Floating point; every row finite, non-negative, with positive mass.

    Raises
    ------
    TypeError, ValueError
        As :func:`validate_verify_inputs_reference` (the message names the argument).

    Notes
    -----
    On CPU the per-row minimum and maximum are taken a chunk of about four times
    :data:`~specexact.decoders.sampling.CHUNK_ELEMENTS` entries at a time, so the second
    reduction reads the chunk from cache: one pass over memory instead of two (and
    ``torch.aminmax(dim=-1)``, which the reference uses, is several times slower than
    ``amin`` plus ``amax`` on CPU). Inputs of at most
    :data:`~specexact.decoders.sampling.SMALL_ELEMENTS` entries in all go to the reference.
    """
    if (_small(draft_probs, target_probs)
            or not (_form_ok(draft_token_ids, draft_probs, target_probs)
                    and _values_ok(draft_probs) and _values_ok(target_probs))):
        validate_verify_inputs_reference(draft_token_ids, draft_probs, target_probs)


def _small(draft_probs, target_probs) -> bool:
    """Tensors of at most :data:`~specexact.decoders.sampling.SMALL_ELEMENTS` entries in
    all: the reference is cheaper there."""
    return (isinstance(draft_probs, torch.Tensor) and isinstance(target_probs, torch.Tensor)
            and draft_probs.numel() + target_probs.numel() <= sampling.SMALL_ELEMENTS)


def _form_ok(draft_token_ids, draft_probs, target_probs) -> bool:
    """The reference's checks of types, shapes, dtypes and the id range, as one boolean."""
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


def _distinct_rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` without its broadcast (stride-0) leading dimensions: rows along such a
    dimension are the same memory, so each distinct row is read once (a law broadcast to
    ``[B, N, V]`` by ``expand`` is checked as ``[N, V]``)."""
    idx = tuple(0 if stride == 0 and size > 1 else slice(None)
                for stride, size in zip(t.stride()[:-1], t.shape[:-1]))
    return t[idx] if any(i == 0 for i in idx) else t


def _values_ok(t: torch.Tensor) -> bool:
    """Every row of ``t [B, N, V]`` has ``min >= 0`` and ``0 < max < inf`` (no NaN)."""
    t = _distinct_rows(t)
    if t.device.type != "cpu":
        return _bounds_ok(t.amin(dim=-1), t.amax(dim=-1))
    try:
        matrices = [t.view(-1, t.shape[-1])]  # [B*N, V]
    except RuntimeError:  # a layout without that view: one batch row ([N, V]) at a time
        matrices = t.unbind(0)
    return all(_matrix_ok(m) for m in matrices)


def _matrix_ok(m: torch.Tensor) -> bool:
    """:func:`_values_ok` of the rows of ``m [R, V]``, a chunk of rows at a time (CPU)."""
    row_min = torch.empty(m.shape[0], dtype=m.dtype)
    row_max = torch.empty_like(row_min)
    # 4x the sampling chunk (8 MiB of float32): the second pass reads it from L3, as fast
    # as from L2 where this was timed, with 4x fewer operations (each may wait for a thread).
    n = 4 * chunk_rows(m.shape[1])
    for s in range(0, m.shape[0], n):
        torch.amin(m[s:s + n], -1, out=row_min[s:s + n])
        torch.amax(m[s:s + n], -1, out=row_max[s:s + n])  # the chunk is still in cache
    return _bounds_ok(row_min, row_max)


def _bounds_ok(row_min: torch.Tensor, row_max: torch.Tensor) -> bool:
    return bool(((row_min >= 0) & (row_max > 0) & (row_max < torch.inf)).all())
