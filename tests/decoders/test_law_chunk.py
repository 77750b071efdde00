"""One chunk of rows of one signature through the logits pipeline (law_chunk) against the reference."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specexact.decoders import SamplingParams, batch_params
from specexact.decoders.law_chunk import GREEDY, MIN_P, TOP_K, TOP_P, has_penalty, penalise_, process_chunk, signatures
from specexact.decoders.pipeline import _widen_if_overflow, process_logits_reference
from specexact.strategies import pipeline_cases

pytestmark = pytest.mark.usefixtures("poisoned_storage")


def _bits(t):
    return t.contiguous().view(-1).view(torch.uint8)


def _chunk_laws(logits, params, history):
    """Every row through penalise_ and process_chunk, rows grouped by signature."""
    V = logits.shape[1]
    sig = signatures(params, V)
    out = torch.full_like(logits, float("nan"))
    temperature = torch.where(params.temperature == 0, torch.ones_like(params.temperature),
                              params.temperature).to(torch.float32)
    pen = has_penalty(params)
    for s in torch.unique(sig).tolist():
        idx = (sig == s).nonzero().squeeze(1)
        X = logits.index_select(0, idx)
        if history is not None and history.numel() and bool(pen[idx].any()):
            penalise_(X, params.repetition_penalty[idx], params.frequency_penalty[idx],
                      params.presence_penalty[idx], history.index_select(0, idx))
        out[idx] = process_chunk(X, s, temperature[idx], params.min_p[idx].float(), params.top_k[idx],
                                 params.top_p[idx].double())
    return out


@settings(deadline=None)
@given(case=pipeline_cases(vocab_size=st.sampled_from([256, 300, 4097, 8193, 32001]), batch_size=st.integers(1, 4),
                           dtypes=["float32"]))
def test_chunks_give_the_reference_laws_on_pipeline_cases(case):
    logits, params, history = case.logits, case.batched_params, case.history_tensor
    if not bool(torch.isfinite(logits).all()) or _widen_if_overflow(logits, params)[1] is not None:
        return  # the fused and grouped paths leave these to the reference
    try:
        ref = process_logits_reference(logits, params, history)
    except ValueError:
        return
    assert torch.equal(_bits(_chunk_laws(logits.clone(), params, history)), _bits(ref))


def test_signatures_name_each_rows_operations():
    rows = [SamplingParams(), SamplingParams(temperature=0, top_k=5), SamplingParams(min_p=0.1),
            SamplingParams(top_k=3), SamplingParams(top_k=100), SamplingParams(top_p=0.5),
            SamplingParams(temperature=0.7, top_k=3, top_p=0.9, min_p=0.2)]
    got = signatures(batch_params(rows, len(rows)), 100).tolist()
    assert got == [0, GREEDY, MIN_P, TOP_K, 0, TOP_P, MIN_P | TOP_K | TOP_P]


def test_has_penalty_marks_rows_with_any_penalty():
    rows = [SamplingParams(), SamplingParams(repetition_penalty=1.1), SamplingParams(presence_penalty=-0.2),
            SamplingParams(frequency_penalty=0.3)]
    assert has_penalty(batch_params(rows, 4)).tolist() == [False, True, True, True]


@pytest.mark.parametrize("bad", [10, -2])
def test_penalise_rejects_history_ids_outside_the_vocabulary(bad):
    with pytest.raises(ValueError, match="history ids"):
        penalise_(torch.zeros(2, 10), torch.ones(2, dtype=torch.float64), torch.zeros(2, dtype=torch.float64),
                  torch.ones(2, dtype=torch.float64), torch.tensor([[1, bad], [0, -1]]))


def test_penalise_counts_repeats_and_skips_padding():
    logits = torch.tensor([[2.0, -2.0, 1.0, 0.5]])
    hist = torch.tensor([[0, 1, 1, -1, 0, 0]])
    out = penalise_(logits.clone(), torch.tensor([2.0], dtype=torch.float64),
                    torch.tensor([0.25], dtype=torch.float64), torch.tensor([0.5], dtype=torch.float64), hist)
    # token 0: 2 / 2 - 0.25 * 3 - 0.5; token 1: -2 * 2 - 0.25 * 2 - 0.5; tokens 2, 3 unseen
    assert out.tolist() == [[2.0 / 2 - 0.75 - 0.5, -4.0 - 0.5 - 0.5, 1.0, 0.5]]
