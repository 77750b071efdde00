"""Shared case for the tree-package tests: toy models whose first round can be enumerated."""

import numpy as np
import pytest
import torch

from specexact.decoders import SamplingParams, ToyLM, ToyLMConfig
from specexact.decoders.tree import tree_speculative_generate
from specexact.exactness import chisquare_gof
from specexact.exactness.tree_laws import PrefixLaws

PROMPT = torch.tensor([0, 1])
TARGET_PARAMS = SamplingParams(repetition_penalty=1.3, frequency_penalty=0.2)
DRAFT_PARAMS = SamplingParams(temperature=0.8)


@pytest.fixture(scope="session")
def tiny_models():
    """V = 3 target and a mismatched draft (the draft is sharper and often wrong)."""
    target = ToyLM(ToyLMConfig(vocab_size=3, seed=5))
    return target, target.draft(1.5)


@pytest.fixture(scope="session")
def tiny_laws(tiny_models):
    target, draft = tiny_models
    return PrefixLaws.from_models(target, draft, PROMPT, TARGET_PARAMS, DRAFT_PARAMS)


def round_outputs(models, verifier, *, branching, drafting, batch, seed):
    """The first round's emitted tuples of ``batch`` rows through the tree decoder."""
    target, draft = models
    records = []
    g = torch.Generator().manual_seed(seed)
    tree_speculative_generate(target, draft, PROMPT[None].expand(batch, -1), TARGET_PARAMS, DRAFT_PARAMS,
                              branching=branching, max_new_tokens=1, drafting=drafting, generator=g,
                              verifier=verifier, observer=records.append)
    tokens = records[0].output.tokens.tolist()
    return [tuple(t for t in row if t >= 0) for row in tokens]


def law_check(outputs, law, *, alpha, name):
    """Pearson chi-square of emitted tuples against an exact round law (fails on any tuple
    outside the law's support)."""
    keys = sorted(law)
    index = {k: i for i, k in enumerate(keys)}
    unexpected = [o for o in outputs if o not in index]
    assert not unexpected, f"outcomes of probability 0: {sorted(set(unexpected))[:5]}"
    counts = np.bincount([index[o] for o in outputs], minlength=len(keys)).astype(np.int64)
    probs = np.array([law[k] for k in keys])
    return chisquare_gof(counts, probs / probs.sum(), false_fail_rate=alpha, name=name)


@pytest.fixture(scope="session")
def round_outputs_fn():
    return round_outputs


@pytest.fixture(scope="session")
def law_check_fn():
    return law_check
