"""Replaying one event: its laws are rebuilt exactly and the sampler is called on them
(audit/decisions_replay.py)."""

import dataclasses

import pytest
import torch

from specexact.audit.cases.decoder_case import default_cases
from specexact.audit.verdict.decisions_replay import EVENT_KEYS, event_laws, replay_event, replay_snippet
from specexact.audit.cases.dispatch import decision_observer
from specexact.audit.zoo import CORRECT, WRONG
from specexact.decoders import speculative_generate


def _events(name, verifier, batch):
    case = dataclasses.replace(next(c for c in default_cases() if c.name == name), batch_size=batch)
    target, draft = case.models()
    prompts, tp, dp = case.batch()
    obs = decision_observer(case, prompts, verifier, 0)
    seen = {}

    def spy(rec):
        for a, row in enumerate(rec.rows.tolist()):
            seen[(rec.round_index, row)] = (rec.draft_probs[a].clone(), rec.target_probs[a].clone())
        obs(rec)

    obs.start_call()
    out = speculative_generate(target, draft, prompts, tp, dp, num_draft_tokens=case.num_draft_tokens,
                               max_new_tokens=case.length, generator=torch.Generator().manual_seed(0),
                               eos_token_id=case.eos_token_id, verifier=verifier, observer=spy)
    obs.finish_call(out)
    return obs.summary(), seen


@pytest.mark.parametrize("kind", ["decisions", "recovered", "bonus"])
def test_event_laws_are_the_laws_the_verifier_got(kind):
    s, seen = _events("v6-trunc-penalties", CORRECT["builtin"], 48)
    ev = {**s[kind]["strongest_event"], "case": "v6-trunc-penalties", "case_set": "default"}
    laws = event_laws(ev)
    q, p = seen[(ev["round"], ev["row"])]
    torch.testing.assert_close(laws["draft_probs"][0], q, atol=1e-6, rtol=0)
    torch.testing.assert_close(laws["target_probs"][0], p, atol=1e-6, rtol=0)
    assert (laws["target_probs"][0] == 0).equal(p == 0)  # same truncation, exactly
    assert set(EVENT_KEYS) <= set(ev)


def test_replay_shows_the_fault_and_the_snippet_runs():
    s, _ = _events("v6-trunc-penalties", WRONG["bonus_from_last_draft_position"], 48)
    ev = {**s["bonus"]["violation_events"][0], "case": "v6-trunc-penalties", "case_set": "default"}
    bad = replay_event(ev, WRONG["bonus_from_last_draft_position"], trials=4000)
    assert bad["kind"] == "bonus" and bad["reached"] > 0
    assert bad["token_expected"] == 0.0 and bad["token_observed"] > 0  # the violation recurs
    good = replay_event(ev, CORRECT["builtin"], trials=4000)
    assert good["token_observed"] == 0.0
    ns = {}
    code = replay_snippet(ev, "specexact.audit.zoo:bonus_from_last_draft_position").replace("100_000", "2000")
    exec(compile(code, "<replay>", "exec"), ns)  # prints the replay
    dec = replay_event({**ev, "kind": "decision", "position": 0}, "builtin", trials=1000)
    assert 0 <= dec["acceptance_prob"] <= 1 and dec["reached"] == 1000


def test_replay_of_a_verify_level_event():
    ev = {"case": "v32000-verify", "case_set": "default", "class": 0, "kind": "decision", "position": 0,
          "history": [], "drafts": [3], "token": 3}
    laws = event_laws(ev)
    assert laws["target_probs"].shape == (1, 2, 32000)
    with pytest.raises(ValueError, match="drafts"):
        event_laws({**ev, "drafts": [3, 4]})
    with pytest.raises(KeyError):
        event_laws({**ev, "case": "no-such-case"})
