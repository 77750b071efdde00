"""Shrinking a failing generated scenario to the smallest one that still fails.

A scenario case (:class:`~specexact.audit.cases.e2e.scenarios.ScenarioCase`) that fails is
shrunk as the fuzz phase shrinks its findings (:mod:`specexact.fuzz.engine`): Hypothesis
replays the draw that produced it (same seed, same settings, no database), skipping the
examples before it, and shrinks it; every candidate is run through the engine as a case of
the same name (hence the same request seeds), on :data:`SHRINK_CALLS` generate calls and
at the same per-check false-fail rate as the original (without the reproducibility calls unless
``reproducible`` failed), and counts as failing when a check of
one of the original's failing check types (``token_law``, ``plain_token_law``,
``reproducible``, ``defect``) fails. Every run is seeded and deterministic, so the shrunk
scenario fails again when replayed (:func:`shrunk_replay`).

The verdict counts the original scenario's checks only (within the audit's false-fail
budget); shrinking only makes the example small. It runs no candidate predicted to end
after ``time_limit_s`` (:data:`SHRINK_TIME_S` by default; the prediction scales the
original's seconds per call pair by the scenarios' estimated work,
:func:`~specexact.audit.cases.e2e.scenarios.cost`) and keeps the smallest failing scenario
found.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from hypothesis import Phase

from specexact.audit.cases.e2e.sampling import run_e2e_case
from specexact.audit.cases.e2e.scenarios import ScenarioCase, cost, hypothesis_run, scenario_case, scenario_seed
from specexact.audit.cases.result import CaseResult
from specexact.fuzz.hypothesis_env import without_local_constants
from specexact.strategies.scenarios import Scenario

__all__ = ["SHRINK_TIME_S", "SHRINK_ALLOWANCE", "ShrinkResult", "failing_types", "needs_shrink", "shrink_scenario", "shrink_failures",
           "shrunk_replay"]

SHRINK_TIME_S = 20.0
"""Seconds a shrink may spend on new candidates (each one a run of the engine)."""

SHRINK_CALLS = 2
"""Generate calls (speculative and plain each) of every candidate: the fewest a case makes,
so that each candidate costs the least (the original may have run more)."""

SHRINK_ALLOWANCE = 0.1
"""The share of a budgeted audit's budget, past it, that shrinking may still use (the 10 %
an audit may end past its budget): a failing scenario is shrunk only in what is left of the
budget and this allowance."""


@dataclass(frozen=True)
class ShrinkResult:
    """What shrinking a failing scenario found.

    Attributes
    ----------
    scenario : Scenario or None
        The smallest scenario that still failed (the original when no smaller one did), or
        None when the draw could not be replayed (``note`` says why).
    failing : tuple of str
        The checks that failed on it.
    runs : int
        Candidates run through the engine.
    time_s : float
    note : str
    num_batches : int
        Generate calls each candidate ran (what the replay runs).
    """

    scenario: Scenario | None
    failing: tuple[str, ...] = ()
    runs: int = 0
    time_s: float = 0.0
    note: str = ""
    num_batches: int = 0

    def to_dict(self) -> dict:
        return {"scenario": None if self.scenario is None else self.scenario.to_dict(), "num_batches": self.num_batches,
                "description": None if self.scenario is None else self.scenario.describe(),
                "failing": list(self.failing), "runs": self.runs, "time_s": self.time_s, "note": self.note}


def failing_types(result: CaseResult) -> set[str]:
    """The failing check types of ``result`` (a check's name before ``[``), ``"defect"``
    for a crash or a protocol break."""
    out = {c.name.split("[")[0] for c in result.checks if not c.passed}
    if result.defect:
        out.add("defect")
    return out


def needs_shrink(result: CaseResult) -> bool:
    """Whether ``result`` is a drawn scenario case that failed and has no shrink yet (a case
    that went on in a fresh process after a crash is not shrunk)."""
    case = result.case
    return (isinstance(case, ScenarioCase) and case.draw is not None and not result.passed
            and result.fresh_process is None and bool(result.num_batches) and "shrunk" not in result.extras)


def shrink_failures(results, engine, *, false_fail_rate: float, seed: int, min_expected: float,
                    time_left_s: float | None) -> None:
    """Shrink every failing drawn scenario of ``results`` (:class:`CaseResult` s, in place:
    ``extras["shrunk"]``), each within :data:`SHRINK_TIME_S` and within what is left of
    ``time_left_s`` (None: no limit but theirs; nothing left: the shrink tries no candidate
    and the original scenario is its own replay). A budgeted audit calls this after all its
    cases ran, with what is left of its budget and :data:`SHRINK_ALLOWANCE`, so that
    shrinking never spends a later case's time nor ends the audit past its budget's 10 %."""
    start = time.perf_counter()
    for res in results:
        if not needs_shrink(res):
            continue
        limit = SHRINK_TIME_S if time_left_s is None else min(SHRINK_TIME_S, max(
            0.0, time_left_s - (time.perf_counter() - start)))
        shrunk = res.timed("shrink", shrink_scenario, res.case, engine, res, false_fail_rate=false_fail_rate,
                           seed=seed, num_batches=min(res.num_batches, SHRINK_CALLS), min_expected=min_expected,
                           time_limit_s=limit)
        res.extras["shrunk"] = shrunk.to_dict()


class _StillFails(Exception):
    """Raised in the shrink's property: the candidate still fails."""


def shrink_scenario(case: ScenarioCase, engine, original: CaseResult, *, false_fail_rate: float, seed: int,
                    num_batches: int, min_expected: float, time_limit_s: float | None = None) -> ShrinkResult:
    """Shrink the failing ``case`` (module docstring).

    Parameters
    ----------
    case : ScenarioCase
        A drawn scenario case (``case.draw`` set).
    engine : EndToEndEngine
    original : CaseResult
        Its failing result (its failing check types are what a candidate must fail).
    false_fail_rate : float
        The per-check rate the original ran at.
    seed : int
        The audit seed (the request seeds).
    num_batches : int
        Generate calls per candidate.
    min_expected : float
    time_limit_s : float, optional
        Default :data:`SHRINK_TIME_S`.

    Returns
    -------
    ShrinkResult

    Raises
    ------
    ValueError
        ``num_batches < 1`` or ``time_limit_s < 0``.
    """
    if time_limit_s is None:
        time_limit_s = SHRINK_TIME_S
    if int(num_batches) < 1:
        raise ValueError(f"num_batches must be >= 1, got {num_batches!r}")
    if not time_limit_s >= 0:
        raise ValueError(f"time_limit_s must be >= 0, got {time_limit_s!r}")
    t0 = time.perf_counter()
    wanted = failing_types(original)
    first = tuple(c.name for c in original.checks if not c.passed)
    if case.draw is None or not wanted:
        return ShrinkResult(None, first, note="not a drawn scenario, or nothing failed: nothing to shrink",
                            num_batches=int(num_batches))
    audit_seed, index = case.draw
    state = {"calls": 0, "best": None, "failing": first, "runs": 0, "mismatch": False}
    deadline = t0 + float(time_limit_s)
    # a candidate's predicted seconds: the original's per call pair (its reproducibility pair
    # included), scaled by the scenarios' estimated work; one predicted past the deadline is skipped
    ph = original.phase_times_s
    pair_s = (ph.get("speculative_calls", 0.0) + ph.get("plain_calls", 0.0)) / (original.num_batches + 1)
    per_work = pair_s / max(cost(case.scenario), 1e-9)

    def fails(s: Scenario, i: int) -> bool:
        if i < index or state["mismatch"]:
            return False
        if i == index:
            if s != case.scenario:
                state["mismatch"] = True
                return False
            state["best"] = s  # it failed in the audit: not run again
            return True
        if s == state["best"]:
            return True  # Hypothesis replays the smallest failing example it has
        if time.perf_counter() + per_work * cost(s) * int(num_batches) > deadline:
            return False  # it would not end in time (a smaller one may)
        cand = replace(scenario_case(engine, s, case.method, pair=case.pair, requests_per_class=case.requests_per_class),
                       name=case.name)
        state["runs"] += 1
        res = run_e2e_case(cand, engine, false_fail_rate=false_fail_rate, seed=seed, num_batches=int(num_batches),
                           min_expected=min_expected, reproducibility="reproducible" in wanted)
        if failing_types(res) & wanted:
            state["best"], state["failing"] = s, tuple(c.name for c in res.checks if not c.passed)
            return True
        return False

    def prop(s: Scenario) -> None:
        i = state["calls"]
        state["calls"] += 1
        if fails(s, i):  # one place that raises: Hypothesis tells failures apart by where they are raised
            raise _StillFails

    with without_local_constants():
        try:
            hypothesis_run(prop, scenario_seed(audit_seed), phases=(Phase.generate, Phase.shrink),
                           scheduler=bool(engine.capabilities().scheduler))()
        except Exception:  # noqa: BLE001 - _StillFails (or Hypothesis' wrapper of it) ends the run
            pass
    took = time.perf_counter() - t0
    if state["best"] is None:
        why = ("the draw gave another scenario at its index (another Hypothesis version?)" if state["mismatch"]
               else "the draw did not reach the scenario's index")
        return ShrinkResult(None, first, state["runs"], took, note=f"not shrunk: {why}", num_batches=int(num_batches))
    note = f"shrunk in {state['runs']} engine runs within {float(time_limit_s):g} s"
    return ShrinkResult(state["best"], state["failing"], state["runs"], took, note=note, num_batches=int(num_batches))


def shrunk_replay(case: dict, shrunk: dict, engine: str, *, seed: int, num_batches: int, alpha: float,
                  threads: int | None = None) -> str:
    """The Python that reruns a shrunk scenario: the case of the scenario ``shrunk`` (a
    :meth:`Scenario.to_dict`) under the name of the original ``case`` (its report dict:
    the same request seeds), ``num_batches`` calls at per-check rate ``alpha``."""
    config = case.get("config", {})
    return ((f"import torch\ntorch.set_num_threads({int(threads)})\n" if threads else "")
            + "from dataclasses import replace\n"
            "from specexact.audit import run_case\n"
            "from specexact.audit.cases.e2e.scenarios import scenario_case\n"
            "from specexact.decoders.engines.registry import resolve_engine\n"
            "from specexact.strategies import Scenario\n"
            f"engine, _ = resolve_engine({engine!r})\n"
            f"scenario = Scenario.from_dict({shrunk!r})\n"
            f"case = replace(scenario_case(engine, scenario, {config.get('method')!r}, pair={config.get('pair')!r}, "
            f"requests_per_class={config.get('requests_per_class')!r}), name={case['name']!r})\n"
            f"result = run_case(case, engine, false_fail_rate={alpha!r}, seed={seed!r}, num_batches={num_batches})\n"
            "print(result.defect or [str(c) for c in result.checks if not c.passed])")
