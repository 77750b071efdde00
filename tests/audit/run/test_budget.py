"""--budget: sample sizes planned from the power functions fit the time, and the audit stops on time."""

import math
import time
from dataclasses import replace

import pytest

from specexact.audit import quick_cases, run_audit
from specexact.audit.cases.result import enough_calls
from specexact.audit.core.levels import CHI2_TAIL_INFLATION
from specexact.audit.cases.decoder_case import AuditCase, RowClass, default_cases
from specexact.audit.run.plan import (
    FLOOR_SHARE,
    cases_within_budget,
    first_token_bins,
    floor_batches,
    plan_batches,
    required_batches,
)
from specexact.audit.run.sample_sizes import MIN_BATCHES, approx_detectable_tv, minimum_time, rows_per_class, tv_constant
from specexact.decoders import SamplingParams, ToyLMConfig, verify
from specexact.exactness.power import min_detectable_tv_chisquare
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
    plan = report["plan"]
    # every case starts, or is left out by the plan, saying why: at load 12-20 the pilot alone
    # can spend the 6 s and leave one case out, whichever it timed slower (the plan decides)
    left_out = [s["case"] for s in plan["skipped"]]
    assert kinds[:2] == ["pilot", "plan"] and kinds.count("case_start") == 2 - len(left_out)
    assert kinds.count("case_skipped") == len(left_out) and len(left_out) <= 1  # the cheaper one always runs
    assert kinds[-1] in ("case_end", "case_skipped")
    assert plan["mode"] == "budget" and plan["budget_s"] == budget and plan["pilot_s"] > 0
    assert sorted([c["name"] for c in plan["cases"]] + left_out) == ["v12-eos-cut", "v8-plain"]
    for case in report["cases"]:
        assert case["num_batches"] >= MIN_BATCHES and case["num_batches"] % 2 == 0
        assert case["execution"]["planned_batches"] >= MIN_BATCHES
    # the progress shows the detectable TV falling as sequences come in
    ran = plan["cases"][0]["name"]  # v8-plain, unless the plan left it out
    tvs = [e["detectable_tv"] for e in events if e["event"] == "batch" and e["case"] == ran]
    assert len(tvs) >= 2 and tvs[-1] < tvs[0]
    # on time: the budget plus at most a few seconds of a busy machine's noise
    assert report["wall_time_s"] < budget + 5.0, report["wall_time_s"]


def test_budget_must_be_positive():
    with pytest.raises(ValueError):
        run_audit(verify, cases=quick_cases()[:1], budget_s=0)


class _SlowAfterThePlan:
    """Correct, but ``seconds`` per verifier call (on vocabulary ``vocab_size`` only, if
    given) once the audit has planned, as if the machine got busy."""

    def __init__(self, seconds: float, vocab_size: int | None = None):
        self.seconds, self.vocab_size = seconds, vocab_size
        self.slow = False

    def on_status(self, event):
        if event["event"] == "plan":
            self.slow = True

    def __call__(self, ids, draft_probs, target_probs, generator=None):
        import time

        if self.slow and self.vocab_size in (None, draft_probs.shape[-1]):
            time.sleep(self.seconds)
        return verify(ids, draft_probs, target_probs, generator)


@pytest.mark.statistical(checks=16)
def test_a_case_never_gets_more_than_the_time_left(one_thread, alpha):
    cases = [c for c in quick_cases() if c.name in ("v8-plain", "v12-eos-cut")]
    # 0.5 s per call on V=8: the speed measured on v8-plain then predicts v12-eos-cut far too slow
    sampler = _SlowAfterThePlan(0.5, vocab_size=8)
    events = []

    def on_status(event):
        sampler.on_status(event)
        events.append(event)

    budget = 4.0
    report = run_audit(sampler, cases=cases, budget_s=budget, false_fail_rate=alpha * 16, on_status=on_status)
    assert report["verdict"] == "pass", report["findings"]
    v12 = next((c for c in report["cases"] if c["name"] == "v12-eos-cut"), None)
    # Predicted about as slow as v8-plain turned out, v12-eos-cut is either left out (its
    # minimum does not fit the time left), or given its minimum (it stops after those 2 calls
    # instead of sampling for 1.5 predicted calls' time), or, where v8-plain left time, it
    # samples within that time (its calls take milliseconds: the 10 % an audit may overrun
    # its budget covers the last of them and its checks), never for its predicted share.
    if v12 is None:
        assert [s["case"] for s in report["settings"]["skipped_cases"] if s.get("kind") == "budget"] == ["v12-eos-cut"]
    elif v12["num_batches"] != MIN_BATCHES:
        (start,) = [e["elapsed_s"] for e in events if e["event"] == "case_start" and e["case"] == "v12-eos-cut"]
        assert start + v12["wall_time_s"] <= 1.1 * budget, (start, v12["wall_time_s"], v12["num_batches"])


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

    from specexact.audit.run.pilot import pilot_costs

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
    import specexact.audit.run.cases_stage as execute

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


