"""How a case runner samples: its settings, and its loop of sampler calls.

- :class:`RunSettings`: the keyword arguments of
  :func:`~specexact.audit.cases.dispatch.run_case`, of every kind's runner and of
  :func:`~specexact.audit.run.isolation.run_case_isolated`, declared and checked once;
- :func:`sample_calls`: call the sampler until the settings say enough, counting calls and
  rows and reporting progress; a raise of the sampler ends the loop as the case's defect.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, fields
from typing import Any, Callable

import torch

from specexact.audit.cases.result import CaseResult, enough_calls, sampler_failure
from specexact.audit.core.errors import AuditInternalError
from specexact.audit.core.levels import MIN_EXPECTED

__all__ = ["RunSettings", "sample_calls"]


@dataclass(frozen=True)
class RunSettings:
    """How one case runs: its false-fail rate, seed, sample size, device and progress.

    Parameters
    ----------
    false_fail_rate : float
        Per-check false-fail rate (the audit's total divided by its number of checks).
    seed : int
        Audit seed; the case's generator is seeded with
        :func:`~specexact.audit.cases.result.case_seed`.
    num_batches : int, optional
        Fixed number of decoder calls (rounded up to even). Exactly one of ``num_batches``
        and ``time_budget_s`` must be given.
    time_budget_s : float, optional
        Sample until this many seconds have passed (at least 2 calls). The sample size
        then depends on the machine's speed but never on the data.
    min_batches : int, default 2
        With ``time_budget_s``: make at least this many calls (rounded up to even) however
        long they take (the plan's floor, :func:`~specexact.audit.run.plan.floor_batches`).
    device : torch.device or str
    progress : callable, optional
        ``progress(num_sequences, num_batches)`` after each call.
    min_expected : float
        Smallest expected count per bin of the chi-square checks (default, and for None,
        :data:`~specexact.audit.core.levels.MIN_EXPECTED`; smaller values only for
        calibration studies at relaxed rates).

    Raises
    ------
    ValueError
        Both or neither of ``num_batches`` / ``time_budget_s``.
    """

    false_fail_rate: float
    seed: int = 0
    num_batches: int | None = None
    time_budget_s: float | None = None
    min_batches: int = 2
    device: torch.device | str = "cpu"
    progress: Callable[[int, int], None] | None = None
    min_expected: float = MIN_EXPECTED

    def __post_init__(self) -> None:
        if (self.num_batches is None) == (self.time_budget_s is None):
            raise ValueError("give exactly one of num_batches and time_budget_s")
        if self.min_expected is None:
            object.__setattr__(self, "min_expected", MIN_EXPECTED)

    def kwargs(self) -> dict[str, Any]:
        """The settings as keyword arguments (of a kind's ``run``; values not copied)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def sample_calls(run: RunSettings, result: CaseResult, start: float, call: Callable[[], Any],
                 keep: Callable[[Any], None], *, rows: int, what: str) -> None:
    """Make calls of the sampler until ``run`` says enough (``start``: the runner's
    :func:`time.perf_counter` when it began).

    Each call is ``call()`` (the sampler's call and whatever must run with it); its output
    goes to ``keep`` (outside the guard below). After each call ``result`` counts the calls
    and ``rows`` sequences per call, and ``run.progress`` hears of it.

    A raise of ``call`` (a crash or protocol violation of the sampler) ends the loop:
    ``result.defect`` and a failing ``defect`` check record it, at ``"{what} {b}"`` (e.g.
    ``"decoder call 3"``), with the traceback from ``call`` inward. An :class:`~specexact.audit.core.errors.AuditInternalError`, the
    audit's own failure, propagates.
    """
    b = 0
    t_first = time.perf_counter()  # the calls' mean time leaves out the runner's set-up before them
    while True:
        try:
            out = call()
        except AuditInternalError:
            raise
        except Exception as exc:  # noqa: BLE001 - a crash of the sampler is a finding
            # The defect's traceback starts at the runner's ``call``, not at this loop.
            exc = exc.with_traceback(exc.__traceback__.tb_next)
            result.defect, chk = sampler_failure(exc, f"{what} {b}", run.false_fail_rate)
            result.checks.append(chk)
            return
        keep(out)
        b += 1
        result.num_batches = b
        result.num_sequences = b * rows
        if run.progress is not None:
            run.progress(result.num_sequences, b)
        now = time.perf_counter()
        # stop before two more calls (at their mean time so far) would pass the case's time
        if enough_calls(b, run.num_batches, run.time_budget_s, now - start, run.min_batches,
                        call_s=(now - t_first) / b):
            return
