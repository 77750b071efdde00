"""Two-sample homogeneity (two_sample.py)."""

import math

import numpy as np
import pytest
from scipy import stats

from specexact.exactness.calibration import calibration_ratio_check, min_replicates_for_ratio
from specexact.exactness.goodness_of_fit import _binned_law
from specexact.exactness.power import min_detectable_tv_chisquare
from specexact.exactness.two_sample import chisquare_homogeneity


def zipf_law(num_outcomes, exponent=1.1):
    weights = 1.0 / np.arange(1, num_outcomes + 1) ** exponent
    return weights / weights.sum()


# Asymptotic chi-square at the per-check rate: ~450 bins of >= 50 expected counts, estimated
# actual false-fail rate about 1.2 alpha (see test_goodness_of_fit.CHI2_PASS_CHECKS): 2 checks.
@pytest.mark.statistical(checks=2)
def test_passes_on_same_law_and_reports_two_sample_power(alpha):
    rng = np.random.default_rng(31)
    probs = np.append(zipf_law(500), np.zeros(10))
    a = rng.multinomial(200_000, probs)
    b = rng.multinomial(150_000, probs)
    result = chisquare_homogeneity(a, b, false_fail_rate=alpha)
    assert result.passed and result.method == "asymptotic"
    assert result.n == 350_000
    assert result.details["dropped_zero_columns"] >= 10
    num_bins = result.details["num_bins"]
    assert result.dof == num_bins - 1
    assert result.detectable_tv == min_detectable_tv_chisquare(
        150_000, num_bins=num_bins, false_fail_rate=alpha, two_sample=True
    )


# A planted bug: only a false pass is at risk; the power must be overwhelming.
@pytest.mark.statistical(checks=0)
def test_fails_on_planted_shift(alpha):
    rng = np.random.default_rng(32)
    probs = zipf_law(300)
    shifted = probs.copy()
    shifted[0] -= 0.05
    shifted[150:] += 0.05 / 150
    n = 200_000
    # Whatever the pooled binning, outcome 0 (expected 20 000 counts) is a bin of its own
    # and the only one that loses mass: the binned laws are 0.05 apart. At most 300 bins.
    overwhelming = min_detectable_tv_chisquare(
        n, num_bins=300, false_fail_rate=alpha, false_pass_rate=alpha, two_sample=True
    )
    assert overwhelming < 0.05 / 1.25  # margin for the noncentral chi-square approximation
    result = chisquare_homogeneity(
        rng.multinomial(n, probs), rng.multinomial(n, shifted), false_fail_rate=alpha
    )
    assert not result.passed and result.detectable_tv < 0.05
    assert result.worst[0][0] == "0"


def test_single_bin_has_no_power():
    result = chisquare_homogeneity(np.array([3, 1]), np.array([2, 2]), false_fail_rate=0.01)
    assert result.passed and result.pvalue == 1.0 and result.detectable_tv == math.inf
    assert "no power" in result.description


# Calibration: one check per level, R from min_replicates_for_ratio at the per-check rate.
# The pooled binning differs per replicate, so each replicate is binned with the function's
# own binning (_binned_law) and the 2 x num_bins Pearson statistic is computed with numpy;
# the first replicates are re-run through chisquare_homogeneity. Asymptotic p-values: the
# design covers true rates within RATE_TOLERANCE of nominal.
LEVELS = (0.1, 0.05)
RATE_TOLERANCE = 1.25
VERIFIED_REPLICATES = 20


def homogeneity_pvalue(a, b, min_expected=50.0):
    keep = (a + b) > 0
    a, b = a[keep], b[keep]
    n_a, n_b = int(a.sum()), int(b.sum())
    bins = _binned_law((a + b) / float(n_a + n_b), min(n_a, n_b), min_expected)
    num_bins = int(bins.max()) + 1
    table = np.vstack([np.bincount(bins, weights=a, minlength=num_bins),
                       np.bincount(bins, weights=b, minlength=num_bins)])
    expected = np.outer(table.sum(axis=1), table.sum(axis=0)) / table.sum()
    statistic = float((((table - expected) ** 2) / expected).sum())
    return statistic, float(stats.chi2.sf(statistic, num_bins - 1))


@pytest.mark.statistical(checks=len(LEVELS))
def test_calibration(alpha):
    """Measured false-fail frequency / nominal on exact Zipf draws lies in [0.5, 2]."""
    rng = np.random.default_rng(20250201)
    probs = zipf_law(300)
    replicates = max(
        min_replicates_for_ratio(level, false_fail_rate=alpha, rate_tolerance=RATE_TOLERANCE)
        for level in LEVELS
    )
    draws_a = rng.multinomial(3_000, probs, size=replicates)
    draws_b = rng.multinomial(5_000, probs, size=replicates)
    results = np.array([homogeneity_pvalue(a, b) for a, b in zip(draws_a, draws_b)])
    for a, b, (statistic, pvalue) in zip(draws_a[:VERIFIED_REPLICATES], draws_b, results):
        result = chisquare_homogeneity(a, b, false_fail_rate=0.01)
        assert result.statistic == pytest.approx(statistic, rel=1e-10)
        assert result.pvalue == pytest.approx(pvalue, rel=1e-8, abs=1e-300)
    pvalues = results[:, 1]
    for level in LEVELS:
        rejections = int(np.count_nonzero(pvalues <= level))
        check = calibration_ratio_check(rejections, replicates, level, false_fail_rate=alpha,
                                        rate_tolerance=RATE_TOLERANCE, name=f"homogeneity[{level}]")
        print(f"CALIBRATION chisquare_homogeneity level={level:g} R={replicates} "
              f"rejections={rejections} ratio={check.statistic:.4f}")
        assert check.passed, check


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


def test_a_passing_homogeneity_check_certifies_the_hash_binned_laws():
    rng = np.random.default_rng(1)
    p = np.full(200, 1 / 200)
    a, b = rng.multinomial(20_000, p), rng.multinomial(20_000, p)
    codes = np.arange(1000, 1200, dtype=np.int64)
    res = chisquare_homogeneity(a, b, false_fail_rate=1e-6, outcome_codes=codes)
    cert = res.details["certified_tv"]
    assert res.passed and cert["law"] == "binned" and cert["num_cells"] <= 32 and "hash" in cert["partition"]
    assert cert["n"] == 40_000 and cert["observed_tv"] <= cert["upper"] <= 1
    # The partition follows the codes, not the positions: permuting outcomes and codes together
    # gives the same bound.
    perm = rng.permutation(200)
    again = chisquare_homogeneity(a[perm], b[perm], false_fail_rate=1e-6, outcome_codes=codes[perm])
    assert again.details["certified_tv"]["upper"] == pytest.approx(cert["upper"])
    failing = chisquare_homogeneity(np.array([900, 100]), np.array([500, 500]), false_fail_rate=1e-6)
    assert not failing.passed and "certified_tv" not in failing.details
    with pytest.raises(ValueError, match="outcome_codes"):
        chisquare_homogeneity(a, b, false_fail_rate=1e-6, outcome_codes=codes[:10])