# --- floors: a case's required first-token TV (AuditCase.required_first_token_tv) ---------

def _tile_case():
    return next(c for c in default_cases() if c.name == "v8193-tile-trunc-penalties")


def _small_floor_case(tv=0.12):
    return AuditCase(name="v16-floor", model=ToyLMConfig(vocab_size=16, seed=3, zipf_exponent=0.3, context_strength=0.5), mismatch=0.3,
                     row_classes=(RowClass((1, 2), SamplingParams(top_k=5), SamplingParams()),),
                     num_draft_tokens=2, length=2, batch_size=64, exact=False, required_first_token_tv=tv)


def _first_token_tv(case, batches, alpha):  # the first-token check's, at the runner's chi-square level
    return min_detectable_tv_chisquare(batches * rows_per_class(case), num_bins=first_token_bins(case),
                                       false_fail_rate=alpha / CHI2_TAIL_INFLATION, false_pass_rate=0.01)


def test_first_token_bins_are_the_targets_top_k_when_every_class_truncates():
    assert first_token_bins(_tile_case()) == 20  # top_k=20 in its one class
    zipf = next(c for c in default_cases() if c.name == "v4096-zipf")
    assert first_token_bins(zipf) == 32  # a class without top_k: PLAN_MAX_BINS


def test_required_batches_are_the_fewest_even_calls_that_reach_the_required_tv():
    case, alpha = _tile_case(), 1e-6 / 150
    b = required_batches(case, alpha)
    assert b % 2 == 0 and b > MIN_BATCHES
    assert _first_token_tv(case, b, alpha) <= 0.02 < _first_token_tv(case, b - 2, alpha)
    assert required_batches(quick_cases()[0], alpha) == MIN_BATCHES  # no requirement


def test_a_required_tv_needs_a_two_sample_case_and_a_tv_in_0_1():
    with pytest.raises(ValueError, match="required_first_token_tv=0.02 needs exact=False"):
        AuditCase(name="x", model=ToyLMConfig(vocab_size=8, seed=1), mismatch=0.1,
                  row_classes=(RowClass((1,), SamplingParams(), SamplingParams()),), num_draft_tokens=2, length=2,
                  batch_size=8, required_first_token_tv=0.02)
    with pytest.raises(ValueError, match="required_first_token_tv=1.5"):
        _small_floor_case(1.5)


def test_the_plan_reserves_the_floor_and_shares_the_rest():
    cases = quick_cases()[:3] + [_tile_case()]
    alpha = 1e-6 / 150
    costs = [0.03, 0.05, 0.04, 0.65]  # seconds per call as measured on a quiet 2-core machine
    need = required_batches(_tile_case(), alpha)
    batches, _, feasible = plan_batches(cases, costs, 60.0, alpha)
    assert feasible and batches[3] >= need and sum(b * c for b, c in zip(batches, costs)) <= 60.0
    assert _first_token_tv(cases[3], batches[3], alpha) <= 0.02
    without, _, _ = plan_batches(cases[:3] + [AuditCase(**{**_tile_case().__dict__,
                                                           "required_first_token_tv": None})], costs, 60.0, alpha)
    assert without[3] < need  # the floor is what makes the difference here
    assert all(b <= w for b, w in zip(batches[:3], without[:3]))  # the other cases pay for it


def test_floors_take_at_most_their_share_of_the_time():
    cases = quick_cases()[:2] + [_tile_case()]
    alpha = 1e-6 / 150
    need = required_batches(_tile_case(), alpha)
    for available in (20.0, 40.0, 2 * need * 1.3 + 5):
        costs = [0.03, 0.05, 1.3]
        floors = floor_batches(cases, costs, available, alpha)
        assert floors[:2] == [MIN_BATCHES, MIN_BATCHES] and floors[2] % 2 == 0 and floors[2] >= MIN_BATCHES
        if need * 1.3 <= FLOOR_SHARE * available:
            assert floors[2] == need
        else:
            assert floors[2] < need and floors[2] * 1.3 <= FLOOR_SHARE * available + 1e-9
        batches, _, feasible = plan_batches(cases, costs, available, alpha)
        assert feasible and batches[2] >= floors[2]
        assert sum(b * c for b, c in zip(batches, costs)) <= available


