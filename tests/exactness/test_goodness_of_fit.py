"""Binned Pearson goodness of fit (goodness_of_fit.py)."""

import json
import math

import numpy as np
import pytest
from scipy import stats

from specexact.exactness._validate import check_probs
from specexact.exactness.calibration import calibration_ratio_check, min_replicates_for_ratio
from specexact.exactness.goodness_of_fit import binned_law, chisquare_gof
from specexact.exactness.power import min_detectable_tv_chisquare


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


# Asymptotic chi-square checks are only approximately calibrated at the suite's tiny per-check
# rate (5e-10): small bins have Poisson tails heavier than the chi-square limit. An estimate
# of the actual false-fail rate at alpha by exact convolution of the Poisson per-bin laws
# (which over-estimated the exact multinomial tail in every configuration we computed both
# for) gives, for the draws below: n=2000 (27 bins) 3.6 alpha, n=1e5 (452 bins) 1.2 alpha,
# n=3e6 (1000 bins) 0.9 alpha. The test therefore declares 4 + 2 + 1 checks.
CHI2_PASS_CHECKS = {2_000: 4, 100_000: 2, 3_000_000: 1}


@pytest.mark.statistical(checks=sum(CHI2_PASS_CHECKS.values()))
def test_passes_on_exact_multinomial_draws(alpha):
    rng = np.random.default_rng(12345)
    probs = np.append(zipf_law(1000), np.zeros(24))
    for n in CHI2_PASS_CHECKS:
        counts = rng.multinomial(n, probs)
        result = chisquare_gof(counts, probs, false_fail_rate=alpha)
        assert result.passed, result
        assert result.method == "asymptotic" and result.n == n
        assert result.dof == result.details["num_bins"] - 1
        assert 0 < result.detectable_tv < 1
        assert result.details["smallest_bin_expected"] >= 50.0 * (1 - 1e-9)


# A planted bug risks only a false pass (the ledger does not count it); its power must be
# overwhelming: the planted TV is above what is detected with miss probability alpha.
@pytest.mark.statistical(checks=0)
def test_fails_on_planted_tv_shift(alpha):
    rng = np.random.default_rng(2024)
    probs = zipf_law(300)
    shifted = probs.copy()
    shifted[0] -= 0.05
    shifted[150:] += 0.05 / 150
    assert 0.5 * np.abs(shifted - probs).sum() == pytest.approx(0.05)
    n = 100_000
    bins = binned_law(probs, n=n, min_expected=50.0)
    # Outcome 0 is a bin of its own and only loses mass, every other bin only gains: the
    # binned laws are 0.05 apart too.
    binned_shift = np.bincount(bins, weights=shifted - probs)
    assert 0.5 * np.abs(binned_shift).sum() == pytest.approx(0.05)
    overwhelming = min_detectable_tv_chisquare(
        n, num_bins=int(bins.max()) + 1, false_fail_rate=alpha, false_pass_rate=alpha
    )
    assert overwhelming < 0.05 / 1.25  # margin for the noncentral chi-square approximation
    counts = rng.multinomial(n, shifted)
    result = chisquare_gof(counts, probs, false_fail_rate=alpha)
    assert not result.passed and result.pvalue < 1e-12
    assert result.detectable_tv < 0.05
    assert result.worst[0][0] == "0"  # the most probable outcome lost the mass


def test_worst_labels_name_bins():
    """Deterministic counts: the excess sits in merged tail bins, which must be named by
    their most probable outcome plus how many others."""
    probs = zipf_law(200)
    n = 20_000
    labels = [f"tok{i}" for i in range(200)]
    bins = binned_law(probs, n=n, min_expected=50.0)
    sizes = np.bincount(bins)
    merged_outcomes = np.flatnonzero(sizes[bins] > 1)
    counts = np.floor(n * probs).astype(np.int64)
    counts[merged_outcomes[-40:]] += 30  # the last merged bins get far too many samples
    counts[0] += n - counts.sum()
    result = chisquare_gof(counts, probs, false_fail_rate=1e-6, labels=labels)
    assert len(result.worst) == 5
    contributions = [(o - e) ** 2 / e for _, o, e in result.worst]
    assert contributions == sorted(contributions, reverse=True)
    assert all(label.startswith("tok") for label, _, _ in result.worst)
    assert any("more)" in label for label, _, _ in result.worst)
    first, others = result.worst[0][0].split(" (+")
    member = labels.index(first)
    assert sizes[bins[member]] == int(others.split()[0]) + 1


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


