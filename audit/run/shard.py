"""Split an audit over machines (``--shard i/n``); :mod:`specexact.reports.merge` merges the shards' reports.

A case's checks depend only on its own samples, and its samples only on the audit seed, the
case and its number of decoder calls: the counts a case produces are sufficient statistics
of its checks whoever runs it. So an audit is split *by case*: shard ``i`` of ``n`` runs a
fixed slice of the cases (:func:`shard_cases`), each at the per-check false-fail rate of
the **whole** audit (the audit's rate divided by the checks of *all* cases, not of the
shard's), and :func:`specexact.reports.merge.merge_reports` puts the slices back together. With ``--batches`` the
merged report has exactly the counts, p-values and verdicts of an unsharded run; with a
time budget each shard plans its own slice within its own budget.

The split is deterministic: cases are dealt, heaviest ``weight`` first, to the shard with
the least weight so far (ties: lower index), then each shard keeps the audit's order.
"""

from __future__ import annotations

import re
from typing import Sequence

from specexact.audit.cases.decoder_case import AuditCase

__all__ = ["ShardError", "parse_shard", "shard_cases"]


class ShardError(ValueError):
    """Bad ``--shard`` value, or shard reports that do not form one audit."""


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/n"`` (1-based, ``1 <= i <= n``) -> ``(i, n)``."""
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not m:
        raise ShardError(f"--shard must look like I/N (e.g. 1/4), got {text!r}")
    i, n = int(m.group(1)), int(m.group(2))
    if not 1 <= i <= n:
        raise ShardError(f"--shard {text!r}: need 1 <= I <= N")
    return i, n


def shard_cases(cases: Sequence[AuditCase], index: int, count: int) -> list[AuditCase]:
    """The cases of shard ``index`` (1-based) of ``count`` (see the module docstring)."""
    if not 1 <= index <= count:
        raise ShardError(f"shard {index}/{count}: need 1 <= index <= count")
    loads = [0.0] * count
    owner = {}
    order = sorted(range(len(cases)), key=lambda k: (-cases[k].weight, k))
    for k in order:
        s = min(range(count), key=lambda j: (loads[j], j))
        owner[k] = s
        loads[s] += cases[k].weight
    return [c for k, c in enumerate(cases) if owner[k] == index - 1]
