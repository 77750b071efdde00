"""Calibration-ratio measurement with a stated error rate (calibration.py).

Everything here is exact arithmetic on the binomial law: no test draws random numbers, so
none is statistical. Brute force means summing :func:`scipy.stats.binom.pmf` over every
count, independently of the module's tail formulas.
"""

import json
import math

import numpy as np
import pytest
from scipy import stats

from specexact.exactness import (
    calibration_ratio_check,
    min_replicates_for_ratio,
    ratio_outside_probability,
)
from specexact.exactness.results import CheckResult


def outside_mask(replicates, nominal, low, high):
    counts = np.arange(replicates + 1)
    ratio = counts / (replicates * nominal)
    return (ratio < low) | (ratio > high)


def brute_outside(replicates, nominal, low=0.5, high=2.0, rate=None):
    rate = nominal if rate is None else rate
    pmf = stats.binom.pmf(np.arange(replicates + 1), replicates, rate)
    return float(pmf[outside_mask(replicates, nominal, low, high)].sum())


@pytest.mark.parametrize(
    "nominal, low, high, target",
    [(0.3, 0.5, 2.0, 1e-3), (0.1, 0.5, 2.0, 1e-4), (0.2, 0.0, 2.0, 1e-5), (0.05, 0.5, math.inf, 1e-3),
     (0.25, 0.8, 1.25, 1e-2)],
)
def test_min_replicates_is_the_smallest_by_brute_force(nominal, low, high, target):
    found = min_replicates_for_ratio(nominal, low=low, high=high, false_fail_rate=target)
    assert brute_outside(found, nominal, low, high) <= target * (1 + 1e-9)
    for smaller in range(1, found):
        assert brute_outside(smaller, nominal, low, high) > target * (1 - 1e-9), smaller


def test_ratio_outside_probability_matches_brute_force():
    for replicates in (1, 7, 40, 333, 2000):
        for nominal in (0.5, 0.1, 0.013):
            for low, high in ((0.5, 2.0), (0.0, 2.0), (0.5, math.inf), (0.9, 1.1)):
                exact = ratio_outside_probability(replicates, nominal, low=low, high=high)
                assert exact == pytest.approx(brute_outside(replicates, nominal, low, high), rel=1e-9, abs=1e-300)


def test_rate_tolerance_bounds_every_rate_in_the_range():
    replicates, nominal, tolerance = 3000, 0.05, 1.25
    bound = ratio_outside_probability(replicates, nominal, rate_tolerance=tolerance)
    assert bound > ratio_outside_probability(replicates, nominal)
    rates = nominal * np.geomspace(1 / tolerance, tolerance, 41)
    worst = max(brute_outside(replicates, nominal, rate=r) for r in rates)
    assert worst <= bound * (1 + 1e-9)
    # The bound is attained up to the other tail at one end.
    assert worst >= 0.5 * bound
    sized = min_replicates_for_ratio(nominal, false_fail_rate=1e-6, rate_tolerance=tolerance)
    assert max(brute_outside(sized, nominal, rate=r) for r in rates) <= 1e-6


def test_one_sided_band_covers_every_smaller_true_rate():
    # low = 0: only too many rejections count; any conservative check is covered.
    replicates = min_replicates_for_ratio(0.1, low=0.0, false_fail_rate=1e-6)
    for rate in (0.1, 0.05, 0.01, 1e-4):
        assert brute_outside(replicates, 0.1, 0.0, 2.0, rate=rate) <= 1e-6


def test_sizes_quoted_in_the_docstring():
    sizes = {0.1: 1.1e3, 0.05: 2.3e3, 0.01: 1.2e4, 1e-3: 1.2e5}
    for nominal, size in sizes.items():
        found = min_replicates_for_ratio(nominal, false_fail_rate=5e-10)
        assert abs(found / size - 1) < 0.05, (nominal, found)
        tolerant = min_replicates_for_ratio(nominal, false_fail_rate=5e-10, rate_tolerance=1.25)
        assert 2.2 < tolerant / found < 2.6
    # Sizes grow like log(1 / false_fail_rate).
    assert min_replicates_for_ratio(0.1, false_fail_rate=5e-12) > min_replicates_for_ratio(0.1, false_fail_rate=5e-10)


