"""The exact per-decision rules and their float slack (audit/decisions_rules.py)."""

import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

from specexact.audit.checks.decisions import DecisionObserver, SlotPlan
from specexact.audit.checks.decisions_rules import (
    KAPPA,
    acceptance_prob,
    must_accept,
    must_reject,
    recovered_support_ok,
    residual_rows,
)
from specexact.audit.zoo import CORRECT
from specexact.decoders import RoundRecord
from specexact.strategies import draft_target_pairs
from specexact.strategies.pairs import HONEST_PAIR_FAMILIES

T = torch.tensor


def test_acceptance_prob_tokenwise_and_sample_compare():
    p = T([0.2, 0.5, 0.0, 0.3], dtype=torch.float64)
    q = T([0.4, 0.25, 0.1, 0.0], dtype=torch.float64)
    torch.testing.assert_close(acceptance_prob(p, q), T([0.5, 1.0, 0.0, 1.0], dtype=torch.float64))
    torch.testing.assert_close(acceptance_prob(p, q, "sample_compare"), p)
    with pytest.raises(ValueError, match="scheme"):
        acceptance_prob(p, q, "tree")


def test_sure_decisions_need_the_slack_except_p_zero():
    q = T([0.5, 0.5, 0.5, 0.5], dtype=torch.float64)
    p = T([0.5, 0.5 * (1 + KAPPA / 2), 0.5 * (1 + 2 * KAPPA), 0.0], dtype=torch.float64)
    assert must_accept(p, q).tolist() == [False, False, True, False]
    assert must_reject(p).tolist() == [False, False, False, True]
    assert not must_accept(p, q, "sample_compare").any()


def test_recovered_support_lenient_fallback_and_violation():
    p = T([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [0.5, 0.5, 0.0]], dtype=torch.float64)
    q = T([[0.2, 0.8, 0.0], [0.2, 0.8, 0.0], [0.5 * (1 + KAPPA / 2), 0.5, 0.0], [0.6, 0.4, 0.0]], dtype=torch.float64)
    drafts = T([1, 1, 0, 0])
    # row 0: token 0 has p > q; row 1: token 1 has p < q (violation); row 2: no token beats
    # q by the slack (residual empty up to rounding): the fallback to p is allowed; row 3:
    # token 2 has p = 0 (violation in every case).
    ok = recovered_support_ok(p, q, drafts, T([0, 1, 1, 2]))
    assert ok.tolist() == [True, False, True, False]
    # sample-and-compare: the rejected draft itself and p = 0 tokens are out.
    assert recovered_support_ok(p, q, drafts, T([0, 1, 0, 1]), "sample_compare").tolist() == [True, False, False, True]
    r = residual_rows(p, q, drafts)
    torch.testing.assert_close(r[0], T([0.3, 0.0, 0.0], dtype=torch.float64))
    torch.testing.assert_close(r[3], T([0.0, 0.1, 0.0], dtype=torch.float64))


def _violations(case, verifier, seed):
    ids, dp, tp = case.draft_token_ids, case.draft_probs.float(), case.target_probs.float()
    B, K = ids.shape
    out = verifier(ids.clone(), dp, tp, torch.Generator().manual_seed(seed))
    num = (out >= 0).sum(1)
    obs = DecisionObserver(batch_size=B, num_draft_tokens=K, max_new_tokens=K + 1, row_class=torch.zeros(B, dtype=torch.long),
                           num_classes=1, prompts=torch.zeros(B, 1, dtype=torch.long), eos_token_id=None,
                           slots=SlotPlan(K, 1, 1), check_cut=False)
    obs.start_call()
    obs(RoundRecord(round_index=0, rows=torch.arange(B), num_generated=torch.zeros(B, dtype=torch.long),
                    draft_token_ids=ids, draft_probs=dp, target_probs=tp, output=out, num_emitted=num,
                    num_kept=num))
    obs.finish_call()
    s = obs.summary()
    return s["must"]["accept_violations"] + s["must"]["reject_violations"], s["recovered"]["violations"], \
        s["bonus"]["violations"]


@settings(max_examples=60)
@given(case=draft_target_pairs(vocab_size=st.integers(1, 48), families=HONEST_PAIR_FAMILIES,
                               dtypes=("float32", "float64")),
       seed=st.integers(0, 2**16))
def test_correct_verifiers_never_break_an_exact_rule(case, seed):
    """Every honest family (identical laws, residual exactly 0 after rounding, one-hot,
    greedy, disjoint, truncated, ...) through every correct verifier of the zoo: no
    violation of an exact rule (false-fail rate 0 is what the exact checks claim)."""
    note(case.repro())
    for name, verifier in CORRECT.items():
        assert _violations(case, verifier, seed) == (0, 0, 0), name


def test_fallback_to_the_target_when_the_residual_is_empty_is_allowed():
    """A target 0.1 % below the draft everywhere (rows need not be normalised): drafts are
    rejected with probability 1e-3 each, the residual max(p - q, 0) is exactly 0, and the
    correct verifiers fall back to p. Those tokens have p(t) < q(t) and must not count as
    violations; a rule without the fallback would fail them."""
    g = torch.Generator().manual_seed(3)
    B, K, V = 4096, 2, 5
    q = torch.softmax(torch.randn(B, K, V, generator=g), -1)
    p = torch.cat([q, q[:, :1]], 1) * 0.999
    ids = torch.multinomial(q.reshape(-1, V), 1, generator=g).reshape(B, K)

    class Case:
        draft_token_ids, draft_probs, target_probs = ids, q, p

    out = CORRECT["builtin"](ids.clone(), q, p, torch.Generator().manual_seed(0))
    assert int(((out >= 0).sum(1) < K + 1).sum()) >= 3  # some rejections did happen
    for name, verifier in CORRECT.items():
        assert _violations(Case, verifier, 0) == (0, 0, 0), name
    strict = ~((p[:, 0] > q[:, 0]).any(1))
    assert bool(strict.all())  # the residual is empty in every row


def test_planted_bugs_break_the_rules():
    from specexact.audit.zoo import WRONG

    g = torch.Generator().manual_seed(0)
    B, K, V = 512, 2, 6
    p = torch.softmax(torch.randn(B, K + 1, V, generator=g), -1)
    p[:, :, 5] = 0  # truncated target: drafts of token 5 must be rejected
    p = p / p.sum(-1, keepdim=True)
    q = torch.softmax(torch.randn(B, K, V, generator=g), -1)
    ids = torch.multinomial(q.reshape(-1, V), 1, generator=g).reshape(B, K)

    class Case:
        draft_token_ids, draft_probs, target_probs = ids, q, p

    dec, rec, _ = _violations(Case, WRONG["always_accept"], 1)
    assert dec > 0
    _, rec, _ = _violations(Case, WRONG["resample_from_target"], 1)
    assert rec > 0
