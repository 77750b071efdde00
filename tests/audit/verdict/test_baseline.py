"""Regression mode: compare_to_baseline on synthetic reports."""

import copy

import pytest

from specexact.audit.verdict.acceptance_drop import acceptance_stats
from specexact.audit.verdict.baseline import compare_to_baseline

ALPHA = 1e-8


def chk(case, name, pvalue=0.5, n=1000, worst=(), details=None):
    return {"case": case, "name": name, "pvalue": pvalue, "passed": pvalue > ALPHA, "n": n,
            "false_fail_rate": ALPHA, "worst": [list(w) for w in worst], "details": details or {}}


def acc_len(case, cls, counts):
    n = sum(counts)
    worst = sorted(((f"N={k}", c, c) for k, c in enumerate(counts)), key=lambda w: -w[1])[:5]
    return chk(case, f"accepted_length[class {cls}]", n=n, worst=worst)


def report(checks, defects=None, sampler="builtin", seed=0):
    names = sorted({c["case"] for c in checks} | set(defects or {}))
    return {
        "schema": "specexact.audit/1", "sampler": {"name": sampler}, "settings": {"seed": seed},
        "cases": [{"name": n, "defect": (defects or {}).get(n)} for n in names],
        "checks": checks,
    }


BASE = report([
    chk("a", "sequence_law[class 0]"),
    acc_len("a", 0, [3000, 3000, 4000]),
    chk("a", "sequence_law[class 1]", pvalue=1e-12),  # a known failure
    chk("z", "first_acceptance[class 0]", n=5000, details={"successes": 4000}),
])


def test_identical_reports_do_not_regress():
    diff = compare_to_baseline(copy.deepcopy(BASE), BASE)
    assert not diff.regressed
    assert [f["check"] for f in diff.still_failing] == ["sequence_law[class 1]"]
    assert {(c.case, c.row_class) for c in diff.acceptance} == {("a", "class 0"), ("z", "class 0")}
    assert all(c.pvalue > 0.1 and c.drop == 0 for c in diff.acceptance)
    text = diff.summary()
    assert text.startswith("baseline comparison: no regression") and "still failing" in text
    assert diff.to_dict()["regressed"] is False


def test_a_check_that_passed_and_now_fails_is_a_regression():
    now = copy.deepcopy(BASE)
    now["checks"][0] = chk("a", "sequence_law[class 0]", pvalue=1e-10)
    now["checks"][2] = chk("a", "sequence_law[class 1]", pvalue=0.3)  # fixed since
    now["checks"].append(chk("new-case", "sequence_law[class 0]", pvalue=0.0))  # no baseline: new
    diff = compare_to_baseline(now, BASE)
    assert diff.regressed
    assert [(f["case"], f["check"], f["baseline_pvalue"]) for f in diff.new_failures] == [
        ("a", "sequence_law[class 0]", 0.5), ("new-case", "sequence_law[class 0]", None)]
    assert [f["check"] for f in diff.fixed] == ["sequence_law[class 1]"]
    assert "new failure  a / sequence_law[class 0]" in diff.summary()


def test_a_new_crash_is_a_regression_and_a_known_one_is_not():
    crashed = report([c for c in BASE["checks"] if c["case"] != "a"] + [chk("a", "defect", pvalue=0.0)],
                     defects={"a": "crash in decoder call 0: RuntimeError: boom\ntraceback"})
    diff = compare_to_baseline(crashed, BASE)
    assert diff.regressed and diff.new_defects[0]["case"] == "a"
    assert "new defect   a: crash in decoder call 0: RuntimeError: boom" in diff.summary()
    assert any("in the baseline only" in s for s in diff.not_compared)
    again = compare_to_baseline(crashed, crashed)
    assert not again.regressed and any(f["check"] == "defect" for f in again.still_failing)


def test_acceptance_drop_beyond_chance_is_a_regression():
    now = copy.deepcopy(BASE)
    now["checks"][1] = acc_len("a", 0, [3600, 2900, 3500])  # mean 1.1 -> 0.99
    diff = compare_to_baseline(now, BASE)
    (drop,) = diff.acceptance_drops
    assert drop.case == "a" and drop.statistic == "mean accepted length"
    assert drop.baseline == pytest.approx(1.1) and drop.current == pytest.approx(0.99)
    assert drop.drop > drop.allowed_drop and drop.pvalue <= drop.false_alarm_rate
    assert drop.false_alarm_rate == pytest.approx(1e-6 / 2)  # Bonferroni over two comparisons
    assert diff.regressed and "acceptance   a / class 0" in diff.summary()


def test_small_drop_within_chance_and_a_rise_are_not_regressions():
    now = copy.deepcopy(BASE)
    now["checks"][1] = acc_len("a", 0, [3050, 2980, 3970])  # tiny drop
    now["checks"][3] = chk("z", "first_acceptance[class 0]", n=5000, details={"successes": 4500})  # rise
    diff = compare_to_baseline(now, BASE)
    assert not diff.regressed
    assert all(c.detectable_drop > 0 for c in diff.acceptance)
    assert "largest detectable drop" in diff.summary()


