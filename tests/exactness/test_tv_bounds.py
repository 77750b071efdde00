"""Certified TV upper bounds: formulas, cells, and coverage measured on laws of known TV."""

import math

import numpy as np
import pytest
from scipy import stats

from specexact.exactness import binned_law
from specexact.exactness.tv_bounds import (
    certified_tv_bound,
    certified_tv_bound_two_sample,
    hash_bins,
    l1_deviation_bound,
)

DELTA = 0.05
REPLICATES = 2000


def max_misses(alpha, replicates=REPLICATES, delta=DELTA):
    """The largest number of misses consistent with a miss rate <= delta at false-fail alpha:
    P(Binomial(replicates, delta) > c) <= alpha."""
    return int(stats.binom.isf(alpha, replicates, delta))


def test_deviation_formulas():
    n, K, d = 5000, 10, 1e-3
    dev = l1_deviation_bound(n, K, d)
    assert dev.mcdiarmid == pytest.approx(math.sqrt((K - 1) / n) + math.sqrt(2 * math.log(1 / d) / n))
    assert dev.weissman == pytest.approx(math.sqrt(2 * (math.log(2 ** K - 2) + math.log(1 / d)) / n))
    assert dev.eps == min(dev.mcdiarmid, dev.weissman) and dev.method == "weissman"
    assert l1_deviation_bound(5000, 2000, d).method == "mcdiarmid"  # many cells: sqrt(K/n) wins
    assert l1_deviation_bound(10, 1, d).eps == 0.0
    assert math.isfinite(l1_deviation_bound(10, 100_000, 1e-12).weissman)  # ln(2^K - 2) without overflow
    for args, msg in (((0, 3, 0.1), "n must be"), ((10, 0, 0.1), "num_cells"), ((10, 3, 1.0), "delta")):
        with pytest.raises(ValueError, match=msg):
            l1_deviation_bound(*args)


def test_cells_and_the_zero_probability_cell():
    p0 = np.array([0.5, 0.5, 0.0])
    b = certified_tv_bound(np.array([40, 50, 10]), p0, delta=DELTA, outside_count=0)
    assert b.num_cells == 3 and b.law == "full"  # two outcomes + the zero-mass cell
    assert b.observed_tv == pytest.approx(0.5 * (0.1 + 0.0 + 0.1))
    c = certified_tv_bound(np.array([40, 50, 0]), p0, delta=DELTA, outside_count=10)
    assert c.observed_tv == pytest.approx(b.observed_tv) and c.n == 100
    assert b.upper == pytest.approx(min(1, b.observed_tv + l1_deviation_bound(100, 3, DELTA).eps / 2))
    binned = certified_tv_bound(np.array([40, 50, 10]), p0, delta=DELTA, bins=np.array([0, 0, -1]))
    assert binned.law == "binned" and binned.num_cells == 2 and binned.observed_tv == pytest.approx(0.1)
    with pytest.raises(ValueError, match="positive reference probability in the -1 cell"):
        certified_tv_bound(np.array([1, 1, 0]), p0, delta=DELTA, bins=np.array([0, -1, -1]))
    with pytest.raises(TypeError, match="integer"):
        certified_tv_bound(np.array([1.0, 1.0, 0.0]), p0, delta=DELTA)


def zipf(m, s=1.1):
    w = 1.0 / np.arange(1, m + 1) ** s
    return w / w.sum()