# The Monte Carlo p-value is (1 + B) / (R + 1), where B ~ Binomial(R, p_exact) counts the
# null statistics at least as large as the observed one (given the data). By Hoeffding,
# |B / R - p_exact| > t has probability <= 2 exp(-2 R t**2) = alpha at the t used below;
# the "+1" moves it by at most 1 / (R + 1). The asymptotic p-value differs from p_exact by
# the chi-square approximation error, small at 50 expected counts per bin and moderate p:
# allowance 0.02. One statistical check.
MONTE_CARLO_REPLICATES = 19_999
ASYMPTOTIC_ALLOWANCE = 0.02


@pytest.mark.statistical(checks=1)
def test_monte_carlo_null(alpha):
    rng = np.random.default_rng(99)
    probs = zipf_law(100)
    counts = rng.multinomial(10_000, probs)
    kwargs = dict(false_fail_rate=0.01, monte_carlo_replicates=MONTE_CARLO_REPLICATES, seed=5)
    one = chisquare_gof(counts, probs, **kwargs)
    two = chisquare_gof(counts, probs, **kwargs)
    asymptotic = chisquare_gof(counts, probs, false_fail_rate=0.01)
    assert one == two and one.method == "monte_carlo"
    assert one.statistic == pytest.approx(asymptotic.statistic)
    assert 1 / (MONTE_CARLO_REPLICATES + 1) <= one.pvalue <= 1
    hoeffding = math.sqrt(math.log(2 / alpha) / (2 * MONTE_CARLO_REPLICATES))
    tolerance = hoeffding + 1 / (MONTE_CARLO_REPLICATES + 1) + ASYMPTOTIC_ALLOWANCE
    assert tolerance < 0.05
    assert abs(one.pvalue - asymptotic.pvalue) < tolerance
    with pytest.raises(ValueError, match="monte_carlo_replicates must be >= 1/false_fail_rate - 1"):
        chisquare_gof(counts, probs, false_fail_rate=1e-6, monte_carlo_replicates=999)


# --------------------------------------------------------------------------- calibration
#
# Each nominal level is one check: the measured ratio rejections / (R * level) must lie in
# [0.5, 2], with R from min_replicates_for_ratio at the per-check rate `alpha`, so the
# assertion itself false-fails with probability <= alpha. The Pearson statistic is computed
# on an [R, num_bins] matrix with numpy; the first replicates are re-run through
# chisquare_gof to show the vectorised statistic and verdicts are the function's.
# Asymptotic p-values are only approximately calibrated: the design covers true rates
# within a factor RATE_TOLERANCE of nominal.
RATE_TOLERANCE = 1.25
ASYMPTOTIC_LEVELS = (0.1, 0.05, 0.01)
VERIFIED_REPLICATES = 20


def replicates_for(levels, alpha, **kwargs):
    return max(min_replicates_for_ratio(level, false_fail_rate=alpha, **kwargs) for level in levels)


def binned_setup(probs, n, min_expected=50.0):
    probs, _ = check_probs(probs)  # as chisquare_gof sees them (renormalised in float64)
    bins = binned_law(probs, n=n, min_expected=min_expected)
    num_bins = int(bins.max()) + 1
    binned_probs = np.bincount(bins, weights=probs, minlength=num_bins)
    binned_probs /= binned_probs.sum()
    return bins, num_bins, binned_probs


def bin_counts(counts, bins, num_bins):
    onehot = np.zeros((bins.size, num_bins), dtype=np.int64)
    onehot[np.arange(bins.size), bins] = 1
    return counts @ onehot


def pearson(binned_counts, expected):
    return (((binned_counts - expected) ** 2) / expected).sum(axis=-1)