def test_a_baseline_that_happened_to_accept_every_draft_is_no_reference_for_a_drop():
    """The eagle nightly audit (v8-near-draft, class 1): the baseline's 2,048 rounds accepted
    all 3 drafts (expected length 2.99817: a rejection is rare), the current 176,128 rounds
    averaged 2.99813. With each sample's own variance the baseline's 0 made that a drop at
    p = 6e-32; the pooled samples' variance puts it at p = 0.1. A real drop to 2.99 at the
    same sizes is still one."""
    base = report([acc_len("n", 1, [0, 0, 0, 2048])])
    now = report([acc_len("n", 1, [40, 30, 150, 175908])])
    diff = compare_to_baseline(now, base)
    (c,) = diff.acceptance
    assert c.baseline == 3.0 and c.current == pytest.approx(2.99813, abs=1e-4)
    assert 0.01 < c.pvalue < 0.5 and not diff.regressed
    assert c.detectable_drop < 0.02
    worse = report([acc_len("n", 1, [4000, 3000, 2000, 167128])])  # mean 2.887
    assert compare_to_baseline(worse, base).regressed


def test_first_acceptance_rate_drop_uses_the_exact_test():
    now = copy.deepcopy(BASE)
    now["checks"][3] = chk("z", "first_acceptance[class 0]", n=5000, details={"successes": 3600})
    diff = compare_to_baseline(now, BASE)
    (drop,) = diff.acceptance_drops
    assert drop.statistic == "first-draft acceptance rate"
    assert drop.baseline == pytest.approx(0.8) and drop.current == pytest.approx(0.72)


def test_acceptance_sources():
    merged = chk("m", "accepted_length[class 0]", n=100, worst=[("N=0", 60, 60), ("N=1 (+2 more)", 40, 40)])
    detailed = chk("d", "accepted_length[class 0]", n=10, worst=[("N=0 (+1 more)", 10, 10)],
                   details={"observed_counts": [4, 6]})
    rep = report([merged, detailed])
    rep["cases"].append({"name": "c", "defect": None, "acceptance": {"class 1": {"counts": [1, 2, 3]}}})
    stats = acceptance_stats(rep)
    assert ("m", "class 0") not in stats  # merged bins: no mean can be formed
    assert stats[("d", "class 0")].counts == (4, 6)
    assert stats[("c", "class 1")].value == pytest.approx(8 / 6)


def test_notes_and_errors():
    other = copy.deepcopy(BASE)
    other["sampler"]["name"] = "transformers"
    other["settings"]["seed"] = 3
    diff = compare_to_baseline(other, BASE)
    assert any("sampler differs" in n for n in diff.notes) and any("seed" in n for n in diff.notes)
    with pytest.raises(ValueError, match="schema"):
        compare_to_baseline({**BASE, "schema": "specexact.audit/2"}, BASE)
    with pytest.raises(ValueError, match="false_alarm_rate"):
        compare_to_baseline(BASE, BASE, false_alarm_rate=0)


# A planted bug risks only a false pass, which the false-fail ledger does not count.
@pytest.mark.statistical(checks=0)
def test_real_reports(alpha):
    from specexact.audit import quick_cases, run_audit
    from specexact.audit.zoo import WRONG
    from specexact.decoders import verify

    cases = [c for c in quick_cases() if c.name == "v8-plain"]
    kw = dict(cases=cases, false_fail_rate=alpha * 8, num_batches=2, budget_s=None, seed=0)
    good = run_audit(verify, **kw)
    bad = run_audit(WRONG["always_accept"], sampler_name="always_accept", **kw)
    same = compare_to_baseline(good, good)
    assert not same.regressed
    assert {(c.row_class, c.statistic) for c in same.acceptance} == {
        ("class 0", "mean accepted length"), ("class 1", "mean accepted length")}
    diff = compare_to_baseline(bad, good)
    assert diff.regressed and any(f["check"].startswith("sequence_law") for f in diff.new_failures)
    assert not diff.acceptance_drops  # accepting everything raises the acceptance
    assert any("sampler differs" in n for n in diff.notes)


def _fuzz(*findings):
    return {"findings": [{"family": fam, "rule": rule, "example_summary": {"family": kind}} for fam, rule, kind in
                         findings]}


