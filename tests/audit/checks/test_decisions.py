"""The decision observer (audit/checks/decisions.py): slots, exact violations, events, the cut."""

import dataclasses

import numpy as np
import pytest
import torch

from specexact.audit.cases.decoder_case import default_cases
from specexact.audit.checks.decisions import DecisionObserver
from specexact.audit.checks.decisions_tally import SCALE_GRID, SlotPlan, slot_plan
from specexact.audit.cases.dispatch import decision_observer
from specexact.audit.zoo import CORRECT, WRONG
from specexact.decoders import speculative_generate


def _case(name):
    return next(c for c in default_cases() if c.name == name)


def _run(case, verifier, calls=2, batch=None, seed=0, observer_hook=None):
    case = dataclasses.replace(case, batch_size=batch or case.batch_size)
    target, draft = case.models()
    prompts, tp, dp = case.batch()
    obs = decision_observer(case, prompts, verifier, seed)
    gen = torch.Generator().manual_seed(seed)
    outs = []
    for _ in range(calls):
        obs.start_call()
        hook = obs if observer_hook is None else (lambda rec: obs(observer_hook(rec)))
        out = speculative_generate(target, draft, prompts, tp, dp, num_draft_tokens=case.num_draft_tokens,
                                   max_new_tokens=case.length, generator=gen, eos_token_id=case.eos_token_id,
                                   verifier=verifier, observer=hook)
        obs.finish_call(out)
        outs.append(out)
    return obs.summary(), outs, case


def test_slot_plan_is_the_most_a_row_can_have():
    assert slot_plan(2, 5) == SlotPlan(decisions=6, recovered=5, bonus=2)
    assert slot_plan(4, 4) == SlotPlan(decisions=7, recovered=4, bonus=1)
    with pytest.raises(ValueError):
        slot_plan(0, 3)


@pytest.mark.parametrize("name", ["v12-eos-cut", "v6-trunc-penalties", "v4-greedy-mix"])
def test_slots_are_fixed_and_never_too_few(name):
    """The slot totals are B * plan per call whatever happened, and every event fits (the
    plan's per-row numbers are maxima: no event is ever left out of its slots)."""
    s, outs, case = _run(_case(name), CORRECT["builtin"], batch=4 * 4 * len(_case(name).row_classes))
    plan = slot_plan(case.num_draft_tokens, case.length)
    for fam, per_row in (("decisions", plan.decisions), ("recovered", plan.recovered), ("bonus", plan.bonus)):
        f = s[fam]
        assert f["slots"] == 2 * case.batch_size * per_row == sum(f["slot_fine"])
        assert f["events_in_slots"] == f["events"] > 0
    # every decision is counted: accepted drafts + one rejection per rejecting round
    acc = sum(int(o.accepted_lengths.clamp_min(0).sum()) for o in outs)
    assert s["decisions"]["events"] == acc + s["recovered"]["events"]
    assert s["cut"]["violations"] == 0 and s["cut"]["rounds"] > 0


def test_correct_verifier_no_violation_and_events_carry_their_context():
    s, _, case = _run(_case("v6-trunc-penalties"), CORRECT["builtin"], batch=96)
    assert s["must"]["accept_violations"] == s["must"]["reject_violations"] == 0
    assert s["recovered"]["violations"] == s["bonus"]["violations"] == 0
    ev = s["decisions"]["strongest_event"]
    assert ev["kind"] == "decision" and len(ev["drafts"]) == case.num_draft_tokens
    rc = case.row_classes[ev["class"]]
    assert ev["prompt"] == list(rc.prompt) and ev["row"] % len(case.row_classes) == ev["class"]
    assert 0 <= ev["acceptance_prob"] <= 1 and "target_law" in ev  # V <= 16: the whole law


def test_planted_bugs_are_seen_where_they_happen():
    s, _, _ = _run(_case("v6-trunc-penalties"), WRONG["always_accept"], batch=96)
    assert s["must"]["reject_violations"] > 0
    ev = s["decisions"]["violation_events"][0]
    assert ev["accepted"] and ev["p_draft"] == 0.0
    s, _, _ = _run(_case("v6-trunc-penalties"), WRONG["residual_from_first_position"], batch=96)
    by = s["recovered"]["violations_by_position"]
    assert by[0] == 0 and sum(by[1:]) > 0  # the bug is only past position 0
    assert s["recovered"]["checked_by_position"][0] > 0
    s, _, _ = _run(_case("v6-trunc-penalties"), WRONG["bonus_from_last_draft_position"], batch=96)
    assert s["bonus"]["violations"] > 0 and s["bonus"]["log_likelihood"]["impossible_prev"] == 0


def test_a_wrong_cut_is_an_eos_cut_violation():
    """Break the decoder's bookkeeping as the observer sees it: a round that claims to keep
    one token more than the cut allows, and one that reports a wrong history length."""
    def keep_one_more(rec):
        return dataclasses.replace(rec, num_kept=(rec.num_kept + 1).clamp(max=rec.num_emitted))

    s, _, _ = _run(_case("v12-eos-cut"), CORRECT["builtin"], batch=32, observer_hook=keep_one_more)
    assert s["cut"]["violations"] > 0
    assert any("kept" in e["message"] or "differ" in e["message"] for e in s["cut"]["events"])


def test_scale_grid_power_grows_away_from_one():
    s, _, _ = _run(_case("v8-plain"), CORRECT["builtin"], batch=256)
    fine = np.asarray(s["scale_fine"]) / s["scale_slots"]
    dev = np.abs(fine - 1 / fine.shape[1]).sum(1)
    grid = np.asarray(SCALE_GRID)
    low = dev[grid < 1]  # 0.5 ... 0.999: deviation shrinks towards 1
    assert (np.diff(low) <= 1e-12).all() and low[0] > low[-1] > 0
    np.testing.assert_allclose(fine.sum(1), 1.0, rtol=1e-9)  # each alternative is a law


def test_observer_refuses_bad_sizes():
    with pytest.raises(ValueError, match="row_class"):
        DecisionObserver(batch_size=4, num_draft_tokens=1, max_new_tokens=2, row_class=torch.zeros(3), num_classes=1,
                         prompts=torch.zeros(4, 1, dtype=torch.long), eos_token_id=None)


def test_other_schemes_are_not_applicable_but_the_cut_is_checked():
    from specexact.audit.checks.decisions_checks import decision_checks

    class Tree:
        from specexact.decoders.adapters.protocol import Capabilities

        capabilities = Capabilities(max_batch_size=None, dtypes=(torch.float32,), devices=("cpu",),
                                    randomness="generator", scheme="tree")

        def __call__(self, *a):
            return CORRECT["builtin"](*a)

    s, _, _ = _run(_case("v8-plain"), Tree(), batch=32)
    assert not s["applicable"]
    checks = decision_checks(s, alpha=1e-6, min_expected=200)
    assert [c.name for c in checks][-1] == "eos_cut" and len(checks) == 6
    assert all(c.passed for c in checks) and checks[0].details["not_applicable"]
