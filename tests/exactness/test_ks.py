"""KS checks (ks.py)."""

import math
import warnings

import numpy as np
import pytest
from scipy import stats

from specexact.exactness.calibration import calibration_ratio_check, min_replicates_for_ratio
from specexact.exactness.ks import (
    detectable_ks_distance,
    ks_two_sample,
    pvalue_uniformity,
    randomized_pit_ks,
)


def zipf_law(num_outcomes, exponent=1.1):
    weights = 1.0 / np.arange(1, num_outcomes + 1) ** exponent
    return weights / weights.sum()


def pit_ks_statistics(samples, probs, uniforms):
    """Vectorised randomised-PIT KS statistics of the rows of ``samples`` [R, n], with the
    randomisation ``uniforms`` [R, n] (what randomized_pit_ks draws from its seed)."""
    order = np.argsort(-probs, kind="stable")
    rank = np.empty(probs.size, dtype=np.int64)
    rank[order] = np.arange(probs.size)
    cdf = np.cumsum(probs[order])
    below = np.concatenate([[0.0], cdf[:-1]])
    ranks = rank[samples]
    transformed = np.clip(below[ranks] + uniforms * probs[order][ranks], 0.0, 1.0)
    transformed.sort(axis=1)
    n = transformed.shape[1]
    i = np.arange(1, n + 1)
    return np.maximum((i / n - transformed).max(axis=1), (transformed - (i - 1) / n).max(axis=1))


def rejections_at(statistics, n, level):
    """How many KS statistics have exact p-value kstwo.sf(D, n) <= level. Decided on the
    critical value; statistics within round-off of it get their p-value computed."""
    critical = stats.kstwo.isf(level, n)
    near = np.abs(statistics - critical) <= 1e-9 * critical
    clear = np.count_nonzero(~near & (statistics > critical))
    return int(clear + np.count_nonzero(stats.kstwo.sf(statistics[near], n) <= level))


PIT_LEVELS = (0.1, 0.05, 0.01)


@pytest.mark.statistical(checks=len(PIT_LEVELS))
def test_randomized_pit_calibration(alpha):
    """Measured false-fail frequency / nominal on exact draws lies in [0.5, 2], one check per
    level with R from min_replicates_for_ratio at the per-check rate. The randomised PIT is
    exactly uniform and the KS p-value exact, so no rate tolerance is needed."""
    rng = np.random.default_rng(20250301)
    probs, n = zipf_law(50), 400
    replicates = max(min_replicates_for_ratio(level, false_fail_rate=alpha) for level in PIT_LEVELS)
    draws = rng.choice(50, size=(replicates, n), p=probs)
    # Row i is randomised as randomized_pit_ks(..., seed=i) does.
    verified = 20
    uniforms = np.vstack([np.random.default_rng(i).random(n) for i in range(verified)]
                         + [rng.random((replicates - verified, n))])
    statistics = pit_ks_statistics(draws, probs, uniforms)
    for i in range(verified):
        result = randomized_pit_ks(draws[i], probs, false_fail_rate=0.01, seed=i)
        assert result.statistic == pytest.approx(statistics[i], rel=1e-12)
        assert result.pvalue == pytest.approx(stats.kstwo.sf(statistics[i], n), rel=1e-9)
    for level in PIT_LEVELS:
        rejections = rejections_at(statistics, n, level)
        check = calibration_ratio_check(rejections, replicates, level, false_fail_rate=alpha,
                                        name=f"randomized_pit_ks[{level}]")
        print(f"CALIBRATION randomized_pit_ks level={level:g} R={replicates} "
              f"rejections={rejections} ratio={check.statistic:.4f}")
        assert check.passed, check


def test_plain_kstest_on_discrete_data_is_anti_conservative():
    """Why the randomised PIT: scipy's kstest against a step CDF rejects correct samplers.

    Deterministic: the smallest sample x_(1) has F(x_(1)) >= 0.5, so the statistic is at
    least F(x_(1)) - 0 >= 0.5 on every sample of size 100, far beyond any critical value."""
    rng = np.random.default_rng(20250302)
    probs = np.array([0.5, 0.3, 0.2])
    cdf = np.cumsum(probs)
    draws = rng.choice(3, size=(50, 100), p=probs)
    results = [stats.kstest(d, lambda x: cdf[np.clip(np.floor(x).astype(int), 0, 2)]) for d in draws]
    assert all(r.statistic >= 0.5 for r in results)
    assert all(r.pvalue <= stats.kstwo.sf(0.5, 100) <= 1e-20 for r in results)