def perturbed(p0, tv, rng):
    """A law at TV exactly ``tv`` from p0: mass moved from the top half to the bottom half."""
    top = np.argsort(-p0)[: len(p0) // 2]
    bottom = np.setdiff1d(np.arange(len(p0)), top)
    p = p0.copy()
    p[top] -= tv * p0[top] / p0[top].sum()
    p[bottom] += tv * p0[bottom] / p0[bottom].sum()
    assert 0.5 * np.abs(p - p0).sum() == pytest.approx(tv) and p.min() >= 0
    return p


# Each coverage test draws REPLICATES = 2000 seeded replicates and counts the replicates whose
# bound lies below the known TV; the bound may miss in at most DELTA = 5 % of them, checked by a
# one-sided binomial test at the per-check false-fail rate (at most 165 misses; it fails with
# probability >= 0.99 once the true miss rate reaches about 10 %). Measured (10 000 replicates,
# delta 0.05 and 1e-3): no miss in cases 1 and 3; the bounds are conservative.
@pytest.mark.statistical(checks=4)
def test_coverage_on_laws_of_known_tv(alpha):
    rng = np.random.default_rng(2024)
    limit = max_misses(alpha)
    # 1. full law, 8 outcomes, TV 0.05
    p0 = zipf(8)
    p = perturbed(p0, 0.05, rng)
    misses = sum(certified_tv_bound(rng.multinomial(3000, p), p0, delta=DELTA).upper < 0.05
                 for _ in range(REPLICATES))
    assert misses <= limit, misses
    # 2. mass 0.03 outside the reference support (never listed): the zero-mass cell takes it
    q = np.append(0.97 * p0, 0.03)
    tv = 0.5 * (np.abs(q[:-1] - p0).sum() + 0.03)
    misses = 0
    for _ in range(REPLICATES):
        c = rng.multinomial(3000, q)
        misses += certified_tv_bound(c[:-1], p0, delta=DELTA, outside_count=int(c[-1])).upper < tv
    assert misses <= limit, misses
    # 3. the check's bins (binned_law at this n) on 200 outcomes; the binned law's TV is known
    p0 = zipf(200)
    p = perturbed(p0, 0.08, rng)
    n = 5000
    bins = binned_law(p0, n=n, min_expected=50)
    tv_binned = 0.5 * np.abs(np.bincount(bins, p, minlength=bins.max() + 1)
                             - np.bincount(bins, p0, minlength=bins.max() + 1)).sum()
    assert 0 < tv_binned <= 0.08
    misses = sum(certified_tv_bound(rng.multinomial(n, p), p0, delta=DELTA, bins=bins).upper < tv_binned
                 for _ in range(REPLICATES))
    assert misses <= limit, misses
    # 4. two samples, hashed bins of outcome codes
    codes = np.arange(200) * 7919 + 13
    hb = hash_bins(codes, 16)
    tv_hashed = 0.5 * np.abs(np.bincount(hb, p, minlength=16) - np.bincount(hb, p0, minlength=16)).sum()
    misses = sum(certified_tv_bound_two_sample(rng.multinomial(4000, p), rng.multinomial(4000, p0), delta=DELTA,
                                               bins=hb).upper < tv_hashed for _ in range(REPLICATES))
    assert misses <= limit, misses


@pytest.mark.statistical(checks=1)
def test_the_coverage_test_catches_a_bound_without_its_deviation_term(alpha):
    """The plug-in TV alone is no bound: when the TV is large against the noise it falls below
    the true TV in about half the replicates, and the coverage test above would fail it."""
    rng = np.random.default_rng(7)
    p0 = zipf(8)
    p = perturbed(p0, 0.05, rng)
    misses = sum(certified_tv_bound(rng.multinomial(100_000, p), p0, delta=DELTA).observed_tv < 0.05
                 for _ in range(REPLICATES))
    assert misses > max_misses(alpha), misses


def test_two_sample_validation_and_hash_bins_are_fixed():
    assert hash_bins(np.array([5, 5, 6]), 4).tolist()[0] == hash_bins(np.array([5]), 4).tolist()[0]
    assert set(hash_bins(np.arange(1000), 8).tolist()) == set(range(8))
    with pytest.raises(ValueError, match="bins must be a non-negative integer array"):
        certified_tv_bound_two_sample(np.array([1, 2]), np.array([2, 1]), delta=DELTA, bins=np.array([0, -1]))
    with pytest.raises(ValueError, match="one shape"):
        certified_tv_bound_two_sample(np.array([1, 2]), np.array([2, 1, 1]), delta=DELTA, bins=np.array([0, 1]))
