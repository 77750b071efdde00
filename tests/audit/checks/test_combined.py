"""The audit's combined check (audit/combined.py): the false-fail split, which checks enter,
a wrong sampler whose evidence is spread over several checks caught by the combination
(and not by Bonferroni alone, as before), exact failures not reported twice, shards,
reproduction commands at the same per-check rate. (The renderers: tests/reports/test_combined_text.py.)"""

import copy

import pytest
import torch

from specexact.audit import quick_cases, run_audit
from specexact.audit.checks.combined import (COMBINED_SHARE, combination_pvalue, combination_uniform, combined_check,
                                      enters_combination, split_false_fail_rate)
from specexact.audit.verdict.build import build_report
from specexact.audit.zoo import CORRECT
from specexact.reports import validate_report

FALSE_FAIL_RATE = 1e-6


@pytest.fixture(scope="module")
def small_report():
    """A correct sampler's audit of one quick case, 2 calls (its p-values are then replaced)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        case = next(c for c in quick_cases() if c.name == "v8-plain")
        return run_audit(CORRECT["builtin"], cases=[case], num_batches=2, budget_s=None, seed=0,
                         false_fail_rate=FALSE_FAIL_RATE)
    finally:
        torch.set_num_threads(before)


def rebuild(report, cases, settings=None):
    return build_report(cases, sampler=report["sampler"], settings=settings or report["settings"],
                        environment=report["environment"], started_at=report["started_at"],
                        finished_at=report["finished_at"], wall_time_s=report["wall_time_s"])


def test_split():
    assert split_false_fail_rate(1e-6, 450) == pytest.approx((0.5e-6 / 450, 0.5e-6))
    assert split_false_fail_rate(1e-6, 10, share=0.25) == pytest.approx((0.75e-7, 0.25e-6))
    for args, match in [((0.0, 10), "false_fail_rate"), ((1e-6, 0), "num_checks"), ((1e-6, 2.5), "num_checks"),
                        ((1e-6, 10, 1.0), "share")]:
        with pytest.raises(ValueError, match=match):
            split_false_fail_rate(*args)


def test_the_audit_states_the_split(small_report):
    s = small_report["settings"]
    assert s["correction"] == "bonferroni+cauchy"
    assert s["combination"] == {"method": "cauchy", "share": COMBINED_SHARE,
                                "false_fail_rate": pytest.approx(COMBINED_SHARE * FALSE_FAIL_RATE)}
    assert s["per_check_false_fail_rate"] == pytest.approx((1 - COMBINED_SHARE) * FALSE_FAIL_RATE / s["num_checks"])
    comb = small_report["combined"]
    assert comb["passed"] and comb["false_fail_rate"] == pytest.approx(COMBINED_SHARE * FALSE_FAIL_RATE)
    # every statistical check with power entered, the exact rules did not
    entered = [c for c in small_report["checks"] if enters_combination(c)]
    assert comb["num_pvalues"] == len(entered) > 0
    assert not any(c["name"] in ("acceptance_exact", "recovered_support", "eos_cut") for c in entered)
    assert all(c["dof"] != 0 for c in entered if c["detectable_tv"] == "inf")
    validate_report(small_report)


def _spread(report, k):
    """The report's cases with ``k`` statistical checks at ``p = 2 * alpha / num_checks``:
    each passes on its own, at the old Bonferroni threshold (alpha / num_checks) as at the
    new one (half of it)."""
    cases = copy.deepcopy(report["cases"])
    n = report["settings"]["num_checks"]
    p = 2 * FALSE_FAIL_RATE / n
    done = 0
    for case in cases:
        for chk in case["checks"]:
            if done < k and enters_combination({"case": case["name"], **chk}):
                chk.update(pvalue=p, passed=True)
                done += 1
    assert done == k
    return cases, p


def test_evidence_spread_over_several_checks_is_caught_by_the_combination_only(small_report):
    cases, p = _spread(small_report, 6)
    new = rebuild(small_report, cases)
    assert new["verdict"] == "fail"
    [finding] = [f for f in new["findings"] if f["source"] == "combined"]
    assert finding["tier"] == "inexact" and finding["kind"] == "inexactness" and finding["check"] == "combined"
    assert new["tiers"]["inexact"] == 1
    assert new["combined"]["pvalue"] <= new["settings"]["combination"]["false_fail_rate"]
    assert [s["pvalue"] for s in new["combined"]["strongest"]] == [pytest.approx(p)] * 5
    assert finding["reproduction"]["command"].startswith("specexact audit --sampler builtin --seed 0")
    assert "combined check fails" in " ".join(new["diagnosis"]["notes"])
    assert new["diagnosis"]["summary"].startswith("faulty (combined evidence")
    validate_report(new)
    # before (Bonferroni alone, the whole rate over the checks): the same p-values pass
    old = dict(small_report["settings"], correction="bonferroni",
               per_check_false_fail_rate=FALSE_FAIL_RATE / small_report["settings"]["num_checks"])
    old.pop("combination")
    before = rebuild(small_report, cases, old)
    assert before["verdict"] == "pass" and before["combined"] is None
    assert all(c["pvalue"] > old["per_check_false_fail_rate"] for c in before["checks"])


def test_an_exact_failure_fails_on_its_own_and_is_not_counted_twice(small_report):
    cases = copy.deepcopy(small_report["cases"])
    target = next(c for c in cases[0]["checks"] if enters_combination(c))
    target.update(pvalue=0.0, passed=False)
    report = rebuild(small_report, cases)
    assert report["verdict"] == "fail"
    assert report["combined"]["passed"] and report["combined"]["neutralised"] == 1
    assert [f["source"] for f in report["findings"]] == ["check"]


def test_a_shard_combines_at_its_share(small_report):
    settings = dict(small_report["settings"], shard={"index": 1, "count": 4, "cases": ["v8-plain"]})
    report = rebuild(small_report, small_report["cases"], settings)
    assert report["combined"]["false_fail_rate"] == pytest.approx(COMBINED_SHARE * FALSE_FAIL_RATE / 4)


def test_a_case_findings_command_keeps_the_per_check_rate(small_report):
    cases = copy.deepcopy(small_report["cases"])
    chk = next(c for c in cases[0]["checks"] if c["name"].startswith("sequence_law"))
    chk.update(pvalue=1e-30, passed=False)
    report = rebuild(small_report, cases)
    finding = next(f for f in report["findings"] if f["source"] == "check")
    rate = finding["reproduction"]["false_fail_rate"]
    # the command's own audit of that case splits its rate the same way: same per-check rate
    per_check, _ = split_false_fail_rate(rate, report["settings"]["num_checks"])
    assert per_check == pytest.approx(report["settings"]["per_check_false_fail_rate"], rel=1e-5)


def test_combined_check_of_the_briefs_pvalues():
    """p = 4.6e-9 ... 1.1e-6 on five of 450 checks: the combination reads them at about
    450 / sum(1/p) = 1.8e-6, below Bonferroni's 450 * min(p) = 2.1e-6 but above the combined
    check's 5e-7 at a false-fail rate of 1e-6: evidence this uneven (one p-value dominates)
    needs more samples; ten checks at 5e-9 (each above the old per-check 2.2e-9) are caught."""
    ps = [4.6e-9, 4.3e-8, 2.3e-7, 7.8e-7, 1.1e-6]
    checks = [{"case": "c", "name": f"sequence_law[class {i}]", "pvalue": p, "passed": True, "dof": 3,
               "detectable_tv": 0.1} for i, p in enumerate(ps + [0.5] * 445)]
    comb = combined_check(checks, 5e-7)
    assert comb["pvalue"] == pytest.approx(1.82e-6, rel=0.01) and comb["passed"]
    for c in checks[:10]:
        c["pvalue"] = 5e-9
    comb = combined_check(checks, 5e-7)
    assert comb["pvalue"] == pytest.approx(2.25e-7, rel=0.01) and not comb["passed"]
    with pytest.raises(ValueError, match="false_fail_rate must be in"):
        combined_check(checks, 0.0)


def _pair(case: str, name: str, pvalue: float, lower: float | None) -> dict:
    details = {} if lower is None else {"pvalue_lower": lower}
    return {"case": case, "name": name, "pvalue": pvalue, "passed": True, "dof": None, "detectable_tv": 0.1,
            "details": details}


def test_discrete_pvalues_enter_randomised_from_the_seed():
    """A check recording ``pvalue_lower`` enters at ``lower + u (p - lower)``, ``u`` from the
    audit's seed, case and check: the same in every run, never above the plain p-value, so
    the combined check rejects whenever it did without it; without a seed, as it is."""
    u = combination_uniform(0, "v8-plain", "independent_rows[class 0]")
    assert 0.0 <= u < 1.0 and u == combination_uniform(0, "v8-plain", "independent_rows[class 0]")
    others = {combination_uniform(1, "v8-plain", "independent_rows[class 0]"),
              combination_uniform(0, "v12-eos-cut", "independent_rows[class 0]"),
              combination_uniform(0, "v8-plain", "independent_calls[class 0]")}
    assert u not in others and len(others) == 3
    chk = _pair("v8-plain", "independent_rows[class 0]", 1.0, 0.2)
    assert combination_pvalue(chk, 0) == pytest.approx(0.2 + u * 0.8, rel=1e-12)
    assert combination_pvalue(chk, None) == 1.0
    assert combination_pvalue(_pair("v8-plain", "sequence_law[class 0]", 0.3, None), 0) == 0.3
    checks = [_pair("c", f"independent_rows[class {i}]", 1.0, 0.05) for i in range(20)]
    checks += [_pair("c", "sequence_law[class 0]", 0.004, None)]
    plain, randomised = combined_check(checks, 0.01), combined_check(checks, 0.01, seed=3)
    assert plain["randomised"] == 0 and randomised["randomised"] == 20
    assert randomised["pvalue"] < plain["pvalue"]
    assert randomised == combined_check(checks, 0.01, seed=3)
    # the failing check is neutralised (p = 0.5), not randomised
    checks[0]["passed"] = False
    assert combined_check(checks, 0.01, seed=3)["randomised"] == 19


def test_reports_randomise_the_pair_checks(small_report):
    """The audit's pair checks record ``pvalue_lower``; the report's combined check reads
    them randomised from ``settings.seed`` (since 1.8), and the schema holds the count."""
    pairs = [c for case in small_report["cases"] for c in case["checks"]
             if c["name"].startswith(("independent_rows", "independent_calls"))]
    assert pairs and all(0.0 <= c["details"]["pvalue_lower"] <= c["pvalue"] for c in pairs)
    comb = small_report["combined"]
    assert comb["randomised"] == sum(1 for c in pairs if c["passed"] and enters_combination(c))
    validate_report(small_report)


def _changed(report, **changes):
    """The report's cases with checks changed: ``name=(pvalue, passed, mean accepted length or None)``."""
    cases = copy.deepcopy(report["cases"])
    found = set()
    for case in cases:
        for chk in case["checks"]:
            key = chk["name"].replace("[class ", "_").replace("]", "")
            if key in changes:
                pvalue, passed, mean = changes[key]
                chk.update(pvalue=pvalue, passed=passed)
                if mean is not None:
                    chk["details"] = {**chk["details"], "mean_accepted_length": mean}
                found.add(key)
    assert found == set(changes)
    return cases