def test_enough_calls_runs_the_floor_however_long_it_takes():
    assert not enough_calls(4, None, 1.0, 100.0, min_calls=6)
    assert enough_calls(6, None, 1.0, 100.0, min_calls=6)
    assert not enough_calls(7, None, 1.0, 100.0, min_calls=6)  # even counts only
    assert enough_calls(2, None, 1.0, 100.0)  # no floor: the usual minimum


def test_enough_calls_stops_before_the_next_calls_and_the_tail_would_pass_the_budget():
    # 6 s spent of 10: two more 1.5 s calls fit, with a 1.5 s tail they do not
    assert not enough_calls(2, None, 10.0, 6.0, call_s=1.5)
    assert enough_calls(2, None, 10.0, 6.0, call_s=1.5, tail_s=1.5)
    assert not enough_calls(3, None, 10.0, 6.0, call_s=1.5, tail_s=1.5)  # even counts only
    assert not enough_calls(2, None, 10.0, 9.0, min_calls=4, call_s=5.0)  # the floor first
    assert enough_calls(2, 2, None, 0.0, call_s=100.0)  # fixed counts: timing plays no part


def _fixed_pilot(monkeypatch, seconds_per_call):
    """The pilot's costs, fixed (the plan then does not depend on this machine's speed)."""
    import specexact.audit.run.cases_stage as execute
    import torch

    def costs(cases, device, verifier=None, time_s=None, details=None):
        return [seconds_per_call] * len(cases)

    monkeypatch.setattr(execute, "pilot_costs", costs)
    monkeypatch.setattr(execute, "pilot_with_thread_choice",
                        lambda cases, device, verifier=None, probe_budget_s=None, time_s=None, details=None: (costs(cases, device),
                                                              execute.ThreadChoice(torch.get_num_threads(), "set")))


@pytest.mark.statistical(checks=16)
def test_a_budgeted_audit_runs_a_cases_floor_even_when_it_is_slower_than_planned(one_thread, alpha, monkeypatch):
    case = _small_floor_case()
    sampler = _SlowAfterThePlan(0.1)  # the case's time share then buys fewer calls than its floor
    _fixed_pilot(monkeypatch, 0.01)  # the floor (about 24 calls) fits half of the 3 s budget
    report = run_audit(sampler, cases=[case], budget_s=3.0, false_fail_rate=alpha * 16, on_status=sampler.on_status)
    validate_report(report)
    assert report["verdict"] == "pass", report["findings"]
    plan = report["plan"]["cases"][0]
    per_check = report["plan"]["per_check_false_fail_rate"]
    assert plan["min_batches"] == required_batches(case, per_check) > MIN_BATCHES
    ran = report["cases"][0]["num_batches"]
    # 0.1 s per verifier call: the floor's calls alone sleep past the 3 s budget, which ran out
    # before the floor, which the case ran all the same, and no further
    assert ran == plan["min_batches"] and report["cases"][0]["execution"]["sampling_time_s"] > 3.0
    first = next(c for c in report["checks"] if c["case"] == "v16-floor" and c["name"].startswith("first_token_law"))
    assert first["detectable_tv"] <= 0.12


def test_re_plans_keep_the_first_plans_floor_time_while_it_fits():
    cases = quick_cases()[:2] + [_tile_case()]
    alpha = 1e-6 / 150
    costs = [0.03, 0.05, 0.65]
    need = required_batches(_tile_case(), alpha)
    floor_time = FLOOR_SHARE * 64.0  # fixed by the first plan
    assert floor_batches(cases, costs, 64.0, alpha)[2] == need
    # late in the audit a third of the time is left: half of it would no longer buy the
    # floor, but a re-plan keeps the first plan's floor time, and the floor still fits
    late = 1.1 * need * 0.65 + minimum_time(cases[:2], costs[:2])
    assert floor_batches(cases, costs, late, alpha)[2] < need
    assert floor_batches(cases, costs, late, alpha, floor_time_s=floor_time)[2] == need
    # it is scaled down only when it does not fit the time left with the others' minimum
    tight = floor_batches(cases, costs, 10.0, alpha, floor_time_s=floor_time)
    assert MIN_BATCHES <= tight[2] < need and tight[2] * 0.65 + minimum_time(cases[:2], costs[:2]) <= 10.0
    # and re-evaluated with the speed measured so far: a slower case gets fewer calls
    assert floor_batches(cases, [0.03, 0.05, 2.0], 64.0, alpha, floor_time_s=floor_time)[2] * 2.0 <= floor_time


