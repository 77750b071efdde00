"""The logits pipeline: each option, its edge values, and the order of operations."""

import math

import pytest
import torch

from specexact.decoders import SamplingParams, batch_params, process_logits, token_counts


def run(logits, history=None, **kw):
    logits = torch.as_tensor(logits, dtype=torch.float64)
    if logits.dim() == 1:
        logits = logits[None]
    bp = batch_params(SamplingParams(**kw), logits.shape[0])
    if history is not None:
        history = torch.as_tensor(history, dtype=torch.int64).reshape(logits.shape[0], -1)
    return process_logits(logits, bp, history)


def test_plain_is_softmax():
    logits = torch.tensor([1.0, 2.0, -0.5, 0.0], dtype=torch.float64)
    assert torch.allclose(run(logits)[0], torch.softmax(logits, -1))


def test_temperature_divides_logits():
    logits = torch.tensor([1.0, 2.0, -0.5], dtype=torch.float64)
    assert torch.allclose(run(logits, temperature=0.5)[0], torch.softmax(logits / 0.5, -1))


def test_greedy_is_point_mass_on_lowest_id_among_ties():
    probs = run([0.0, 3.0, 3.0, 1.0], temperature=0)[0]
    assert probs.tolist() == [0.0, 1.0, 0.0, 0.0]


def test_top_k_keeps_ties_at_kth_value():
    probs = run([5.0, 4.0, 4.0, 1.0], top_k=2)[0]
    assert (probs > 0).tolist() == [True, True, True, False]
    kept = torch.tensor([5.0, 4.0, 4.0], dtype=torch.float64)
    assert torch.allclose(probs[:3], torch.softmax(kept, -1))


@pytest.mark.parametrize("k", [4, 5, 1000])
def test_top_k_at_or_above_vocab_is_off(k):
    logits = [0.3, 0.1, -2.0, 1.0]
    assert torch.equal(run(logits, top_k=k), run(logits))


def test_top_p_cumsum_exactly_equal_keeps_smallest_set():
    # probs 0.5, 0.25, 0.25: mass 0.75 is reached exactly by the first two tokens.
    logits = torch.log(torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64))
    probs = run(logits, top_p=0.75)[0]
    assert probs.tolist() == [2 / 3, 1 / 3, 0.0]


def test_top_p_ties_ranked_by_lower_id():
    logits = torch.log(torch.tensor([0.2, 0.4, 0.4], dtype=torch.float64))
    probs = run(logits, top_p=0.4)[0]
    assert probs.tolist() == [0.0, 1.0, 0.0]


def test_tiny_top_p_keeps_the_most_probable_token():
    probs = run([0.1, 0.2, 0.05], top_p=1e-7)[0]
    assert probs.tolist() == [0.0, 1.0, 0.0]


def test_top_p_one_keeps_everything_on_large_vocab():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(1, 128256, generator=g, dtype=torch.float64) * 3
    probs = run(logits, top_p=1.0)
    assert bool((probs > 0).all())


def test_min_p_threshold_relative_to_max():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.05, 0.15], dtype=torch.float64))
    probs = run(logits, min_p=0.3)[0]  # keep prob >= 0.15
    assert (probs > 0).tolist() == [True, True, False, True]


def test_top_p_applies_to_law_renormalised_after_top_k():
    # probs .4 .3 .2 .1; top_k=2 leaves .4/.7 and .3/.7 (= .571, .429); top_p=0.5 keeps one.
    logits = torch.log(torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64))
    assert run(logits, top_k=2, top_p=0.5)[0].tolist() == [1.0, 0.0, 0.0, 0.0]
    # Without the renormalisation, mass .4 < .5 would have kept two tokens.
    assert (run(logits, top_p=0.5)[0] > 0).sum() == 2


def test_repetition_penalty_divides_positive_and_multiplies_negative():
    logits = torch.tensor([[2.0, -1.0, 0.5]], dtype=torch.float64)
    probs = run(logits, history=[[0, 1]], repetition_penalty=2.0)[0]
    expected = torch.softmax(torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64), -1)
    assert torch.allclose(probs, expected)


def test_frequency_and_presence_penalties_count_occurrences():
    logits = torch.zeros(1, 3, dtype=torch.float64)
    probs = run(logits, history=[[0, 0, 1, -1]], frequency_penalty=0.5, presence_penalty=0.25)[0]
    expected = torch.softmax(torch.tensor([-1.25, -0.75, 0.0], dtype=torch.float64), -1)
    assert torch.allclose(probs, expected)


def test_penalties_before_temperature():
    logits = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    probs = run(logits, history=[[0]], presence_penalty=1.0, temperature=0.5)[0]
    assert torch.allclose(probs, torch.tensor([0.5, 0.5], dtype=torch.float64))


def test_greedy_sees_penalties():
    probs = run([[1.0, 0.9]], history=[[0]], repetition_penalty=2.0, temperature=0)[0]
    assert probs.tolist() == [0.0, 1.0]


def test_per_row_parameters():
    logits = torch.tensor([[0.0, 1.0, 2.0]] * 3, dtype=torch.float64)
    bp = batch_params([SamplingParams(), SamplingParams(temperature=0), SamplingParams(top_k=1)], 3)
    probs = process_logits(logits, bp)
    assert torch.allclose(probs[0], torch.softmax(logits[0], -1))
    assert probs[1].tolist() == [0.0, 0.0, 1.0]
    assert probs[2].tolist() == [0.0, 0.0, 1.0]


def test_neg_inf_mask_is_zero_probability():
    probs = run([0.0, -math.inf, 1.0])[0]
    assert probs[1] == 0 and math.isclose(float(probs.sum()), 1.0)


def test_vocab_of_one():
    assert run([[3.0]], top_p=0.5, top_k=1, min_p=0.9).tolist() == [[1.0]]


def test_half_precision_logits_give_float32_law():
    probs = process_logits(torch.tensor([[1.0, 2.0]], dtype=torch.float16), batch_params(SamplingParams(), 1))
    assert probs.dtype == torch.float32


def test_huge_logits_do_not_overflow():
    probs = run([[1e30, 1e30 - 1e15, -1e30]])[0]
    assert bool(torch.isfinite(probs).all()) and math.isclose(float(probs.sum()), 1.0)


@pytest.mark.parametrize("bad, match", [
    ([[math.nan, 0.0]], "NaN"),
    ([[math.inf, 0.0]], r"\+inf"),
    ([[-math.inf, -math.inf]], "all -inf"),
])
def test_bad_logits_raise(bad, match):
    with pytest.raises(ValueError, match=match):
        run(bad)


def test_history_out_of_range_raises():
    with pytest.raises(ValueError, match="history ids"):
        token_counts(torch.tensor([[5]]), 3)


@pytest.mark.parametrize("field, value", [
    ("temperature", -1.0), ("top_k", -2), ("top_p", 0.0), ("top_p", 1.5), ("min_p", 2.0),
    ("repetition_penalty", 0.0), ("temperature", math.nan),
])
def test_params_validation_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**{field: value})


def test_batch_params_length_mismatch():
    with pytest.raises(ValueError, match="one SamplingParams per row"):
        batch_params([SamplingParams()] * 2, 3)
