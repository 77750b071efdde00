"""Binned Pearson goodness of fit (goodness_of_fit.py)."""

import json
import math

import numpy as np
import pytest

from specexact.exactness.goodness_of_fit import binned_law, chisquare_gof


def zipf_law(num_outcomes, exponent=1.1):
    weights = 1.0 / np.arange(1, num_outcomes + 1) ** exponent
    return weights / weights.sum()


def check_binning(probs, bins, n, min_expected):
    support = probs > 0
    assert (bins[~support] == -1).all() and (bins[support] >= 0).all()
    num_bins = bins.max() + 1
    expected = n * np.bincount(bins[support], weights=probs[support], minlength=num_bins)
    if num_bins >= 2:
        assert (expected >= min_expected * (1 - 1e-9)).all()
    order = np.argsort(-probs, kind="stable")
    sorted_bins = bins[order][: support.sum()]
    # Bins are contiguous runs in descending-probability order, numbered 0, 1, 2, ...
    assert sorted_bins[0] == 0 and (np.diff(sorted_bins) >= 0).all() and (np.diff(sorted_bins) <= 1).all()
    # Greedy minimality: every bin but the last closes as soon as it reaches min_expected.
    sorted_probs = probs[order][: support.sum()]
    for b in range(num_bins - 1):
        members = sorted_probs[sorted_bins == b]
        assert n * members[:-1].sum() < min_expected * (1 + 1e-9)
    return num_bins


def test_binned_law_properties_on_random_laws():
    rng = np.random.default_rng(11)
    for trial in range(60):
        size = int(rng.integers(1, 3000))
        probs = rng.dirichlet(np.full(size, float(rng.choice([0.05, 0.5, 5.0]))))
        probs[rng.random(size) < 0.1] = 0.0
        if probs.sum() == 0:
            probs[0] = 1.0
        probs /= probs.sum()
        n = int(10 ** rng.uniform(1, 8))
        min_expected = float(rng.choice([1.0, 5.0, 50.0]))
        check_binning(probs, binned_law(probs, n=n, min_expected=min_expected), n, min_expected)


def test_binned_law_examples():
    probs = np.array([0.5, 0.0, 0.3, 0.1, 0.06, 0.04])
    # n = 100: expected 50, 30, 10, 6, 4 -> bins {0}, {2}, {3, 4, 5} (10 + 6 + 4 = 20).
    np.testing.assert_array_equal(binned_law(probs, n=100, min_expected=20), [0, -1, 1, 2, 2, 2])
    # min_expected 25: the tail {3, 4, 5} (20 expected) is merged into the last bin.
    np.testing.assert_array_equal(binned_law(probs, n=100, min_expected=25), [0, -1, 1, 1, 1, 1])
    np.testing.assert_array_equal(binned_law(probs, n=1000, min_expected=50), [0, -1, 1, 2, 3, 3])
    np.testing.assert_array_equal(binned_law(probs, n=10, min_expected=50), [0, -1, 0, 0, 0, 0])


def test_exact_support_violation_fails_at_once():
    probs = np.array([0.5, 0.5, 0.0, 0.0])
    counts = np.array([5000, 5000, 0, 2])
    result = chisquare_gof(counts, probs, false_fail_rate=1e-6, labels=["a", "b", "c", "d"])
    assert not result.passed and result.pvalue == 0.0 and result.method == "exact"
    assert result.worst == (("d", 2.0, 0.0),)
    assert result.details["support_violations"] == 2
    json.dumps(result.to_dict())


def test_passes_on_exact_multinomial_draws():
    rng = np.random.default_rng(12345)
    probs = np.append(zipf_law(1000), np.zeros(24))
    for n in (2_000, 100_000, 3_000_000):
        counts = rng.multinomial(n, probs)
        result = chisquare_gof(counts, probs, false_fail_rate=1e-6)
        assert result.passed, result
        assert result.method == "asymptotic" and result.n == n
        assert result.dof == result.details["num_bins"] - 1
        assert 0 < result.detectable_tv < 1
        assert result.details["smallest_bin_expected"] >= 50.0 * (1 - 1e-9)


def test_fails_on_planted_tv_shift():
    rng = np.random.default_rng(2024)
    probs = zipf_law(300)
    shifted = probs.copy()
    shifted[0] -= 0.05
    shifted[150:] += 0.05 / 150
    assert 0.5 * np.abs(shifted - probs).sum() == pytest.approx(0.05)
    counts = rng.multinomial(100_000, shifted)
    result = chisquare_gof(counts, probs, false_fail_rate=1e-6)
    assert not result.passed and result.pvalue < 1e-12
    assert result.detectable_tv < 0.05
    assert result.worst[0][0] == "0"  # the most probable outcome lost the mass


def test_worst_labels_name_bins():
    probs = zipf_law(200)
    counts = np.random.default_rng(3).multinomial(20_000, probs)
    labels = [f"tok{i}" for i in range(200)]
    result = chisquare_gof(counts, probs, false_fail_rate=1e-6, labels=labels)
    assert len(result.worst) == 5
    contributions = [(o - e) ** 2 / e for _, o, e in result.worst]
    assert contributions == sorted(contributions, reverse=True)
    assert all(label.startswith("tok") for label, _, _ in result.worst)
    assert any("more)" in label for label in binned_labels(result))


