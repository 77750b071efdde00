"""Invalid inputs: the built-in refuses every corruption; a sampler that does not is a finding."""

import pytest
import torch

from specexact.decoders import verify
from specexact.decoders.adapters.builtin_logits import verify_logits_level
from specexact.fuzz.examples import LogitsExample, ProbExample
from specexact.fuzz.invalid import LOGITS_CORRUPTIONS, PROB_CORRUPTIONS, check_refused, corrupt
from specexact.fuzz.rules import RuleBroken
from specexact.fuzz.subject import Subject
from specexact.decoders import SamplingParams
from specexact.strategies import LogitsCase, ProbsCase, VerifyCase

PROB = ProbExample(VerifyCase(family="independent", vocab_size=6, batch_size=2, num_draft_tokens=2, seed=1))
LOGITS = LogitsExample(logits=LogitsCase(family="zipf", vocab_size=6, batch_size=6, seed=1),
                       draft=ProbsCase(family="zipf", vocab_size=6, batch_size=4, seed=2), num_draft_tokens=2,
                       target_params=(SamplingParams(top_k=3), SamplingParams(repetition_penalty=1.5)),
                       prompt=((1, 2), (3, 4)), output=((5,), ()))


@pytest.mark.parametrize("kind", PROB_CORRUPTIONS)
def test_the_builtin_verifier_refuses_each_corruption(kind):
    check_refused(Subject.of(verify, "builtin"), PROB.inputs, kind, seed=3)


@pytest.mark.parametrize("kind", LOGITS_CORRUPTIONS)
def test_builtin_logits_refuses_each_corruption(kind):
    check_refused(Subject.of(verify_logits_level, "builtin-logits"), LOGITS.inputs, kind, seed=3)


def test_a_sampler_without_checks_is_caught_and_the_corruption_leaves_the_inputs_alone():
    def unchecked(ids, q, p, g):
        return verify(ids, q, p, g, validate=False)

    before = PROB.inputs
    bad = corrupt(before, "nan_target_prob", 0)
    assert bool(torch.isnan(bad.target_probs).any()) and not bool(torch.isnan(before.target_probs).any())
    caught = []
    for kind in ("draft_id_too_large", "negative_draft_prob", "float_draft_ids"):  # a crash, silent outputs
        with pytest.raises(RuleBroken) as info:
            check_refused(Subject.of(unchecked, "unchecked"), PROB.inputs, kind)
        caught.append(info.value.rule)
    assert caught == ["refuses_invalid_input"] * 3


def test_unknown_corruptions_are_named():
    with pytest.raises(ValueError, match="unknown probability-level corruption 'x'"):
        corrupt(PROB.inputs, "x")
    with pytest.raises(ValueError, match="unknown logits-level corruption 'x'"):
        corrupt(LOGITS.inputs, "x")
