"""Pairs of draws pooled over groups of different laws (exactness/pooled_pairs.py): the exact
law of the agreeing pairs, the one-sided test and its detectable shared fraction."""

import numpy as np
import pytest
from scipy import stats

from specexact.exactness.pooled_pairs import agreement_pmf, pooled_pair_agreement_check


def test_the_law_of_the_agreeing_pairs_is_the_convolution_of_the_groups_binomials():
    pmf = agreement_pmf([3, 0, 5], [0.2, 0.9, 0.5])
    assert pmf.shape == (9,) and pmf.sum() == pytest.approx(1.0, abs=1e-15)
    # one group: its binomial; two: the law of the sum, by brute force over both counts
    assert np.allclose(agreement_pmf([5], [0.3]), stats.binom.pmf(np.arange(6), 5, 0.3), rtol=0, atol=1e-16)
    brute = np.zeros(9)
    for a in range(4):
        for b in range(6):
            brute[a + b] += stats.binom.pmf(a, 3, 0.2) * stats.binom.pmf(b, 5, 0.5)
    assert np.allclose(pmf, brute, rtol=0, atol=1e-15)


def test_the_pvalue_is_the_exact_upper_tail_and_shared_streams_fail():
    ok = pooled_pair_agreement_check([1, 0], [40, 60], [0.05, 0.02], false_fail_rate=1e-6, labels=["a", "b"])
    pmf = agreement_pmf([40, 60], [0.05, 0.02])
    assert ok.passed and ok.pvalue == pytest.approx(pmf[1:].sum(), rel=1e-12)
    assert ok.details["pvalue_lower"] == pytest.approx(pmf[2:].sum(), rel=1e-12)
    assert ok.details["expected_equal_pairs"] == pytest.approx(40 * 0.05 + 60 * 0.02)
    # the detectable fraction of pairs sharing one stream: caught with power 0.99 at the critical value
    rho, crit = ok.details["detectable_shared_fraction"], ok.details["critical_value"]
    alt = agreement_pmf([40, 60], [rho + (1 - rho) * 0.05, rho + (1 - rho) * 0.02])
    assert alt[crit:].sum() >= 0.99 and pmf[crit:].sum() <= 1e-6 < pmf[crit - 1:].sum()
    assert ok.detectable_tv == pytest.approx(rho * (40 * 0.95 + 60 * 0.98) / 100)
    # every pair agreeing (one stream): an exact failure far below any rate
    bad = pooled_pair_agreement_check([40, 60], [40, 60], [0.05, 0.02], false_fail_rate=1e-6)
    assert not bad.passed and bad.pvalue < 1e-100


def test_too_few_pairs_to_catch_anything_report_no_detectable_fraction():
    # 12 pairs, 9 agreeing (the transformers early_exit audit's seed check, 2026-12-07): at this
    # rate no count is critical, so no shared fraction is caught; the check is still a result
    # (it raised, details holding inf, which ended that audit with an internal error).
    chk = pooled_pair_agreement_check([4, 4, 4, 1], [4, 4, 4, 4], [0.5538, 0.4420, 1.0, 0.0915], false_fail_rate=3e-10)
    assert chk.details["critical_value"] is None and chk.details["detectable_shared_fraction"] is None
    assert chk.passed and chk.detectable_tv == float("inf")


def test_point_masses_test_nothing_and_bad_arguments_name_themselves():
    chk = pooled_pair_agreement_check([4, 1], [4, 8], [1.0, 0.1], false_fail_rate=1e-3, labels=["greedy", "T=1"])
    assert chk.n == 8 and chk.details["left_out"] == ["greedy"]
    none = pooled_pair_agreement_check([3], [3], [1.0], false_fail_rate=1e-3)
    assert none.passed and none.n == 0 and "not_applicable" in none.details
    with pytest.raises(ValueError, match="num_equal=5 and num_pairs=4"):
        pooled_pair_agreement_check([5], [4], [0.1], false_fail_rate=1e-3)
    with pytest.raises(ValueError, match="collision_probs must be in"):
        pooled_pair_agreement_check([0], [4], [1.5], false_fail_rate=1e-3)
    with pytest.raises(ValueError, match="one entry per group"):
        pooled_pair_agreement_check([0, 1], [4], [0.1], false_fail_rate=1e-3)


@pytest.mark.statistical(checks=1)  # independent draws: the one check that could fail falsely
def test_independent_draws_pass_and_half_shared_draws_fail(alpha):
    rng = np.random.default_rng(33)
    laws = [np.array([0.5, 0.3, 0.2]), np.full(8, 1 / 8)]
    pis = [float((p * p).sum()) for p in laws]
    n = 300
    equal = [int((rng.choice(3, n, p=laws[0]) == rng.choice(3, n, p=laws[0])).sum()),
             int((rng.choice(8, n, p=laws[1]) == rng.choice(8, n, p=laws[1])).sum())]
    assert pooled_pair_agreement_check(equal, [n, n], pis, false_fail_rate=alpha).passed
    # half the pairs from one stream (a planted fault: only a false pass is at stake)
    shared = [e // 2 + n // 2 for e in equal]
    chk = pooled_pair_agreement_check(shared, [n, n], pis, false_fail_rate=alpha)
    assert not chk.passed and chk.details["detectable_shared_fraction"] < 0.5
