"""sampling_params / histories / pipeline_cases: truncation edges generated as claimed."""

import math

import pytest
import torch
from hypothesis import given, note
from hypothesis import strategies as st

from specexact.decoders import SamplingParams, process_logits
from specexact.strategies import (
    HISTORY_KINDS,
    PARAM_FAMILIES,
    PIPELINE_FAMILIES,
    InvalidArgument,
    PipelineCase,
    histories,
    params_repr,
    pipeline_cases,
    sampling_params,
    sampling_params_family,
    vocab_sizes,
)
from specexact.strategies.truncation import _histories

SIZES = vocab_sizes(max_size=8193)


@pytest.mark.parametrize("family", PARAM_FAMILIES)
@given(data=st.data())
def test_param_families_are_tagged_as_drawn(family, data):
    V = data.draw(vocab_sizes(min_size=2, max_size=300), label="vocab_size")
    params = data.draw(sampling_params(vocab_size=V, families=[family]), label="params")
    assert isinstance(params, SamplingParams)
    assert sampling_params_family(params, V) == family
    if family == "top_k":
        assert 1 <= params.top_k < V
    if family == "top_k_ge_vocab":
        assert params.top_k >= V


def test_every_param_family_is_reachable(reach):
    reach(sampling_params(vocab_size=50), lambda p: sampling_params_family(p, 50),
          PARAM_FAMILIES)


def test_every_param_family_is_reachable_without_a_vocabulary(reach):
    reach(sampling_params(), sampling_params_family, PARAM_FAMILIES)


@given(data=st.data())
def test_histories_have_the_claimed_form(data):
    V = data.draw(st.integers(1, 50), label="V")
    B = data.draw(st.integers(1, 3), label="B")
    kind, h = data.draw(_histories(st.just(V), B, 10, HISTORY_KINDS, None), label="history")
    assert h.dtype == torch.int64 and h.shape[0] == B and h.shape[1] <= 10
    assert ((h >= -1) & (h < V)).all()
    present = h >= 0
    assert torch.equal(present, present.cumprod(1).bool()), "-1 padding must be a tail"
    if kind == "empty":
        assert h.shape[1] == 0
    if kind == "repeats":
        for row in h.tolist():
            assert len(set(row)) < len(row)
    if kind != "padded":
        assert present.all()


def test_public_histories_draw_from_token_pool(every_example, reach):
    for h in every_example(histories(vocab_size=100, batch_size=2, token_ids=[3, 7]), n=50):
        assert set(h.flatten().tolist()) - {-1} <= {3, 7}
    reach(histories(vocab_size=100, batch_size=2, token_ids=[3, 7]),
          lambda h: tuple(sorted(set(h.flatten().tolist()) - {-1})), [(3,), (7,), (3, 7)])


def test_every_history_kind_is_reachable(reach):
    reach(_histories(st.integers(1, 50), 2, 12, HISTORY_KINDS, None), lambda t: t[0],
          HISTORY_KINDS)


def check_pipeline_case(case: PipelineCase) -> None:
    B, V = case.batch_size, case.vocab_size
    x = case.logits
    assert x.shape == (B, V) and x.dtype == getattr(torch, case.dtype)
    assert not torch.isnan(x).any() and not torch.isposinf(x).any()
    assert torch.isfinite(x).any(-1).all()
    assert len(case.params) == B
    h = case.history_tensor
    if h is not None:
        assert h.shape[0] == B and ((h >= -1) & (h < V)).all()
    x64 = x.to(torch.float64)
    desc = torch.sort(x64, dim=-1, descending=True).values
    fam = case.family
    if fam == "top_k_tie":
        for b, p in enumerate(case.params):
            assert p.temperature == 1 and p.repetition_penalty == 1
            if p.top_k < V:
                assert desc[b, p.top_k - 1] == desc[b, p.top_k], "tie must straddle the k-th value"
    elif fam == "top_k_ge_vocab":
        assert all(p.top_k >= V for p in case.params)
    elif fam == "top_p_exact":
        tier = case.edge
        assert tier >= 2 and tier & (tier - 1) == 0
        assert (torch.isfinite(x).sum(-1) == tier).all() and (x64[torch.isfinite(x)] == 0).all()
        for p in case.params:
            m = p.top_p * tier
            assert m == int(m) and 1 <= m < tier
    elif fam == "top_p_tiny":
        assert all(p.top_p <= 1e-7 for p in case.params)
    elif fam == "top_p_one_large_vocab":
        assert all(p.top_p >= 1 - 1e-9 for p in case.params)
    elif fam == "min_p":
        assert all(p.min_p > 0 for p in case.params)
    elif fam == "greedy_tie":
        assert all(p.temperature == 0 for p in case.params)
        if V >= 2:
            assert (desc[:, 0] == desc[:, 1]).all()
    elif fam in ("penalties", "drafted_history"):
        assert h is not None and all(sampling_params_family(p) == "penalties" for p in case.params)
        if fam == "penalties" and case.logits_family in ("zipf", "near_tie", "spikes") and V >= 3:
            assert ((x64 > 0).any(-1) & (x64 < 0).any(-1)).all()
        if fam == "drafted_history":
            rows = [[t for t in row if t >= 0] for row in h.tolist()]
            for j in range(1, B):
                assert rows[j][:-1] == rows[j - 1] and rows[j][-1] in rows[0]


