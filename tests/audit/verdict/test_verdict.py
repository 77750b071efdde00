"""The verdict's rules (:mod:`specexact.audit.verdict.verdict`), one test per rule of its
docstring, on small hand-made findings and cases."""

import pytest

from specexact.audit.verdict.verdict import (ERROR, FAIL, NOT_STARTED, PASS, command_verdict, decide_verdict, fails,
                                             not_started)

INEXACT = {"source": "check", "check": "sequence_law[class 0]", "kind": "inexactness", "tier": "inexact"}
DEFECT = {"source": "check", "check": "defect", "kind": "crash", "tier": "defect"}
UNDER = {"source": "check", "check": "accepted_length[class 0]", "kind": "under_accepting", "tier": "under_accepting"}
HARDENING = {"source": "fuzz", "family": "invalid", "rule": "refuses_invalid_input", "tier": "hardening"}


def test_rule_1_a_finding_of_a_failing_tier_fails_the_audit():
    for finding in (INEXACT, DEFECT, UNDER):
        assert decide_verdict([finding], ["pass"]) == FAIL
        assert decide_verdict([finding], ["pass"], strict_inputs=True) == FAIL


def test_rule_2_hardening_fails_only_with_strict_inputs():
    assert decide_verdict([HARDENING], ["pass"]) == PASS
    assert decide_verdict([HARDENING], ["pass"], strict_inputs=True) == FAIL
    assert decide_verdict([HARDENING, INEXACT], ["pass"]) == FAIL


def test_rule_3_a_finding_without_tier_gets_one_and_unknown_ones_fail():
    assert decide_verdict([{"check": "accepted_length[class 0]", "kind": "under_accepting"}], []) == FAIL
    assert decide_verdict([{"check": "a_future_check[class 0]", "kind": "inexactness"}], []) == FAIL
    assert decide_verdict([{"source": "fuzz", "family": "f", "rule": "a_future_rule"}], []) == FAIL
    untiered_hardening = {"source": "fuzz", "family": "invalid", "rule": "refuses_invalid_input"}
    assert decide_verdict([untiered_hardening], []) == PASS
    assert decide_verdict([untiered_hardening], [], strict_inputs=True) == FAIL


def test_rule_4_a_failing_case_fails_the_audit_without_a_finding():
    assert decide_verdict([], ["pass", "fail"]) == FAIL
    assert decide_verdict([], ["pass", "something else"]) == FAIL
    assert decide_verdict([HARDENING], ["fail"]) == FAIL


def test_rule_5_combined_and_fuzz_findings_count_as_any_other():
    assert decide_verdict([{"source": "combined", "check": "combined", "kind": "inexactness"}], ["pass"]) == FAIL
    assert decide_verdict([{"source": "combined", "check": "combined", "kind": "under_accepting"}], ["pass"]) == FAIL
    fuzz_defect = {"source": "fuzz", "family": "rows", "rule": "no_crash"}
    assert decide_verdict([fuzz_defect], ["pass"]) == FAIL


def test_rule_6_otherwise_the_audit_passes():
    assert decide_verdict([], []) == PASS
    assert decide_verdict([], ["pass", "pass"]) == PASS
    assert fails([]) is False and fails([INEXACT]) is True


def test_rule_7_a_failed_comparison_with_the_baseline_is_an_error():
    for report_verdict in (PASS, FAIL):
        for regressed in (None, False, True):
            assert command_verdict(report_verdict, regressed=regressed, comparison_failed=True) == ERROR


@pytest.mark.parametrize("report_verdict", [PASS, FAIL])
def test_rule_8_regression_mode_follows_the_comparison(report_verdict):
    assert command_verdict(report_verdict, regressed=True) == FAIL
    assert command_verdict(report_verdict, regressed=False) == PASS


def test_rule_9_otherwise_the_command_follows_the_report():
    assert command_verdict(PASS) == PASS
    assert command_verdict(FAIL) == FAIL


def test_rule_10_a_pass_without_the_fuzz_phase_is_an_error():
    assert command_verdict(PASS, fuzz_error=True) == ERROR
    assert command_verdict(FAIL, fuzz_error=True) == FAIL
    assert command_verdict(FAIL, regressed=False, fuzz_error=True) == ERROR
    assert command_verdict(PASS, regressed=True, fuzz_error=True) == FAIL


def test_rule_11_no_case_that_started_is_an_error_whatever_else():
    down = {"defect": "crash in engine load: AssertionError: no CUDA\nTraceback ...", NOT_STARTED: True}
    ran = {"defect": "crash in speculative generate call 0: RuntimeError: x\n..."}
    assert not_started([down, down]) == "crash in engine load: AssertionError: no CUDA"
    assert not_started([down, ran]) is None and not_started([ran]) is None and not_started([]) is None
    for report_verdict in (PASS, FAIL):
        for regressed in (None, False, True):
            assert command_verdict(report_verdict, regressed=regressed, engine_not_started=True) == ERROR


def test_build_report_states_decide_verdict():
    """The report's verdict is decide_verdict's, cases included (rule 4 through build_report)."""
    from specexact.audit.verdict.build import build_report

    case = {"name": "c", "verdict": "fail", "num_sequences": 0, "checks": [], "config": {}}
    settings = {"per_check_false_fail_rate": 1e-6, "seed": 0, "false_fail_rate": 1e-6}
    kwargs = dict(sampler={"name": "s"}, settings=settings, environment={}, started_at="", wall_time_s=0.0)
    assert build_report([case], **kwargs)["verdict"] == FAIL
    assert build_report([{**case, "verdict": "pass"}], **kwargs)["verdict"] == PASS
