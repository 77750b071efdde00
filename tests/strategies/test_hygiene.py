"""Hypothesis hygiene: the CI profile is deterministic and so are the strategies."""

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from specexact.strategies import (
    draft_target_pairs,
    logit_tensors,
    pipeline_cases,
    vocab_sizes,
)


def test_active_profile_is_registered_and_ci_is_derandomised():
    profile = settings._current_profile
    assert profile in ("ci", "dev", "nightly") or profile.startswith("default")
    ci = settings.get_profile("ci")
    assert ci.derandomize and ci.database is None and ci.deadline is None and ci.print_blob
    assert settings.get_profile("nightly").max_examples > ci.max_examples
    if profile == "ci":
        assert settings.default.derandomize and settings.default.database is None


def _draw_reprs(strategy, n=25):
    seen = []

    @settings(max_examples=n, derandomize=True, database=None, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(example):
        seen.append(repr(example))

    collect()
    return seen


@pytest.mark.parametrize(
    "strategy",
    [vocab_sizes(), logit_tensors(vocab_size=st.integers(1, 64)),
     draft_target_pairs(vocab_size=st.integers(1, 64)), pipeline_cases(vocab_size=st.integers(1, 64))],
    ids=["vocab_sizes", "logit_tensors", "draft_target_pairs", "pipeline_cases"],
)
def test_derandomised_runs_draw_the_same_examples(strategy):
    assert _draw_reprs(strategy) == _draw_reprs(strategy)


def test_reprs_rebuild_identical_tensors():
    from specexact.decoders import SamplingParams
    from specexact.strategies import LogitsCase, PipelineCase, VerifyCase

    scope = {"LogitsCase": LogitsCase, "VerifyCase": VerifyCase, "PipelineCase": PipelineCase,
             "SamplingParams": SamplingParams}
    for text in _draw_reprs(draft_target_pairs(vocab_size=st.integers(1, 64)), n=10):
        a, b = eval(text, scope), eval(text, scope)
        assert torch.equal(a.target_probs, b.target_probs)
        assert torch.equal(a.draft_token_ids, b.draft_token_ids)
    for text in _draw_reprs(pipeline_cases(vocab_size=st.integers(1, 64)), n=10):
        a, b = eval(text, scope), eval(text, scope)
        assert torch.equal(a.logits, b.logits) and a.params == b.params
