"""--budget: sample sizes planned from the power functions fit the time, and the audit stops on time."""

import math

import pytest

from specexact.audit import quick_cases, run_audit
from specexact.audit.plan import (
    MIN_BATCHES,
    approx_detectable_tv,
    cases_within_budget,
    minimum_time,
    plan_batches,
    rows_per_class,
    tv_constant,
)
from specexact.decoders import verify
from specexact.reports import validate_report

ALPHA = 1e-8


def test_planned_tvs_shrink_with_the_budget_and_the_plan_fits():
    cases = quick_cases()
    costs = [0.05, 0.08, 0.07, 0.06, 0.03, 0.04][: len(cases)]
    assert len(costs) == len(cases)
    last = [math.inf] * len(cases)
    for budget in (2.0, 5.0, 20.0, 80.0):
        batches, worst, feasible = plan_batches(cases, costs, budget, ALPHA)
        assert feasible and worst is not None
        assert sum(b * c for b, c in zip(batches, costs)) <= budget
        assert all(b >= MIN_BATCHES and b % 2 == 0 for b in batches)
        tvs = [approx_detectable_tv(c, b * rows_per_class(c), ALPHA) for c, b in zip(cases, batches)]
        assert all(t < old for t, old in zip(tvs, last)) and max(tvs) == pytest.approx(worst)
        last = tvs


def test_costs_must_match_the_cases():
    with pytest.raises(ValueError, match="costs has 2 entries but there are 3 cases"):
        plan_batches(quick_cases()[:3], [0.1, 0.2], 10.0, ALPHA)


def test_the_plan_minimises_the_sum_of_squared_tvs():
    cases = quick_cases()[:3]
    costs = [0.01, 0.1, 1.0]  # cheap, medium, expensive
    budget = 60.0
    batches, _, _ = plan_batches(cases, costs, budget, ALPHA)
    objective = lambda b: sum(tv_constant(c, ALPHA) / (bi * rows_per_class(c)) for c, bi in zip(cases, b))
    # time grows with sqrt(cost): the expensive case gets the most time, the cheap one the most calls
    times = [b * c for b, c in zip(batches, costs)]
    assert times[2] > times[1] > times[0] and batches[0] > batches[1] > batches[2]
    # no move of calls between two cases at the same time cost improves the objective
    for i in range(3):
        for j in range(3):
            if i == j:
                continue
            step_i = 2
            step_j = 2 * max(1, round(costs[i] / costs[j]))
            if batches[i] - step_i < MIN_BATCHES:
                continue
            moved = list(batches)
            moved[i] -= step_i
            moved[j] += step_j
            if sum(b * c for b, c in zip(moved, costs)) <= budget:
                assert objective(moved) >= objective(batches) * (1 - 1e-9)


def test_too_small_a_budget_runs_the_minimum_and_says_so():
    cases = quick_cases()
    costs = [1.0] * len(cases)
    batches, tv, feasible = plan_batches(cases, costs, minimum_time(cases, costs) / 2, ALPHA)
    assert not feasible and batches == [MIN_BATCHES] * len(cases)


def test_detectable_tv_falls_with_more_sequences():
    case = quick_cases()[0]
    tvs = [approx_detectable_tv(case, n, ALPHA) for n in (10, 100, 1_000, 10_000, 100_000)]
    assert tvs[0] == math.inf and all(a > b for a, b in zip(tvs[1:], tvs[2:]))


