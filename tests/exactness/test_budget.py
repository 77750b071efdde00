"""False-fail budget, Holm, Benjamini-Hochberg (budget.py)."""


import numpy as np
import pytest
from scipy import stats

from specexact.exactness.budget import FalseFailBudget, benjamini_hochberg, holm


def brute_force_holm(pvalues, total):
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    rejected = [False] * len(pvalues)
    for step, i in enumerate(order):
        if pvalues[i] > total / (len(pvalues) - step):
            break
        rejected[i] = True
    return rejected


def test_per_check_is_bonferroni():
    budget = FalseFailBudget()
    assert budget.total == 1e-6
    assert budget.per_check(4) == pytest.approx(2.5e-7)
    assert FalseFailBudget(total=0.05).per_check(1) == 0.05


def test_holm_matches_definition_and_dominates_bonferroni():
    rng = np.random.default_rng(7)
    for size in (1, 2, 5, 40):
        for _ in range(50):
            pvalues = rng.random(size) ** 4
            rejected = holm(pvalues, total=0.05)
            assert rejected.tolist() == brute_force_holm(pvalues.tolist(), 0.05)
            assert (rejected >= (pvalues <= 0.05 / size)).all()
    assert FalseFailBudget(total=0.05).holm([0.001, 0.02, 0.5]).tolist() == [True, True, False]


def test_holm_step_down_stops_at_first_failure():
    # 0.03 > 0.05/2 stops the procedure although 0.04 <= 0.05/1.
    assert holm([0.01, 0.03, 0.04], total=0.05).tolist() == [True, False, False]
    # Ties are handled in any order.
    assert holm([0.01, 0.01], total=0.05).tolist() == [True, True]


def test_benjamini_hochberg_matches_scipy():
    pvalues = np.array([0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205, 0.212, 0.216])
    np.testing.assert_allclose(
        benjamini_hochberg(pvalues), stats.false_discovery_control(pvalues, method="bh")
    )


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: FalseFailBudget(total=0.0), ValueError, r"total must be in \(0, 1\), got 0.0"),
        (lambda: FalseFailBudget(total="x"), TypeError, "total must be a real number"),
        (lambda: FalseFailBudget().per_check(0), ValueError, "num_checks must be >= 1"),
        (lambda: FalseFailBudget().per_check(2.0), TypeError, "num_checks must be an integer"),
        (lambda: holm([0.1, 1.2], total=0.05), ValueError, "pvalues must be in \\[0, 1\\], got 1.2"),
        (lambda: holm([0.1, np.nan], total=0.05), ValueError, "pvalues must be in"),
        (lambda: holm([], total=0.05), ValueError, "pvalues must not be empty"),
        (lambda: holm([0.1], total=2.0), ValueError, "total must be in"),
        (lambda: benjamini_hochberg([[0.1]]), ValueError, "pvalues must be one-dimensional"),
    ],
)
def test_validation(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_holm_total_is_keyword_only():
    with pytest.raises(TypeError):
        holm([0.1], 0.05)
