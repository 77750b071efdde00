"""Pair-agreement test for shared randomness (independence.py)."""

import numpy as np
import pytest
from scipy import stats

from specexact.exactness.calibration import calibration_ratio_check, min_replicates_for_ratio
from specexact.exactness.independence import collision_probability, pair_agreement_check
from specexact.exactness.power import min_detectable_shift_binomial


def zipf_law(num_outcomes, exponent=1.1):
    weights = 1.0 / np.arange(1, num_outcomes + 1) ** exponent
    return weights / weights.sum()


def test_collision_probability():
    assert collision_probability(np.full(8, 1 / 8)) == pytest.approx(1 / 8)
    assert collision_probability([1.0, 0.0]) == 1.0
    probs = zipf_law(30)
    assert collision_probability(probs) == pytest.approx((probs**2).sum())


# One exact one-sided binomial check on independent pairs (false-fail probability alpha);
# the shared and partly shared pairs are planted bugs whose detection must be overwhelming.
@pytest.mark.statistical(checks=1)
def test_independent_pairs_pass_shared_pairs_fail(alpha):
    rng = np.random.default_rng(51)
    probs = zipf_law(50)
    collision = collision_probability(probs)
    first, second = rng.choice(50, size=(2, 100_000), p=probs)
    good = pair_agreement_check(int((first == second).sum()), first.size, collision, false_fail_rate=alpha)
    assert good.passed and good.method == "exact"
    # Perfectly shared randomness: both rows identical.
    shared = pair_agreement_check(first.size, first.size, collision, false_fail_rate=alpha)
    assert not shared.passed and shared.pvalue < 1e-300
    # Partly shared: 5 % of pairs reuse the same draw, so pairs agree with probability
    # 0.05 + 0.95 * collision: an excess of 0.05 * (1 - collision).
    planted = 0.05 * (1 - collision)
    overwhelming = min_detectable_shift_binomial(
        first.size, collision, false_fail_rate=alpha, false_pass_rate=alpha, alternative="greater"
    )
    assert overwhelming < planted / 1.25
    reuse = rng.random(first.size) < 0.05
    partly = np.where(reuse, first, second)
    weak = pair_agreement_check(int((first == partly).sum()), first.size, collision, false_fail_rate=alpha)
    assert not weak.passed
    assert weak.detectable_tv < planted


PAIR_LEVELS = (0.05, 0.01)


@pytest.mark.statistical(checks=len(PAIR_LEVELS))
def test_calibration_is_conservative(alpha):
    """Exact one-sided test: its size is at most nominal (computed exactly), and the measured
    false-fail frequency must match that size (ratio in [0.5, 2], R from
    min_replicates_for_ratio at the per-check rate)."""
    rng = np.random.default_rng(20250501)
    probs = zipf_law(20)
    collision = collision_probability(probs)
    pairs = 500
    values = np.arange(pairs + 1)
    sizes, failed = {}, {}
    for level in PAIR_LEVELS:
        failed[level] = np.array(
            [not pair_agreement_check(int(k), pairs, collision, false_fail_rate=level).passed for k in values]
        )
        sizes[level] = float(stats.binom.pmf(values[failed[level]], pairs, collision).sum())
        assert sizes[level] <= level
    replicates = max(min_replicates_for_ratio(size, false_fail_rate=alpha) for size in sizes.values())
    equal = rng.binomial(pairs, collision, size=replicates)
    for level, size in sizes.items():
        rejections = int(failed[level][equal].sum())
        check = calibration_ratio_check(rejections, replicates, size, false_fail_rate=alpha,
                                        name=f"pair_agreement[{level}]")
        print(f"CALIBRATION pair_agreement level={level:g} exact size={size:.5f} "
              f"(size/level {size / level:.4f}) R={replicates} rejections={rejections} "
              f"ratio to size={check.statistic:.4f} to level={rejections / replicates / level:.4f}")
        assert check.passed, check


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
