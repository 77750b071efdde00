"""Logits processing in a declared order: validation, agreement with the built-in pipeline,
and that the order and the repetition scope change the law where they should."""

import pytest
import torch

from specexact.decoders import LogitsProcessing, SamplingParams, batch_params, process_logits, process_logits_in_order
from specexact.decoders.processing import BUILTIN_ORDER, BUILTIN_PROCESSING, PENALTIES

HF_LIKE = LogitsProcessing(order=("repetition_penalty", "temperature", "top_k", "top_p", "min_p"),
                           repetition_penalty_scope="prompt_and_output", greedy=False)

PARAMS = [
    SamplingParams(),
    SamplingParams(temperature=0.7, top_k=5),
    SamplingParams(temperature=1.3, top_p=0.8, min_p=0.05),
    SamplingParams(temperature=0, repetition_penalty=1.4),
    SamplingParams(top_k=3, top_p=0.9, min_p=0.2, repetition_penalty=0.8, presence_penalty=0.5,
                   frequency_penalty=0.3),
    SamplingParams(temperature=0.9, min_p=0.5, frequency_penalty=-0.4),
]


def batch(seed, B=96, V=50, H=6, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    logits = (2.0 * torch.randn(B, V, generator=g)).to(dtype)
    history = torch.randint(0, V, (B, H), generator=g)
    history[torch.rand(B, H, generator=g) < 0.3] = -1
    prompt = torch.randint(0, V, (B, 3), generator=g)
    params = [PARAMS[i % len(PARAMS)] for i in range(B)]
    return logits, batch_params(params, B), history, prompt


def test_penalties_shorthand_expands_and_builtin_is_recognised():
    assert LogitsProcessing(order=("penalties", "temperature")).order == PENALTIES + ("temperature",)
    assert BUILTIN_PROCESSING.is_builtin and BUILTIN_PROCESSING.order == BUILTIN_ORDER
    assert not LogitsProcessing(repetition_penalty_scope="prompt_and_output").is_builtin
    assert not HF_LIKE.is_builtin


@pytest.mark.parametrize("kw, match", [
    ({"order": ("temperature", "nucleus")}, "unknown operations"),
    ({"order": ("top_k", "temperature", "top_k")}, "more than once"),
    ({"order": ("penalties", "presence_penalty")}, "more than once"),
    ({"repetition_penalty_scope": "everything"}, "repetition_penalty_scope"),
])
def test_bad_orders_are_refused_by_name(kw, match):
    with pytest.raises(ValueError, match=match):
        LogitsProcessing(**kw)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("seed", range(4))
def test_builtin_order_matches_process_logits(seed, dtype):
    logits, params, history, _ = batch(seed, dtype=dtype)
    ours = process_logits_in_order(logits, params, history)
    ref = process_logits(logits, params, history)
    assert ours.dtype == ref.dtype
    assert torch.equal(ours > 0, ref > 0), "same kept sets"
    torch.testing.assert_close(ours, ref, rtol=1e-5 if dtype == torch.float32 else 1e-12, atol=1e-7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_builtin_order_matches_process_logits_at_the_tile_edge(dtype):
    """V = 8193 (one past a 2**13 tile), the tile-edge default case's vocabulary, with its
    truncation and penalties: the per-operation reference (the logits-level audit's laws for
    any declared order) agrees with the built-in pipeline there too. CI audits the
    logits-level zoo without that case (tests/audit/zoo/test_logits.py); this keeps the
    reference checked at that vocabulary on every build."""
    logits, params, history, _ = batch(11, B=16, V=8193, H=12, dtype=dtype)
    ours = process_logits_in_order(logits, params, history)
    ref = process_logits(logits, params, history)
    assert torch.equal(ours > 0, ref > 0), "same kept sets"
    torch.testing.assert_close(ours, ref, rtol=1e-5 if dtype == torch.float32 else 1e-12, atol=1e-7)


def test_calling_the_builtin_processing_is_process_logits_bit_for_bit():
    logits, params, history, prompt = batch(7)
    assert torch.equal(BUILTIN_PROCESSING(logits, params, history, prompt), process_logits(logits, params, history))


def test_min_p_before_or_after_top_p_differs_as_specified():
    # probs 0.5, 0.3, 0.15, 0.05; min_p=0.2 keeps >= 0.1; top_p=0.82.
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]], dtype=torch.float64))
    params = batch_params(SamplingParams(top_p=0.82, min_p=0.2), 1)
    first = process_logits_in_order(logits, params)  # min-p, then top-p on the renormalised law
    last = process_logits_in_order(logits, params, processing=LogitsProcessing(
        order=("penalties", "temperature", "top_k", "top_p", "min_p")))
    # min-p first: 0.5/0.95 + 0.3/0.95 = 0.842 >= 0.82 after two tokens -> 2 kept.
    assert (first[0] > 0).tolist() == [True, True, False, False]
    # top-p first: 0.5 + 0.3 = 0.8 < 0.82 -> 3 kept; min-p (>= 0.2 * max) keeps all three.
    assert (last[0] > 0).tolist() == [True, True, True, False]
    torch.testing.assert_close(last[0, :3], torch.tensor([0.5, 0.3, 0.15], dtype=torch.float64) / 0.95)


