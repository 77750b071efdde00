"""Randomised PITs and their slot-count uniformity check (exactness/pit.py)."""

import math

import numpy as np
import pytest
import torch

from specexact.exactness.calibration import calibration_ratio_check, min_replicates_for_ratio
from specexact.exactness.pit import (
    FINE_CELLS,
    bernoulli_pit,
    coarsen,
    discrete_pit,
    fine_cell_counts,
    noncentrality_of_cells,
    num_cells,
    pit_uniformity_check,
    required_noncentrality,
)
from specexact.exactness.power import min_detectable_tv_chisquare


def test_bernoulli_pit_maps_each_outcome_to_its_interval():
    a = torch.tensor([0.3, 0.3, 0.0, 1.0, 1.0, 0.0], dtype=torch.float64)
    success = torch.tensor([True, False, False, True, False, True])
    w = torch.full((6,), 0.5, dtype=torch.float64)
    u = bernoulli_pit(success, a, w)
    torch.testing.assert_close(u, torch.tensor([0.15, 0.65, 0.5, 0.5, 1.0, 0.0], dtype=torch.float64))
    with pytest.raises(ValueError, match="one shape"):
        bernoulli_pit(success, a[:3], w)


def test_bernoulli_pit_law_is_exactly_uniform():
    """P(U <= u) = u for every u, computed exactly from the two branches."""
    for a in (0.0, 0.07, 0.5, 0.93, 1.0):
        for u in np.linspace(0, 1, 21):
            below_accept = a * (min(u, a) / a if a > 0 else 0.0)  # P(accepted and a W <= u)
            below_reject = (1 - a) * (max(u - a, 0.0) / (1 - a) if a < 1 else 0.0)
            assert below_accept + below_reject == pytest.approx(u, abs=1e-12)


def test_discrete_pit_orders_and_clips():
    u = discrete_pit(torch.tensor([0.0, 0.5, 2.0]), torch.tensor([0.5, 0.5, 1.0]), torch.tensor([1.0, 1.0, 2.0]),
                     torch.tensor([0.5, 1.0, 1.0]))
    torch.testing.assert_close(u, torch.tensor([0.25, 1.0, 1.0], dtype=torch.float64))


def test_fine_cells_num_cells_and_coarsen():
    counts = fine_cell_counts(torch.tensor([0.0, 0.024, 0.025, 0.999, 1.0]))
    assert counts.shape == (FINE_CELLS,) and counts[0] == 2 and counts[1] == 1 and counts[-1] == 2
    assert num_cells(10_000, min_expected=200) == 10
    assert num_cells(1_000, min_expected=200) == 5
    assert num_cells(599, min_expected=200) == 2
    assert num_cells(399, min_expected=200) == 1
    np.testing.assert_array_equal(coarsen(np.arange(FINE_CELLS), 2),
                                  [sum(range(20)), sum(range(20, 40))])
    with pytest.raises(ValueError, match="divide"):
        coarsen(np.zeros(FINE_CELLS), 3)


def test_uniformity_check_detectable_tv_is_that_of_the_events():
    S, events = 100_000, 25_000
    fine = np.full(FINE_CELLS, S // FINE_CELLS)
    res = pit_uniformity_check(fine, num_events=events, false_fail_rate=1e-8, min_expected=200, name="x")
    assert res.passed and res.n == S and res.details["num_cells"] == 10
    slots_tv = min_detectable_tv_chisquare(S, num_bins=10, false_fail_rate=1e-8)
    assert res.details["detectable_tv_of_slots"] == pytest.approx(slots_tv)
    assert res.detectable_tv == pytest.approx(slots_tv / 0.25)
    # A shift of 2 % of the mass from the first to the last cell fails.
    fine2 = fine.copy()
    fine2[:4] -= 500
    fine2[-4:] += 500
    assert not pit_uniformity_check(fine2, num_events=events, false_fail_rate=1e-8, min_expected=200, name="x").passed
    # Too few slots: no test.
    small = pit_uniformity_check(np.ones(FINE_CELLS, dtype=int), num_events=10, false_fail_rate=1e-8,
                                 min_expected=200, name="x")
    assert small.passed and small.detectable_tv == math.inf and small.method == "exact"
    with pytest.raises(ValueError, match="exceeds"):
        pit_uniformity_check(fine, num_events=S + 1, false_fail_rate=1e-8, min_expected=200, name="x")


def test_noncentrality_matches_the_chisquare_power():
    pi = np.full(10, 0.1)
    assert noncentrality_of_cells(pi, 1000) == 0.0
    pi2 = pi.copy()
    pi2[0] += 0.01
    pi2[1] -= 0.01
    assert noncentrality_of_cells(pi2, 1000) == pytest.approx(1000 * 10 * 2e-4)
    need = required_noncentrality(10, false_fail_rate=1e-8)
    tv = min_detectable_tv_chisquare(10_000, num_bins=10, false_fail_rate=1e-8)
    assert need == pytest.approx(4 * 10_000 * tv**2)


LEVEL = 0.2


@pytest.mark.statistical(checks=1)
def test_pits_of_events_with_their_own_laws_are_calibrated(alpha):
    """Events of varying laws (Bernoulli decisions and discrete tokens), PITs on a fixed
    number of slots with fillers: the check's rejection rate at a relaxed level is nominal."""
    replicates = min_replicates_for_ratio(LEVEL, false_fail_rate=alpha, rate_tolerance=1.1)
    g = torch.Generator().manual_seed(5)
    rejections = 0
    for _ in range(replicates):
        n, S = 1500, 2000
        a = torch.rand(n, generator=g, dtype=torch.float64)
        acc = torch.rand(n, generator=g, dtype=torch.float64) < a
        u = bernoulli_pit(acc, a, torch.rand(n, generator=g, dtype=torch.float64))
        fine = fine_cell_counts(u) + np.bincount(
            torch.randint(0, FINE_CELLS, (S - n,), generator=g).numpy(), minlength=FINE_CELLS)
        res = pit_uniformity_check(fine, num_events=n, false_fail_rate=LEVEL, min_expected=20, name="calib")
        rejections += not res.passed
    # Pearson's statistic on 10 equal cells of 200 is within 10 % of chi-square at 0.2.
    check = calibration_ratio_check(rejections, replicates, LEVEL, false_fail_rate=alpha, rate_tolerance=1.1)
    assert check.passed, check
