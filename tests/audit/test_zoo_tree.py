"""The tree / block zoo: every planted bug has a computed TV > 0, every variant none."""

import numpy as np
import pytest
import torch

from specexact.audit.zoo_tree import CORRECT, CORRECT_SAMPLERS, WRONG, WRONG_SAMPLERS, exact_discrepancy
from specexact.decoders import SamplingParams, ToyLM, ToyLMConfig, speculative_generate
from specexact.decoders.tree import tree_speculative_generate
from specexact.exactness import chisquare_gof
from specexact.exactness.tree_laws import PrefixLaws, round_law

PROMPT = torch.tensor([0, 1])
TARGET_PARAMS = SamplingParams(repetition_penalty=1.3, frequency_penalty=0.2)
DRAFT_PARAMS = SamplingParams(temperature=0.8)


@pytest.fixture(scope="module")
def models():
    target = ToyLM(ToyLMConfig(vocab_size=3, seed=5))
    return target, target.draft(1.5)


@pytest.fixture(scope="module")
def laws(models):
    return PrefixLaws.from_models(*models, PROMPT, TARGET_PARAMS, DRAFT_PARAMS)


def branching_of(entry):
    return (1, 1, 1) if entry.protocol == "chain" else (2, 2)


# Exact first-round TVs on this case (emitted law continued by the target, against the target):
# rrs_residual_not_updated 0.299, tree_child_against_parent_law 0.398,
# multi_draft_resample_target 0.255 (accepted-length law unchanged), block_tokenwise_residual
# 0.0188 (accepted-length law unchanged), block_first_failure 0.170.
@pytest.mark.parametrize("name", sorted(WRONG))
def test_each_bug_differs_from_the_target_by_a_computed_tv(laws, name):
    entry = WRONG[name]
    d = exact_discrepancy(entry, laws, branching=branching_of(entry))
    assert d.emitted_tv > 0.01 and d.round_tv >= d.emitted_tv - 1e-12, d


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_each_variant_has_the_references_law_exactly(laws, name):
    entry = CORRECT[name]
    d = exact_discrepancy(entry, laws, branching=branching_of(entry))
    assert d.round_tv < 1e-12 and d.emitted_tv < 1e-12 and d.accepted_length_tv < 1e-12, d


def test_the_samplers_run_in_both_decoders(models):
    target, draft = models
    g = torch.Generator().manual_seed(0)
    prompts = PROMPT[None].expand(16, -1)
    for name, sampler in {**WRONG_SAMPLERS, **CORRECT_SAMPLERS}.items():
        entry = {**WRONG, **CORRECT}[name]
        if entry.protocol == "chain":
            out = speculative_generate(target, draft, prompts, TARGET_PARAMS, DRAFT_PARAMS, num_draft_tokens=3,
                                       max_new_tokens=6, generator=g, verifier=sampler)
        else:
            out = tree_speculative_generate(target, draft, prompts, TARGET_PARAMS, DRAFT_PARAMS, branching=(2, 2),
                                            max_new_tokens=6, drafting=entry.drafting, generator=g, verifier=sampler)
        assert bool((out.num_tokens == 6).all()), name


def first_round_counts(models, sampler, law, batch, seed):
    target, draft = models
    records = []
    tree_speculative_generate(target, draft, PROMPT[None].expand(batch, -1), TARGET_PARAMS, DRAFT_PARAMS,
                              branching=(2, 2), max_new_tokens=1, generator=torch.Generator().manual_seed(seed),
                              verifier=sampler, observer=records.append)
    keys = sorted(law)
    index = {k: i for i, k in enumerate(keys)}
    outs = [tuple(t for t in row if t >= 0) for row in records[0].output.tokens.tolist()]
    assert all(o in index for o in outs)
    return np.bincount([index[o] for o in outs], minlength=len(keys)).astype(np.int64), np.array([law[k] for k in keys])


# 10 000 first rounds (per-row programs are slow): detectable TV of the binned round law about
# 0.06 at the per-check rate and power 0.99; the planted bug is 0.30 away from the reference.
@pytest.mark.statistical(checks=2)
def test_a_variant_passes_and_a_bug_fails_against_the_reference_law(models, laws, alpha):
    reference = round_law(laws, "tree", branching=(2, 2))
    counts, probs = first_round_counts(models, CORRECT_SAMPLERS["rrs_unnormalised"], reference, 10_000, 1)
    ok = chisquare_gof(counts, probs, false_fail_rate=alpha)
    assert ok.passed, ok
    counts, probs = first_round_counts(models, WRONG_SAMPLERS["rrs_residual_not_updated"], reference, 10_000, 2)
    bad = chisquare_gof(counts, probs, false_fail_rate=alpha)
    assert not bad.passed, bad