def test_the_first_plan_fixes_the_floor_time_and_re_plans_keep_it(monkeypatch):
    from specexact.audit.run.cases_stage import open_audit, report_reserve_s
    from specexact.audit.run.resolve import resolve_audit
    from specexact.audit.core.settings import AuditSettings

    early = replace(_small_floor_case(), name="v16-early", required_first_token_tv=None)
    late = _small_floor_case()
    _fixed_pilot(monkeypatch, 0.05)
    run = open_audit(resolve_audit(verify, AuditSettings(cases=(early, late), budget_s=6.0, false_fail_rate=1e-6)))
    clock = {"t": 0.0}
    budget = 6.0 - report_reserve_s(6.0)  # the cases' time: the rest is kept for the report
    monkeypatch.setattr(run, "elapsed", lambda: clock["t"])
    alpha = run.resolved.per_check_false_fail_rate
    need = required_batches(late, alpha)
    assert 0.5 * 2.0 < need * 0.05 < 2.0  # fits the first plan's floor time, not half of 2 s
    first = run.plan([early, late])
    fixed = run.floor_time_s
    assert fixed == pytest.approx(FLOOR_SHARE * (budget - 2 * run.overhead()))
    assert first.case("v16-floor").min_batches == need and first.case("v16-early").min_batches == MIN_BATCHES
    clock["t"] = budget - run.overhead() - 2.0  # 2 s left for the late case
    again = run.plan([late])
    assert run.floor_time_s == fixed and again.case("v16-floor").min_batches == need
    assert again.case("v16-floor").planned_batches >= need and "v16-floor" not in run.unmet
    clock["t"] = budget - run.overhead() - 1.0  # 1 s left: the floor no longer fits; named in the note
    short = run.plan([late])
    got = short.case("v16-floor").min_batches
    assert MIN_BATCHES <= got < need and got * 0.05 <= 1.0
    said = run.unmet["v16-floor"]
    assert f"v16-floor needs ≈{need} decoder calls" in said and f"it gets at least {got}" in said


@pytest.mark.statistical(checks=32)
def test_a_floor_short_of_its_requirement_is_named_in_the_report(one_thread, alpha, monkeypatch):
    # Predicted at 0.2 s per call, the case's floor of about 24 calls cannot fit half of a
    # 4 s budget: the report's note says so, and the case runs the floor it got.
    case = _small_floor_case()
    _fixed_pilot(monkeypatch, 0.2)
    events = []
    report = run_audit(verify, cases=[case], budget_s=4.0, false_fail_rate=alpha * 32, on_status=events.append)
    validate_report(report)
    assert report["verdict"] == "pass", report["findings"]
    need = required_batches(case, report["plan"]["per_check_false_fail_rate"])
    got = report["plan"]["cases"][0]["min_batches"]
    assert MIN_BATCHES <= got < need
    assert f"v16-floor needs ≈{need} decoder calls" in report["plan"]["note"]
    assert f"it gets at least {got}" in report["plan"]["note"]
    assert report["cases"][0]["num_batches"] >= got
    start = next(e for e in events if e["event"] == "case_start")
    assert start["floor_note"] in report["plan"]["note"]  # said as the case starts (the CLI prints it)


@pytest.mark.statistical(checks=16)
def test_a_quick_audit_leaves_no_case_out_for_the_budget(one_thread, alpha):
    # The same budget that leaves v12-eos-cut out of a custom audit (the test above): a
    # --quick audit (case_set "quick") runs every case, at its minimum, and says it overran.
    cases = [c for c in quick_cases() if c.name in ("v12-eos-cut", "v8-plain")]
    report = run_audit(_slow_on_v12, cases=cases, case_set="quick", budget_s=3.0, false_fail_rate=alpha * 16)
    assert report["verdict"] == "pass", report["findings"]
    assert sorted(c["name"] for c in report["cases"]) == ["v12-eos-cut", "v8-plain"]
    assert not [s for s in report["settings"]["skipped_cases"] if s.get("kind") == "budget"]
    assert report["plan"]["skipped"] == []
    assert report["plan"]["feasible"] or "budget too small" in report["plan"]["note"]  # an overrun is said


