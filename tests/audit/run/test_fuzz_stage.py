"""The audit's fuzz stage: in the plan, in the report, in the verdict, in shards."""

import pytest

from specexact.audit import SCHEMA_VERSION, quick_cases, run_audit
from specexact.audit.cases.dispatch import checks_per_case
from specexact.reports.merge import merge_reports
from specexact.audit.zoo.floats import accepts_at_equality
from specexact.decoders import verify
from specexact.fuzz import FuzzSettings
from specexact.audit.cases.generated import generated_cases
from specexact.reports import validate_report

CASE = [c for c in quick_cases() if c.name == "v8-plain"]
GENERATED = generated_cases(verify, FuzzSettings(seed=0))
CHECKS = sum(checks_per_case(c) for c in CASE + GENERATED)


def audit(verifier, alpha, **kw):
    return run_audit(verifier, cases=CASE, num_batches=2, budget_s=None, fuzz=True, fuzz_examples=4,
                     false_fail_rate=alpha * CHECKS, **kw)


@pytest.mark.statistical(checks=CHECKS)
def test_a_fuzzed_audit_of_the_builtin_verifier_passes_and_reports_the_phase(alpha):
    events = []
    report = audit(verify, alpha, on_status=lambda e: events.append(e["event"]))
    validate_report(report)
    assert report["verdict"] == "pass" and report["schema_version"] == SCHEMA_VERSION
    fz = report["fuzz"]
    assert fz["verdict"] == "pass" and [f["examples"] for f in fz["families"]] == [4, 4, 4]
    assert fz["generated_cases"] == ["fuzz-rows-1", "fuzz-laws-1"]
    assert [c["name"] for c in report["cases"]] == ["v8-plain", "fuzz-rows-1", "fuzz-laws-1"]
    plan = report["plan"]["fuzz"]
    assert plan["share"] is None and plan["examples_per_family"] == 4 and plan["time_s"] > 0
    assert events.index("fuzz_start") < events.index("fuzz_end") < events.index("plan")


@pytest.mark.statistical(checks=0)  # a planted fault risks only a false pass
def test_a_fuzz_finding_fails_the_audit(alpha):
    report = audit(accepts_at_equality, alpha, sampler_name="specexact.audit.zoo_float:accepts_at_equality")
    assert report["verdict"] == "fail" and all(c["verdict"] == "pass" for c in report["cases"])
    findings = report["fuzz"]["findings"]
    # one finding per (rule, family, direction) where the rule is broken: each with its replay
    assert {f["rule"] for f in findings} == {"zero_probability_token"}, [f["rule"] for f in findings]
    assert all("replay" in f for f in findings)
    validate_report(report)


@pytest.mark.statistical(checks=CHECKS)
def test_a_budget_gives_the_phase_its_share_and_the_cases_the_rest(alpha):
    # 5 s (the audit fills its budget's wall time): the phase's share is 1 s, the case keeps the rest
    report = run_audit(verify, cases=CASE, budget_s=5.0, fuzz=True, fuzz_share=0.2, false_fail_rate=alpha * CHECKS)
    plan = report["plan"]["fuzz"]
    assert plan["share"] == 0.2 and plan["planned_time_s"] == pytest.approx(1.0)
    assert plan["time_s"] < plan["planned_time_s"] + 10.0  # at most one example past its share (loaded machine)
    assert all(f["stopped"] in ("time", "examples") for f in report["fuzz"]["families"])


@pytest.mark.statistical(checks=CHECKS)
def test_the_phase_runs_in_shard_1_and_merging_carries_it(alpha):
    shards = [audit(verify, alpha, shard=(i, 2), sampler_name="builtin") for i in (1, 2)]
    assert "fuzz" in shards[0] and "fuzz" not in shards[1]
    merged = merge_reports(shards)
    assert merged["fuzz"] == shards[0]["fuzz"] and merged["verdict"] == "pass"
    validate_report(merged)


@pytest.mark.statistical(checks=0)  # the case checks are not what is tested (a crashing sampler)
def test_an_isolated_fuzz_stage_survives_a_segfault(alpha, monkeypatch):
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).parents[1]))
    report = run_audit(None, sampler_name="fuzz_faulty:segfault_from_two_tokens", cases=CASE, num_batches=2,
                       budget_s=None, fuzz=True, fuzz_examples=4, isolate=True, case_timeout_s=120)
    (finding,) = report["fuzz"]["findings"]
    assert finding["rule"] == "no_crash" and "SIGSEGV" in finding["message"]
    assert report["verdict"] == "fail"
    validate_report(report)


def test_fixed_fuzz_examples_hold_also_with_a_budget():
    """``--fuzz-examples N`` with a budget: N examples per family, no time share, so the
    fuzz findings do not depend on the machine's speed (what ``--baseline`` compares)."""
    import argparse

    from specexact.audit import AuditSettings
    from specexact.cli_fuzz import add_audit_fuzz_options, audit_fuzz_settings

    timed = AuditSettings(budget_s=60.0, fuzz=True)
    fixed = AuditSettings(budget_s=60.0, fuzz=True, fuzz_examples=5)
    assert timed.fuzz_time_s == pytest.approx(12.0) and timed.fuzz_settings().examples_per_family is None
    assert fixed.fuzz_time_s is None and fixed.fuzz_settings().examples_per_family == 5
    parser = argparse.ArgumentParser()
    parser.add_argument("--report-dir", default="r")
    add_audit_fuzz_options(parser)
    assert audit_fuzz_settings(parser.parse_args(["--fuzz-examples", "7"]))["fuzz_examples"] == 7
    assert audit_fuzz_settings(parser.parse_args([]))["fuzz_examples"] is None