def binned_labels(result):
    return [label for label, _, _ in result.worst] + [
        label
        for label, _, _ in chisquare_gof(
            np.random.default_rng(4).multinomial(5_000, zipf_law(200)),
            zipf_law(200),
            false_fail_rate=1e-6,
        ).worst
    ]


def test_single_bin_has_no_power():
    result = chisquare_gof(np.array([3, 2, 0]), np.array([0.5, 0.3, 0.2]), false_fail_rate=1e-6)
    assert result.passed and result.pvalue == 1.0 and result.detectable_tv == math.inf
    assert "no power" in result.description
    assert result.details["num_bins"] == 1


def test_renormalises_tiny_drift_and_rejects_bigger():
    probs = np.array([0.5, 0.5 + 1e-12])
    result = chisquare_gof(np.array([500, 500]), probs, false_fail_rate=0.01)
    assert result.details["renormalised"] is True
    with pytest.raises(ValueError, match="reference_probs must sum to 1"):
        chisquare_gof(np.array([500, 500]), np.array([0.5, 0.51]), false_fail_rate=0.01)


def test_monte_carlo_null():
    rng = np.random.default_rng(99)
    probs = zipf_law(100)
    counts = rng.multinomial(10_000, probs)
    one = chisquare_gof(counts, probs, false_fail_rate=0.01, monte_carlo_replicates=999, seed=5)
    two = chisquare_gof(counts, probs, false_fail_rate=0.01, monte_carlo_replicates=999, seed=5)
    asymptotic = chisquare_gof(counts, probs, false_fail_rate=0.01)
    assert one == two and one.method == "monte_carlo"
    assert one.statistic == pytest.approx(asymptotic.statistic)
    assert 1 / 1000 <= one.pvalue <= 1
    assert abs(one.pvalue - asymptotic.pvalue) < 0.05
    with pytest.raises(ValueError, match="monte_carlo_replicates must be >= 1/false_fail_rate - 1"):
        chisquare_gof(counts, probs, false_fail_rate=1e-6, monte_carlo_replicates=999)


@pytest.mark.statistical
def test_calibration_asymptotic():
    """Measured false-fail frequency / nominal on exact Zipf draws lies in [0.5, 2]."""
    rng = np.random.default_rng(20250101)
    probs = zipf_law(300)
    draws = rng.multinomial(5_000, probs, size=4000)
    pvalues = np.array([chisquare_gof(c, probs, false_fail_rate=0.01).pvalue for c in draws])
    for alpha in (0.01, 0.05):
        ratio = np.mean(pvalues <= alpha) / alpha
        assert 0.5 <= ratio <= 2, (alpha, ratio)


@pytest.mark.statistical
def test_calibration_monte_carlo():
    rng = np.random.default_rng(20250102)
    probs = zipf_law(60)
    draws = rng.multinomial(2_000, probs, size=1000)
    rejected = [
        not chisquare_gof(c, probs, false_fail_rate=0.05, monte_carlo_replicates=99, seed=i).passed
        for i, c in enumerate(draws)
    ]
    ratio = np.mean(rejected) / 0.05
    assert 0.5 <= ratio <= 2, ratio


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(observed_counts=[1.0, 2.0]), TypeError, "observed_counts must be an integer array"),
        (dict(observed_counts=[1, -2]), ValueError, "observed_counts must be >= 0, got -2 at index 1"),
        (dict(observed_counts=[0, 0]), ValueError, "observed_counts must hold at least one observation"),
        (dict(observed_counts=[1, 2, 3]), ValueError, "same shape"),
        (dict(reference_probs=[0.5, np.nan]), ValueError, "reference_probs must be finite"),
        (dict(reference_probs=[1.5, -0.5]), ValueError, "reference_probs must be >= 0, got -0.5 at index 1"),
        (dict(reference_probs=[[0.5, 0.5]]), ValueError, "reference_probs must be one-dimensional"),
        (dict(false_fail_rate=0.0), ValueError, r"false_fail_rate must be in \(0, 1\), got 0.0"),
        (dict(false_pass_rate=1.0), ValueError, r"false_pass_rate must be in \(0, 1\), got 1.0"),
        (dict(min_expected=0), ValueError, "min_expected must be a finite number > 0, got 0.0"),
        (dict(labels=["a"]), ValueError, "labels must have 2 entries"),
        (dict(monte_carlo_replicates=-1), ValueError, "monte_carlo_replicates must be >= 0"),
        (dict(seed=1.5), TypeError, "seed must be a non-negative integer or None"),
        (dict(name=""), ValueError, "name must not be empty"),
    ],
)
def test_bad_inputs_name_the_argument(kwargs, error, match):
    arguments = dict(observed_counts=[500, 500], reference_probs=[0.5, 0.5], false_fail_rate=0.01)
    arguments.update(kwargs)
    with pytest.raises(error, match=match):
        chisquare_gof(
            arguments.pop("observed_counts"), arguments.pop("reference_probs"), **arguments
        )
    with pytest.raises(TypeError):
        chisquare_gof([500, 500], [0.5, 0.5], 0.01)  # rates are keyword-only
