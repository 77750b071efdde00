"""Planted faults only generated end-to-end scenarios reach (audit/zoo/e2e.py
E2E_WRONG_SCENARIO): each is caught in the scenarios of the default seed, on the speculative
path only — by the per-token checks, or (tokens kept past a stop inside a verify window) by
the output protocol, diagnosed EOS / length bookkeeping — and the failing scenario is shrunk
with a replay that fails again. The correct engine passes the same scenarios:
tests/audit/cases/test_e2e_scenarios.py."""

import functools

import pytest

import specexact.audit.cases.e2e.shrink as shrink
from specexact.audit import run_audit
from specexact.audit.cases.dispatch import checks_per_case
from specexact.audit.cases.e2e.sampling import run_e2e_case
from specexact.audit.cases.e2e.scenarios import scenario_cases
from specexact.audit.zoo.e2e import (
    E2E_WRONG_SCENARIO,
    FourthWindowPositionMisread,
    MinTokensCheckedPerRound,
    PenaltiesOncePerRound,
    TokensPastStopInWindow,
    UnmaskedLeftPadding,
)
from specexact.strategies import Scenario


def test_the_scenario_faults_are_listed():
    assert E2E_WRONG_SCENARIO == {"unmasked_left_padding": UnmaskedLeftPadding,
                                  "penalties_once_per_round": PenaltiesOncePerRound,
                                  "fourth_window_position_misread": FourthWindowPositionMisread,
                                  "min_tokens_checked_per_round": MinTokensCheckedPerRound,
                                  "tokens_past_stop_in_window": TokensPastStopInWindow}


FOUND_BY = {"tokens_past_stop_in_window": {("defect", "defect")}}
"""The findings a fault makes where they are not a per-token law's (``token_law``, inexact)."""


SHRINK_RUNS = 2
"""Candidates the shrink test lets the shrink run (a fake clock ends it after them): for this
fault at seed 0 the first candidate Hypothesis tries already fails (one shape of the four,
γ = 3 kept); a counted stop is the same on a quiet or a loaded machine, where the wall-clock
limit (:data:`~specexact.audit.cases.e2e.shrink.SHRINK_TIME_S`, 20 s) is not."""


NO_WALL_LIMIT_S = 1e6
"""The shrink's time limit under the counting clock: no candidate is predicted past it (the
prediction scales the original's measured seconds, which a loaded machine inflates), so the
count alone ends the shrink."""


class _RunCountingClock:
    """``time`` for the shrink module: ``perf_counter`` stands still until the shrink has run
    ``runs`` candidates, then jumps past the shrink's deadline (:data:`NO_WALL_LIMIT_S`), so
    every later candidate is predicted to end past it and skipped: the shrink's own time
    limit, counted in candidates."""

    def __init__(self, runs: int):
        self.left, self.now = runs, 0.0

    def perf_counter(self) -> float:
        return self.now

    def ran(self) -> None:
        self.left -= 1
        if self.left <= 0:
            self.now = 2 * NO_WALL_LIMIT_S


SHRUNK = "fourth_window_position_misread"
"""The fault whose audit shrinks its failing scenario (the shrink test's)."""

SHRINK_RUNS_OF = {SHRUNK: SHRINK_RUNS, "min_tokens_checked_per_round": 0}
"""Candidates each fault's shrink may run: ``0``, no time for any (the original scenario is
its own replay); a fault not named here is not shrunk at all (its Hypothesis replay and
shrink passes cost about a third of its audit's CPU even with no candidate to run)."""


@functools.lru_cache(maxsize=None)
def _audit(name: str, alpha: float) -> dict:
    """The audit of ``name``'s planted engine on the default seed's scenarios, once per worker
    (the speculative-path test and the shrink test read the same report); its failing
    scenario shrunk on at most ``SHRINK_RUNS_OF[name]`` candidates."""
    engine = E2E_WRONG_SCENARIO[name]()
    cases = scenario_cases(engine, seed=0)
    runs = SHRINK_RUNS_OF.get(name)
    clock = _RunCountingClock(runs or 0)

    def counted(*args, **kwargs):
        clock.ran()
        return run_e2e_case(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        if runs is None:
            mp.setattr(shrink, "needs_shrink", lambda result: False)
        elif runs == 0:
            mp.setattr(shrink, "SHRINK_TIME_S", 0.0)
        else:
            mp.setattr(shrink, "time", clock)
            mp.setattr(shrink, "SHRINK_TIME_S", NO_WALL_LIMIT_S)
            mp.setattr(shrink, "run_e2e_case", counted)
        return run_audit(engine, cases=cases, num_batches=2, budget_s=None,
                         false_fail_rate=alpha * sum(checks_per_case(c) for c in cases), sampler_name=engine.name,
                         fuzz=False, threads=1)


@pytest.mark.statistical(checks=0)  # a planted fault risks only a false pass
@pytest.mark.parametrize("name", sorted(E2E_WRONG_SCENARIO))
def test_a_scenario_fault_is_caught_on_the_speculative_path(name, alpha):
    report = _audit(name, alpha)
    assert report["verdict"] == "fail"
    failed = {(f["check"].split("[")[0], f["tier"]) for f in report["findings"]}
    assert failed == FOUND_BY.get(name, {("token_law", "inexact")}), failed  # the plain path is right
    if name in FOUND_BY:  # the output protocol: tokens after the stop token, the loop's EOS bookkeeping
        assert all("continue after EOS" in f["message"] for f in report["findings"]), report["findings"]
        assert "eos_cut" in report["diagnosis"]["culprits"], report["diagnosis"]["summary"]
        return
    for rep in report["cases"]:
        if rep["verdict"] == "fail":  # the original scenario's checks decide; the shrink is kept beside them
            if SHRINK_RUNS_OF.get(name) == 0:  # no time to run a candidate: the original is its own replay
                assert rep["shrunk"]["scenario"] == rep["config"]["scenario"], rep["shrunk"]["note"]
            elif name != SHRUNK:
                assert "shrunk" not in rep
            assert any(not c["passed"] for c in rep["checks"] if c["name"].startswith("token_law"))


@pytest.mark.statistical(checks=0)
def test_the_failing_scenario_shrinks_and_its_replay_fails_again(alpha):
    report = _audit(SHRUNK, alpha)
    (rep,) = [r for r in report["cases"] if r["verdict"] == "fail"]
    original, shrunk = Scenario.from_dict(rep["config"]["scenario"]), Scenario.from_dict(rep["shrunk"]["scenario"])
    assert 1 <= rep["shrunk"]["runs"] <= SHRINK_RUNS and shrunk != original, rep["shrunk"]
    assert shrunk.gamma >= 3  # the fault needs a verify window of four positions
    assert len(shrunk.shapes) <= len(original.shapes)
    assert sum(s.max_tokens for s in shrunk.shapes) <= sum(s.max_tokens for s in original.shapes)
    finding = next(f for f in report["findings"] if f["case"] == rep["name"])
    replay = finding["reproduction"]["shrunk"]
    assert replay["scenario"] == shrunk.to_dict() and replay["failing"]
    assert f"--case {rep['name']}" in finding["reproduction"]["command"]
    assert finding["reproduction"]["command"].startswith("specexact audit --engine ")
    namespace: dict = {}
    exec(replay["python"].replace("resolve_engine(", "_resolve(").replace(
        "from specexact.decoders.engines.registry import resolve_engine", ""),
         {"_resolve": lambda name: (FourthWindowPositionMisread(), None)}, namespace)
    result = namespace["result"]
    assert not result.passed and any(not c.passed and c.name.startswith("token_law") for c in result.checks)
