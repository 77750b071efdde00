"""Reusable storage for the decoders' large per-round tensors (the verifier's inputs).

A speculative round hands the verifier ``draft_probs [A, γ, V]`` and ``target_probs
[A, γ+1, V]``: at V = 32000 and 2048 rows, 1.8 GB. On CPU a fresh tensor of that size costs
a page fault per 4 KiB page on first write (and the kernel zeroes each page), as much time
as the decoder's own work on those rows. :func:`take` hands out views of storage kept from
the previous round or call instead, when nothing but this module holds that storage any
more (checked on the storage's reference count: a verifier or observer that kept its
inputs, or a view of them, gets fresh storage next time, never an overwritten one).

The storage is kept between calls (at most one buffer per name); :func:`release` frees it.
"""

from __future__ import annotations

import math
import threading

import torch

__all__ = ["take", "release", "REUSE", "POISON"]

REUSE = True
"""Whether :func:`take` reuses storage (False: a fresh tensor every time)."""

POISON: float | None = None
"""Test hook: when set, every tensor :func:`take` hands out is first filled with this value
(e.g. NaN), reused or fresh, so that a caller reading an entry it did not write reads the
poison deterministically instead of whatever the storage held."""

_buffers: dict[str, torch.Tensor] = {}
_lock = threading.Lock()


def _use_count(t: torch.Tensor) -> int | None:
    counter = getattr(torch._C, "_storage_Use_Count", None)
    if counter is None:
        return None
    storage = t.untyped_storage()
    return counter(storage._cdata) - 1  # less the reference of ``storage`` itself


def _free(t: torch.Tensor) -> bool:
    """Whether the storage of ``t`` is held by ``t`` alone."""
    count = _use_count(t)
    return count == 1


def take(name: str, shape: tuple[int, ...], dtype: torch.dtype = torch.float32,
         device: torch.device | str = "cpu") -> torch.Tensor:
    """An uninitialised contiguous tensor of ``shape``, on storage reused where possible.

    Parameters
    ----------
    name : str
        Which buffer (one per name is kept, e.g. ``"draft_probs"``).
    shape : tuple of int
    dtype : torch.dtype
    device : torch.device or str
        Only CPU storage is kept; elsewhere a fresh tensor is returned.

    Returns
    -------
    torch.Tensor
        A view of the kept storage (the previous contents, to be overwritten) or a new
        tensor. The storage is reused only while nothing else holds it.
    """
    numel = math.prod(shape)
    device = torch.device(device)
    if not REUSE or device.type != "cpu":
        return _poisoned(torch.empty(shape, dtype=dtype, device=device))
    with _lock:
        buf = _buffers.get(name)
        if buf is None or buf.dtype != dtype or buf.numel() < numel or not _free(buf):
            _buffers.pop(name, None)  # dropped before allocating: the old one is not kept alongside
            buf = torch.empty(numel, dtype=dtype)
            _buffers[name] = buf
        out = buf[:numel].view(shape)
    return _poisoned(out)


def _poisoned(t: torch.Tensor) -> torch.Tensor:
    if POISON is not None:
        t.fill_(POISON)
    return t


def release() -> None:
    """Drop every kept buffer (the memory returns once no tensor views it)."""
    with _lock:
        _buffers.clear()
