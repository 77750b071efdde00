"""The Cauchy combination test (exactness/combination.py): known values, numerics, input
checks, and its false-fail rate on null p-values, independent and dependent."""

import math

import numpy as np
import pytest
from scipy import stats

from specexact.exactness.calibration import calibration_ratio_check, min_replicates_for_ratio
from specexact.exactness.combination import cauchy_combination, cauchy_pvalue, cauchy_statistic


def test_known_values():
    # one p-value (below the cap) is its own combination; equal p-values combine to themselves
    assert cauchy_combination([0.03]) == pytest.approx(0.03, rel=1e-12)
    assert cauchy_combination([0.01, 0.01, 0.01]) == pytest.approx(0.01, rel=1e-12)
    # symmetric terms cancel: tan(0.25 pi) + tan(-0.25 pi) = 0, p = 0.5
    assert cauchy_statistic([0.25, 0.75], max_pvalue=1.0) == pytest.approx(0.0, abs=1e-12)
    assert cauchy_combination([0.25, 0.75], max_pvalue=1.0) == pytest.approx(0.5)
    # by hand: T = (1/tan(0.01 pi) + 1/tan(0.2 pi)) / 2
    t = (1 / math.tan(0.01 * math.pi) + 1 / math.tan(0.2 * math.pi)) / 2
    assert cauchy_statistic([0.01, 0.2]) == pytest.approx(t, rel=1e-12)
    assert cauchy_combination([0.01, 0.2]) == pytest.approx(0.5 - math.atan(t) / math.pi, rel=1e-12)
    # weights: all on the first p-value
    assert cauchy_combination([0.02, 0.9], [1.0, 0.0]) == pytest.approx(0.02, rel=1e-12)
    # the brief's example: 5 small of 450 (the rest at 0.5, term 0): close to 450 / sum(1/p)
    ps = [4.6e-9, 4.3e-8, 2.3e-7, 7.8e-7, 1.1e-6]
    combined = cauchy_combination(ps + [0.5] * 445)
    assert combined == pytest.approx(450 / sum(1 / p for p in ps), rel=1e-6)
    assert combined < 450 * min(ps)  # below Bonferroni's reading of the same p-values


def test_tiny_and_extreme_pvalues_are_stable():
    assert cauchy_combination([1e-300] * 4) == pytest.approx(1e-300, rel=1e-9)
    assert cauchy_combination([1e-20, 0.5]) == pytest.approx(2e-20, rel=1e-9)
    assert cauchy_combination([0.0, 0.4]) == 0.0
    assert cauchy_combination([0.0, 0.4], [0.0, 1.0]) == pytest.approx(0.4)
    # p = 1 is capped (default 1 - 1/m): it cannot cancel a small p-value
    assert cauchy_combination([1e-6, 1.0]) < 1e-5
    assert cauchy_statistic([1.0], max_pvalue=1.0) == -math.inf
    assert cauchy_pvalue(math.inf) == 0.0 and cauchy_pvalue(-math.inf) == 1.0
    assert cauchy_pvalue(1e12) == pytest.approx(1 / (math.pi * 1e12), rel=1e-9)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(pvalues=[]), ValueError, "pvalues must not be empty"),
    (dict(pvalues=[[0.1]]), ValueError, "pvalues must be one-dimensional"),
    (dict(pvalues=[0.1, 1.5]), ValueError, r"pvalues must be in \[0, 1\], got 1.5"),
    (dict(pvalues=[float("nan")]), ValueError, r"pvalues must be in \[0, 1\]"),
    (dict(pvalues=["a"]), TypeError, "pvalues must be a real numeric array"),
    (dict(pvalues=[0.1, 0.2], weights=[0.5]), ValueError, "weights must have the shape"),
    (dict(pvalues=[0.1, 0.2], weights=[0.7, 0.7]), ValueError, "weights must sum to 1"),
    (dict(pvalues=[0.1, 0.2], weights=[1.5, -0.5]), ValueError, "weights must be finite and >= 0"),
    (dict(pvalues=[0.1], max_pvalue=0.4), ValueError, r"max_pvalue must be in \(0.5, 1\], got 0.4"),
    (dict(pvalues=[0.1], max_pvalue="x"), TypeError, "max_pvalue must be a real number"),
])
def test_bad_input_is_refused_by_name(kwargs, error, match):
    with pytest.raises(error, match=match):
        cauchy_combination(**kwargs)


def _null_pvalues(kind: str, rng, trials: int, m: int) -> np.ndarray:
    if kind == "independent":
        return rng.uniform(size=(trials, m))
    if kind == "binomial":  # discrete, super-uniform: exact binomial tests of n=30, p=0.3
        k = rng.binomial(30, 0.3, size=(trials, m))
        return stats.binom.sf(k - 1, 30, 0.3)
    rho = {"equicorrelated-0.5": 0.5, "equicorrelated-0.9": 0.9}[kind]
    z = math.sqrt(rho) * rng.standard_normal((trials, 1)) + math.sqrt(1 - rho) * rng.standard_normal((trials, m))
    return stats.norm.sf(z)