def test_cases_within_budget_counts_a_cases_extra_calls():
    # two cases of 1 s per call: their minimum of 2 calls each fits 4.5 s; with the first
    # case's reproducibility pair (one more call) the two need 5 s and only the cheapest stays
    assert cases_within_budget([1.0, 1.0], available_s=4.5) == [True, True]
    assert cases_within_budget([1.0, 1.0], available_s=4.5, extra_calls=[1, 0]) == [True, False]
    with pytest.raises(ValueError, match="extra_calls has 1 entries for 2 costs"):
        cases_within_budget([1.0, 1.0], available_s=4.5, extra_calls=[1])


def test_an_end_to_end_cases_minimum_counts_its_reproducibility_pair(monkeypatch):
    """The first plan's "need at least" of an end-to-end case: two call pairs and the
    reproducibility pair (it said two pairs, and a 60 s audit under load ran past it)."""
    from specexact.audit.cases.e2e.catalog import e2e_cases
    from specexact.audit.core.settings import AuditSettings
    from specexact.audit.run.cases_stage import open_audit, report_reserve_s
    from specexact.audit.run.resolve import resolve_audit
    from specexact.audit.run.sample_sizes import fixed_calls
    from specexact.decoders.engines.builtin import BuiltinEngine

    engine = BuiltinEngine()
    case = e2e_cases(engine, "draft_model", requests_per_class=2)[0]
    # the reproducibility pair and the in-mix pair (the built-in engine promises other mixes)
    assert fixed_calls(case) == 2 and fixed_calls(quick_cases()[0]) == 0
    _fixed_pilot(monkeypatch, 10.0)  # one call pair: 10 s
    run = open_audit(resolve_audit(engine, AuditSettings(cases=(case,), budget_s=25.0, false_fail_rate=1e-6)))
    monkeypatch.setattr(run, "elapsed", lambda: 0.0)
    plan = run.plan([case])
    need = 4 * 10.0 + run.overhead()
    left = 25.0 - report_reserve_s(25.0)  # the time kept for the report is not the cases'
    assert not plan.feasible and f"need at least {need - left:.0f} s more ({need:.0f} s in all" in plan.note
    # and the budget the whole audit needs, the time spent before the cases included (here 0)
    assert f"this audit needs a budget of at least ≈{need + 25.0 - left:.0f} s" in plan.note, plan.note
    assert "its reproducibility pair" in plan.note


@pytest.mark.statistical(checks=16)
def test_the_budgets_clock_counts_the_cases_resolution_and_keeps_time_for_the_report(monkeypatch, alpha):
    """Under load 8-10, 2 of 10 60 s audits ended at 66.4 and 69.2 s: the time the cases took
    to resolve (before the pilot; 20-30 s of imports and set-up at load 11) was not counted
    against the budget, nor the report's files after the cases. Resolution slowed by 1 s here:
    the first case starts with at least that second on the clock (the old clock: ~0)."""
    import specexact.audit.run.stages as stages
    from specexact.audit.run.cases_stage import report_reserve_s

    real = stages.resolve_audit

    def slow_resolve(*args, **kwargs):
        time.sleep(1.0)
        return real(*args, **kwargs)

    monkeypatch.setattr(stages, "resolve_audit", slow_resolve)
    events = []
    cases = [c for c in quick_cases() if c.name == "v8-plain"]
    report = run_audit(verify, cases=cases, num_batches=2, false_fail_rate=alpha * 16, on_status=events.append)
    assert report["verdict"] == "pass", report["findings"]
    start = next(e for e in events if e["event"] == "case_start")
    assert start["elapsed_s"] >= 1.0, start["elapsed_s"]
    assert report_reserve_s(60.0) == pytest.approx(3.0) and report_reserve_s(6.0) == pytest.approx(0.3)
    # a busy machine (7 wall seconds per CPU second): the report's CPU seconds at that pace,
    # never more than a fifth of the budget
    assert report_reserve_s(60.0, 7.0) == pytest.approx(1.5 * 6.0) and report_reserve_s(6.0, 7.0) == pytest.approx(1.2)