# One accepted-length check at p = 2e-8 (above its own chi-square level, (0.5e-6 / 14) / 3 =
# 1.2e-8, so it passes on its own) makes the combination of the 11 checks with power fail
# (p ~ 11 * 2e-8 = 2.2e-7 <= 5e-7). Its law's mean accepted length in this case: ~0.90.
P_SPREAD = 2e-8


def test_combined_evidence_of_under_acceptance_reads_under_accepting(small_report):
    assert small_report["settings"]["num_checks"] == 14
    new = rebuild(small_report, _changed(small_report, accepted_length_0=(P_SPREAD, True, 0.5)))
    assert new["verdict"] == "fail" and not new["combined"]["passed"]
    [finding] = new["findings"]
    assert finding["source"] == "combined"
    assert finding["kind"] == "under_accepting" and finding["tier"] == "under_accepting"
    assert "under-accepting" in finding["message"]
    assert new["tiers"] == {"inexact": 0, "defect": 0, "under_accepting": 1, "hardening": 0}
    assert new["diagnosis"]["summary"].startswith("exact but under-accepting (combined evidence")
    validate_report(new)


@pytest.mark.parametrize("changes", [
    # the acceptance evidence reads above the law: not under-acceptance
    {"accepted_length_0": (P_SPREAD, True, 1.5)},
    # the law checks' evidence alone makes the combination fail
    {"accepted_length_0": (P_SPREAD, True, 0.5), "sequence_law_1": (P_SPREAD, True, None)},
    # a law check of the case fails on its own (neutralised in the combination)
    {"accepted_length_0": (P_SPREAD, True, 0.5), "sequence_law_1": (1e-30, False, None)},
], ids=["above-the-law", "law-evidence", "law-check-fails"])
def test_other_combined_evidence_reads_inexact(small_report, changes):
    new = rebuild(small_report, _changed(small_report, **changes))
    assert new["verdict"] == "fail" and not new["combined"]["passed"]
    [finding] = [f for f in new["findings"] if f["source"] == "combined"]
    assert finding["kind"] == "inexactness" and finding["tier"] == "inexact"
    assert "under-accepting" not in finding["message"]
    assert new["tiers"]["under_accepting"] == 0
    validate_report(new)
