"""Anytime-valid e-process (sequential.py)."""

import json
import math

import numpy as np
import pytest
from scipy import stats

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


@pytest.mark.statistical
def test_ville_false_fail_rate_on_null_streams():
    rng = np.random.default_rng(20250601)
    probs = rng.dirichlet(np.ones(10))
    alpha = 0.1
    rejected = 0
    for _ in range(300):
        test = SequentialGOF(probs, false_fail_rate=alpha)
        for batch in rng.multinomial(100, probs, size=20):
            test.update(batch)
        rejected += test.rejected
    assert rejected / 300 / alpha <= 2  # Ville: at most alpha, usually far below


def test_rejects_gross_bug_and_support_violation():
    rng = np.random.default_rng(62)
    probs = np.full(10, 0.1)
    wrong = probs.copy()
    wrong[:5] += 0.02
    wrong[5:] -= 0.02  # TV 0.1
    test = SequentialGOF(probs, false_fail_rate=1e-6)
    for batch in rng.multinomial(1000, wrong, size=30):
        if test.update(batch):
            break
    assert test.rejected and test.num_samples <= 30_000
    result = test.result()
    assert not result.passed and result.pvalue <= 1e-6
    json.dumps(result.to_dict())

    support = SequentialGOF(np.array([0.5, 0.5, 0.0]), false_fail_rate=1e-6)
    assert support.update(np.array([10, 10, 1]))
    assert support.log_e_value == math.inf and support.result().to_dict()["statistic"] == "inf"


def test_rejection_is_sticky_and_null_passes():
    rng = np.random.default_rng(63)
    probs = rng.dirichlet(np.ones(5))
    test = SequentialGOF(probs, false_fail_rate=1e-6)
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
