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
