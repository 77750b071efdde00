"""Which columns of a model's previous call a new call can reuse (the prefix caches).

A causal model's state after column ``t`` of a row depends on that row's ids up to ``t``
only, so a call whose rows begin like rows of the previous call can resume from the
previous call's states there. :func:`reusable_prefix` finds, for every row of a new call, a
row of the previous call and the number of leading columns they share in every row:
:class:`~specexact.decoders.ToyLM`'s state cache (same rows only) and the tiny models' key /
value cache (:mod:`specexact.decoders.tiny_models.kv_cache`, any rows) read it.
"""

from __future__ import annotations

import torch

__all__ = ["reusable_prefix"]

MAX_COMPARED = 1 << 22
"""Largest ``[rows, cached rows, columns]`` comparison made at once (elements)."""


def reusable_prefix(cached_ids: torch.Tensor | None, ids: torch.Tensor, *,
                    any_row: bool = False) -> tuple[torch.Tensor | None, int]:
    """The cached row each row of ``ids`` resumes and the columns every row can resume.

    Parameters
    ----------
    cached_ids : torch.LongTensor or None
        Shape ``[C, S]``: the ids of the previous call (None: no previous call).
    ids : torch.LongTensor
        Shape ``[B, T]``: the ids of the new call (same device).
    any_row : bool
        False: row ``i`` resumes cached row ``i`` only (``B == C`` required, else nothing is
        reused). True: each row resumes the cached row sharing its longest prefix (any of
        them when several do: their states there are equal), so a call on a subset of the
        previous rows, or on them reordered, reuses them.

    Returns
    -------
    source : torch.LongTensor or None
        Shape ``[B]``: the cached row of each row (None when ``start == 0``).
    start : int
        The largest ``m <= min(T, S)`` such that ``ids[i, :m] == cached_ids[source[i], :m]``
        for every row ``i``; 0 when nothing can be reused (no previous call, another device,
        no row in common).
    """
    if cached_ids is None or cached_ids.device != ids.device or ids.shape[0] == 0 or cached_ids.shape[0] == 0:
        return None, 0
    B, C = ids.shape[0], cached_ids.shape[0]
    m = min(ids.shape[1], cached_ids.shape[1])
    if m == 0:
        return None, 0
    if not any_row:
        if B != C:
            return None, 0
        differs = (cached_ids[:, :m] != ids[:, :m]).any(0)  # [m]
        start = int(differs.to(torch.int8).argmax()) if bool(differs.any()) else m
        return (torch.arange(B, device=ids.device) if start else None), start
    rows = max(1, MAX_COMPARED // (C * m))
    best_len, source = [], []
    for i in range(0, B, rows):
        same = ids[i:i + rows, None, :m] == cached_ids[None, :, :m]  # [b, C, m]
        shared = same.to(torch.int8).cumprod(2).sum(2)  # [b, C]: leading columns in common
        length, j = shared.max(1)
        best_len.append(length)
        source.append(j)
    start = int(torch.cat(best_len).min())
    return (torch.cat(source) if start else None), start
