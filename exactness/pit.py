"""Randomised probability integral transforms (PIT) of single events, and a calibrated test
of their uniformity on a fixed number of slots.

Why a PIT per event
-------------------
A sampler's decisions each have their *own* exact law: a draft is accepted with probability
``a_k`` that depends on that draft's laws, a recovered token follows the residual of its own
position. The randomised PIT maps every event, whatever its law, to one number that is
exactly ``Uniform(0, 1)`` under that law:

- a Bernoulli event (success with probability ``a``): ``U = a W`` after a success,
  ``U = a + (1 - a) W`` after a failure (:func:`bernoulli_pit`);
- a discrete outcome ``t`` of a law ``r`` over tokens in a fixed order:
  ``U = (F(t-) + W r(t)) / total`` with ``F(t-)`` the mass of the tokens before ``t``
  (:func:`discrete_pit`);

with ``W ~ Uniform(0, 1)`` drawn from a generator independent of the sampler. If each event's
``U`` is uniform *conditionally on everything before it* (true for a correct sampler, whose
every draw has its stated law given the past) then any sequence of them is i.i.d. uniform
(the conditional laws do not depend on the past, so the joint law is the product).

Why a fixed number of slots
---------------------------
How many events happen (decisions, rejections, full acceptances) depends on the outcomes,
and i.i.d.-ness of a *randomly stopped* sequence is lost: given their number, the events are
not i.i.d. (a long row is one that accepted often, i.e. had small ``U``). The test therefore
runs on a number of *slots* ``S`` fixed before sampling: slot ``j`` holds the ``j``-th event
when there is one, and otherwise an independent uniform (a *filler*). Whether slot ``j``
holds an event is decided by what happened before it, so the ``S`` slot values are i.i.d.
``Uniform(0, 1)`` for a correct sampler, and their counts in ``m`` equal cells are exactly
``Multinomial(S, 1/m, ..., 1/m)``: Pearson's statistic on them is referred to chi-square
(:func:`pit_uniformity_check`). Fillers carry no information: a fault that moves the
events' PIT law by TV ``tau`` moves the slots' law by ``f tau``, ``f`` the fraction of slots
holding events, so the detectable TV of the events is that of the slots over ``f``.

References
----------
P. J. Brockwell, "Universal residuals: a multivariate transformation", Statistics &
Probability Letters 77 (2007) 1473-1478 (randomised PIT of discrete laws). A. P. Dawid,
"Statistical theory: the prequential approach", JRSS-A 147 (1984) 278-292 (conditional PITs
of a sequence are i.i.d. uniform under the forecasting law).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ._validate import check_int, check_name, check_positive_finite, check_rates
from .goodness_of_fit import chisquare_gof
from .power import _required_noncentrality, min_detectable_tv_chisquare
from .results import CheckResult

__all__ = [
    "FINE_CELLS",
    "MAX_CELLS",
    "bernoulli_pit",
    "discrete_pit",
    "fine_cell_counts",
    "num_cells",
    "coarsen",
    "pit_uniformity_check",
    "noncentrality_of_cells",
    "required_noncentrality",
]

FINE_CELLS = 40
"""Equal cells of ``[0, 1)`` in which PIT values are counted; tests merge them into
:func:`num_cells` coarse cells (a divisor of 40)."""

MAX_CELLS = 10
"""Most coarse cells a PIT test uses: few cells keep the power for smooth deviations (a
shifted acceptance probability moves the PIT density up on one side of ``a`` and down on
the other) and the chi-square approximation accurate at the audit's levels."""

_DIVISORS = tuple(d for d in range(FINE_CELLS, 0, -1) if FINE_CELLS % d == 0)


