"""Power and sample-size planning (power.py)."""

import math

import numpy as np
import pytest
from scipy import stats

from specexact.exactness import power
from specexact.exactness.calibration import calibration_ratio_check, min_replicates_for_ratio
from specexact.exactness.power import (
    chisquare_power,
    min_detectable_shift_binomial,
    min_detectable_tv_chisquare,
    min_num_samples_binomial,
    min_num_samples_chisquare,
)

# Figures from /work/shared/notes/statistics.md: TV = 1e-3, alpha = 1e-6, power 0.99.
NOTES_FIGURES = {2: 13e6, 32: 24.5e6, 100: 35.5e6, 1000: 90e6, 32_000: 459e6}


@pytest.mark.parametrize("num_bins, expected", sorted(NOTES_FIGURES.items()))
def test_reproduces_figures_from_notes(num_bins, expected):
    n = min_num_samples_chisquare(1e-3, num_bins=num_bins, false_fail_rate=1e-6)
    assert abs(n / expected - 1) < 0.05
    # TV = 1e-2: divide by 100.
    n_coarse = min_num_samples_chisquare(1e-2, num_bins=num_bins, false_fail_rate=1e-6)
    assert abs(n_coarse / (expected / 100) - 1) < 0.05


def test_two_sample_costs_four_times_in_total():
    for num_bins in (2, 100, 1000):
        one = min_num_samples_chisquare(1e-3, num_bins=num_bins, false_fail_rate=1e-6)
        per_sample = min_num_samples_chisquare(
            1e-3, num_bins=num_bins, false_fail_rate=1e-6, two_sample=True
        )
        assert abs(2 * per_sample / one - 4) < 1e-5


def test_chisquare_power_at_zero_noncentrality_is_the_level():
    for dof in (1, 5, 99):
        assert chisquare_power(0.0, dof, false_fail_rate=0.01) == pytest.approx(0.01, rel=1e-9)
    assert chisquare_power(50.0, 3, false_fail_rate=0.01) > chisquare_power(
        10.0, 3, false_fail_rate=0.01
    )


@pytest.mark.parametrize("two_sample", [False, True])
@pytest.mark.parametrize("num_bins", [2, 17, 500])
def test_chisquare_round_trip(num_bins, two_sample):
    opts = dict(num_bins=num_bins, false_fail_rate=1e-6, false_pass_rate=0.01, two_sample=two_sample)
    for n in (10_000, 123_457, 10**8):
        tv = min_detectable_tv_chisquare(n, **opts)
        assert abs(min_num_samples_chisquare(tv, **opts) - n) <= 1
    for tv in (0.3, 0.01, 1e-3, 2.5e-5):
        n = min_num_samples_chisquare(tv, **opts)
        assert min_detectable_tv_chisquare(n, **opts) <= tv * (1 + 1e-6)
        if n > 1:
            assert min_detectable_tv_chisquare(n - 1, **opts) > tv * (1 - 1e-6)


def test_chisquare_monotone():
    tvs = [0.2, 0.05, 0.01, 1e-3]
    ns = [min_num_samples_chisquare(t, num_bins=50, false_fail_rate=1e-6) for t in tvs]
    assert ns == sorted(ns) and len(set(ns)) == len(ns)
    by_bins = [min_num_samples_chisquare(1e-3, num_bins=k, false_fail_rate=1e-6) for k in (2, 10, 100, 1000)]
    assert by_bins == sorted(by_bins)
    by_alpha = [min_num_samples_chisquare(1e-3, num_bins=10, false_fail_rate=a) for a in (1e-2, 1e-4, 1e-6, 1e-9)]
    assert by_alpha == sorted(by_alpha)
    by_beta = [
        min_num_samples_chisquare(1e-3, num_bins=10, false_fail_rate=1e-6, false_pass_rate=b)
        for b in (0.5, 0.1, 0.01, 1e-4)
    ]
    assert by_beta == sorted(by_beta)
    detectable = [min_detectable_tv_chisquare(n, num_bins=10, false_fail_rate=1e-6) for n in (10**3, 10**4, 10**6)]
    assert detectable == sorted(detectable, reverse=True)


