"""Exact binomial test and accepted-length law (exact_tests.py)."""

import numpy as np
import pytest
from scipy import stats

from specexact.exactness.calibration import calibration_ratio_check, min_replicates_for_ratio
from specexact.exactness.exact_tests import (
    accepted_length_check,
    binomial_check,
    mean_accepted_length,
    truncated_geometric_law,
)
from specexact.exactness.power import min_detectable_shift_binomial, min_detectable_tv_chisquare


def test_binomial_check_basic():
    result = binomial_check(310, 1000, 0.3, false_fail_rate=1e-6)
    assert result.passed and result.method == "exact" and result.n == 1000
    assert result.pvalue == stats.binomtest(310, 1000, 0.3).pvalue
    assert result.statistic == pytest.approx(0.31)
    assert result.detectable_tv == min_detectable_shift_binomial(1000, 0.3, false_fail_rate=1e-6)
    assert result.worst == (("event", 310.0, 300.0),)
    assert not binomial_check(400, 1000, 0.3, false_fail_rate=1e-6).passed


def test_binomial_check_exact_support():
    assert binomial_check(1, 1000, 0.0, false_fail_rate=1e-6).pvalue == 0.0
    assert binomial_check(0, 1000, 0.0, false_fail_rate=1e-6).passed
    assert not binomial_check(999, 1000, 1.0, false_fail_rate=1e-6).passed


BINOMIAL_LEVELS = (0.05, 0.01)


@pytest.mark.statistical(checks=len(BINOMIAL_LEVELS))
def test_binomial_calibration_is_conservative(alpha):
    """Exact discrete test: its size (the null probability of its rejection region) is at
    most nominal, computed exactly; the measured false-fail frequency must match that size
    (ratio in [0.5, 2], R from min_replicates_for_ratio at the per-check rate)."""
    rng = np.random.default_rng(20250401)
    trials, prob = 200, 0.3
    values = np.arange(trials + 1)
    pvalues = np.array([stats.binomtest(int(k), trials, prob).pvalue for k in values])
    sizes = {}
    for level in BINOMIAL_LEVELS:
        region = pvalues <= level
        sizes[level] = float(stats.binom.pmf(values[region], trials, prob).sum())
        assert sizes[level] <= level  # exact test: conservative by construction
    replicates = max(min_replicates_for_ratio(size, false_fail_rate=alpha) for size in sizes.values())
    successes = rng.binomial(trials, prob, size=replicates)
    observed = np.unique(successes)
    for level, size in sizes.items():
        # binomial_check is a deterministic function of `successes`: check each value once.
        failed = np.zeros(trials + 1, dtype=bool)
        failed[observed] = [
            not binomial_check(int(k), trials, prob, false_fail_rate=level).passed for k in observed
        ]
        np.testing.assert_array_equal(failed[observed], pvalues[observed] <= level)
        rejections = int(failed[successes].sum())
        check = calibration_ratio_check(rejections, replicates, size, false_fail_rate=alpha,
                                        name=f"binomial_check[{level}]")
        print(f"CALIBRATION binomial_check level={level:g} exact size={size:.5f} "
              f"(size/level {size / level:.4f}) R={replicates} rejections={rejections} "
              f"ratio to size={check.statistic:.4f} to level={rejections / replicates / level:.4f}")
        assert check.passed, check


def test_truncated_geometric_law():
    law = truncated_geometric_law(0.8, 4)
    np.testing.assert_allclose(law, [0.2, 0.16, 0.128, 0.1024, 0.4096])
    assert law.sum() == pytest.approx(1.0)
    np.testing.assert_array_equal(truncated_geometric_law(0.0, 3), [1, 0, 0, 0])
    np.testing.assert_array_equal(truncated_geometric_law(1.0, 3), [0, 0, 0, 1])
    for rate in (0.0, 0.3, 0.9, 1.0):
        for gamma in (1, 5):
            closed = gamma if rate == 1 else (rate - rate ** (gamma + 1)) / (1 - rate)
            assert mean_accepted_length(rate, gamma) == pytest.approx(closed)


def simulate_accepted_lengths(rng, acceptance_rate, gamma, rounds):
    """Accepted length = number of leading accepted draft positions (capped at gamma)."""
    accepted = rng.random((rounds, gamma)) < acceptance_rate
    lengths = np.where(accepted.all(axis=1), gamma, np.argmin(accepted, axis=1))
    return np.bincount(lengths, minlength=gamma + 1)


# The correct law passing an asymptotic chi-square over 5 bins of >= 10 000 expected counts:
# estimated actual false-fail rate 1.02 alpha (Poisson convolution), declared as 2 checks.
# The planted acceptance rate 0.78 (instead of 0.8) is a TV of 0.039 on the length law,
# above what 1e5 rounds detect with miss probability alpha.
@pytest.mark.statistical(checks=2)
def test_accepted_length_check(alpha):
    rng = np.random.default_rng(41)
    law = truncated_geometric_law(0.8, 4)
    rounds = 100_000
    good = accepted_length_check(simulate_accepted_lengths(rng, 0.8, 4, rounds), law, false_fail_rate=alpha)
    assert good.passed and good.worst[0][0].startswith("accepted=")
    assert good.details["num_bins"] == 5
    planted = 0.5 * np.abs(truncated_geometric_law(0.78, 4) - law).sum()
    assert min_detectable_tv_chisquare(rounds, num_bins=5, false_fail_rate=alpha,
                                       false_pass_rate=alpha) < planted / 1.25
    bad = accepted_length_check(simulate_accepted_lengths(rng, 0.78, 4, rounds), law, false_fail_rate=alpha)
    assert not bad.passed
    # Acceptance rate 1: any round shorter than gamma is impossible.
    certain = truncated_geometric_law(1.0, 4)
    support = accepted_length_check(np.array([0, 0, 1, 0, 999]), certain, false_fail_rate=1e-6)
    assert not support.passed and support.pvalue == 0.0 and support.worst[0][0] == "accepted=2"


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: binomial_check(5, 3, 0.5, false_fail_rate=0.01), ValueError, "successes must be <= trials=3, got 5"),
        (lambda: binomial_check(1, 0, 0.5, false_fail_rate=0.01), ValueError, "trials must be >= 1"),
        (lambda: binomial_check(1.0, 3, 0.5, false_fail_rate=0.01), TypeError, "successes must be an integer"),
        (lambda: binomial_check(1, 3, -0.1, false_fail_rate=0.01), ValueError, "prob must be in"),
        (lambda: binomial_check(1, 3, 0.5, false_fail_rate=0.01, alternative="x"), ValueError, "alternative"),
        (lambda: truncated_geometric_law(1.2, 3), ValueError, r"acceptance_rate must be in \[0, 1\], got 1.2"),
        (lambda: truncated_geometric_law(0.5, 0), ValueError, "gamma must be >= 1"),
        (lambda: truncated_geometric_law(0.5, True), TypeError, "gamma must be an integer"),
        (lambda: accepted_length_check([1], [1.0], false_fail_rate=0.01), ValueError, "gamma >= 1"),
    ],
)
def test_bad_inputs_name_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()
