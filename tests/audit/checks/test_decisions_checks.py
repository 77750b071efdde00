"""Per-event checks from an observer summary (audit/decisions_checks.py)."""

import dataclasses
import math

import pytest
import torch

from specexact.audit.cases.decoder_case import default_cases
from specexact.audit.checks.decisions_checks import DECISION_CHECK_NAMES, DECISION_CHECKS, VERIFY_DECISION_CHECKS, decision_checks
from specexact.audit.core.levels import CHI2_TAIL_INFLATION
from specexact.audit.cases.dispatch import checks_per_case, decision_observer, run_case
from specexact.audit.zoo import CORRECT, WRONG
from specexact.decoders import speculative_generate


def _summary(verifier, name="v8-plain", batch=256, calls=2):
    case = dataclasses.replace(next(c for c in default_cases() if c.name == name), batch_size=batch)
    target, draft = case.models()
    prompts, tp, dp = case.batch()
    obs = decision_observer(case, prompts, verifier, 7)
    gen = torch.Generator().manual_seed(7)
    for _ in range(calls):
        obs.start_call()
        out = speculative_generate(target, draft, prompts, tp, dp, num_draft_tokens=case.num_draft_tokens,
                                   max_new_tokens=case.length, generator=gen, eos_token_id=case.eos_token_id,
                                   verifier=verifier, observer=obs)
        obs.finish_call(out)
    return obs.summary()


def test_names_levels_and_rates():
    s = _summary(CORRECT["builtin"])
    checks = decision_checks(s, alpha=1e-6, min_expected=50)
    assert tuple(c.name for c in checks) == DECISION_CHECK_NAMES and len(checks) == DECISION_CHECKS
    rates = {c.name: c.false_fail_rate for c in checks}
    for name in ("acceptance", "recovered_token_law", "bonus_token_law"):
        assert rates[name] == pytest.approx(1e-6 / CHI2_TAIL_INFLATION)
    for name in ("acceptance_exact", "recovered_support", "eos_cut"):
        c = next(x for x in checks if x.name == name)
        assert rates[name] == 1e-6 and c.method == "exact" and c.pvalue == 1.0
        assert c.detectable_tv == pytest.approx(math.log(100) / c.n)
    acc = next(c for c in checks if c.name == "acceptance")
    assert acc.details["num_slots"] == s["decisions"]["slots"]
    assert acc.detectable_tv == pytest.approx(acc.details["detectable_tv_of_slots"] / acc.details["event_fraction"])
    lo, hi = acc.details["detectable_scale_low"], acc.details["detectable_scale_high"]
    assert 0.5 < lo < 1 < hi < 2
    verify = decision_checks(s, alpha=1e-6, min_expected=50, level="verify")
    assert [c.name for c in verify] == list(DECISION_CHECK_NAMES[:VERIFY_DECISION_CHECKS])
    with pytest.raises(ValueError, match="level"):
        decision_checks(s, alpha=1e-6, min_expected=50, level="tree")


def test_more_decisions_detect_smaller_scales():
    small = decision_checks(_summary(CORRECT["builtin"], batch=512), alpha=1e-6, min_expected=50)[1]
    large = decision_checks(_summary(CORRECT["builtin"], batch=2048), alpha=1e-6, min_expected=50)[1]
    assert large.details["detectable_scale_low"] > small.details["detectable_scale_low"]
    assert large.detectable_tv < small.detectable_tv


def test_exact_failures_fail_at_p_zero_with_their_events():
    checks = {c.name: c for c in decision_checks(_summary(WRONG["resample_from_target"]), alpha=1e-6,
                                                 min_expected=50)}
    sup = checks["recovered_support"]
    assert not sup.passed and sup.pvalue == 0 and sup.statistic == sup.details["violations"] > 0
    assert sup.details["violation_events"][0]["kind"] == "recovered"
    checks = {c.name: c for c in decision_checks(_summary(WRONG["bonus_from_last_draft_position"], "v6-trunc-penalties", batch=240),
                                                 alpha=1e-6, min_expected=50)}
    assert not checks["bonus_token_law"].passed and checks["bonus_token_law"].method == "exact"


def test_run_case_runs_what_checks_per_case_counts():
    case = dataclasses.replace(next(c for c in default_cases() if c.name == "v12-eos-cut"), batch_size=64)
    res = run_case(case, CORRECT["builtin"], false_fail_rate=1e-6, num_batches=2)
    assert len(res.checks) == checks_per_case(case) == 4 * 2 + DECISION_CHECKS
    assert [c.name for c in res.checks[-DECISION_CHECKS:]] == list(DECISION_CHECK_NAMES)