@pytest.fixture
def one_thread():
    # Timing test: on a busy machine torch's default threads wait for each other and a
    # decoder call's time varies 100-fold; one thread keeps it steady (as under xdist).
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_budget_audit_plans_shows_progress_and_stops_on_time(one_thread):
    cases = [c for c in quick_cases() if c.name in ("v8-plain", "v12-eos-cut")]
    events = []
    budget = 6.0  # both cases' minimum fits (with 4 s a slow pilot may leave v12-eos-cut out)
    report = run_audit(verify, cases=cases, budget_s=budget, false_fail_rate=1e-6, on_status=events.append)
    validate_report(report)
    kinds = [e["event"] for e in events]
    assert kinds[:2] == ["pilot", "plan"] and kinds.count("case_start") == 2 and kinds[-1] == "case_end"
    plan = report["plan"]
    assert plan["mode"] == "budget" and plan["budget_s"] == budget and plan["pilot_s"] > 0
    assert [c["name"] for c in plan["cases"]] == ["v8-plain", "v12-eos-cut"]
    for case in report["cases"]:
        assert case["num_batches"] >= MIN_BATCHES and case["num_batches"] % 2 == 0
        assert case["execution"]["planned_batches"] >= MIN_BATCHES
    # the progress shows the detectable TV falling as sequences come in
    tvs = [e["detectable_tv"] for e in events if e["event"] == "batch" and e["case"] == "v8-plain"]
    assert len(tvs) >= 2 and tvs[-1] < tvs[0]
    # on time: the budget plus at most a few seconds of a busy machine's noise
    assert report["wall_time_s"] < budget + 5.0, report["wall_time_s"]


def test_budget_must_be_positive():
    with pytest.raises(ValueError):
        run_audit(verify, cases=quick_cases()[:1], budget_s=0)


class _SlowOnV8AfterThePlan:
    """Correct, but 0.5 s per verifier call on V=8 once the audit has planned (as if the
    machine got busy): the speed measured on v8-plain then predicts v12-eos-cut far too
    slow."""

    def __init__(self):
        self.slow = False

    def on_status(self, event):
        if event["event"] == "plan":
            self.slow = True

    def __call__(self, ids, draft_probs, target_probs, generator=None):
        import time

        if self.slow and draft_probs.shape[-1] == 8:
            time.sleep(0.5)
        return verify(ids, draft_probs, target_probs, generator)


@pytest.mark.statistical(checks=16)
def test_a_case_never_gets_more_than_the_time_left(one_thread, alpha):
    cases = [c for c in quick_cases() if c.name in ("v8-plain", "v12-eos-cut")]
    sampler = _SlowOnV8AfterThePlan()
    report = run_audit(sampler, cases=cases, budget_s=4.0, false_fail_rate=alpha * 16, on_status=sampler.on_status)
    assert report["verdict"] == "pass", report["findings"]
    v12 = next((c for c in report["cases"] if c["name"] == "v12-eos-cut"), None)
    # Predicted about as slow as v8-plain turned out, v12-eos-cut is either left out (its
    # minimum does not fit the time left) or, if it fits, given its minimum: it stops after
    # those 2 calls instead of sampling for 1.5 predicted calls' time.
    if v12 is None:
        assert [s["case"] for s in report["settings"]["skipped_cases"] if s.get("kind") == "budget"] == ["v12-eos-cut"]
    else:
        assert v12["num_batches"] == MIN_BATCHES and v12["execution"]["sampling_time_s"] < 1.0


def _slow_on_v12(ids, draft_probs, target_probs, generator=None):
    """Correct, but 0.5 s per verifier call on V=12."""
    import time

    if draft_probs.shape[-1] == 12:
        time.sleep(0.5)
    return verify(ids, draft_probs, target_probs, generator)