def test_check_passes_inside_the_band_including_its_edges():
    replicates = min_replicates_for_ratio(0.01, false_fail_rate=1e-6)
    lo, hi = (int(v) for v in calibration_ratio_check(0, replicates, 0.01, false_fail_rate=0.5).details["band_counts"])
    counts = {0, 1, lo - 2, lo - 1, lo, lo + 1, hi - 1, hi, hi + 1, hi + 2, replicates}
    counts |= set(range(0, replicates + 1, max(1, replicates // 40)))
    for count in sorted(counts):
        result = calibration_ratio_check(count, replicates, 0.01, false_fail_rate=1e-6)
        ratio = count / (replicates * 0.01)
        assert result.passed == (0.5 <= ratio <= 2.0) == (lo <= count <= hi)
        assert result.statistic == pytest.approx(ratio)
        assert (result.pvalue == 1.0) == result.passed
        if not result.passed:
            assert result.pvalue <= result.details["design_false_fail_probability"] <= 1e-6
    # A ratio of exactly 0.5 (the edge) is inside: 30 of 6000 at nominal 0.01.
    edge = calibration_ratio_check(30, 6000, 0.01, false_fail_rate=1e-3)
    assert edge.statistic == 0.5 and edge.passed


def test_pvalue_is_the_probability_of_a_ratio_at_least_as_far_outside():
    replicates, nominal = 2000, 0.05
    counts = np.arange(replicates + 1)
    ratio = counts / (replicates * nominal)
    with np.errstate(divide="ignore"):
        distance = np.maximum(np.log(0.5 / ratio), np.log(ratio / 2.0))
    pmf = stats.binom.pmf(counts, replicates, nominal)
    for observed in (0, 20, 49, 201, 230, 400):
        result = calibration_ratio_check(observed, replicates, nominal, false_fail_rate=1e-3)
        assert not result.passed
        brute = pmf[distance >= distance[observed] - 1e-12].sum()
        assert result.pvalue == pytest.approx(brute, rel=1e-6), observed


def test_detectable_rates_have_the_stated_power():
    replicates, nominal, beta = 5000, 0.05, 0.01
    result = calibration_ratio_check(250, replicates, nominal, false_fail_rate=1e-6, false_pass_rate=beta)
    a, b = result.details["band_counts"]
    down, up = result.details["detectable_rate_low"], result.details["detectable_rate_high"]
    assert down < 0.5 * nominal < 2 * nominal < up
    assert stats.binom.cdf(a - 1, replicates, down) == pytest.approx(1 - beta, abs=1e-9)
    assert stats.binom.sf(b, replicates, up) == pytest.approx(1 - beta, abs=1e-9)
    assert result.detectable_tv == pytest.approx(max(nominal - down, up - nominal))
    assert result.details["detectable_ratio_high"] == pytest.approx(up / nominal)
    # One-sided band: only upward departures are looked for.
    one_sided = calibration_ratio_check(10, replicates, nominal, low=0.0, false_fail_rate=1e-6)
    assert one_sided.passed and one_sided.details["detectable_rate_low"] is None
    assert one_sided.detectable_tv == pytest.approx(one_sided.details["detectable_rate_high"] - nominal)


def test_result_is_a_json_round_trippable_check_result():
    result = calibration_ratio_check(3, 2315, 0.05, false_fail_rate=5e-10, name="gof[0.05]")
    assert isinstance(result, CheckResult) and result.method == "exact" and result.n == 2315
    assert not result.passed and result.name == "gof[0.05]"
    assert result.worst == (("rejections", 3.0, pytest.approx(115.75)),)
    assert CheckResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result
    assert "ratio" in str(result.description)


def test_too_few_replicates_are_refused_with_the_size_to_use():
    needed = min_replicates_for_ratio(0.05, false_fail_rate=1e-6)
    with pytest.raises(ValueError, match=rf"replicates=100 is too few.*min_replicates_for_ratio\(\.\.\.\) = {needed}"):
        calibration_ratio_check(5, 100, 0.05, false_fail_rate=1e-6)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: min_replicates_for_ratio(0.0, false_fail_rate=1e-3), ValueError, r"nominal_rate must be in \(0, 1\), got 0.0"),
        (lambda: min_replicates_for_ratio(0.1, false_fail_rate=1.0), ValueError, "false_fail_rate must be in"),
        (lambda: min_replicates_for_ratio(0.1, low=1.0, false_fail_rate=1e-3), ValueError, r"low must be in \[0, 1\)"),
        (lambda: min_replicates_for_ratio(0.1, high=1.0, false_fail_rate=1e-3), ValueError, "high must be > 1"),
        (lambda: min_replicates_for_ratio(0.1, low=0.0, high=math.inf, false_fail_rate=1e-3), ValueError, "could never fail"),
        (lambda: min_replicates_for_ratio(0.1, false_fail_rate=1e-3, rate_tolerance=0.9), ValueError, "rate_tolerance must be"),
        (lambda: min_replicates_for_ratio(0.1, false_fail_rate=1e-9, max_replicates=10), ValueError, "max_replicates=10"),
        (lambda: min_replicates_for_ratio("0.1", false_fail_rate=1e-3), TypeError, "nominal_rate must be a real number"),
        (lambda: min_replicates_for_ratio(0.1, 0.5, 2.0, 1e-3), TypeError, "positional"),
        (lambda: ratio_outside_probability(0, 0.1), ValueError, "replicates must be >= 1"),
        (lambda: ratio_outside_probability(10.0, 0.1), TypeError, "replicates must be an integer"),
        (lambda: calibration_ratio_check(11, 10, 0.1, false_fail_rate=0.5), ValueError, "rejections must be <= replicates=10, got 11"),
        (lambda: calibration_ratio_check(-1, 10, 0.1, false_fail_rate=0.5), ValueError, "rejections must be >= 0"),
        (lambda: calibration_ratio_check(1, 10, 0.1, false_fail_rate=0.5, false_pass_rate=0.6), ValueError, "false_fail_rate \\+ false_pass_rate"),
        (lambda: calibration_ratio_check(1, 10, 0.1, false_fail_rate=0.5, name=""), ValueError, "name must not be empty"),
        (lambda: calibration_ratio_check(True, 10, 0.1, false_fail_rate=0.5), TypeError, "rejections must be an integer"),
    ],
)
def test_bad_inputs_name_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_rate_tolerance_in_the_check():
    replicates, nominal = 6000, 0.05
    plain = calibration_ratio_check(300, replicates, nominal, false_fail_rate=1e-6)
    tolerant = calibration_ratio_check(300, replicates, nominal, false_fail_rate=1e-6, rate_tolerance=1.25)
    assert plain.passed and tolerant.passed
    assert tolerant.details["design_false_fail_probability"] == pytest.approx(
        ratio_outside_probability(replicates, nominal, rate_tolerance=1.25))
    low = calibration_ratio_check(140, replicates, nominal, false_fail_rate=1e-6, rate_tolerance=1.25)
    assert not low.passed
    assert low.pvalue <= low.details["design_false_fail_probability"] <= 1e-6
    # The composite p-value (lower part at nominal / 1.25) exceeds the exactly calibrated one.
    assert low.pvalue > calibration_ratio_check(140, replicates, nominal, false_fail_rate=1e-6).pvalue