def assert_calibrated(pvalues, levels, alpha, *, label, rate_tolerance=1.0, low=0.5, high=2.0,
                      nominal_rates=None):
    """One calibration_ratio_check per level (each within the per-check rate alpha)."""
    for i, level in enumerate(levels):
        nominal = level if nominal_rates is None else nominal_rates[i]
        rejections = int(np.count_nonzero(pvalues <= level))
        result = calibration_ratio_check(
            rejections, int(pvalues.size), nominal, low=low, high=high, false_fail_rate=alpha,
            rate_tolerance=rate_tolerance, name=f"{label}[{level:g}]",
        )
        print(f"CALIBRATION {label} level={level:g} nominal={nominal:.6g} R={pvalues.size} "
              f"rejections={rejections} ratio={result.statistic:.4f}")
        assert result.passed, result


@pytest.mark.statistical(checks=len(ASYMPTOTIC_LEVELS))
def test_calibration_asymptotic(alpha):
    """Measured false-fail frequency / nominal on exact Zipf draws lies in [0.5, 2]."""
    rng = np.random.default_rng(20250101)
    probs, n = zipf_law(300), 5_000
    replicates = replicates_for(ASYMPTOTIC_LEVELS, alpha, rate_tolerance=RATE_TOLERANCE)
    draws = rng.multinomial(n, probs, size=replicates)
    bins, num_bins, binned_probs = binned_setup(probs, n)
    statistic = pearson(bin_counts(draws, bins, num_bins), n * binned_probs)
    pvalues = stats.chi2.sf(statistic, num_bins - 1)
    for counts, stat, pvalue in zip(draws[:VERIFIED_REPLICATES], statistic, pvalues):
        result = chisquare_gof(counts, probs, false_fail_rate=0.01)
        assert result.details["num_bins"] == num_bins
        assert result.statistic == pytest.approx(stat, rel=1e-12)
        assert result.pvalue == pytest.approx(pvalue, rel=1e-9, abs=1e-300)
    assert_calibrated(pvalues, ASYMPTOTIC_LEVELS, alpha, label="chisquare_gof asymptotic",
                      rate_tolerance=RATE_TOLERANCE)


@pytest.mark.statistical(checks=1)
def test_calibration_asymptotic_strict(alpha):
    """The same at nominal 1e-3, drawing the binned counts directly (the binned counts of a
    multinomial are multinomial with the binned law; the statistic is verified above)."""
    rng = np.random.default_rng(20250103)
    probs, n, level = zipf_law(300), 5_000, 1e-3
    replicates = replicates_for((level,), alpha, rate_tolerance=RATE_TOLERANCE)
    bins, num_bins, binned_probs = binned_setup(probs, n)
    critical = stats.chi2.isf(level, num_bins - 1)
    rejections = 0
    for start in range(0, replicates, 50_000):
        size = min(50_000, replicates - start)
        binned = rng.multinomial(n, binned_probs, size=size)
        rejections += int(np.count_nonzero(pearson(binned, n * binned_probs) >= critical))
    pvalues = np.ones(replicates)
    pvalues[:rejections] = 0.0
    assert_calibrated(pvalues, (level,), alpha, label="chisquare_gof asymptotic",
                      rate_tolerance=RATE_TOLERANCE)


MONTE_CARLO_LEVELS = (0.1, 0.05)


@pytest.mark.statistical(checks=len(MONTE_CARLO_LEVELS))
def test_calibration_monte_carlo(alpha):
    """Monte Carlo p-values from 99 null replicates: (1 + #{T_r >= T}) / 100 <= level has
    probability exactly level for a continuous statistic; ties (the statistic is discrete)
    only lower it, which RATE_TOLERANCE covers."""
    rng = np.random.default_rng(20250102)
    probs, n, inner = zipf_law(60), 2_000, 99
    replicates = replicates_for(MONTE_CARLO_LEVELS, alpha, rate_tolerance=RATE_TOLERANCE)
    draws = rng.multinomial(n, probs, size=replicates)
    bins, num_bins, binned_probs = binned_setup(probs, n)
    expected = n * binned_probs
    observed = pearson(bin_counts(draws, bins, num_bins), expected)
    pvalues = np.empty(replicates)
    for i in range(replicates):
        # The null replicates chisquare_gof draws with seed=i (one batch of 99).
        null = np.random.default_rng(i).multinomial(n, binned_probs, size=inner)
        gamma = abs(np.finfo(np.float64).eps * 100 * observed[i])
        pvalues[i] = (1 + np.count_nonzero(pearson(null, expected) >= observed[i] - gamma)) / (inner + 1)
    for i in range(VERIFIED_REPLICATES):
        result = chisquare_gof(draws[i], probs, false_fail_rate=0.05, monte_carlo_replicates=inner, seed=i)
        assert result.pvalue == pytest.approx(pvalues[i], rel=1e-12)
    assert_calibrated(pvalues, MONTE_CARLO_LEVELS, alpha, label="chisquare_gof monte carlo",
                      rate_tolerance=RATE_TOLERANCE)


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


