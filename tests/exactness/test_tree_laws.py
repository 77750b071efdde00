"""Exact round, accepted-length and generation laws of the tree / block / lossy schemes."""

import functools

import numpy as np
import pytest
import torch

from specexact.decoders import SamplingParams, ToyLM, ToyLMConfig
from specexact.decoders.tree import check_tree_output, full_tree_parents
from specexact.exactness.enumeration import sequence_law
from specexact.exactness.tree_laws import (
    PrefixLaws,
    accepted_length_law,
    block_accepted_length_law,
    complete_with_target,
    generation_law,
    round_law,
    rrs_accepted_length_law,
    target_only_accepted_length_law,
    target_sequence_law,
    tokenwise_accepted_length_law,
    total_variation,
    tree_verifier_from_program,
    rrs_program,
)

EOS = 2
PROMPT = torch.tensor([1, 0])
TARGET_PARAMS = SamplingParams(repetition_penalty=1.4)


@pytest.fixture(scope="module")
def models():
    target = ToyLM(ToyLMConfig(vocab_size=3, seed=7, eos_token_id=EOS, eos_logit=-1.0))
    return target, target.draft(1.2)


@pytest.fixture(scope="module")
def laws(models):
    return PrefixLaws.from_models(*models, PROMPT, TARGET_PARAMS, SamplingParams(temperature=0.7))


LOSSLESS = [("tokenwise", (1, 1, 1), "iid"), ("block", (1, 1, 1), "iid"), ("tree", (2, 2), "iid"),
            ("tree", (2, 2), "without_replacement"), ("multi_draft", (3, 1), "iid"),
            ("tree_target_only", (2, 2), "top_k"), ("tree", (2, 2), "top_k")]


@pytest.mark.parametrize("scheme,branching,drafting", LOSSLESS)
def test_lossless_rounds_continued_by_the_target_are_the_target_law(laws, scheme, branching, drafting):
    law = round_law(laws, scheme, branching=branching, drafting=drafting)
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
    L = len(branching) + 1
    assert total_variation(complete_with_target(law, laws, L), target_sequence_law(laws, L)) < 1e-12
    assert all(1 <= len(k) <= L for k in law)


def test_closed_form_accepted_length_laws_match_the_enumerated_rounds(laws):
    for scheme, closed in (("tokenwise", tokenwise_accepted_length_law), ("block", block_accepted_length_law)):
        enumerated = accepted_length_law(round_law(laws, scheme, branching=(1, 1, 1)), 3)
        assert np.allclose(enumerated, closed(laws, 3), atol=1e-14)
    enumerated = accepted_length_law(round_law(laws, "tree_target_only", branching=(2, 2), drafting="top_k"), 2)
    assert np.allclose(enumerated, target_only_accepted_length_law(laws, (2, 2)), atol=1e-14)
    tok, blk = tokenwise_accepted_length_law(laws, 3), block_accepted_length_law(laws, 3)
    tail = lambda law: np.cumsum(law[::-1])[::-1]  # noqa: E731
    assert np.all(tail(blk) >= tail(tok) - 1e-15) and tail(blk)[2] > tail(tok)[2] + 1e-3


@pytest.mark.parametrize("branching,drafting", [((2, 2), "iid"), ((2, 2), "without_replacement"),
                                                ((3, 1), "iid"), ((2, 2), "top_k"), ((1, 1, 1), "iid"),
                                                ((3,), "without_replacement")])
def test_the_level_recursion_of_rrs_is_the_enumerated_law(laws, branching, drafting):
    enumerated = accepted_length_law(round_law(laws, rrs_program, branching=branching, drafting=drafting),
                                     len(branching))
    fast = rrs_accepted_length_law(laws, branching, drafting)
    assert np.abs(fast - enumerated).max() < 1e-13 and fast.sum() == pytest.approx(1.0, abs=1e-13)
    # After a prefix too (other laws: penalties count the prefix).
    enumerated = accepted_length_law(round_law(laws, rrs_program, branching=branching, drafting=drafting,
                                               prefix=(1, 1)), len(branching))
    assert np.abs(rrs_accepted_length_law(laws, branching, drafting, prefix=(1, 1)) - enumerated).max() < 1e-13


