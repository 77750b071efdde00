"""Forbidden tokens and the acceptance band the exact rules compare with."""

import math

import torch

from specexact.decoders import SamplingParams, verify
from specexact.decoders.adapters.builtin_logits import verify_logits_level
from specexact.decoders.adapters.protocol import LogitsVerifyInputs
from specexact.fuzz.examples import ProbInputs
from specexact.fuzz.reference import acceptance_band, forbidden_tokens
from specexact.fuzz.subject import Subject


def test_probability_level_forbidden_tokens_are_the_zeros():
    x = ProbInputs(torch.tensor([[0]]), torch.tensor([[[0.5, 0.5, 0.0]]]), torch.tensor([[[0.0, 0.4, 0.6], [1.0, 0, 0]]]))
    f = forbidden_tokens(Subject.of(verify), x)
    assert f.tolist() == [[[True, False, False], [False, True, True]]]


def _logits_inputs(logits, params):
    B, K1, V = logits.shape
    return LogitsVerifyInputs(draft_token_ids=torch.zeros(B, K1 - 1, dtype=torch.int64),
                              draft_probs=torch.full((B, K1 - 1, V), 1.0 / V), target_logits=logits,
                              target_params=tuple(params), prompt_token_ids=torch.zeros(B, 1, dtype=torch.int64),
                              output_token_ids=torch.zeros(B, 0, dtype=torch.int64))


def test_logits_level_ties_at_a_truncation_boundary_are_not_forbidden():
    # Flat logits with top-p 0.5: the reference keeps ids {0, 1}, but any two of the four are a
    # valid top-p set, so none is forbidden; a -inf logit and a clearly smaller one are.
    subject = Subject.of(verify_logits_level, "builtin-logits")
    flat = torch.zeros(1, 2, 4)
    f = forbidden_tokens(subject, _logits_inputs(flat, [SamplingParams(top_p=0.5)]))
    assert not bool(f.any())
    x = torch.tensor([[[3.0, 2.0, 0.0, -math.inf], [0.0, 0.0, 0.0, 0.0]]])
    f = forbidden_tokens(subject, _logits_inputs(x, [SamplingParams(top_k=2)]))
    assert f[0, 0].tolist() == [False, False, True, True] and not bool(f[0, 1].any())


def test_the_band_holds_the_raw_and_the_normalised_ratio_and_the_zero_rule():
    # Row sums 1 (draft) and 0.5 (target): raw ratio 0.2/0.5 = 0.4, normalised 0.8.
    q = torch.tensor([[[0.5, 0.5]], [[0.0, 1.0]], [[1.0, 0.0]]], dtype=torch.float64)
    p = torch.tensor([[[0.2, 0.3], [0.5, 0.5]], [[0.0, 1.0], [0.5, 0.5]], [[0.0, 1.0], [0.5, 0.5]]],
                     dtype=torch.float64)
    ids = torch.tensor([[0], [0], [0]])
    band = acceptance_band(Subject.of(verify), ProbInputs(ids, q, p))
    assert math.isclose(float(band.low[0]), 0.4) and math.isclose(float(band.high[0]), 0.8)
    assert float(band.rel[0]) < 1e-4
    u = torch.tensor([0.39, 0.0, 0.0])
    assert band.must_accept(u).tolist() == [True, False, False]
    assert band.must_reject(torch.tensor([0.81, 0.0, 0.0])).tolist() == [True, True, True]
    assert band.zero.tolist() == [False, True, True]  # q(d) = 0 with p(d) = 0, and p(d) = 0
    assert not bool(band.must_reject(torch.tensor([0.6, 0.5, 0.5]))[0]), "inside the band either decision"
