"""The audit: split the false-fail rate and the time budget over cases, run them, decide."""

from __future__ import annotations

import datetime as _dt
import platform
import subprocess
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from specexact.exactness.budget import benjamini_hochberg

from .cases import AuditCase, default_cases
from .runner import CaseResult, checks_per_case, run_case

__all__ = ["run_audit", "environment", "SCHEMA"]

SCHEMA = "specexact.audit/1"
"""Version tag of the JSON report (``reports/schema.md`` documents the fields)."""


def environment(device: torch.device | str) -> dict:
    """Versions, device and git revision, for the report's metadata."""
    import scipy

    import specexact

    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent).stdout.strip() or None
    except Exception:  # noqa: BLE001 - git is optional
        rev = None
    dev = torch.device(device)
    return {
        "specexact": specexact.__version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "device": str(dev),
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or platform.machine(),
        "platform": platform.platform(),
        "git_revision": rev,
    }


def run_audit(
    verifier: Callable,
    *,
    sampler_name: str = "builtin",
    sampler_target: str = "specexact.decoders:verify",
    cases: Sequence[AuditCase] | None = None,
    false_fail_rate: float = 1e-6,
    budget_s: float | None = 120.0,
    num_batches: int | None = None,
    seed: int = 0,
    device: torch.device | str = "cpu",
    on_case_start: Callable[[AuditCase, int, int], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
    on_case_end: Callable[[CaseResult], None] | None = None,
) -> dict:
    """Audit ``verifier`` on ``cases`` and return the report as a JSON-ready dict.

    Parameters
    ----------
    verifier : callable
        Anything with the :func:`~specexact.decoders.verify` protocol.
    cases : sequence of AuditCase, optional
        Default: :func:`~specexact.audit.cases.default_cases`.
    false_fail_rate : float
        Chance that a correct verifier fails the audit as a whole; split equally
        (Bonferroni) over every check of every case, so each check runs at
        ``false_fail_rate / num_checks``.
    budget_s : float, optional
        Sampling time, split over cases by their ``weight``. Ignored when
        ``num_batches`` is given (fixed sample sizes, for reproducible tests).
    num_batches : int, optional
        Fixed decoder calls per case.
    seed : int
        Seeds every case's generator.

    Returns
    -------
    dict
        ``{"schema", "verdict", "sampler", "settings", "environment", "cases", "checks",
        "findings", ...}``; ``verdict`` is ``"pass"`` or ``"fail"``.
    """
    if not 0 < false_fail_rate < 1:
        raise ValueError(f"false_fail_rate must be in (0, 1), got {false_fail_rate!r}")
    if num_batches is None and (budget_s is None or budget_s <= 0):
        raise ValueError(f"budget_s must be > 0 when num_batches is not given, got {budget_s!r}")
    cases = list(default_cases() if cases is None else cases)
    total_checks = sum(checks_per_case(c) for c in cases)
    alpha = false_fail_rate / total_checks
    total_weight = sum(c.weight for c in cases)
    started = _dt.datetime.now(_dt.timezone.utc)
    t0 = time.perf_counter()
    results: list[CaseResult] = []
    for i, case in enumerate(cases):
        if on_case_start is not None:
            on_case_start(case, i, len(cases))
        share = None if num_batches is not None else budget_s * case.weight / total_weight
        res = run_case(case, verifier, false_fail_rate=alpha, seed=seed, num_batches=num_batches,
                       time_budget_s=share, device=device, progress=progress)
        results.append(res)
        if on_case_end is not None:
            on_case_end(res)
    wall = time.perf_counter() - t0

    flat = []
    for res in results:
        for chk in res.checks:
            flat.append({"case": res.case.name, **chk.to_dict()})
    pvalues = np.array([c["pvalue"] for c in flat], dtype=float)
    if len(pvalues):
        for entry, adj in zip(flat, benjamini_hochberg(pvalues)):
            entry["bh_adjusted_pvalue"] = float(adj)
    findings = []
    for res in results:
        for chk in res.checks:
            if not chk.passed:
                findings.append({
                    "case": res.case.name,
                    "check": chk.name,
                    "message": (chk.details or {}).get("message") or f"{chk.name}: p={chk.pvalue:.3g} <= {alpha:.3g}",
                    "worst": [list(w) for w in chk.worst],
                    "reproduction": {
                        "command": f"specexact audit --sampler {sampler_name} --seed {seed} --case {res.case.name}"
                                   + (f" --batches {num_batches}" if num_batches is not None else ""),
                        "case_seed": res.seed,
                        "batch_size": res.case.batch_size,
                        "num_batches": res.num_batches,
                    },
                })
    verdict = "pass" if all(r.passed for r in results) else "fail"
    return {
        "schema": SCHEMA,
        "verdict": verdict,
        "sampler": {"name": sampler_name, "target": sampler_target},
        "started_at": started.isoformat(timespec="seconds"),
        "wall_time_s": wall,
        "settings": {
            "seed": seed,
            "budget_s": budget_s if num_batches is None else None,
            "num_batches": num_batches,
            "false_fail_rate": false_fail_rate,
            "num_checks": total_checks,
            "per_check_false_fail_rate": alpha,
            "correction": "bonferroni",
        },
        "environment": environment(device),
        "num_sequences": sum(r.num_sequences for r in results),
        "cases": [r.to_dict() for r in results],
        "checks": flat,
        "findings": findings,
    }
