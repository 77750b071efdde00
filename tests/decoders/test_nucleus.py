"""The top-p set from a histogram and one sorted bin (nucleus_of_chunk) against the full sort."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specexact.decoders import nucleus
from specexact.decoders.nucleus import certify_margin, nucleus_of_chunk, nucleus_reference, sparse_nonzero

pytestmark = pytest.mark.usefixtures("poisoned_storage")

TOP_P = st.one_of(st.sampled_from([1e-12, 0.1, 0.5, 0.9, 0.95, 0.999, 1 - 1e-9, 1 - 2**-53]),
                  st.floats(1e-6, 1 - 1e-6))


def _kept(V, R, seed, scale, cut, ties):
    """Float32 kept probabilities: a softmax, some entries cut to zero, values tied."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(R, V, generator=g) * scale
    if ties:  # few distinct values: ties inside and across histogram bins
        x = (x * 2).round() / 2
    p = torch.softmax(x, -1)
    if cut:
        p = torch.where(torch.rand(R, V, generator=g) < cut, torch.zeros(()), p)
        p[:, 0] += 1e-3  # every row keeps some mass
    return p.contiguous()


def _assert_reference_set(kept, top_p):
    got = nucleus_of_chunk(kept, top_p)
    assert got.dtype == torch.float32 and got.shape == kept.shape
    assert bool(((got == 0) | (got == 1)).all())
    normalised = kept.double() / kept.sum(-1, keepdim=True, dtype=torch.float64)
    ref = nucleus_reference(normalised, top_p)
    positive = kept > 0
    assert torch.equal(got.bool()[positive], ref[positive])


@settings(deadline=None)
@given(V=st.sampled_from([256, 300, 4097, 8193, 32001]), R=st.integers(1, 6), seed=st.integers(0, 2**31 - 1),
       scale=st.sampled_from([0.1, 1.0, 3.0, 8.0]), cut=st.sampled_from([0.0, 0.5, 0.99]), ties=st.booleans(),
       data=st.data())
def test_the_set_is_the_reference_set_on_every_token_of_positive_probability(V, R, seed, scale, cut, ties, data):
    kept = _kept(V, R, seed, scale, cut, ties)
    top_p = torch.tensor([data.draw(TOP_P) for _ in range(R)], dtype=torch.float64)
    _assert_reference_set(kept, top_p)


@pytest.mark.parametrize("m", [1, 3, 8, 13])
def test_mass_reaching_top_p_exactly_keeps_the_tokens_before_it(m):
    """16 equal tokens of mass 1/16 each (exact in float): top_p = m/16 keeps the m lowest ids."""
    V = 512
    kept = torch.zeros(2, V)
    kept[:, 100:116] = 1 / 16
    top_p = torch.full((2,), m / 16, dtype=torch.float64)
    got = nucleus_of_chunk(kept, top_p)
    assert torch.equal(got[:, 100:116].bool(), (torch.arange(16) < m).expand(2, -1))
    _assert_reference_set(kept, top_p)


@pytest.mark.parametrize("margin", [0.0, 1e-3, 1.0])
def test_uncertified_rows_take_the_full_sort(margin, monkeypatch):
    monkeypatch.setattr(nucleus, "certify_margin", lambda V: margin)
    kept = _kept(4097, 5, 3, 2.0, 0.3, False)
    _assert_reference_set(kept, torch.tensor([0.5, 0.9, 0.99, 0.1, 0.999], dtype=torch.float64))


def test_certify_margin_grows_with_the_vocabulary_and_stays_tiny():
    assert 0 < certify_margin(256) < certify_margin(32000) < 1e-9


@given(R=st.integers(1, 5), W8=st.integers(1, 40), density=st.sampled_from([0.0, 0.01, 0.3, 1.0]),
       seed=st.integers(0, 2**31 - 1))
def test_sparse_nonzero_is_nonzero_row_major(R, W8, density, seed):
    W = 8 * W8
    width = W - seed % 8
    flags = (torch.rand(R, W, generator=torch.Generator().manual_seed(seed)) < density).to(torch.uint8)
    flags[:, width:] = 0
    r, c = sparse_nonzero(flags, width)
    rr, cc = flags[:, :width].bool().nonzero(as_tuple=True)
    assert torch.equal(r, rr) and torch.equal(c, cc)