def bernoulli_pit(success: torch.Tensor, prob: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Randomised PIT of Bernoulli events.

    Shape: ``success [n] bool, prob [n], w [n] -> U [n]`` (float64).

    Parameters
    ----------
    success : torch.BoolTensor
        Whether each event succeeded (e.g. the draft was accepted).
    prob : torch.Tensor
        Its success probability under the null, in ``[0, 1]``.
    w : torch.Tensor
        Independent ``Uniform(0, 1)`` draws, one per event.

    Returns
    -------
    torch.Tensor
        ``prob * w`` after a success, ``prob + (1 - prob) * w`` after a failure: exactly
        ``Uniform(0, 1)`` when the success probability is ``prob``. A success of
        probability 0 maps to 0 and a failure of probability 0 to 1 (outcomes a correct
        sampler never produces; exact checks catch them).

    Raises
    ------
    ValueError
        If the shapes differ.
    """
    if not (success.shape == prob.shape == w.shape):
        raise ValueError(f"success, prob and w must have one shape, got {tuple(success.shape)}, "
                         f"{tuple(prob.shape)}, {tuple(w.shape)}")
    a = prob.to(torch.float64)
    w = w.to(torch.float64)
    return torch.where(success, a * w, a + (1.0 - a) * w)


def discrete_pit(mass_before: torch.Tensor, mass_at: torch.Tensor, total: torch.Tensor,
                 w: torch.Tensor) -> torch.Tensor:
    """Randomised PIT of discrete outcomes.

    Shape: ``[n]`` each ``-> U [n]`` (float64).

    Parameters
    ----------
    mass_before : torch.Tensor
        Mass of the outcomes ordered before the observed one (same unnormalised scale as
        ``total``).
    mass_at : torch.Tensor
        Mass of the observed outcome.
    total : torch.Tensor
        Total mass of the law (> 0).
    w : torch.Tensor
        Independent ``Uniform(0, 1)`` draws.

    Returns
    -------
    torch.Tensor
        ``(mass_before + w * mass_at) / total`` clipped to ``[0, 1]``: exactly
        ``Uniform(0, 1)`` when the outcome follows the law.

    Raises
    ------
    ValueError
        If the shapes differ.
    """
    if not (mass_before.shape == mass_at.shape == total.shape == w.shape):
        raise ValueError("mass_before, mass_at, total and w must have one shape")
    u = (mass_before.double() + w.double() * mass_at.double()) / total.double()
    return u.clamp_(0.0, 1.0)


def fine_cell_counts(u: torch.Tensor) -> np.ndarray:
    """Counts of ``u`` in the :data:`FINE_CELLS` equal cells of ``[0, 1)`` (``u = 1`` in the
    last). Shape: ``[n] -> [FINE_CELLS]`` int64."""
    cells = (u.detach().cpu().double() * FINE_CELLS).floor_().clamp_(0, FINE_CELLS - 1).long()
    return torch.bincount(cells.reshape(-1), minlength=FINE_CELLS).numpy().astype(np.int64)


def num_cells(num_slots: int, *, min_expected: float, max_cells: int = MAX_CELLS) -> int:
    """Coarse cells for a PIT test on ``num_slots`` slots: the largest divisor of
    :data:`FINE_CELLS` that is at most ``max_cells`` and leaves every cell at least
    ``min_expected`` expected counts; 1 when even two cells would not (no test)."""
    num_slots = check_int(num_slots, "num_slots", minimum=0)
    min_expected = check_positive_finite(min_expected, "min_expected")
    for d in _DIVISORS:
        if d <= max_cells and (d == 1 or num_slots / d >= min_expected):
            return d
    return 1


def coarsen(fine: np.ndarray, cells: int) -> np.ndarray:
    """Merge the :data:`FINE_CELLS` counts (or probabilities; any leading axes) into
    ``cells`` equal cells. Shape: ``[..., FINE_CELLS] -> [..., cells]``."""
    if FINE_CELLS % cells:
        raise ValueError(f"cells must divide {FINE_CELLS}, got {cells}")
    fine = np.asarray(fine)
    return fine.reshape(*fine.shape[:-1], cells, FINE_CELLS // cells).sum(-1)


def noncentrality_of_cells(cell_probs: np.ndarray, num_slots: int) -> np.ndarray:
    """Noncentrality ``S m sum_j (pi_j - 1/m)^2`` of Pearson's statistic on ``S`` slots whose
    cell probabilities are ``pi`` (``[..., m]``) instead of ``1/m``."""
    pi = np.asarray(cell_probs, dtype=np.float64)
    m = pi.shape[-1]
    return num_slots * m * ((pi - 1.0 / m) ** 2).sum(-1)


def required_noncentrality(cells: int, *, false_fail_rate: float, false_pass_rate: float = 0.01) -> float:
    """Noncentrality at which the chi-square test on ``cells`` cells at ``false_fail_rate``
    has power ``1 - false_pass_rate`` (:mod:`~specexact.exactness.power`)."""
    alpha, beta = check_rates(false_fail_rate, false_pass_rate)
    return _required_noncentrality(check_int(cells, "cells", minimum=2) - 1, alpha, beta)


def pit_uniformity_check(
    fine_counts,
    *,
    num_events: int,
    false_fail_rate: float,
    min_expected: float,
    name: str,
    false_pass_rate: float = 0.01,
    what: str = "events",
    details: dict | None = None,
) -> CheckResult:
    """Pearson chi-square of PIT slot counts against the uniform law on equal cells.

    Parameters
    ----------
    fine_counts : array_like of int, shape (FINE_CELLS,)
        Counts of the slot values (events' PITs and fillers) in the fine cells; their total
        ``S`` must have been fixed before sampling (see the module docstring).
    num_events : int
        How many of the ``S`` slots held an event (``<= S``).
    false_fail_rate : float
        Level alpha of the chi-square test.
    min_expected : float
        Smallest expected count per coarse cell (:func:`num_cells`).
    name : str
        Name of the check.
    false_pass_rate : float, default 0.01
        Miss probability for ``detectable_tv``.
    what : str
        What the events are (for the description).
    details : dict, optional
        Extra JSON-ready details.

    Returns
    -------
    CheckResult
        From :func:`~specexact.exactness.goodness_of_fit.chisquare_gof` on the coarse cells
        (``method`` ``"asymptotic"``; ``"exact"`` with p-value 1 when fewer than two cells
        have ``min_expected`` counts). ``detectable_tv`` is the TV, from uniform, of the
        binned PIT law *of the events* detected with power ``1 - false_pass_rate``: the
        slots' detectable TV divided by the fraction ``f`` of slots holding events
        (``inf`` if above 1). ``details`` add ``num_slots``, ``num_events``,
        ``event_fraction``, ``num_cells``, ``detectable_tv_of_slots`` and
        ``cell_counts``.

    Raises
    ------
    ValueError
        If ``fine_counts`` has the wrong shape or negative entries, or ``num_events`` is
        outside ``[0, S]``.

    Notes
    -----
    Under the null the coarse counts are exactly multinomial with equal cell
    probabilities; the chi-square approximation to Pearson's statistic is then at its most
    accurate (equal cells, ``>= min_expected`` counts each). The audit still runs it at its
    reduced chi-square level (``CHI2_TAIL_INFLATION``) like every Pearson check.
    """
    fine = np.asarray(fine_counts, dtype=np.int64).reshape(-1)
    if fine.shape != (FINE_CELLS,) or (fine < 0).any():
        raise ValueError(f"fine_counts must be {FINE_CELLS} non-negative counts, got shape {fine.shape}")
    name = check_name(name)
    alpha, beta = check_rates(false_fail_rate, false_pass_rate)
    S = int(fine.sum())
    num_events = check_int(num_events, "num_events", minimum=0)
    if num_events > S:
        raise ValueError(f"num_events={num_events} exceeds the {S} slots")
    m = num_cells(S, min_expected=min_expected)
    f = num_events / S if S else 0.0
    info = {"num_slots": S, "num_events": num_events, "event_fraction": f, "num_cells": m,
            "detectable_tv_of": f"binned PIT law of the {what}", **(details or {})}
    if m < 2 or num_events == 0:
        return CheckResult(
            name=name, method="exact", statistic=0.0, pvalue=1.0, dof=0, n=S, false_fail_rate=alpha,
            detectable_tv=math.inf, false_pass_rate=beta, passed=True, worst=(),
            details={**info, "cell_counts": coarsen(fine, m).tolist() if S else [],
                     "detectable_tv_of_slots": None},
            description=(f"randomised PIT of {num_events} {what} on {S} slots: fewer than two cells of "
                         f">= {min_expected:g} expected counts (or no event), so no test (p-value 1, "
                         "detectable TV inf)"))
    counts = coarsen(fine, m)
    res = chisquare_gof(counts, np.full(m, 1.0 / m), false_fail_rate=alpha, false_pass_rate=beta,
                        min_expected=min(min_expected, S / m), labels=[f"U in [{j / m:.2g}, {(j + 1) / m:.2g})"
                                                                       for j in range(m)], name=name)
    tv_slots = min_detectable_tv_chisquare(S, num_bins=m, false_fail_rate=alpha, false_pass_rate=beta)
    tv = tv_slots / f if f > 0 else math.inf
    if tv > 1.0:
        tv = math.inf
    return CheckResult(
        name=name, method=res.method, statistic=res.statistic, pvalue=res.pvalue, dof=res.dof, n=S,
        false_fail_rate=alpha, detectable_tv=tv, false_pass_rate=beta, passed=res.passed, worst=res.worst,
        details={**info, "cell_counts": counts.tolist(), "detectable_tv_of_slots": tv_slots},
        description=(f"randomised PIT of each of {num_events} {what} under its own exact law, on {S} slots "
                     f"fixed in advance ({S - num_events} independent uniform fillers), Pearson chi-square "
                     f"against Uniform(0, 1) on {m} equal cells (exactly multinomial under the null)"))
