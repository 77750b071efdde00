"""Two-sample homogeneity (two_sample.py)."""

import math

import numpy as np
import pytest

from specexact.exactness.power import min_detectable_tv_chisquare
from specexact.exactness.two_sample import chisquare_homogeneity


def zipf_law(num_outcomes, exponent=1.1):
    weights = 1.0 / np.arange(1, num_outcomes + 1) ** exponent
    return weights / weights.sum()


def test_passes_on_same_law_and_reports_two_sample_power():
    rng = np.random.default_rng(31)
    probs = np.append(zipf_law(500), np.zeros(10))
    a = rng.multinomial(200_000, probs)
    b = rng.multinomial(150_000, probs)
    result = chisquare_homogeneity(a, b, false_fail_rate=1e-6)
    assert result.passed and result.method == "asymptotic"
    assert result.n == 350_000
    assert result.details["dropped_zero_columns"] >= 10
    num_bins = result.details["num_bins"]
    assert result.dof == num_bins - 1
    assert result.detectable_tv == min_detectable_tv_chisquare(
        150_000, num_bins=num_bins, false_fail_rate=1e-6, two_sample=True
    )


def test_fails_on_planted_shift():
    rng = np.random.default_rng(32)
    probs = zipf_law(300)
    shifted = probs.copy()
    shifted[0] -= 0.05
    shifted[150:] += 0.05 / 150
    result = chisquare_homogeneity(
        rng.multinomial(100_000, probs), rng.multinomial(100_000, shifted), false_fail_rate=1e-6
    )
    assert not result.passed and result.detectable_tv < 0.05
    assert result.worst[0][0] == "0"


def test_single_bin_has_no_power():
    result = chisquare_homogeneity(np.array([3, 1]), np.array([2, 2]), false_fail_rate=0.01)
    assert result.passed and result.pvalue == 1.0 and result.detectable_tv == math.inf
    assert "no power" in result.description


@pytest.mark.statistical
def test_calibration():
    """Measured false-fail frequency / nominal on exact Zipf draws lies in [0.5, 2]."""
    rng = np.random.default_rng(20250201)
    probs = zipf_law(300)
    draws_a = rng.multinomial(3_000, probs, size=4000)
    draws_b = rng.multinomial(5_000, probs, size=4000)
    pvalues = np.array(
        [chisquare_homogeneity(a, b, false_fail_rate=0.01).pvalue for a, b in zip(draws_a, draws_b)]
    )
    for alpha in (0.01, 0.05):
        ratio = np.mean(pvalues <= alpha) / alpha
        assert 0.5 <= ratio <= 2, (alpha, ratio)


@pytest.mark.parametrize(
    "a, b, kwargs, error, match",
    [
        ([1.0, 2.0], [1, 2], {}, TypeError, "counts_a must be an integer array"),
        ([1, 2], [1, 2, 3], {}, ValueError, "same shape"),
        ([0, 0], [1, 2], {}, ValueError, "counts_a must hold at least one observation"),
        ([1, 2], [0, -1], {}, ValueError, "counts_b must be >= 0"),
        ([1, 2], [1, 2], {"false_fail_rate": 2.0}, ValueError, r"false_fail_rate must be in \(0, 1\), got 2.0"),
        ([1, 2], [1, 2], {"labels": ["x"]}, ValueError, "labels must have 2 entries"),
    ],
)
def test_bad_inputs_name_the_argument(a, b, kwargs, error, match):
    kwargs = {"false_fail_rate": 0.01, **kwargs}
    with pytest.raises(error, match=match):
        chisquare_homogeneity(a, b, **kwargs)
