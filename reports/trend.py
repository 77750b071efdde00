"""Earlier reports in a folder: the history behind the trend plots and tables."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Sequence

__all__ = ["load_history", "summarize", "check_key"]


def check_key(check: dict) -> str:
    return f"{check['case']} / {check['name']}"


def _num(x) -> float:
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return float(x)
    if x == "inf":
        return math.inf
    return math.nan


def summarize(report: dict, path: str | None = None) -> dict:
    """The few fields of a report a trend needs."""
    return {
        "path": path,
        "started_at": report.get("started_at", ""),
        "verdict": report.get("verdict"),
        "audit_key": (report.get("settings") or {}).get("audit_key"),
        "per_check_false_fail_rate": (report.get("settings") or {}).get("per_check_false_fail_rate"),
        "checks": {
            check_key(c): {"pvalue": _num(c.get("pvalue")), "detectable_tv": _num(c.get("detectable_tv")),
                           "passed": bool(c.get("passed")), "n": c.get("n")}
            for c in report.get("checks", []) if "case" in c and "name" in c
        },
    }


def load_history(folder: str | os.PathLike, *, sampler_name: str, exclude: Sequence[str | os.PathLike] = (),
                 before: str | None = None, limit: int = 30) -> list[dict]:
    """Summaries of earlier audit reports of ``sampler_name`` in ``folder``, oldest first.

    Reads every ``*.json`` there that is a ``specexact.audit/*`` report of the same sampler
    and not a shard (a shard holds part of the checks; its merged report is the run). Files
    that are not reports, or cannot be read, are skipped. ``exclude`` lists paths to leave
    out (the report being written); ``before`` keeps only reports started earlier (ISO
    timestamps); at most the ``limit`` latest are returned.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    skip = {Path(p).resolve() for p in exclude}
    found = []
    for path in folder.glob("*.json"):
        if path.resolve() in skip:
            continue
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict) or not str(data.get("schema", "")).startswith("specexact.audit/"):
            continue
        if (data.get("sampler") or {}).get("name") != sampler_name:
            continue
        if (data.get("settings") or {}).get("shard"):
            continue
        if before is not None and str(data.get("started_at", "")) >= before:
            continue
        found.append(summarize(data, str(path)))
    found.sort(key=lambda s: (s["started_at"], s["path"] or ""))
    unique: dict[tuple, dict] = {}
    for s in found:  # the same run written twice (e.g. --json into the same folder)
        unique.setdefault((s["started_at"], s["audit_key"], s["verdict"]), s)
    found = list(unique.values())
    return found[-limit:] if limit > 0 else []