# A planted bug: only a false pass is at risk; the power must be overwhelming.
@pytest.mark.statistical(checks=0)
def test_detects_planted_shift_between_head_and_tail(alpha):
    rng = np.random.default_rng(33)
    probs = zipf_law(300)
    shifted = probs.copy()
    shifted[0] -= 0.05
    shifted[150:] += 0.05 / 150
    # The CDF gap (descending-probability order) is 0.05 from outcome 0 to outcome 149.
    order = np.argsort(-probs, kind="stable")
    assert np.abs(np.cumsum(shifted[order]) - np.cumsum(probs[order])).max() == pytest.approx(0.05)
    n = 40_000
    assert detectable_ks_distance(n, false_fail_rate=alpha, false_pass_rate=alpha) < 0.05 / 1.25
    samples = rng.choice(300, size=n, p=shifted)
    result = randomized_pit_ks(samples, probs, false_fail_rate=alpha, seed=1)
    assert not result.passed
    assert result.details["detectable_ks"] < 0.05
    assert result.detectable_tv == math.inf  # (M - 1) * detectable KS >= 1
    assert result.worst[0][0].startswith("<= ")


@pytest.mark.statistical(checks=1)  # exact test: false-fail probability alpha
def test_passes_on_exact_draws_and_is_reproducible(alpha):
    rng = np.random.default_rng(34)
    probs = np.append(zipf_law(20), [0.0])
    samples = rng.choice(21, size=50_000, p=probs)
    one = randomized_pit_ks(samples, probs, false_fail_rate=alpha, seed=3)
    assert one.passed and one.method == "exact"
    assert one == randomized_pit_ks(samples, probs, false_fail_rate=alpha, seed=3)
    assert one.detectable_tv == pytest.approx(20 * one.details["detectable_ks"])


def test_support_violation_fails_exactly():
    probs = np.array([0.5, 0.5, 0.0])
    result = randomized_pit_ks(np.array([0, 1, 1, 2]), probs, false_fail_rate=1e-6, seed=0)
    assert not result.passed and result.pvalue == 0.0 and result.worst == (("2", 1.0, 0.0),)


@pytest.mark.statistical(checks=1)
def test_detectable_ks_distance_has_the_promised_power(alpha):
    """At the detectable distance the miss rate is at most beta (a bound, usually far
    below): the measured miss frequency must stay below 2 beta (one-sided ratio check, valid
    for every true miss rate <= beta)."""
    rng = np.random.default_rng(35)
    n, level, beta = 300, 0.01, 0.1
    distance = detectable_ks_distance(n, false_fail_rate=level, false_pass_rate=beta)
    replicates = min_replicates_for_ratio(beta, low=0.0, false_fail_rate=alpha)
    # Alternative at KS distance `distance` from uniform: shift the uniform law.
    samples = np.clip(rng.random((replicates, n)) + distance, 0, 1)
    missed = int(np.count_nonzero(stats.kstest(samples, "uniform", axis=1).pvalue > level))
    check = calibration_ratio_check(missed, replicates, beta, low=0.0, false_fail_rate=alpha,
                                    name="ks_power_miss_rate")
    print(f"CALIBRATION ks miss rate bound={beta} R={replicates} misses={missed} ratio={check.statistic:.4f}")
    assert check.passed, check


def lattice_size(m, level):
    """Exact size of ks_2samp (method="exact", n_a = n_b = m) at ``level``: the largest
    p-value <= level over the lattice D = k / m (samples shifted by k - 1/2 have D = k/m)."""

    def pvalue(k):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # an asymptotic fallback would not be the exact size
            return stats.ks_2samp(np.arange(m) * 1.0, np.arange(m) + k - 0.5, method="exact").pvalue

    # Start below the asymptotic critical value, where the p-value is still above the level.
    k = max(1, math.floor(0.8 * stats.kstwobign.isf(level) * math.sqrt(2 / m) * m))
    assert pvalue(k) > level
    while pvalue(k) > level:
        k += 1
    return pvalue(k)