def test_fuzz_findings_take_part_new_ones_regress_known_ones_do_not():
    zero = ("acceptance_probes", "zero_probability_token", "identical")
    nan = ("invalid_inputs", "refuses_invalid_input", "nan_draft_prob")
    base = {**copy.deepcopy(BASE), "fuzz": _fuzz(zero, nan)}
    same = {**copy.deepcopy(BASE), "fuzz": _fuzz(zero, nan)}
    diff = compare_to_baseline(same, base)
    assert not diff.regressed and {f["check"] for f in diff.still_failing if f["case"] == "fuzz"} == {
        "acceptance_probes / zero_probability_token[identical]", "invalid_inputs / refuses_invalid_input[nan_draft_prob]"}
    # Another corruption refused badly is a new finding of the hardening tier: listed, a
    # regression only with --strict-inputs (as it fails an audit only then); the
    # zero-probability one fixed.
    other = ("invalid_inputs", "refuses_invalid_input", "nan_target_prob")
    diff = compare_to_baseline({**copy.deepcopy(BASE), "fuzz": _fuzz(nan, other)}, base)
    assert not diff.regressed and diff.new_failures == []
    assert [f["check"] for f in diff.new_hardening] == ["invalid_inputs / refuses_invalid_input[nan_target_prob]"]
    assert "new hardening" in diff.summary() and diff.to_dict()["new_hardening"] == diff.new_hardening
    assert [f["check"] for f in diff.fixed if f["case"] == "fuzz"] == ["acceptance_probes / zero_probability_token[identical]"]
    strict = compare_to_baseline({**copy.deepcopy(BASE), "fuzz": _fuzz(nan, other)}, base, strict_inputs=True)
    assert strict.regressed
    assert [f["check"] for f in strict.new_failures] == ["invalid_inputs / refuses_invalid_input[nan_target_prob]"]
    assert "an exact rule broken" in strict.summary()
    # the current audit's own --strict-inputs is the default
    report_strict = copy.deepcopy(BASE)
    report_strict["settings"] = {**report_strict.get("settings", {}), "strict_inputs": True}
    assert compare_to_baseline({**report_strict, "fuzz": _fuzz(nan, other)}, base).regressed
    # a new defect-tier finding is a regression without --strict-inputs
    crash = ("verify_calls", "no_crash", "identical")
    assert compare_to_baseline({**copy.deepcopy(BASE), "fuzz": _fuzz(zero, nan, crash)}, base).regressed
    # A baseline without the fuzz phase: every finding is new, and said so.
    diff = compare_to_baseline({**copy.deepcopy(BASE), "fuzz": _fuzz(zero)}, copy.deepcopy(BASE))
    assert diff.regressed and any("no fuzz phase" in n for n in diff.notes)
    # A report without the fuzz phase compares no fuzz findings, and says so.
    diff = compare_to_baseline(copy.deepcopy(BASE), base)
    assert not diff.regressed and sorted(n for n in diff.not_compared if n.startswith("fuzz / ")) == [
        "fuzz / acceptance_probes / zero_probability_token[identical]: in the baseline; this audit ran no fuzz phase",
        "fuzz / invalid_inputs / refuses_invalid_input[nan_draft_prob]: in the baseline; this audit ran no fuzz phase"]


def _acceptance_finding(kind, message):
    return {"family": "acceptance_probes", "rule": "acceptance_rule", "example_summary": {"family": kind},
            "message": message}


def test_another_acceptance_defect_under_a_recorded_rule_is_new():
    """SGLang's recorded finding (q one ulp above 1: rejected though it must accept) must not
    hide a different acceptance defect (acceptance scaled by 0.97: p = q = 1 rejected)."""
    recorded = _acceptance_finding("draft_above", "draft 0 with p(d)=1.0, q(d)=1.0000001192092896: rejected at "
                                                  "u=1.4e-45, must accept (...)")
    base = {**copy.deepcopy(BASE), "fuzz": {"findings": [recorded]}}
    same = compare_to_baseline({**copy.deepcopy(BASE), "fuzz": {"findings": [copy.deepcopy(recorded)]}}, base)
    assert not same.regressed
    assert [f["check"] for f in same.still_failing if f["case"] == "fuzz"] == [
        "acceptance_probes / acceptance_rule[draft_above, rejects]"]
    scaled = _acceptance_finding("identical", "draft 0 with p(d)=1.0, q(d)=1.0: rejected at u=0.98, must accept (...)")
    diff = compare_to_baseline({**copy.deepcopy(BASE), "fuzz": {"findings": [scaled]}}, base)
    assert diff.regressed
    assert [f["check"] for f in diff.new_failures] == ["acceptance_probes / acceptance_rule[identical, rejects]"]
    # The same example family, the other direction: also another defect.
    accepts = _acceptance_finding("draft_above", "draft 0 with p(d)=0.5, q(d)=1.0: accepted at u=0.9, must reject (...)")
    diff = compare_to_baseline({**copy.deepcopy(BASE), "fuzz": {"findings": [accepts]}}, base)
    assert [f["check"] for f in diff.new_failures] == ["acceptance_probes / acceptance_rule[draft_above, accepts]"]


@pytest.mark.parametrize("bad", [None, "x", [], {}, 1e308, -1, 2.5, True])
def test_counts_the_schema_lets_through_leave_the_class_out_not_crash(bad):
    """A baseline valid by the schema whose ``details.observed_counts`` holds something other
    than counts crashed the comparison after the whole audit (a reviewer's mutation)."""
    good = chk("a", "accepted_length[class 0]", n=10, details={"observed_counts": [2, 3, 5]})
    broken = chk("a", "accepted_length[class 0]", n=10, details={"observed_counts": [bad, 3, 5]})
    assert ("a", "class 0") in acceptance_stats(report([good]))
    assert ("a", "class 0") not in acceptance_stats(report([broken]))
    diff = compare_to_baseline(report([good]), report([broken]))
    assert not diff.acceptance and not diff.regressed
