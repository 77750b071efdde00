"""Inverse-CDF sampling: support, law (both the one-level and the blocked path), edges."""

import numpy as np
import pytest
import torch

import specexact.decoders.sampling as sampling
from specexact.decoders import sample_from_probs
from specexact.exactness import chisquare_gof


@pytest.mark.parametrize("V", [3, 4096, 4097, 10000, 33000])
def test_never_returns_a_zero_probability_id(V):
    g = torch.Generator().manual_seed(V)
    probs = torch.rand(64, V, generator=g)
    probs[torch.rand(64, V, generator=g) < 0.9] = 0
    probs[:, V - 1] = 0  # the last id is impossible
    probs[:, 0] += 1e-3  # every row has mass
    for _ in range(20):
        ids = sample_from_probs(probs, g)
        assert bool((probs[torch.arange(64), ids] > 0).all())


@pytest.mark.parametrize("V", [10, 10000])
def test_uniform_at_the_top_maps_to_the_last_positive_id(V, monkeypatch):
    monkeypatch.setattr(sampling, "uniform", lambda shape, g, d: torch.full(shape, 1 - 2**-53, dtype=torch.float64))
    probs = torch.zeros(2, V)
    probs[:, [1, V - 3]] = 0.5
    assert sample_from_probs(probs).tolist() == [V - 3, V - 3]


@pytest.mark.statistical(checks=2)
@pytest.mark.parametrize("V", [600, 10000])
def test_law_matches_probs(V, alpha):
    """Goodness of fit of 100k draws to a Zipf law with mass at block edges (exact law known)."""
    g = torch.Generator().manual_seed(1)
    probs = 1.0 / torch.arange(1, V + 1, dtype=torch.float64) ** 1.1
    probs = probs[torch.randperm(V, generator=g)]
    if V > 2048:  # heavy ids on both sides of block edges
        probs[[1023, 1024, 2047, 2048]] = probs.max()
    probs /= probs.sum()
    rows = probs.to(torch.float32).expand(2000, -1).contiguous()
    counts = np.zeros(V, dtype=np.int64)
    for _ in range(50):
        counts += np.bincount(sample_from_probs(rows, g).numpy(), minlength=V)
    law = rows[0].double().numpy()
    result = chisquare_gof(counts, law / law.sum(), false_fail_rate=alpha)
    assert result.passed, result


def test_rows_without_mass_raise():
    with pytest.raises(ValueError, match="row 1 has no positive"):
        sample_from_probs(torch.tensor([[1.0, 0.0], [0.0, 0.0]]))


# ------------------------------------------------- the fast path against the reference
# sample_from_probs (chunked, CPU) must return what sample_from_probs_reference returns from
# the same generator state, and leave the generator in the same state.

from unittest import mock  # noqa: E402

from hypothesis import given, note  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from specexact.decoders.sampling import (  # noqa: E402
    BLOCK,
    BlockMasses,
    _inverse_cdf,
    _inverse_cdf_fast,
    sample_from_probs_reference,
)
from specexact.strategies import probability_tensors, vocab_sizes  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def fast_path_at_every_size():
    """Below ``SMALL_ELEMENTS`` entries sample_from_probs runs the reference: force its
    fast code at every size in this module."""
    with mock.patch.object(sampling, "SMALL_ELEMENTS", 0):
        yield


def assert_same_draws(probs, seed=0):
    g_ref, g_fast = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
    ref = sample_from_probs_reference(probs, g_ref)
    fast = sample_from_probs(probs, g_fast)
    assert fast.dtype == ref.dtype and torch.equal(fast, ref)
    assert torch.equal(g_fast.get_state(), g_ref.get_state())


@given(case=probability_tensors(vocab_size=vocab_sizes(max_size=9000), batch_size=st.integers(1, 9)),
       seed=st.integers(0, 2**32 - 1), tiny=st.booleans())
def test_fast_equals_reference_on_every_family(case, seed, tiny):
    note(case.repro())
    chunk = 2 * case.vocab_size + 1 if tiny else sampling.CHUNK_ELEMENTS
    with mock.patch.object(sampling, "CHUNK_ELEMENTS", chunk):
        assert_same_draws(case.probs, seed)