@pytest.mark.statistical(checks=16)
def test_a_case_whose_minimum_does_not_fit_is_left_out_not_overrun(one_thread, alpha):
    from specexact.reports import render_html, render_markdown

    cases = [c for c in quick_cases() if c.name in ("v12-eos-cut", "v8-plain")]
    events = []
    # The pilot alone spends >= 1 s on v12-eos-cut (warm-up and timed call), so at most 2 s
    # are left, and its minimum of 2 calls (>= 1 s) with the 1 s per-case prior never fits
    # beside v8-plain's; v8-plain, the cheaper, always runs.
    report = run_audit(_slow_on_v12, cases=cases, budget_s=3.0, false_fail_rate=alpha * 16, on_status=events.append)
    validate_report(report)
    assert report["verdict"] == "pass", report["findings"]
    assert [c["name"] for c in report["cases"]] == ["v8-plain"]
    (left_out,) = [s for s in report["settings"]["skipped_cases"] if s.get("kind") == "budget"]
    assert left_out["case"] == "v12-eos-cut" and left_out["reason"].startswith("budget: its minimum of 2 decoder calls")
    assert [s["case"] for s in report["plan"]["skipped"]] == ["v12-eos-cut"]
    assert "v12-eos-cut" in report["plan"]["note"] and not report["plan"]["feasible"]
    assert [e["case"] for e in events if e["event"] == "case_skipped"] == ["v12-eos-cut"]
    assert not any(e["event"] == "case_start" and e["case"] == "v12-eos-cut" for e in events)
    assert "- not run: v12-eos-cut: budget: its minimum" in render_markdown(report)
    assert "Not run: v12-eos-cut: budget" in render_html(report)


def test_the_pilot_times_the_sampler_under_audit_and_survives_its_crash():
    import time

    from specexact.audit.plan import pilot_costs

    cases = [c for c in quick_cases() if c.name == "v12-eos-cut"]
    calls = {"slow": 0, "crash": 0}

    def slow(ids, draft_probs, target_probs, generator=None):
        calls["slow"] += 1
        time.sleep(0.5)
        return verify(ids, draft_probs, target_probs, generator)

    def crash(*args):
        calls["crash"] += 1
        raise RuntimeError("boom")

    (slowed,) = pilot_costs(cases, verifier=slow)
    (crashed,) = pilot_costs(cases, verifier=crash)
    # The timed call went through the sampler: at least one 0.5 s verifier call in it.
    assert calls["slow"] >= 2 and slowed >= 0.5
    # The crashing sampler was tried (warm-up and timed call), then timed with the built-in.
    assert calls["crash"] == 2 and 0 < crashed < float("inf")


def test_cases_within_budget_keeps_every_case_when_their_minimum_fits():
    assert cases_within_budget([1.0, 2.0, 3.0], available_s=2 * 6.0 + 3 * 0.5, overhead_s=0.5) == [True] * 3


def test_cases_within_budget_keeps_the_cheapest_cases_that_fit():
    # minimums: 2*5+1 = 11, 2*1+1 = 3, 2*2+1 = 5, 2*1+1 = 3 (ties by order); 12 s left
    assert cases_within_budget([5.0, 1.0, 2.0, 1.0], available_s=12.0, overhead_s=1.0) == [False, True, True, True]
    assert cases_within_budget([5.0, 1.0, 2.0, 1.0], available_s=6.0, overhead_s=1.0) == [False, True, False, True]


def test_cases_within_budget_always_keeps_the_cheapest_case():
    assert cases_within_budget([3.0, 2.0], available_s=0.5) == [False, True]
    assert cases_within_budget([3.0, 2.0], available_s=-1.0) == [False, True]


def test_cases_within_budget_without_keep_one_may_leave_every_case_out():
    assert cases_within_budget([3.0, 2.0], available_s=0.5, keep_one=False) == [False, False]


@pytest.mark.statistical(checks=8)
def test_the_report_starts_before_the_pilot(one_thread, alpha, monkeypatch):
    """``started_at`` is read before the pilot (the pilot is part of ``wall_time_s``)."""
    import specexact.audit.execute as execute

    log = []
    stamps = iter(f"2026-01-01T00:00:{s:02d}+00:00" for s in range(60))

    def fake_now():
        log.append(("now", next(stamps)))
        return log[-1][1]

    monkeypatch.setattr(execute, "now", fake_now)
    cases = [c for c in quick_cases() if c.name == "v8-plain"]
    report = run_audit(verify, cases=cases, budget_s=2.0, false_fail_rate=alpha * 8,
                       on_status=lambda e: log.append((e["event"], None)))
    pilot = log.index(("pilot", None))
    assert ("now", report["started_at"]) in log[:pilot], log
