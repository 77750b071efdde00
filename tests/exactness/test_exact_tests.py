"""Exact binomial test and accepted-length law (exact_tests.py)."""

import numpy as np
import pytest
from scipy import stats

from specexact.exactness.exact_tests import (
    accepted_length_check,
    binomial_check,
    mean_accepted_length,
    truncated_geometric_law,
)
from specexact.exactness.power import min_detectable_shift_binomial


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


@pytest.mark.statistical
def test_binomial_calibration_is_conservative():
    """Exact discrete test: false-fail frequency / nominal <= 1 in theory; assert <= 2."""
    rng = np.random.default_rng(20250401)
    trials, prob = 200, 0.3
    successes = rng.binomial(trials, prob, size=20_000)
    values, counts = np.unique(successes, return_counts=True)
    for alpha in (0.01, 0.05):
        # binomial_check is a deterministic function of `successes`: evaluate each value once.
        failed = np.array(
            [not binomial_check(int(k), trials, prob, false_fail_rate=alpha).passed for k in values]
        )
        ratio = counts[failed].sum() / successes.size / alpha
        assert ratio <= 2, (alpha, ratio)
        exact_size = stats.binom.pmf(values[failed], trials, prob).sum()
        assert exact_size <= alpha


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


def test_accepted_length_check():
    rng = np.random.default_rng(41)
    law = truncated_geometric_law(0.8, 4)
    good = accepted_length_check(simulate_accepted_lengths(rng, 0.8, 4, 100_000), law, false_fail_rate=1e-6)
    assert good.passed and good.worst[0][0].startswith("accepted=")
    bad = accepted_length_check(simulate_accepted_lengths(rng, 0.78, 4, 100_000), law, false_fail_rate=1e-6)
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
