"""What one audit case produced, and the per-case helpers every kind of case shares.

- :class:`CaseResult`: a case's checks, sample counts, timing and defect;
- :func:`case_seed`: the case's generator seed (audit seed and case name);
- :func:`defect_check`: the failing check that records a crash or protocol violation;
- :func:`sampler_failure`: what a runner records when a call of the sampler raises.
"""

from __future__ import annotations

import time
import traceback
import zlib
from dataclasses import dataclass, field

from specexact.audit.sampler.call_timeout import SamplerCallTimeout
from specexact.decoders import VerifierProtocolError
from specexact.exactness.results import CheckResult

__all__ = ["CaseResult", "case_seed", "defect_check", "enough_calls", "sampler_failure", "TRACEBACK_FRAMES",
           "NOT_STARTED"]

NOT_STARTED = "engine_not_started"
"""The case dict's key (since report schema 1.12, ``true`` when present) of an end-to-end case
whose engine's first load in the audit's process raised: it did not start here
(:func:`~specexact.audit.cases.e2e.sampling.run_e2e_case`)."""

TRACEBACK_FRAMES = 12
"""Innermost stack frames of a sampler's exception kept in the case's ``defect`` text."""


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
    phase_times_s: dict[str, float] = field(default_factory=dict)
    """Where the wall time went, for kinds that time their phases (end-to-end cases: engine
    loads, generate calls, the crash search, the checks); empty otherwise."""
    fresh_process: object | None = None
    """End-to-end cases whose engine could not be loaded again in this process after a crash:
    what a fresh process must still do
    (:class:`~specexact.audit.cases.e2e.engine_call.FreshProcessWork`; the run room starts
    it), else None. Not part of :meth:`to_dict`."""
    extras: dict = field(default_factory=dict)
    """What a kind adds to the case's report dict (a shrunk failing scenario:
    ``{"shrunk": ...}``, :mod:`~specexact.audit.cases.e2e.shrink`); empty otherwise."""

    def timed(self, phase: str, fn, *args, **kwargs):
        """``fn(*args, **kwargs)``, its seconds added to :attr:`phase_times_s` [``phase``]
        (also when it raises)."""
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.phase_times_s[phase] = self.phase_times_s.get(phase, 0.0) + time.perf_counter() - t

    @property
    def passed(self) -> bool:
        """The case's own verdict (its dict's ``verdict``): no defect and every check passed.
        A case that fails, fails the audit
        (:func:`~specexact.audit.verdict.verdict.decide_verdict`)."""
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
            **({"phase_times_s": dict(self.phase_times_s)} if self.phase_times_s else {}),
            **self.extras,
        }


def case_seed(seed: int, case) -> int:
    """The case's generator seed: a stable function of the audit seed and the case name."""
    return (seed * 1_000_003 + zlib.crc32(case.name.encode())) % (2**63)


def defect_check(name: str, message: str, alpha: float, kind: str | None = None) -> CheckResult:
    """The failing check (p-value 0) recording ``message``; ``kind`` (``"timeout"``,
    ``"crash"``) is kept in ``details["kind"]`` when given."""
    details = {"message": message} if kind is None else {"message": message, "kind": kind}
    return CheckResult(
        name=name, method="exact", statistic=float("inf"), pvalue=0.0, dof=None, n=0,
        false_fail_rate=alpha, detectable_tv=0.0, false_pass_rate=0.01, passed=False,
        worst=(), details=details, description="the sampler crashed, hung or broke the protocol",
    )


def sampler_failure(exc: BaseException, where: str, alpha: float, note: str = "") -> tuple[str, CheckResult]:
    """``(defect text, defect check)`` for an exception a call of the sampler raised at
    ``where`` (e.g. ``"decoder call 3"``): a protocol violation
    (:class:`~specexact.decoders.VerifierProtocolError`), a timeout
    (:class:`~specexact.audit.sampler.call_timeout.SamplerCallTimeout`, a hang in process) or a
    crash. The text ends with the innermost :data:`TRACEBACK_FRAMES` frames of the
    exception's traceback (the sampler's own lines); ``note`` is added to the first line."""
    if isinstance(exc, VerifierProtocolError):
        kind, detail = "protocol violation", None
    elif isinstance(exc, SamplerCallTimeout):
        kind, detail = "timeout", "timeout"
    else:
        kind, detail = "crash", None
    msg = f"{kind} in {where}: {type(exc).__name__}: {exc}{note}"
    frames = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-TRACEBACK_FRAMES))
    return msg + "\n" + frames, defect_check("defect", msg, alpha, kind=detail)


def enough_calls(calls: int, num_batches: int | None, time_budget_s: float | None, elapsed_s: float,
                 min_calls: int = 2, *, call_s: float = 0.0, tail_s: float = 0.0) -> bool:
    """Whether a case runner stops after ``calls`` decoder (or verifier) calls: at
    ``num_batches`` rounded up to even (the independence checks pair successive calls),
    or, with a time budget, at an even count of at least ``min_calls`` (at least 2: a floor
    the plan reserved, run however long it takes) once the next two calls and what the case
    still does after its calls would not end within the budget:
    ``elapsed_s + 2 * call_s + tail_s >= time_budget_s``.

    Parameters
    ----------
    call_s : float
        The runner's prediction of one more call's seconds (e.g. the slower of the last
        call and the mean so far); 0 stops only once the budget is spent.
    tail_s : float
        Seconds the case still spends after its last call (an end-to-end case's
        reproducibility calls and checks); counted inside the budget.
    """
    if num_batches is not None:
        return calls >= num_batches + (num_batches % 2)
    if calls < max(2, min_calls) or calls % 2:
        return False
    return elapsed_s + 2 * max(call_s, 0.0) + max(tail_s, 0.0) >= time_budget_s