def _rows(B, V, kind, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(B, V, generator=g, dtype=torch.float64) ** 6
    if kind == "zeros":
        p[torch.rand(B, V, generator=g) < 0.9] = 0
        p[:, -V // 3:] = 0  # trailing zeros (and whole empty blocks)
        p[:, 0] += 1e-3
    elif kind == "ties":
        p = (p * 3).ceil()
    elif kind == "one_hot":
        p = torch.zeros(B, V, dtype=torch.float64).scatter_(1, torch.randint(0, V, (B, 1), generator=g), 1.0)
    p = p.to(dtype)
    p[p.double().sum(-1) == 0, 0] = 1  # rows that underflowed in half precision
    return p


@pytest.mark.parametrize("V", [1, 3, 600, 4 * BLOCK, 4 * BLOCK + 1, 5000, 10240, 33000])
@pytest.mark.parametrize("kind", ["dense", "zeros", "ties", "one_hot"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("tiny", [False, True])
def test_fast_equals_reference_on_a_grid(V, kind, dtype, tiny):
    B = 300 if V <= 4 * BLOCK else 40
    probs = _rows(B, V, kind, dtype, seed=V)
    chunk = 3 * V + 7 if tiny else sampling.CHUNK_ELEMENTS
    with mock.patch.object(sampling, "CHUNK_ELEMENTS", chunk):
        for seed in range(3):
            assert_same_draws(probs, seed)


@pytest.mark.parametrize("u", [0.0, 0.5, 1 - 2**-53])
@pytest.mark.parametrize("V", [700, 5000])
def test_fast_equals_reference_at_extreme_uniforms(u, V, monkeypatch):
    monkeypatch.setattr(sampling, "uniform", lambda shape, g, d: torch.full(shape, u, dtype=torch.float64))
    for kind in ("dense", "zeros", "ties"):
        probs = _rows(50, V, kind, torch.float32)
        assert torch.equal(sample_from_probs(probs), sample_from_probs_reference(probs))


@pytest.mark.parametrize("V", [700, 5000])
def test_fast_searches_the_reference_rows_and_targets(V, monkeypatch):
    """White box: the rows or blocks searched and the float64 targets are the reference's."""
    seen = {"reference": [], "fast": []}
    for name, key in (("_inverse_cdf", "reference"), ("_inverse_cdf_fast", "fast")):
        def spy(probs, target, _real=getattr(sampling, name), _key=key):
            seen[_key].append((probs.clone(), target.clone()))
            return _real(probs, target)
        monkeypatch.setattr(sampling, name, spy)
    monkeypatch.setattr(sampling, "CHUNK_ELEMENTS", 5 * V)
    probs = _rows(600, V, "zeros", torch.float32)
    assert_same_draws(probs)
    for i in (0, 1):
        assert torch.equal(torch.cat([c[i] for c in seen["fast"]]), torch.cat([c[i] for c in seen["reference"]]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("V", [4 * BLOCK + 1, 5000, 9216, 32000])
def test_block_masses_are_the_reference_sums(dtype, V):
    """Bit for bit: float64 sums over 1024 entries depend on the summation order, so a
    different order (or a float32 accumulation) would show here (values over many
    magnitudes: about half the sums differ when summed in reverse)."""
    g = torch.Generator().manual_seed(V)
    x = (torch.rand(23, V, generator=g, dtype=torch.float64) ** 8
         * torch.exp(torch.randn(23, V, generator=g, dtype=torch.float64) * 10)).to(dtype)
    ref = torch.nn.functional.pad(x, (0, (-V) % BLOCK)).view(23, -1, BLOCK).sum(-1, dtype=torch.float64)
    masses = BlockMasses(V, 5)
    fast = torch.cat([masses(x[s:s + 5]) for s in range(0, 23, 5)])
    assert torch.equal(fast, ref)


def test_inverse_cdf_fast_equals_inverse_cdf_on_boundaries():
    g = torch.Generator().manual_seed(0)
    probs = torch.rand(64, 300, generator=g, dtype=torch.float64)
    probs[probs < 0.5] = 0
    probs[:, -50:] = 0
    cdf = probs.cumsum(-1)
    targets = [torch.zeros(64, 1), cdf[:, 10:11], cdf[:, -1:], torch.nextafter(cdf[:, -1:], cdf[:, -1:] + 1),
               cdf[:, -1:] * 2, cdf[:, 120:121] * (1 - 2**-53)]
    for t in targets:
        t = t.to(torch.float64).contiguous()
        assert torch.equal(_inverse_cdf_fast(probs, t), _inverse_cdf(probs, t))
        assert torch.equal(_inverse_cdf_fast(probs.float(), t), _inverse_cdf(probs.float(), t))


@pytest.mark.parametrize("layout", ["transposed", "strided_rows", "expanded"])
def test_fast_equals_reference_on_other_layouts(layout):
    probs = _rows(16, 5000, "zeros", torch.float32)
    if layout == "transposed":
        probs = probs.t().contiguous().t()
    elif layout == "strided_rows":
        probs = torch.cat([probs, probs], 1)[:, :5000]
    else:
        probs = probs[:1].expand(16, -1)
    assert_same_draws(probs)


@pytest.mark.parametrize("bad", ["zero_row", "nan", "inf", "negative_total"])
@pytest.mark.parametrize("V", [10, 5000])
def test_fast_raises_what_the_reference_raises(bad, V):
    probs = _rows(6, V, "dense", torch.float32)
    if bad == "zero_row":
        probs[4] = 0
    elif bad == "nan":
        probs[3, 2] = float("nan")
    elif bad == "inf":
        probs[2, 1] = float("inf")
    else:
        probs[1] = -probs[1]
    g_ref, g_fast = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    with pytest.raises(ValueError) as ref:
        sample_from_probs_reference(probs, g_ref)
    with pytest.raises(ValueError) as fast:
        sample_from_probs(probs, g_fast)
    assert str(fast.value) == str(ref.value)
    assert torch.equal(g_fast.get_state(), g_ref.get_state())
