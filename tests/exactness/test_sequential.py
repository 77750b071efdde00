"""Anytime-valid e-process (sequential.py)."""

import json
import math

import numpy as np
import pytest
from scipy import special, stats

from specexact.exactness.calibration import calibration_ratio_check, min_replicates_for_ratio
from specexact.exactness.sequential import SequentialGOF


def test_e_value_matches_dirichlet_multinomial_ratio_and_is_order_free():
    rng = np.random.default_rng(61)
    probs = rng.dirichlet(np.ones(6))
    batches = rng.multinomial(50, probs, size=4)
    sequential = SequentialGOF(probs, false_fail_rate=0.01)
    for batch in batches:
        sequential.update(batch)
    in_one_go = SequentialGOF(probs, false_fail_rate=0.01)
    in_one_go.update(batches.sum(axis=0))
    assert sequential.log_e_value == pytest.approx(in_one_go.log_e_value, rel=1e-12, abs=1e-12)
    total = batches.sum(axis=0)
    expected = stats.dirichlet_multinomial.logpmf(total, np.full(6, 0.5), total.sum()) - stats.multinomial.logpmf(
        total, total.sum(), probs
    )
    assert sequential.log_e_value == pytest.approx(expected, rel=1e-9)


def stream_log_e_values(batches, probs):
    """Log e-values [R, T] after each batch of streams ``batches`` [R, T, M] (vectorised
    form of SequentialGOF's Dirichlet(1/2)-mixture likelihood ratio)."""
    counts = np.cumsum(batches, axis=1)
    n = counts.sum(axis=2)
    half_m = 0.5 * probs.size
    with np.errstate(divide="ignore"):
        log_probs = np.log(probs)
    log_null = np.where(counts > 0, counts * log_probs, 0.0).sum(axis=2)
    log_mixture = (
        special.gammaln(half_m) - special.gammaln(n + half_m)
        + (special.gammaln(counts + 0.5) - special.gammaln(0.5)).sum(axis=2)
    )
    return log_mixture - log_null


VILLE_LEVELS = (0.1, 0.01)


@pytest.mark.statistical(checks=len(VILLE_LEVELS))
def test_ville_false_fail_rate_on_null_streams(alpha):
    """Ville: a null stream is ever rejected with probability <= level (usually far below).
    One-sided ratio check per level (low = 0: valid for every true rate <= level), R from
    min_replicates_for_ratio at the per-check rate; the vectorised e-values are verified
    against SequentialGOF on the first streams."""
    rng = np.random.default_rng(20250601)
    probs = rng.dirichlet(np.ones(10))
    replicates = max(min_replicates_for_ratio(level, low=0.0, false_fail_rate=alpha) for level in VILLE_LEVELS)
    batches = rng.multinomial(100, probs, size=(replicates, 20))
    log_e = stream_log_e_values(batches, probs)
    for stream, logs in zip(batches[:10], log_e):
        test = SequentialGOF(probs, false_fail_rate=0.1)
        for batch, expected in zip(stream, logs):
            test.update(batch)
            assert test.log_e_value == pytest.approx(expected, rel=1e-9, abs=1e-9)
    for level in VILLE_LEVELS:
        rejections = int(np.count_nonzero(log_e.max(axis=1) >= -math.log(level)))
        check = calibration_ratio_check(rejections, replicates, level, low=0.0, false_fail_rate=alpha,
                                        name=f"sequential_gof[{level}]")
        print(f"CALIBRATION sequential_gof level={level:g} R={replicates} rejections={rejections} "
              f"ratio={check.statistic:.4f}")
        assert check.passed, check


def miss_probability_bound(wrong, probs, n, alpha):
    """Upper bound on P(log E_n < log(1/alpha)) for n samples of the law ``wrong``.

    The Dirichlet(1/2) mixture is at least its mass on {theta_s >= (1 - d) wrong_s}, where
    the density is >= Gamma(M/2) / Gamma(1/2)**M and the region is a simplex of volume
    d**(M-1) / (M-1)!, times the smallest likelihood there, (1 - d)**n prod wrong_s**c_s:
    log E_n >= L_n + B with L_n = sum_s c_s log(wrong_s / p_s) and the constant B below
    (d = (M - 1) / n). L_n sums n i.i.d. terms in [min, max] log(wrong / p) with mean
    n KL(wrong || p); Hoeffding bounds the chance it falls short.
    """
    m = probs.size
    d = (m - 1) / n
    constant = (
        n * math.log1p(-d) + (m - 1) * math.log(d) - math.lgamma(m)
        + math.lgamma(m / 2) - m * math.lgamma(0.5)
    )
    ratios = np.log(wrong / probs)
    mean = n * float(np.dot(wrong, ratios))
    shortfall = mean - (-math.log(alpha) - constant)
    assert shortfall > 0
    return math.exp(-2 * shortfall**2 / (n * float(ratios.max() - ratios.min()) ** 2))


# A planted bug (TV 0.1): only a false pass is at risk, bounded far below alpha.
@pytest.mark.statistical(checks=0)
def test_rejects_gross_bug_and_support_violation(alpha):
    rng = np.random.default_rng(62)
    probs = np.full(10, 0.1)
    wrong = probs.copy()
    wrong[:5] += 0.02
    wrong[5:] -= 0.02  # TV 0.1
    assert miss_probability_bound(wrong, probs, 30_000, alpha) < alpha
    test = SequentialGOF(probs, false_fail_rate=alpha)
    for batch in rng.multinomial(1000, wrong, size=30):
        if test.update(batch):
            break
    assert test.rejected and test.num_samples <= 30_000
    result = test.result()
    assert not result.passed and result.pvalue <= alpha
    json.dumps(result.to_dict())

    support = SequentialGOF(np.array([0.5, 0.5, 0.0]), false_fail_rate=1e-6)
    assert support.update(np.array([10, 10, 1]))
    assert support.log_e_value == math.inf and support.result().to_dict()["statistic"] == "inf"


@pytest.mark.statistical(checks=1)  # Ville: a null stream is ever rejected w.p. <= alpha
def test_rejection_is_sticky_and_null_passes(alpha):
    rng = np.random.default_rng(63)
    probs = rng.dirichlet(np.ones(5))
    test = SequentialGOF(probs, false_fail_rate=alpha)
    for batch in rng.multinomial(500, probs, size=10):
        assert not test.update(batch)
    assert test.result().passed and test.result().n == 5000


def test_bad_inputs():
    with pytest.raises(ValueError, match=r"false_fail_rate must be in \(0, 1\), got 2.0"):
        SequentialGOF([0.5, 0.5], false_fail_rate=2.0)
    test = SequentialGOF([0.5, 0.5], false_fail_rate=0.01)
    with pytest.raises(ValueError, match="counts must have shape"):
        test.update(np.array([1, 2, 3]))
    with pytest.raises(TypeError, match="counts must be an integer array"):
        test.update(np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="no samples yet"):
        test.result()
