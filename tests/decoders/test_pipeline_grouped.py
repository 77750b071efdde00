"""process_logits' grouped path (rows grouped by operation, cache-sized chunks) against the
readable reference, bit for bit: Hypothesis pipeline cases, mixed rows, tile-edge and real
vocabularies, chunk boundaries, rows that fall back to the full sort."""

from __future__ import annotations

from contextlib import contextmanager
from unittest import mock

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specexact.decoders import SamplingParams, batch_params, process_logits
from specexact.decoders import nucleus, pipeline
from specexact.decoders.pipeline import _process_grouped, process_logits_reference
from specexact.strategies import pipeline_cases


def assert_bits(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(a.contiguous().view(-1).view(torch.uint8), b.contiguous().view(-1).view(torch.uint8))


@contextmanager
def chunks_of(rows: int, V: int):
    """Every input of 256+ entries per row takes the grouped path, ``rows`` rows per chunk."""
    with mock.patch.object(pipeline, "SMALL_ELEMENTS", 0), \
            mock.patch.object(pipeline, "GROUP_CHUNK_ELEMENTS", rows * V):
        yield


def _applies(logits: torch.Tensor) -> bool:
    return (logits.dtype == torch.float32 and 256 <= logits.shape[1] <= 32768
            and bool(torch.isfinite(logits).all()))


@given(case=pipeline_cases(vocab_size=st.integers(256, 9000), batch_size=st.integers(1, 6)),
       chunk=st.integers(1, 4))
def test_grouped_equals_reference_on_pipeline_cases(case, chunk):
    logits = case.logits.float() if case.logits.dtype != torch.float64 else case.logits
    with chunks_of(chunk, case.vocab_size):
        out = _process_grouped(logits, case.batched_params, case.history_tensor)
    if not _applies(logits) or logits.dtype != torch.float32:
        return
    ref = process_logits_reference(logits, case.batched_params, case.history_tensor)
    if out is None:  # only the overflow guard may send a finite float32 input elsewhere
        assert pipeline._widen_if_overflow(logits, case.batched_params)[1] is not None
        return
    assert_bits(out, ref)


@settings(max_examples=max(1, settings.default.max_examples // 2))
@given(case=pipeline_cases(vocab_size=st.sampled_from([4095, 4096, 4097, 8193, 32000, 32001, 32768]),
                           batch_size=st.integers(2, 3)))
def test_process_logits_grouped_equals_reference_at_tile_edges_and_real_sizes(case):
    out = process_logits(case.logits, case.batched_params, case.history_tensor)
    ref = process_logits_reference(case.logits, case.batched_params, case.history_tensor)
    assert_bits(out, ref)


ROWS = [
    SamplingParams(),
    SamplingParams(temperature=0),
    SamplingParams(temperature=0.7, top_k=5),
    SamplingParams(top_p=0.9),
    SamplingParams(temperature=0.9, top_p=0.95),
    SamplingParams(temperature=1.3, min_p=0.05, top_k=40, top_p=0.8),
    SamplingParams(min_p=0.01, presence_penalty=0.5),
    SamplingParams(repetition_penalty=1.4, frequency_penalty=-0.3, presence_penalty=0.6, top_p=0.5),
    SamplingParams(temperature=0.5, repetition_penalty=0.7, top_k=3),
    SamplingParams(top_p=1e-9),
    SamplingParams(top_p=float(torch.nextafter(torch.tensor(1.0, dtype=torch.float64),
                                               torch.tensor(0.0, dtype=torch.float64)))),
]


@pytest.mark.parametrize("V", [256, 3000, 8193, 32000])
@pytest.mark.parametrize("chunk", [1, 3, 64])
@pytest.mark.parametrize("scale", [0.5, 3.0, 12.0])
def test_grouped_equals_reference_on_mixed_rows(V, chunk, scale):
    """Rows of every kind interleaved (as an audit batch's classes), with histories."""
    g = torch.Generator().manual_seed(V + chunk)
    B = 3 * len(ROWS)
    logits = torch.randn(B, V, generator=g) * scale
    logits[:, :50] += 4  # a head, so that top-p and min-p cut inside it
    params = batch_params([ROWS[b % len(ROWS)] for b in range(B)], B)
    history = torch.randint(-1, 60, (B, 5), generator=g)
    for hist in (None, history):
        with chunks_of(chunk, V):
            out = _process_grouped(logits, params, hist)
        assert out is not None
        assert_bits(out, process_logits_reference(logits, params, hist))


def test_grouped_takes_the_full_sort_where_the_nucleus_is_most_of_the_vocabulary():
    """Flat logits: the top-p candidates exceed V/2, the row falls back to the reference sort."""
    logits = torch.zeros(4, 4096)
    logits[1] = torch.linspace(0, 1e-3, 4096)
    logits[2, ::3] = 0.5  # ties across a third of the row
    params = batch_params(SamplingParams(top_p=0.9), 4)
    with chunks_of(2, 4096):
        out = _process_grouped(logits, params, None)
    assert_bits(out, process_logits_reference(logits, params))


def test_grouped_leaves_what_it_does_not_handle_to_the_batched_path():
    params = batch_params(SamplingParams(top_p=0.9), 2)
    neg = torch.zeros(2, 1000)
    neg[0, 3] = -torch.inf
    assert _process_grouped(neg, params, None) is None  # -inf: the batched path's masks
    assert _process_grouped(torch.zeros(2, 1000, dtype=torch.float64), params, None) is None
    assert _process_grouped(torch.zeros(2, 40000), params, None) is None  # rows longer than 32768
    nan = torch.zeros(2, 1000)
    nan[1, 7] = torch.nan
    with pytest.raises(ValueError, match="NaN"):
        process_logits(nan, params)


def test_switching_the_grouped_path_off_gives_the_same_laws(monkeypatch):
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(12, 32000, generator=g) * 2
    params = batch_params([ROWS[b % len(ROWS)] for b in range(12)], 12)
    on = process_logits(logits, params)
    monkeypatch.setattr(pipeline, "GROUPED", False)
    assert_bits(on, process_logits(logits, params))


@pytest.mark.parametrize("edge,m", [(8, 1), (8, 3), (8, 7), (16, 5), (16, 11)])
def test_grouped_top_p_boundary_is_exclusive_on_exact_masses(edge, m):
    """``edge`` equal logits, the rest far below (their float32 probability is exactly 0):
    each kept token has mass 1/edge exactly, and with top_p = m/edge the mass before the
    (m+1)-th token equals top_p: it is cut (the reference's strict ``<``)."""
    V, B = 4096, 4
    logits = torch.full((B, V), -200.0)
    g = torch.Generator().manual_seed(edge * 100 + m)
    for b in range(B):
        logits[b, torch.randperm(V, generator=g)[:edge]] = 0.0
    params = batch_params(SamplingParams(top_p=m / edge), B)
    with chunks_of(2, V):
        out = _process_grouped(logits, params, None)
    assert out is not None
    ref = process_logits_reference(logits, params)
    assert_bits(out, ref)
    assert ((out > 0).sum(-1) == m).all()


@pytest.mark.parametrize("margin", [1e-3, 0.05, 1.0])
@pytest.mark.parametrize("top_p", [0.5, 0.9, 0.99])
def test_rows_not_certified_fall_back_to_the_full_sort(top_p, margin):
    """A certification margin widened (forced here) leaves some or all rows uncertified:
    they must take the reference sort, beside the certified rows of their chunk."""
    g = torch.Generator().manual_seed(int(top_p * 100))
    logits = torch.randn(6, 5000, generator=g) * 2
    params = batch_params(SamplingParams(top_p=top_p), 6)
    with chunks_of(3, 5000), mock.patch.object(nucleus, "certify_margin", lambda V: margin):
        out = _process_grouped(logits, params, None)
    assert_bits(out, process_logits_reference(logits, params))
