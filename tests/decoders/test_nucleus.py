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