@pytest.mark.parametrize("family", PIPELINE_FAMILIES)
@given(data=st.data())
def test_pipeline_families_generate_what_they_claim(family, data):
    case = data.draw(pipeline_cases(vocab_size=SIZES, families=[family]))
    note(case.repro())
    check_pipeline_case(case)
    probs = process_logits(case.logits, case.batched_params, case.history_tensor)
    assert probs.shape == (case.batch_size, case.vocab_size)


def test_every_pipeline_family_and_history_kind_is_reachable(reach):
    reach(pipeline_cases(vocab_size=SIZES), lambda c: c.family, PIPELINE_FAMILIES)
    reach(pipeline_cases(vocab_size=SIZES), lambda c: c.history_kind,
          (*HISTORY_KINDS, "drafted", "none"))


def test_pipeline_case_repr_rebuilds_it():
    case = PipelineCase(family="drafted_history", vocab_size=20, batch_size=3, seed=4,
                        dtype="bfloat16", logits_family="zipf",
                        params=(SamplingParams(repetition_penalty=1.5),) * 3,
                        history=((1, 2, -1, -1), (1, 2, 1, -1), (1, 2, 1, 2)),
                        history_kind="drafted")
    again = eval(repr(case), {"PipelineCase": PipelineCase, "SamplingParams": SamplingParams})
    assert again == case and torch.equal(again.logits, case.logits)


# ---------------------------------------------------------------- pinned edge values
def test_pinned_params_repr_and_family_tags():
    assert params_repr(SamplingParams()) == "SamplingParams()"
    assert params_repr(SamplingParams(top_k=3, top_p=0.5)) == "SamplingParams(top_k=3, top_p=0.5)"
    tags = {
        SamplingParams(temperature=0.0, top_k=3): "greedy",
        SamplingParams(presence_penalty=0.5, top_k=2): "penalties",
        SamplingParams(top_k=2, min_p=0.1): "combined",
        SamplingParams(top_k=10): "top_k_ge_vocab",
        SamplingParams(top_k=9): "top_k",
        SamplingParams(top_p=1e-7): "top_p_tiny",
        SamplingParams(top_p=0.5): "top_p",
        SamplingParams(min_p=1.0): "min_p",
        SamplingParams(temperature=0.5): "temperature",
        SamplingParams(top_p=math.nextafter(1.0, 0.0)): "top_p_one",
    }
    for params, tag in tags.items():
        assert sampling_params_family(params, 10) == tag, params


def test_pinned_top_p_exact_case():
    case = PipelineCase(family="top_p_exact", vocab_size=8, batch_size=1, seed=0, dtype="float32",
                        logits_family="flat", params=(SamplingParams(top_p=0.5),), edge=4)
    x = case.logits[0]
    assert torch.isfinite(x).sum() == 4 and (x[torch.isfinite(x)] == 0).all()
    probs = torch.softmax(x, -1)
    assert sorted(probs[probs > 0].tolist()) == [0.25] * 4  # exact dyadic probabilities


def test_pinned_top_k_tie_case():
    case = PipelineCase(family="top_k_tie", vocab_size=10, batch_size=1, seed=0, dtype="float32",
                        logits_family="zipf", params=(SamplingParams(top_k=3),), edge=2)
    desc = torch.sort(case.logits[0], descending=True).values
    assert desc[1] == desc[2] == desc[3] == desc[4] and desc[0] > desc[1] > desc[5]


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: sampling_params(vocab_size=0), "vocab_size=0 must be >= 1"),
        (lambda: sampling_params(families=["nucleus"]), "unknown family 'nucleus'"),
        (lambda: histories(vocab_size=5, max_length=0), "max_length=0 must be >= 1"),
        (lambda: histories(vocab_size=5, batch_size=0), "batch_size=0 must be >= 1"),
        (lambda: histories(vocab_size=5, kinds=["long"]), "unknown family 'long'"),
        (lambda: histories(vocab_size=5, token_ids=[5]), "token_ids contains 5"),
        (lambda: histories(vocab_size=5, token_ids=[]), "at least one id"),
        (lambda: pipeline_cases(batch_size=0), "batch_size=0 must be >= 1"),
        (lambda: pipeline_cases(families=["top_q"]), "unknown family 'top_q'"),
        (lambda: pipeline_cases(logits_families=["subnormal"]), "unknown family 'subnormal'"),
        (lambda: PipelineCase(family="min_p", vocab_size=3, batch_size=2, seed=0, dtype="float32",
                              logits_family="zipf", params=(SamplingParams(),)),
         "params must be 2 SamplingParams"),
    ],
)
def test_bad_arguments_raise_eagerly(call, match):
    with pytest.raises(InvalidArgument, match=match):
        call()
