"""Exact laws by enumeration: hand-checkable cases and internal consistency."""

import numpy as np
import pytest
import torch

from specexact.decoders import SamplingParams, ToyLM, ToyLMConfig, batch_params, process_logits
from specexact.exactness.enumeration import (
    acceptance_law,
    count_sequences,
    encode_sequences,
    sequence_law,
)


@pytest.fixture(scope="module")
def model():
    return ToyLM(ToyLMConfig(vocab_size=5, seed=2, eos_token_id=4, eos_logit=0.0))


def step_law(model, prefix, params, hist):
    m = model.to(dtype=torch.float64)
    logits = m(torch.tensor([prefix]), torch.tensor([[len(prefix) - 1]]))[:, 0]
    return process_logits(logits, batch_params(params, 1), torch.tensor([hist], dtype=torch.long).reshape(1, -1))[0]


def test_sequence_law_is_the_product_of_step_laws(model):
    params = SamplingParams(temperature=0.7, repetition_penalty=1.5, top_p=0.9)
    law = sequence_law(model, torch.tensor([1, 2]), params, length=3, eos_token_id=4)
    assert abs(law.probs.sum() - 1) < 1e-12
    for seq, prob in zip(law.sequences[:20], law.probs[:20]):
        toks = [int(t) for t in seq if t >= 0]
        want = 1.0
        for j, tok in enumerate(toks):
            want *= float(step_law(model, [1, 2] + toks[:j], params, toks[:j])[tok])
        assert prob == pytest.approx(want, rel=1e-9)
        assert len(toks) == 3 or toks[-1] == 4  # shorter only when ended by EOS


def test_truncated_tokens_are_not_outcomes(model):
    law = sequence_law(model, torch.tensor([0]), SamplingParams(top_k=1), length=3)
    assert law.num_outcomes == 1 and law.probs[0] == pytest.approx(1.0)


def test_count_sequences_and_unexpected(model):
    law = sequence_law(model, torch.tensor([0]), SamplingParams(top_k=2), length=2)
    seqs = np.vstack([law.sequences[0], law.sequences[0], law.sequences[-1], [[3, 3]]])
    counts, unexpected = count_sequences(law, seqs)
    assert counts[0] == 2 and counts[-1] == 1 and counts.sum() == 3
    assert unexpected.tolist() == [[3, 3]]


def test_encode_is_injective_on_padding():
    codes = encode_sequences(np.array([[0, -1], [0, 0], [-1, -1]]), 3)
    assert len(set(codes.tolist())) == 3


def test_acceptance_law_gamma_one_is_sum_of_min(model):
    draft = model.draft(0.9)
    tp, dp = SamplingParams(temperature=0.8), SamplingParams(top_k=3)
    law = acceptance_law(model, draft, torch.tensor([2]), tp, dp, num_draft_tokens=1)
    p = step_law(model, [2], tp, [])
    q = step_law(draft, [2], dp, [])
    assert law[1] == pytest.approx(float(torch.minimum(p, q).sum()), rel=1e-12)
    assert law.sum() == pytest.approx(1.0)


def test_acceptance_law_gamma_two_by_hand(model):
    draft = model.draft(0.9)
    tp = dp = SamplingParams(repetition_penalty=1.6)
    law = acceptance_law(model, draft, torch.tensor([2]), tp, dp, num_draft_tokens=2)
    p1, q1 = step_law(model, [2], tp, []), step_law(draft, [2], dp, [])
    both = 0.0
    for d in range(5):
        w = float(min(p1[d], q1[d]))
        p2, q2 = step_law(model, [2, d], tp, [d]), step_law(draft, [2, d], dp, [d])
        both += w * float(torch.minimum(p2, q2).sum())
    assert law[2] == pytest.approx(both, rel=1e-12)
    assert law[0] == pytest.approx(1 - float(torch.minimum(p1, q1).sum()), rel=1e-12)


def test_identical_models_accept_everything(model):
    law = acceptance_law(model, model, torch.tensor([1]), SamplingParams(), SamplingParams(), num_draft_tokens=3)
    assert law[3] == pytest.approx(1.0) and law[:3] == pytest.approx(0.0, abs=1e-12)


def test_too_many_outcomes_refused(model):
    with pytest.raises(ValueError, match="max_outcomes"):
        sequence_law(model, torch.tensor([0]), SamplingParams(), length=6, max_outcomes=100)


def test_acceptance_law_of_sample_compare_uses_p_times_q():
    """Sample-and-compare (the target samples, the draft is kept on a match) accepts a draft
    with probability p(d): one position has P(N >= 1) = sum_v p q, below sum_v min(p, q)."""
    import torch as _torch

    from specexact.decoders import SamplingParams, ToyLM, ToyLMConfig, batch_params, process_logits

    target = ToyLM(ToyLMConfig(vocab_size=5, seed=2))
    draft = target.draft(0.9)
    prompt = _torch.tensor([[1, 3]])
    sp = SamplingParams()
    tok = acceptance_law(target, draft, prompt, sp, sp, num_draft_tokens=1)
    cmp = acceptance_law(target, draft, prompt, sp, sp, num_draft_tokens=1, scheme="sample_compare")
    pos = _torch.tensor([[1]])
    p = process_logits(target.to(dtype=_torch.float64)(prompt, pos)[:, 0], batch_params(sp, 1), None)[0]
    q = process_logits(draft.to(dtype=_torch.float64)(prompt, pos)[:, 0], batch_params(sp, 1), None)[0]
    assert abs(cmp[1] - float((p * q).sum())) < 1e-12
    assert abs(tok[1] - float(_torch.minimum(p, q).sum())) < 1e-12
    assert cmp[1] < tok[1]
    with pytest.raises(ValueError, match="scheme"):
        acceptance_law(target, draft, prompt, sp, sp, num_draft_tokens=1, scheme="block")
