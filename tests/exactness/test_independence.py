"""Pair-agreement test for shared randomness (independence.py)."""

import numpy as np
import pytest

from specexact.exactness.independence import collision_probability, pair_agreement_check


def zipf_law(num_outcomes, exponent=1.1):
    weights = 1.0 / np.arange(1, num_outcomes + 1) ** exponent
    return weights / weights.sum()


def test_collision_probability():
    assert collision_probability(np.full(8, 1 / 8)) == pytest.approx(1 / 8)
    assert collision_probability([1.0, 0.0]) == 1.0
    probs = zipf_law(30)
    assert collision_probability(probs) == pytest.approx((probs**2).sum())


def test_independent_pairs_pass_shared_pairs_fail():
    rng = np.random.default_rng(51)
    probs = zipf_law(50)
    collision = collision_probability(probs)
    first, second = rng.choice(50, size=(2, 100_000), p=probs)
    good = pair_agreement_check(int((first == second).sum()), first.size, collision, false_fail_rate=1e-6)
    assert good.passed and good.method == "exact"
    # Perfectly shared randomness: both rows identical.
    shared = pair_agreement_check(first.size, first.size, collision, false_fail_rate=1e-6)
    assert not shared.passed and shared.pvalue < 1e-300
    # Partly shared: 5 % of pairs reuse the same uniforms.
    reuse = rng.random(first.size) < 0.05
    partly = np.where(reuse, first, second)
    weak = pair_agreement_check(int((first == partly).sum()), first.size, collision, false_fail_rate=1e-6)
    assert not weak.passed
    assert weak.detectable_tv < 0.05 * (1 - collision)


@pytest.mark.statistical
def test_calibration_is_conservative():
    rng = np.random.default_rng(20250501)
    probs = zipf_law(20)
    collision = collision_probability(probs)
    equal = rng.binomial(500, collision, size=20_000)
    values, counts = np.unique(equal, return_counts=True)
    for alpha in (0.01, 0.05):
        failed = np.array(
            [not pair_agreement_check(int(k), 500, collision, false_fail_rate=alpha).passed for k in values]
        )
        assert counts[failed].sum() / equal.size / alpha <= 2


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: pair_agreement_check(3, 2, 0.1, false_fail_rate=0.01), ValueError, "num_equal_pairs must be <= num_pairs=2, got 3"),
        (lambda: pair_agreement_check(1, 2, 1.1, false_fail_rate=0.01), ValueError, r"collision_prob must be in \[0, 1\], got 1.1"),
        (lambda: pair_agreement_check(1, 0, 0.1, false_fail_rate=0.01), ValueError, "num_pairs must be >= 1"),
        (lambda: pair_agreement_check(1, 2, 0.1, false_fail_rate=0.0), ValueError, "false_fail_rate"),
    ],
)
def test_bad_inputs_name_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()
