"""The kill table, the second self-check of :mod:`specexact.audit.zoo.selfcheck`: for each
verifier, the smallest number of decoder calls per case at which the full audit fails it
(:func:`kill_table`), with the sequences it used, the failing checks and the wall time; and
its Markdown (:func:`kill_table_markdown`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

import torch

from specexact.audit.cases.decoder_case import AuditCase, default_cases
from specexact.audit.run.stages import run_audit
from specexact.audit.zoo import CORRECT
from specexact.audit.zoo.law_cache import cached_exact_laws

__all__ = ["KillRow", "kill_table", "kill_table_markdown"]


@dataclass
class KillRow:
    """How one verifier fared in :func:`kill_table`."""

    name: str
    expected: str  # "fail" (planted bug) or "pass" (correct)
    verdict: str
    batches: int | None  # smallest failing batches (bugs) or the batches run (correct)
    sequences: int
    failing_checks: list[str]
    wall_time_s: float
    tried: list[int]

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def kill_table(
    verifiers: Mapping[str, Callable],
    *,
    batches: Sequence[int] = (1, 2, 4, 8),
    seed: int = 0,
    false_fail_rate: float = 1e-6,
    correct: Iterable[str] | None = None,
    cases: Sequence[AuditCase] | None = None,
    device: torch.device | str = "cpu",
    on_row: Callable[[KillRow], None] | None = None,
) -> list[KillRow]:
    """Smallest number of decoder calls per case at which the audit fails each verifier.

    Parameters
    ----------
    verifiers : mapping of str to callable
        Verifiers by name.
    batches : sequence of int, default (1, 2, 4, 8)
        Increasing decoder calls per case to try. The runner rounds odd numbers up to even
        (its independence checks pair successive calls), so 1 runs as 2; a size that runs
        the same audit as the previous one is not run again, and the smallest nominal size
        is recorded.
    seed : int, default 0
        Audit seed.
    false_fail_rate : float, default 1e-6
        The whole audit's false-fail rate (split over its checks).
    correct : iterable of str, optional
        Names of verifiers believed correct: run only at ``max(batches)`` and record the
        verdict. Default: the names in :data:`specexact.audit.zoo.CORRECT`.
    cases : sequence of AuditCase, optional
        Default: :func:`~specexact.audit.cases.decoder_case.default_cases`.
    device : torch.device or str
    on_row : callable, optional
        Called with each finished row (for progress output).

    Returns
    -------
    list of KillRow
        For a planted bug: ``batches`` is the first entry of ``batches`` at which the audit
        failed (None if it passed them all), ``sequences`` the sequences sampled in that
        audit, ``failing_checks`` its findings as ``"case: check"``, ``wall_time_s`` the time
        of the audits run for it (all tried sizes). For a correct verifier: one audit at
        ``max(batches)``. The exact reference laws are enumerated once for all verifiers
        (:func:`cached_exact_laws`); verdicts are those of :func:`run_audit`.
    """
    if correct is None:
        correct = CORRECT
    correct = set(correct)
    sizes = sorted(set(int(b) for b in batches))
    if not sizes or sizes[0] < 1:
        raise ValueError(f"batches must be positive integers, got {list(batches)!r}")
    cases = list(default_cases() if cases is None else cases)
    rows = []
    with cached_exact_laws():
        for name, verifier in verifiers.items():
            is_correct = name in correct
            plan = [sizes[-1]] if is_correct else sizes
            tried, start = [], time.perf_counter()
            report, effective = None, None
            for size in plan:
                tried.append(size)
                if size + size % 2 == effective:
                    continue  # the runner rounds odd sizes up: this audit was just run
                effective = size + size % 2
                report = run_audit(verifier, sampler_name=name, cases=cases,
                                   false_fail_rate=false_fail_rate, num_batches=size, budget_s=None,
                                   seed=seed, device=device)
                if report["verdict"] == "fail" and not is_correct:
                    break
            failed = report["verdict"] == "fail"
            row = KillRow(
                name=name,
                expected="pass" if is_correct else "fail",
                verdict=report["verdict"],
                batches=tried[-1] if (failed or is_correct) else None,
                sequences=int(report["num_sequences"]),
                failing_checks=[f"{f['case']}: {f['check']}" for f in report["findings"]],
                wall_time_s=time.perf_counter() - start,
                tried=tried,
            )
            rows.append(row)
            if on_row is not None:
                on_row(row)
    return rows


def kill_table_markdown(rows: Sequence[KillRow], *, max_checks: int = 4) -> str:
    """A Markdown table of :func:`kill_table` rows."""
    lines = ["| verifier | expected | verdict | batches | sequences | failing checks | seconds |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        checks = row.failing_checks[:max_checks]
        more = len(row.failing_checks) - len(checks)
        text = "; ".join(checks) + (f"; +{more} more" if more > 0 else "")
        batches = "-" if row.batches is None else str(row.batches)
        if row.expected == "fail" and row.batches is None:
            batches = f"not killed by {max(row.tried)}"
        lines.append(f"| {row.name} | {row.expected} | {row.verdict} | {batches} | {row.sequences} | "
                     f"{text or '-'} | {row.wall_time_s:.1f} |")
    return "\n".join(lines)