def _top_k_case(V, R, seed, scale, ties, k, min_p_cut):
    """Logits, the chunk's kept probabilities after a top-k mask (ties at the k-th value all
    kept), and what process_chunk hands cut_to_nucleus_of_top_k_."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(R, V, generator=g) * scale
    if ties:
        x = (x * 2).round() / 2
    top_k = torch.tensor([k] * R, dtype=torch.int64)
    top = torch.topk(x, k + 1, dim=-1)
    kth = top.values[:, k - 1:k]
    p = torch.softmax(x, -1) * (x >= kth)
    if min_p_cut:
        p = p * (p >= min_p_cut * p.amax(-1, keepdim=True))
    tie_free = top.values[:, k] < kth[:, 0]
    return p.contiguous(), top.indices, top_k, tie_free


@settings(deadline=None)
@given(V=st.sampled_from([256, 300, 8193, 32001]), R=st.integers(1, 6), seed=st.integers(0, 2**31 - 1),
       scale=st.sampled_from([0.1, 1.0, 3.0, 8.0]), ties=st.booleans(), k=st.sampled_from([1, 2, 5, 20, 40, 255]),
       min_p_cut=st.sampled_from([0.0, 0.05, 0.5]), data=st.data())
def test_top_k_rows_cut_to_the_reference_set(V, R, seed, scale, ties, k, min_p_cut, data):
    kept, top_ids, top_k, tie_free = _top_k_case(V, R, seed, scale, ties, k, min_p_cut)
    top_p = torch.tensor([data.draw(TOP_P) for _ in range(R)], dtype=torch.float64)
    normalised = kept.double() / kept.sum(-1, keepdim=True, dtype=torch.float64)
    expected = kept * nucleus_reference(normalised, top_p)
    got = nucleus.cut_to_nucleus_of_top_k_(kept.clone(), top_p, top_ids, top_k, tie_free)
    positive = kept > 0
    assert torch.equal(got[positive].view(torch.int32), expected[positive].view(torch.int32))
    assert bool((got[~positive] == 0).all())


def test_top_k_rows_with_ties_past_the_k_th_take_the_histogram(monkeypatch):
    """Four tokens tie at the k-th logit (k = 2): the mask keeps all four, the top-k ids hold
    two, so the row is not tie-free and takes nucleus_of_chunk."""
    V = 512
    x = torch.full((1, V), -10.0)
    x[0, [7, 9, 11, 13]] = 1.0
    x[0, 3] = 2.0
    kept = torch.softmax(x, -1) * (x >= 1.0)
    calls = []
    inner = nucleus.nucleus_of_chunk
    monkeypatch.setattr(nucleus, "nucleus_of_chunk", lambda *a: calls.append(1) or inner(*a))
    top = torch.topk(x, 3, dim=-1)
    tie_free = top.values[:, 2] < top.values[:, 1]
    assert not bool(tie_free.all())
    top_p = torch.tensor([0.7], dtype=torch.float64)
    got = nucleus.cut_to_nucleus_of_top_k_(kept.clone(), top_p, top.indices, torch.tensor([2]), tie_free)
    normalised = kept.double() / kept.sum(-1, keepdim=True, dtype=torch.float64)
    assert calls and torch.equal(got, kept * nucleus_reference(normalised, top_p))


def test_top_k_rows_break_ties_by_lower_id_whatever_order_topk_gives():
    """16 tokens of mass 1/16 each (k = 16), listed highest id first: top_p = 0.3 keeps the
    5 lowest ids (mass before them 0 .. 4/16), as the reference's stable sort does."""
    V = 512
    ids = torch.tensor([400, 390, 300, 250, 200, 170, 150, 120, 100, 90, 60, 40, 30, 20, 10, 5])
    kept = torch.zeros(2, V)
    kept[:, ids] = 1 / 16
    top_ids = torch.cat([ids, torch.tensor([0])]).expand(2, -1)  # the (k+1)-th: a zero-mass token
    got = nucleus.cut_to_nucleus_of_top_k_(kept.clone(), torch.tensor([0.3, 0.3], dtype=torch.float64), top_ids,
                                           torch.tensor([16, 16]), torch.tensor([True, True]))
    assert sorted((got[0] > 0).nonzero().squeeze(1).tolist()) == [5, 10, 20, 30, 40]
    assert torch.equal(got[0], got[1])