# --- certified TV upper bounds of passing checks -------------------------------------------

def test_a_passing_check_certifies_the_full_law_when_outcomes_are_few():
    p0 = np.array([0.5, 0.3, 0.2, 0.0])
    res = chisquare_gof(np.array([510, 290, 200, 0]), p0, false_fail_rate=1e-6)
    cert = res.details["certified_tv"]
    assert res.passed and cert["law"] == "full" and cert["partition"] == "every outcome"
    assert cert["delta"] == 1e-6 and cert["n"] == 1000 and cert["num_cells"] == 4  # 3 outcomes + the zero cell
    assert cert["observed_tv"] == pytest.approx(0.01) and cert["upper"] == pytest.approx(0.01 + cert["deviation"])
    assert "probability at most delta" in cert["semantics"] and "certified_tv_coarse" not in res.details
    json.dumps(res.to_dict())


def test_many_outcomes_certify_the_binned_law_and_a_coarse_one():
    p0 = np.full(5000, 1 / 5000)
    counts = np.random.default_rng(0).multinomial(100_000, p0)
    res = chisquare_gof(counts, p0, false_fail_rate=1e-6, min_expected=20)
    cert, coarse = res.details["certified_tv"], res.details["certified_tv_coarse"]
    assert res.passed and cert["law"] == "binned" and cert["num_cells"] == res.details["num_bins"] + 1
    assert coarse["law"] == "binned" and coarse["num_cells"] <= 33 and coarse["upper"] < cert["upper"] / 3


def test_the_certificate_is_the_bound_of_the_checks_cells_at_its_rate():
    from specexact.exactness.tv_bounds import certified_tv_bound

    p0 = np.full(400, 1 / 400)
    counts = np.random.default_rng(2).multinomial(10_000, p0)
    res = chisquare_gof(counts, p0, false_fail_rate=1e-7, min_expected=50)
    bins = binned_law(p0, n=10_000, min_expected=50)
    assert res.details["certified_tv"]["upper"] == certified_tv_bound(counts, p0, delta=1e-7, bins=bins).upper
    coarse = binned_law(p0, n=10_000, min_expected=10_000 / 32)
    assert res.details["certified_tv_coarse"]["upper"] == certified_tv_bound(counts, p0, delta=1e-7,
                                                                             bins=coarse).upper


def test_a_failing_check_certifies_nothing():
    res = chisquare_gof(np.array([800, 200]), np.array([0.5, 0.5]), false_fail_rate=1e-6)
    assert not res.passed and "certified_tv" not in res.details
    violation = chisquare_gof(np.array([5, 5, 1]), np.array([0.5, 0.5, 0.0]), false_fail_rate=1e-6)
    assert not violation.passed and "certified_tv" not in violation.details


# The statement: P(check passes and the sampler's TV exceeds the bound) <= delta (= the check's
# false-fail rate). A sampler at TV 0.01 from the reference on 10 outcomes, n = 2000, checks at
# delta = 0.05 (so that they pass most of the time): count the replicates where both happen.
# Measured: 0 of 2000 (1551 passes; bounds 0.061 .. 0.10: the deviation term is far from tight;
# without it, the observed TV alone falls below 0.01 in most replicates).
@pytest.mark.statistical(checks=1)
def test_the_certified_bound_holds_at_its_delta(alpha):
    p0 = np.full(10, 0.1)
    p = p0.copy()
    p[0] += 0.01
    p[1] -= 0.01
    rng = np.random.default_rng(5)
    R, delta, bad, passed = 2000, 0.05, 0, 0
    for _ in range(R):
        res = chisquare_gof(rng.multinomial(2000, p), p0, false_fail_rate=delta)
        if res.passed:
            passed += 1
            bad += res.details["certified_tv"]["upper"] < 0.01
    assert passed > R / 2  # the statement is about passes: enough of them
    assert bad <= stats.binom.isf(alpha, R, delta), bad
