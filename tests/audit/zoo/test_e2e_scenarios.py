"""Planted faults only generated end-to-end scenarios reach (audit/zoo/e2e.py
E2E_WRONG_SCENARIO): each is caught in the scenarios of the default seed, on the speculative
path only — by the per-token checks, or (tokens kept past a stop inside a verify window) by
the output protocol, diagnosed EOS / length bookkeeping — and the failing scenario is shrunk
with a replay that fails again. The correct engine passes the same scenarios:
tests/audit/cases/test_e2e_scenarios.py."""

import pytest

import specexact.audit.cases.e2e.shrink as shrink
from specexact.audit import run_audit
from specexact.audit.cases.dispatch import checks_per_case
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


def _audit(engine, alpha):
    cases = scenario_cases(engine, seed=0)
    return run_audit(engine, cases=cases, num_batches=2, budget_s=None,
                     false_fail_rate=alpha * sum(checks_per_case(c) for c in cases), sampler_name=engine.name,
                     fuzz=False, threads=1)


@pytest.mark.statistical(checks=0)  # a planted fault risks only a false pass
@pytest.mark.parametrize("name", sorted(E2E_WRONG_SCENARIO))
def test_a_scenario_fault_is_caught_on_the_speculative_path(name, alpha, monkeypatch):
    monkeypatch.setattr(shrink, "SHRINK_TIME_S", 0.0)  # the shrink's own test is below
    report = _audit(E2E_WRONG_SCENARIO[name](), alpha)
    assert report["verdict"] == "fail"
    failed = {(f["check"].split("[")[0], f["tier"]) for f in report["findings"]}
    assert failed == FOUND_BY.get(name, {("token_law", "inexact")}), failed  # the plain path is right
    if name in FOUND_BY:  # the output protocol: tokens after the stop token, the loop's EOS bookkeeping
        assert all("continue after EOS" in f["message"] for f in report["findings"]), report["findings"]
        assert "eos_cut" in report["diagnosis"]["culprits"], report["diagnosis"]["summary"]
        return
    for rep in report["cases"]:
        if rep["verdict"] == "fail":  # the original scenario's checks decide; the shrink is kept beside them
            assert rep["shrunk"]["scenario"] == rep["config"]["scenario"], rep["shrunk"]["note"]
            assert any(not c["passed"] for c in rep["checks"] if c["name"].startswith("token_law"))


@pytest.mark.statistical(checks=0)
def test_the_failing_scenario_shrinks_and_its_replay_fails_again(alpha):
    report = _audit(FourthWindowPositionMisread(), alpha)
    (rep,) = [r for r in report["cases"] if r["verdict"] == "fail"]
    original, shrunk = Scenario.from_dict(rep["config"]["scenario"]), Scenario.from_dict(rep["shrunk"]["scenario"])
    assert rep["shrunk"]["runs"] >= 1 and shrunk != original, rep["shrunk"]
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
