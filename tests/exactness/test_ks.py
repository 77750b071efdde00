"""KS checks (ks.py)."""

import math

import numpy as np
import pytest
from scipy import stats

from specexact.exactness.ks import (
    detectable_ks_distance,
    ks_two_sample,
    pvalue_uniformity,
    randomized_pit_ks,
)


def zipf_law(num_outcomes, exponent=1.1):
    weights = 1.0 / np.arange(1, num_outcomes + 1) ** exponent
    return weights / weights.sum()


@pytest.mark.statistical
def test_randomized_pit_calibration():
    """Measured false-fail frequency / nominal on exact draws lies in [0.5, 2]."""
    rng = np.random.default_rng(20250301)
    probs = zipf_law(50)
    draws = rng.choice(50, size=(4000, 400), p=probs)
    pvalues = np.array(
        [randomized_pit_ks(d, probs, false_fail_rate=0.01, seed=i).pvalue for i, d in enumerate(draws)]
    )
    for alpha in (0.01, 0.05):
        ratio = np.mean(pvalues <= alpha) / alpha
        assert 0.5 <= ratio <= 2, (alpha, ratio)


@pytest.mark.statistical
def test_plain_kstest_on_discrete_data_is_anti_conservative():
    """Why the randomised PIT: scipy's kstest against a step CDF rejects correct samplers."""
    rng = np.random.default_rng(20250302)
    probs = np.array([0.5, 0.3, 0.2])
    cdf = np.cumsum(probs)
    draws = rng.choice(3, size=(200, 100), p=probs)
    pvalues = np.array(
        [stats.kstest(d, lambda x: cdf[np.clip(np.floor(x).astype(int), 0, 2)]).pvalue for d in draws]
    )
    assert np.mean(pvalues <= 0.05) > 0.9  # nominal 0.05
    fixed = [randomized_pit_ks(d, probs, false_fail_rate=0.05, seed=i).pvalue for i, d in enumerate(draws)]
    assert np.mean(np.array(fixed) <= 0.05) < 0.15


def test_detects_planted_shift_between_head_and_tail():
    rng = np.random.default_rng(33)
    probs = zipf_law(300)
    shifted = probs.copy()
    shifted[0] -= 0.05
    shifted[150:] += 0.05 / 150
    samples = rng.choice(300, size=20_000, p=shifted)
    result = randomized_pit_ks(samples, probs, false_fail_rate=1e-6, seed=1)
    assert not result.passed
    assert result.details["detectable_ks"] < 0.05
    assert result.detectable_tv == math.inf  # (M - 1) * detectable KS >= 1
    assert result.worst[0][0].startswith("<= ")


def test_passes_on_exact_draws_and_is_reproducible():
    rng = np.random.default_rng(34)
    probs = np.append(zipf_law(20), [0.0])
    samples = rng.choice(21, size=50_000, p=probs)
    one = randomized_pit_ks(samples, probs, false_fail_rate=1e-6, seed=3)
    assert one.passed and one.method == "exact"
    assert one == randomized_pit_ks(samples, probs, false_fail_rate=1e-6, seed=3)
    assert one.detectable_tv == pytest.approx(20 * one.details["detectable_ks"])


def test_support_violation_fails_exactly():
    probs = np.array([0.5, 0.5, 0.0])
    result = randomized_pit_ks(np.array([0, 1, 1, 2]), probs, false_fail_rate=1e-6, seed=0)
    assert not result.passed and result.pvalue == 0.0 and result.worst == (("2", 1.0, 0.0),)


def test_detectable_ks_distance_has_the_promised_power():
    rng = np.random.default_rng(35)
    n, alpha, beta = 300, 0.01, 0.1
    distance = detectable_ks_distance(n, false_fail_rate=alpha, false_pass_rate=beta)
    # Alternative at KS distance `distance` from uniform: shift the uniform law.
    samples = np.clip(rng.random((2000, n)) + distance, 0, 1)
    rejected = stats.kstest(samples, "uniform", axis=1).pvalue <= alpha
    assert rejected.mean() >= 1 - beta


@pytest.mark.statistical
def test_ks_two_sample_calibrated_on_continuous_and_conservative_on_discrete():
    rng = np.random.default_rng(20250303)
    continuous = [
        ks_two_sample(rng.normal(size=150), rng.normal(size=200), false_fail_rate=0.05).pvalue
        for _ in range(2000)
    ]
    ratio = np.mean(np.array(continuous) <= 0.05) / 0.05
    assert 0.5 <= ratio <= 2, ratio
    discrete = [
        ks_two_sample(rng.poisson(2.0, size=150), rng.poisson(2.0, size=200), false_fail_rate=0.05).pvalue
        for _ in range(2000)
    ]
    assert np.mean(np.array(discrete) <= 0.05) / 0.05 < 1.0


def test_ks_two_sample_detects_shift():
    rng = np.random.default_rng(36)
    result = ks_two_sample(rng.normal(size=5000), rng.normal(0.2, size=5000), false_fail_rate=1e-6)
    assert not result.passed and result.detectable_tv == math.inf
    assert result.details["detectable_ks"] < 0.2


def test_pvalue_uniformity():
    rng = np.random.default_rng(37)
    assert pvalue_uniformity(rng.random(2000), false_fail_rate=1e-6).passed
    assert not pvalue_uniformity(rng.random(2000) ** 1.5, false_fail_rate=1e-6).passed
    # Discrete, super-uniform p-values: the two-sided test flags them, "greater" does not.
    discrete = np.array([stats.binomtest(k, 20, 0.5).pvalue for k in rng.binomial(20, 0.5, size=3000)])
    assert not pvalue_uniformity(discrete, false_fail_rate=1e-6).passed
    assert pvalue_uniformity(discrete, false_fail_rate=1e-6, alternative="greater").passed


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: randomized_pit_ks([0.0, 1.0], [0.5, 0.5], false_fail_rate=0.01, seed=0), TypeError, "samples must be an integer array"),
        (lambda: randomized_pit_ks([0, 2], [0.5, 0.5], false_fail_rate=0.01, seed=0), ValueError, r"samples must be outcome indices in \[0, 2\), got 2"),
        (lambda: randomized_pit_ks([0, 1], [0.5, 0.5], false_fail_rate=0.01, seed=None), TypeError, "seed must be a non-negative integer"),
        (lambda: randomized_pit_ks([], [0.5, 0.5], false_fail_rate=0.01, seed=0), TypeError, "samples"),
        (lambda: randomized_pit_ks([0, 1], [0.5, 0.6], false_fail_rate=0.01, seed=0), ValueError, "reference_probs must sum to 1"),
        (lambda: ks_two_sample([1.0, np.inf], [1.0], false_fail_rate=0.01), ValueError, "values_a must be finite"),
        (lambda: ks_two_sample([1.0], [], false_fail_rate=0.01), ValueError, "values_b must not be empty"),
        (lambda: pvalue_uniformity([0.5, 1.5], false_fail_rate=0.01), ValueError, r"pvalues must be in \[0, 1\], got 1.5"),
        (lambda: pvalue_uniformity([0.5], false_fail_rate=0.01, alternative="less"), ValueError, "alternative must be one of"),
        (lambda: detectable_ks_distance(0, false_fail_rate=0.01), ValueError, "n must be >= 1"),
    ],
)
def test_bad_inputs_name_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()