KINDS = ("independent", "binomial", "equicorrelated-0.5", "equicorrelated-0.9")
LEVELS = (0.05, 0.01)


# Liu and Xie's validity under dependence is asymptotic (small rates). At relaxed rates the
# size can exceed nominal: measured here at rate 0.05 with equicorrelation 0.5, about 1.3x
# (1.25x at 0.01, 0.95x at 0.002). So every true rate up to 1.5x nominal counts as calibrated
# (rate_tolerance), and the check fails at a ratio above 2 (band [0, 2], one-sided: the
# combination may be conservative, e.g. on discrete p-values); independent continuous
# p-values must also stay above half of nominal (band [0.5, 2]).
@pytest.mark.statistical(checks=len(KINDS) * len(LEVELS))
@pytest.mark.parametrize("kind", KINDS)
def test_false_fail_rate_on_null_pvalues(kind, alpha):
    rng = np.random.default_rng(20260 + KINDS.index(kind))
    low = 0.5 if kind == "independent" else 0.0
    trials = max(min_replicates_for_ratio(level, low=low, high=2.0, false_fail_rate=alpha, rate_tolerance=1.5)
                 for level in LEVELS)
    m = 20
    pvalues = _null_pvalues(kind, rng, trials, m)
    combined = np.array([cauchy_combination(row) for row in pvalues])
    for level in LEVELS:
        result = calibration_ratio_check(int(np.count_nonzero(combined <= level)), trials, level, low=low, high=2.0,
                                         false_fail_rate=alpha, rate_tolerance=1.5)
        assert result.passed, (kind, level, result.statistic)


def test_perfectly_dependent_pvalues_combine_to_themselves():
    rng = np.random.default_rng(7)
    for p in rng.uniform(1e-9, 0.9, size=50):
        assert cauchy_combination([p] * 30, max_pvalue=1.0) == pytest.approx(p, rel=1e-9)


def test_randomized_pvalue_of_the_pair_test_is_exactly_uniform():
    """Every 2x2 table of the pair-agreement Fisher test with fixed margins, weighted by its
    null (hypergeometric) probability: the randomised p-value ``lower + u (p - lower)``,
    ``u`` uniform, has P(p_rand <= t) = t exactly, where the plain p-value is conservative."""
    from specexact.exactness.combination import randomized_pvalue
    from specexact.exactness.independence import pair_agreement_vs_control_check

    suspect, control, equal = 40, 40, 9  # pairs of each kind, agreements in all
    support = range(max(0, equal - control), min(equal, suspect) + 1)
    laws = [(stats.hypergeom.pmf(x, suspect + control, equal, suspect),
             pair_agreement_vs_control_check(x, suspect, equal - x, control, false_fail_rate=0.01))
            for x in support]
    assert sum(f for f, _ in laws) == pytest.approx(1.0, abs=1e-12)
    for t in (0.003, 0.01, 0.05, 0.2, 0.5, 0.9):
        plain = sum(f for f, r in laws if r.pvalue <= t)
        randomised = 0.0
        for f, r in laws:
            p, lower = r.pvalue, r.details["pvalue_lower"]
            assert 0.0 <= lower <= p
            assert randomized_pvalue(p, lower, 0.0) == lower and randomized_pvalue(p, lower, 0.999999) <= p
            randomised += f * (1.0 if p <= t else 0.0 if lower >= t else (t - lower) / (p - lower))
        assert randomised == pytest.approx(t, abs=1e-12)
        assert plain <= t  # the plain p-value is valid, but conservative
    assert sum(f for f, r in laws if r.pvalue <= 0.05) < 0.8 * 0.05


@pytest.mark.parametrize("args, error, match", [
    ((1.5, 0.1, 0.5), ValueError, r"pvalue must be in \[0, 1\], got 1.5"),
    ((0.3, 0.4, 0.5), ValueError, r"pvalue_lower must be in \[0, pvalue=0.3\], got 0.4"),
    ((0.3, -0.1, 0.5), ValueError, r"pvalue_lower must be in \[0, pvalue=0.3\], got -0.1"),
    ((0.3, 0.1, 1.0), ValueError, r"u must be in \[0, 1\), got 1.0"),
    ((0.3, 0.1, float("nan")), ValueError, "u must not be NaN"),
    (("x", 0.1, 0.5), TypeError, "pvalue must be a real number"),
])
def test_randomized_pvalue_refuses_bad_input_by_name(args, error, match):
    from specexact.exactness.combination import randomized_pvalue

    with pytest.raises(error, match=match):
        randomized_pvalue(*args)
