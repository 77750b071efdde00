"""Which columns of a model's previous call a new call can reuse (the prefix caches).

A causal model's state after column ``t`` of a row depends on that row's ids up to ``t``
only, so a call whose rows begin like rows of the previous call can resume from the
previous call's states there. :func:`reusable_prefix` finds the leading columns every row shares
with the same row of the previous call (:class:`~specexact.decoders.ToyLM`'s state cache);
:func:`row_prefixes` finds, for each row, the cached row sharing its longest prefix and that
length (the tiny models' key / value cache, :mod:`specexact.decoders.tiny_models.kv_cache`).
"""

from __future__ import annotations

import torch

__all__ = ["reusable_prefix", "row_prefixes"]

MAX_COMPARED = 1 << 22
"""Largest ``[rows, cached rows, columns]`` comparison :func:`row_prefixes` makes at once
(elements)."""


def reusable_prefix(cached_ids: torch.Tensor | None, ids: torch.Tensor) -> tuple[torch.Tensor | None, int]:
    """The leading columns in which every row of ``ids`` equals the same row of ``cached_ids``.

    Parameters
    ----------
    cached_ids : torch.LongTensor or None
        Shape ``[C, S]``: the ids of the previous call (None: no previous call).
    ids : torch.LongTensor
        Shape ``[B, T]``: the ids of the new call.

    Returns
    -------
    source : torch.LongTensor or None
        ``arange(B)`` (row ``i`` resumes cached row ``i``; None when ``start == 0``).
    start : int
        The largest ``m <= min(T, S)`` with ``ids[:, :m] == cached_ids[:, :m]``; 0 when
        nothing can be reused (no previous call, another device, another batch size: a row's
        states may depend on the batch it was computed in).
    """
    if (cached_ids is None or cached_ids.device != ids.device or ids.shape[0] == 0
            or cached_ids.shape[0] != ids.shape[0]):
        return None, 0
    m = min(ids.shape[1], cached_ids.shape[1])
    if m == 0:
        return None, 0
    differs = (cached_ids[:, :m] != ids[:, :m]).any(0)  # [m]
    start = int(differs.to(torch.int8).argmax()) if bool(differs.any()) else m
    return (torch.arange(ids.shape[0], device=ids.device) if start else None), start


def row_prefixes(cached_ids: torch.Tensor | None, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For each row of ``ids``, the cached row sharing its longest prefix, and that length.

    Any cached row may serve (a call on a subset of the previous rows, or on them reordered,
    reuses them); among rows sharing the same prefix any one serves (their states there are
    equal).

    Parameters
    ----------
    cached_ids : torch.LongTensor or None
        Shape ``[C, S]``: the ids of the previous call; an id that no new id equals (e.g.
        ``-2`` beside ids ``>= 0``) marks a column not to reuse.
    ids : torch.LongTensor
        Shape ``[B, T]``: the ids of the new call.

    Returns
    -------
    source : torch.LongTensor
        Shape ``[B]``: the cached row of each row (0 where its length is 0).
    length : torch.LongTensor
        Shape ``[B]``: the largest ``m <= min(T, S)`` with ``ids[i, :m] ==
        cached_ids[source[i], :m]`` (all 0 with no previous call or another device).
    """
    B = ids.shape[0]
    zeros = torch.zeros(B, dtype=torch.int64, device=ids.device)
    if cached_ids is None or cached_ids.device != ids.device or cached_ids.shape[0] == 0:
        return zeros, zeros.clone()
    C = cached_ids.shape[0]
    m = min(ids.shape[1], cached_ids.shape[1])
    if m == 0 or B == 0:
        return zeros, zeros.clone()
    rows = max(1, MAX_COMPARED // (C * m))
    lengths, source = [], []
    for i in range(0, B, rows):
        same = ids[i:i + rows, None, :m] == cached_ids[None, :, :m]  # [b, C, m]
        shared = same.to(torch.int8).cumprod(2).sum(2)  # [b, C]: leading columns in common
        length, j = shared.max(1)
        lengths.append(length)
        source.append(j)
    return torch.cat(source), torch.cat(lengths)