def test_repetition_scope_counts_the_prompt_only_when_declared():
    logits = torch.tensor([[2.0, 1.0, 0.5]], dtype=torch.float64)
    params = batch_params(SamplingParams(repetition_penalty=2.0), 1)
    prompt = torch.tensor([[0]])
    empty = torch.empty(1, 0, dtype=torch.int64)
    out_only = process_logits_in_order(logits, params, empty, prompt_ids=prompt)
    with_prompt = process_logits_in_order(logits, params, empty, prompt_ids=prompt,
                                          processing=LogitsProcessing(repetition_penalty_scope="prompt_and_output"))
    torch.testing.assert_close(out_only, torch.softmax(logits, -1))
    torch.testing.assert_close(with_prompt, torch.softmax(torch.tensor([[1.0, 1.0, 0.5]], dtype=torch.float64), -1))
    with pytest.raises(ValueError, match="prompt_ids is required"):
        process_logits_in_order(logits, params, empty,
                                processing=LogitsProcessing(repetition_penalty_scope="prompt_and_output"))


def test_penalties_are_applied_where_the_order_puts_them():
    # Repetition after temperature: 2/T then /rep, vs (2/rep)/T: equal for positive logits,
    # but a presence penalty after temperature is not divided by T.
    logits = torch.tensor([[2.0, 1.0]], dtype=torch.float64)
    params = batch_params(SamplingParams(temperature=0.5, presence_penalty=1.0), 1)
    hist = torch.tensor([[0]])
    before = process_logits_in_order(logits, params, hist)
    after = process_logits_in_order(logits, params, hist, processing=LogitsProcessing(
        order=("temperature", "penalties")))
    torch.testing.assert_close(before, torch.softmax(torch.tensor([[1.0 / 0.5, 1.0 / 0.5]], dtype=torch.float64), -1))
    torch.testing.assert_close(after, torch.softmax(torch.tensor([[4.0 - 1.0, 2.0]], dtype=torch.float64), -1))


def test_unsupported_parameters_are_named():
    assert HF_LIKE.unsupported(SamplingParams(top_k=3, repetition_penalty=1.2, min_p=0.1)) == []
    assert HF_LIKE.unsupported(SamplingParams(presence_penalty=0.5, frequency_penalty=0.1)) == [
        "frequency_penalty=0.1", "presence_penalty=0.5"]
    assert HF_LIKE.unsupported(SamplingParams(temperature=0)) == ["temperature=0 (greedy)"]
    logits, params, history, prompt = batch(1)
    with pytest.raises(ValueError, match=r"frequency_penalty=.*row 4.*'frequency_penalty'"):
        process_logits_in_order(logits, params, history, prompt_ids=prompt, processing=HF_LIKE)
    greedy_only = batch_params([SamplingParams(temperature=0)], 1)
    with pytest.raises(ValueError, match="temperature=0"):
        process_logits_in_order(logits[:1], greedy_only, processing=HF_LIKE)


def test_every_supported_order_gives_laws():
    logits, params, history, prompt = batch(3, dtype=torch.float32)
    for order in (BUILTIN_ORDER, tuple(reversed(BUILTIN_ORDER)), ("top_p", "penalties", "min_p", "top_k", "temperature")):
        probs = process_logits_in_order(logits, params, history, prompt_ids=prompt,
                                        processing=LogitsProcessing(order=order))
        assert probs.dtype == torch.float32 and bool((probs >= 0).all())
        torch.testing.assert_close(probs.sum(-1), torch.ones(probs.shape[0]))
        greedy = params.temperature == 0
        assert bool(((probs[greedy] == 1).sum(-1) == 1).all())


@pytest.mark.parametrize("bad, match", [
    (lambda l: l.fill_(float("nan")), "NaN"),
    (lambda l: l.fill_(float("-inf")), "all -inf"),
])
def test_bad_logits_raise(bad, match):
    logits, params, history, _ = batch(0, B=6)
    bad(logits[2])
    with pytest.raises(ValueError, match=match):
        process_logits_in_order(logits, params, history)


def test_shape_mismatches_name_the_argument():
    logits, params, history, prompt = batch(0, B=6)
    with pytest.raises(ValueError, match="history must have shape"):
        process_logits_in_order(logits, params, history[:3])
    with pytest.raises(ValueError, match="params has 6 rows"):
        process_logits_in_order(logits[:3], params)
