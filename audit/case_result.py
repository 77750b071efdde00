"""What one audit case produced, and the per-case helpers every kind of case shares.

- :class:`CaseResult`: a case's checks, sample counts, timing and defect;
- :func:`case_seed`: the case's generator seed (audit seed and case name);
- :func:`defect_check`: the failing check that records a crash or protocol violation.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

from specexact.exactness.results import CheckResult

__all__ = ["CaseResult", "case_seed", "defect_check", "enough_calls"]


@dataclass
class CaseResult:
    """What one case produced: checks, sample counts, timing, defects."""

    case: object  # the case (AuditCase, VerifyCase, ...): has name, description, to_dict()
    checks: list[CheckResult] = field(default_factory=list)
    num_sequences: int = 0
    num_batches: int = 0
    wall_time_s: float = 0.0
    defect: str | None = None
    seed: int = 0

    @property
    def passed(self) -> bool:
        return self.defect is None and all(c.passed for c in self.checks)

    def to_dict(self) -> dict:
        return {
            "name": self.case.name,
            "description": self.case.description,
            "config": self.case.to_dict(),
            "seed": self.seed,
            "num_sequences": self.num_sequences,
            "num_batches": self.num_batches,
            "wall_time_s": self.wall_time_s,
            "verdict": "pass" if self.passed else "fail",
            "defect": self.defect,
            "checks": [c.to_dict() for c in self.checks],
        }


def case_seed(seed: int, case) -> int:
    """The case's generator seed: a stable function of the audit seed and the case name."""
    return (seed * 1_000_003 + zlib.crc32(case.name.encode())) % (2**63)


def defect_check(name: str, message: str, alpha: float) -> CheckResult:
    return CheckResult(
        name=name, method="exact", statistic=float("inf"), pvalue=0.0, dof=None, n=0,
        false_fail_rate=alpha, detectable_tv=0.0, false_pass_rate=0.01, passed=False,
        worst=(), details={"message": message}, description="the sampler crashed or broke the protocol",
    )


def enough_calls(calls: int, num_batches: int | None, time_budget_s: float | None, elapsed_s: float,
                 min_calls: int = 2) -> bool:
    """Whether a case runner stops after ``calls`` decoder (or verifier) calls: at
    ``num_batches`` rounded up to even (the independence checks pair successive calls),
    or, with a time budget, once ``elapsed_s`` reaches it at an even count of at least
    ``min_calls`` (at least 2: a floor the plan reserved, run however long it takes)."""
    if num_batches is not None:
        return calls >= num_batches + (num_batches % 2)
    return elapsed_s >= time_budget_s and calls >= max(2, min_calls) and calls % 2 == 0