def test_the_rrs_recursion_is_target_only_on_top_k_trees_and_rejects_bad_drafting(laws):
    assert np.allclose(rrs_accepted_length_law(laws, (2, 2), "top_k"),
                       target_only_accepted_length_law(laws, (2, 2)), atol=1e-14)
    with pytest.raises(ValueError, match="drafting"):
        rrs_accepted_length_law(laws, (2, 2), "beam")


def test_rrs_on_a_chain_is_tokenwise(laws):
    chain = round_law(laws, "tree", branching=(1, 1, 1))
    assert total_variation(chain, round_law(laws, "tokenwise", branching=(1, 1, 1))) < 1e-14


def test_typical_acceptance_is_lossy_and_its_parameters_matter(laws):
    target = target_sequence_law(laws, 3)
    medusa = round_law(laws, "typical", branching=(2, 2), drafting="top_k")
    # With alpha <= 1 the target's argmax always passes (exp(-H) <= sum p^2 <= max p); alpha = 3
    # and epsilon = 0.95 reject it whenever the law is not peaked.
    strict = round_law(laws, "typical", branching=(2, 2), drafting="top_k", posterior_threshold=0.95,
                       posterior_alpha=3.0)
    tv_medusa = total_variation(complete_with_target(medusa, laws, 3), target)
    tv_strict = total_variation(complete_with_target(strict, laws, 3), target)
    assert tv_medusa > 0.01 and tv_strict > 0.01 and abs(tv_medusa - tv_strict) > 1e-3
    assert accepted_length_law(strict, 2)[2] < accepted_length_law(medusa, 2)[2] - 0.01


def test_generation_law_over_several_rounds_with_eos_is_the_target_law(models, laws):
    """Length 5 needs three or more rounds of depth <= 2; EOS ends sequences early."""
    target_law = sequence_law(models[0], PROMPT, TARGET_PARAMS, length=5, eos_token_id=EOS)
    want = {tuple(int(t) for t in s): p for s, p in zip(target_law.sequences, target_law.probs)}
    for scheme, branching, drafting in (("tree", (2,), "iid"), ("block", (1, 1), "iid")):
        rounds = functools.partial(lambda prefix, s, b, d: round_law(laws, s, branching=b, drafting=d, prefix=prefix),
                                   s=scheme, b=branching, d=drafting)
        got = generation_law(laws, rounds, 5, eos_token_id=EOS)
        assert any(-1 in k for k in got)  # EOS occurred
        assert total_variation(got, want) < 1e-12
    lossy = generation_law(laws, lambda prefix: round_law(laws, "typical", branching=(2,), drafting="top_k",
                                                          prefix=prefix), 5, eos_token_id=EOS)
    assert sum(lossy.values()) == pytest.approx(1.0) and total_variation(lossy, want) > 0.01


def test_prefix_laws_validate_and_normalise():
    laws = PrefixLaws.fixed([1, 3], [2, 2])
    assert laws.target((0, 1)).tolist() == [0.25, 0.75] and laws.draft().tolist() == [0.5, 0.5]
    with pytest.raises(ValueError, match="one shape"):
        PrefixLaws.fixed([1, 3], [1, 1, 1])
    with pytest.raises(ValueError, match="positive mass"):
        PrefixLaws.fixed([0, 0], [1, 1])
    bad = PrefixLaws(lambda prefix: np.ones(3), lambda prefix: np.ones(2), 2)
    with pytest.raises(ValueError, match="must have 2 entries"):
        bad.target(())
    with pytest.raises(ValueError, match="vocab_size"):
        PrefixLaws(lambda p: None, lambda p: None, 0)


def test_a_program_runs_as_a_protocol_sampler():
    g = torch.Generator().manual_seed(0)
    B, V = 64, 4
    parents = full_tree_parents((2, 2))[None].expand(B, -1).clone()
    q = torch.softmax(torch.randn(B, 6, V, generator=g), -1)
    p = torch.softmax(torch.randn(B, 7, V, generator=g), -1)
    ids = torch.multinomial(q.reshape(-1, V), 1, generator=g).reshape(B, 6)
    out = tree_verifier_from_program(rrs_program)(ids, parents, q, p, g)
    assert check_tree_output(out, ids, parents, V).min() >= 1