def test_detectable_tv_is_inf_when_no_tv_can_be_guaranteed():
    assert min_detectable_tv_chisquare(3, num_bins=100, false_fail_rate=1e-6) == math.inf


@pytest.mark.statistical(checks=1)
def test_worst_case_alternative_is_detected_with_the_promised_power(alpha):
    """Simulate the worst-case alternative (error proportional to p on two halves): the miss
    rate must be beta within a factor 1.3 (|power - 0.9| < 0.03). R from
    min_replicates_for_ratio at the per-check rate, for true miss rates within 5 % of beta
    (the noncentral chi-square law is an approximation; measured 0.999 beta with 4e5
    replicates)."""
    rng = np.random.default_rng(20240601)
    num_bins, n, level, beta = 10, 4000, 0.01, 0.1
    tv = min_detectable_tv_chisquare(n, num_bins=num_bins, false_fail_rate=level, false_pass_rate=beta)
    reference = np.full(num_bins, 1.0 / num_bins)
    sign = np.where(np.arange(num_bins) < num_bins // 2, 1.0, -1.0)
    alternative = reference * (1 + 2 * tv * sign)
    assert 0.5 * np.abs(alternative - reference).sum() == pytest.approx(tv)
    band = dict(low=0.7, high=1.3, rate_tolerance=1.05)
    replicates = min_replicates_for_ratio(beta, false_fail_rate=alpha, **band)
    counts = rng.multinomial(n, alternative, size=replicates)
    expected = n * reference
    statistic = ((counts - expected) ** 2 / expected).sum(axis=1)
    missed = int(np.count_nonzero(statistic <= stats.chi2.isf(level, num_bins - 1)))
    check = calibration_ratio_check(missed, replicates, beta, false_fail_rate=alpha, name="miss_rate", **band)
    print(f"CALIBRATION chisquare miss rate nominal={beta} R={replicates} misses={missed} "
          f"ratio={check.statistic:.4f}")
    assert check.passed, check


@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
@pytest.mark.parametrize("n, prob, alpha", [(60, 0.3, 0.05), (200, 0.02, 0.01), (150, 0.5, 1e-4)])
def test_binomial_rejection_region_matches_binomtest(n, prob, alpha, alternative):
    k_lo, k_hi = power._binomial_rejection_region(n, prob, alpha, alternative)
    brute = np.array(
        [stats.binomtest(k, n, prob, alternative=alternative).pvalue <= alpha for k in range(n + 1)]
    )
    region = (np.arange(n + 1) <= k_lo) | (np.arange(n + 1) >= k_hi)
    np.testing.assert_array_equal(region, brute)
    # Exact test: size at most alpha.
    assert stats.binom.pmf(np.flatnonzero(region), n, prob).sum() <= alpha


def test_binomial_detectable_shift_gives_the_promised_power():
    n, prob, alpha, beta = 500, 0.3, 1e-3, 0.05
    shift = min_detectable_shift_binomial(n, prob, false_fail_rate=alpha, false_pass_rate=beta)
    k = np.arange(n + 1)
    pvalues = np.array([stats.binomtest(int(j), n, prob).pvalue for j in k])
    region = pvalues <= alpha
    powers = [stats.binom.pmf(k[region], n, prob + s).sum() for s in (shift, -shift)]
    assert min(powers) == pytest.approx(1 - beta, abs=1e-9)
    bigger = [stats.binom.pmf(k[region], n, prob + s).sum() for s in (1.1 * shift, -1.1 * shift)]
    assert min(bigger) > 1 - beta


@pytest.mark.parametrize("alternative", ["two-sided", "greater"])
@pytest.mark.parametrize("prob", [0.5, 0.05, 1e-4])
def test_binomial_round_trip(prob, alternative):
    """Exact power saw-tooths in n: check the crossing property and closeness (not +-1)."""
    opts = dict(false_fail_rate=1e-6, false_pass_rate=0.01, alternative=alternative)
    for shift in (0.2, 0.01):
        if shift > 1 - prob:
            continue
        n = min_num_samples_binomial(shift, prob, **opts)
        assert min_detectable_shift_binomial(n, prob, **opts) <= shift
        if n > 1:
            assert min_detectable_shift_binomial(n - 1, prob, **opts) > shift
    for n in (2_000, 300_000):
        shift = min_detectable_shift_binomial(n, prob, **opts)
        if not math.isfinite(shift):
            continue
        back = min_num_samples_binomial(shift, prob, **opts)
        assert abs(back / n - 1) < 0.02


def test_binomial_monotone_in_n_on_a_coarse_grid():
    shifts = [min_detectable_shift_binomial(n, 0.2, false_fail_rate=1e-6) for n in (100, 1000, 10**4, 10**5, 10**6)]
    assert shifts == sorted(shifts, reverse=True)


def test_binomial_edge_probabilities():
    # prob = 0: any success is rejected, power 1 - (1 - s)**n.
    shift = min_detectable_shift_binomial(500, 0.0, false_fail_rate=1e-6)
    assert 1 - (1 - shift) ** 500 == pytest.approx(0.99, abs=1e-9)
    assert min_detectable_shift_binomial(500, 1.0, false_fail_rate=1e-6) == pytest.approx(shift)
    # Too few trials to ever reject at alpha 1e-6.
    assert min_detectable_shift_binomial(10, 0.5, false_fail_rate=1e-6) == math.inf


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: min_num_samples_chisquare(0.0, num_bins=2, false_fail_rate=0.01), "tv must be in"),
        (lambda: min_num_samples_chisquare(1.5, num_bins=2, false_fail_rate=0.01), "tv must be in"),
        (lambda: min_num_samples_chisquare(0.1, num_bins=1, false_fail_rate=0.01), "num_bins must be >= 2"),
        (lambda: min_num_samples_chisquare(0.1, num_bins=3, false_fail_rate=1.5), r"false_fail_rate must be in \(0, 1\), got 1.5"),
        (lambda: min_num_samples_chisquare(0.1, num_bins=3, false_fail_rate=0.5, false_pass_rate=0.6), "false_fail_rate \\+ false_pass_rate"),
        (lambda: min_detectable_tv_chisquare(0, num_bins=3, false_fail_rate=0.01), "n must be >= 1"),
        (lambda: chisquare_power(-1.0, 3, false_fail_rate=0.01), "noncentrality"),
        (lambda: min_detectable_shift_binomial(10, 1.2, false_fail_rate=0.01), "prob must be in"),
        (lambda: min_detectable_shift_binomial(10, 0.5, false_fail_rate=0.01, alternative="up"), "alternative"),
        (lambda: min_num_samples_binomial(0.2, 0.9, false_fail_rate=0.01, alternative="greater"), "shift must leave"),
    ],
)
def test_bad_values_raise_value_error_naming_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_bad_types_raise_type_error():
    with pytest.raises(TypeError, match="num_bins"):
        min_num_samples_chisquare(0.1, num_bins=2.5, false_fail_rate=0.01)
    with pytest.raises(TypeError, match="false_fail_rate"):
        min_num_samples_chisquare(0.1, num_bins=2, false_fail_rate="0.01")
    with pytest.raises(TypeError, match="two_sample"):
        min_num_samples_chisquare(0.1, num_bins=2, false_fail_rate=0.01, two_sample=1)
    with pytest.raises(TypeError):
        min_num_samples_chisquare(0.1, 2, 0.01)  # rates are keyword-only