@pytest.mark.statistical(checks=2)
def test_ks_two_sample_calibrated_on_continuous_and_conservative_on_discrete(alpha):
    rng = np.random.default_rng(20250303)
    m, level = 150, 0.1
    # Continuous data: the exact p-value is discrete in D = k / m, so the size is the exact
    # lattice size (a little below the level); the measured rate must match it.
    size = lattice_size(m, level)
    assert 0.75 * level <= size <= level
    replicates = min_replicates_for_ratio(size, false_fail_rate=alpha)
    continuous = np.array([
        ks_two_sample(rng.normal(size=m), rng.normal(size=m), false_fail_rate=level).pvalue
        for _ in range(replicates)
    ])
    rejections = int(np.count_nonzero(continuous <= level))
    check = calibration_ratio_check(rejections, replicates, size, false_fail_rate=alpha,
                                    name="ks_two_sample continuous")
    print(f"CALIBRATION ks_two_sample continuous level={level} exact size={size:.5f} R={replicates} "
          f"rejections={rejections} ratio={check.statistic:.4f} (to nominal {rejections / replicates / level:.4f})")
    assert check.passed, check
    # Discrete data (ties): conservative, at most half the level (measured about 1 % at 5 %;
    # ties make the exact p-value an upper bound).
    # One-sided check: the measured rate stays below the level, valid for every true rate
    # <= level / 2.
    replicates = min_replicates_for_ratio(level / 2, low=0.0, false_fail_rate=alpha)
    discrete = np.array([
        ks_two_sample(rng.poisson(2.0, size=150), rng.poisson(2.0, size=200), false_fail_rate=level).pvalue
        for _ in range(replicates)
    ])
    rejections = int(np.count_nonzero(discrete <= level))
    check = calibration_ratio_check(rejections, replicates, level / 2, low=0.0, false_fail_rate=alpha,
                                    name="ks_two_sample discrete")
    print(f"CALIBRATION ks_two_sample discrete level={level} R={replicates} rejections={rejections} "
          f"ratio to nominal={rejections / replicates / level:.4f}")
    assert check.passed, check


# A planted shift of 0.5 standard deviations: KS distance 2 Phi(0.25) - 1 = 0.197.
@pytest.mark.statistical(checks=0)
def test_ks_two_sample_detects_shift(alpha):
    rng = np.random.default_rng(36)
    planted = 2 * stats.norm.cdf(0.25) - 1
    result = ks_two_sample(rng.normal(size=5000), rng.normal(0.5, size=5000), false_fail_rate=alpha)
    assert not result.passed and result.detectable_tv == math.inf
    overwhelming = ks_two_sample(
        np.zeros(5000), np.zeros(5000), false_fail_rate=alpha, false_pass_rate=alpha
    ).details["detectable_ks"]
    assert overwhelming < planted / 1.1


# Correct inputs passing: two exact KS checks (uniform p-values, and super-uniform p-values
# with the one-sided alternative, whose false-fail rate is at most the uniform one's).
@pytest.mark.statistical(checks=2)
def test_pvalue_uniformity(alpha):
    rng = np.random.default_rng(37)
    assert pvalue_uniformity(rng.random(2000), false_fail_rate=alpha).passed
    # Planted: U**1.5 has CDF t**(2/3), KS distance 4/27 = 0.148 from uniform.
    assert detectable_ks_distance(4000, false_fail_rate=alpha, false_pass_rate=alpha) < (4 / 27) / 1.25
    assert not pvalue_uniformity(rng.random(4000) ** 1.5, false_fail_rate=alpha).passed
    # Discrete, super-uniform p-values: the two-sided test flags them, "greater" does not.
    # Planted: P(p = 1) = P(k = 10) = 0.176, a KS gap of 0.176 just below 1.
    assert detectable_ks_distance(3000, false_fail_rate=alpha, false_pass_rate=alpha) < 0.176 / 1.25
    discrete = np.array([stats.binomtest(k, 20, 0.5).pvalue for k in rng.binomial(20, 0.5, size=3000)])
    assert not pvalue_uniformity(discrete, false_fail_rate=alpha).passed
    assert pvalue_uniformity(discrete, false_fail_rate=alpha, alternative="greater").passed


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
