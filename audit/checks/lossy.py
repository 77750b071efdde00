"""Lossy samplers are measured, not failed: their emitted law's TV from the target's.

A sampler that declares ``scheme="lossy"`` (Medusa's typical acceptance, SGLang's target-only
rule with thresholds below 1) knowingly differs from the target. For it, every case's
sequence-law check becomes a *measurement* (:func:`lossy_tv_check`): the TV between its
emitted law and the target's, with a confidence interval at level ``1 - LOSSY_DELTA``
(:func:`~specexact.exactness.lossy_tv.tv_interval`), recorded as a check that passes; the
report lists them in a "lossy measurements" table.

Cells: every outcome of positive target probability its own cell (the *full* law) when there
are at most ``n / FULL_LAW_SAMPLES_PER_CELL`` of them, else the check's bins of at least
``min_expected`` expected counts (:func:`~specexact.exactness.goodness_of_fit.binned_law`:
the *binned* law, whose TV is at most the full law's, so its lower end still bounds the full
law's TV from below); outcomes of target probability 0 share one more cell. Both depend only
on the target law and ``n``, never on the counts, as the interval requires.
"""

from __future__ import annotations

import numpy as np

from specexact.exactness.goodness_of_fit import binned_law
from specexact.exactness.lossy_tv import tv_interval
from specexact.exactness.results import CheckResult

__all__ = ["LOSSY_DELTA", "FULL_LAW_SAMPLES_PER_CELL", "lossy_tv_check"]

LOSSY_DELTA = 0.01
"""The interval misses the TV with probability at most this (a 99 % interval; a
measurement spends none of the audit's false-fail rate)."""

FULL_LAW_SAMPLES_PER_CELL = 100
"""The full law is measured when it has at most ``n / FULL_LAW_SAMPLES_PER_CELL`` outcomes."""


def lossy_tv_check(counts, probs, *, false_fail_rate: float, min_expected: float, name: str,
                   split_seed: int = 0, delta: float | None = None) -> CheckResult:
    """The TV of a lossy sampler's emitted law from the target's, measured (module docstring).

    Parameters
    ----------
    counts : array_like of int, shape (M,)
        Samples per outcome (outcomes of target probability 0 included, with probability 0).
    probs : array_like of float, shape (M,)
        The target's exact law of the outcomes.
    false_fail_rate : float
        Recorded as the check's level (the measurement passes whatever it finds).
    min_expected : float
        Smallest expected count of a bin when the binned law is measured.
    name : str
    split_seed : int
        Seed of the interval's sample split (deterministic given it).
    delta : float, optional
        The interval's miss probability (default: :data:`LOSSY_DELTA`, read at call time).

    Returns
    -------
    CheckResult
        ``passed=True``, ``pvalue=1``, ``statistic`` the plug-in TV, ``detectable_tv`` inf (a
        measurement detects nothing); ``details["lossy_tv"]`` is the
        :class:`~specexact.exactness.lossy_tv.TVInterval` as a dict.

    Raises
    ------
    TypeError, ValueError
        Malformed counts or law (:func:`~specexact.exactness.lossy_tv.tv_interval`).
    """
    delta = LOSSY_DELTA if delta is None else delta
    counts = np.asarray(counts)
    probs = np.asarray(probs, dtype=np.float64)
    n = int(counts.sum())
    support = int(np.count_nonzero(probs > 0))
    bins = None if support * FULL_LAW_SAMPLES_PER_CELL <= n else binned_law(probs, n=n, min_expected=min_expected)
    interval = tv_interval(counts, probs, delta=delta, bins=bins, split_seed=split_seed)
    return CheckResult(
        name=name, method="exact", statistic=interval.estimate, pvalue=1.0, dof=None, n=n,
        false_fail_rate=false_fail_rate, detectable_tv=float("inf"), false_pass_rate=0.01, passed=True, worst=(),
        details={"lossy_tv": interval.to_dict(), "measured": True},
        description=(f"lossy sampler measured, not tested: TV of the {interval.law} emitted law from the target's "
                     f"{interval.estimate:.4g}, in [{interval.lower:.4g}, {interval.upper:.4g}] with probability "
                     f">= {1 - delta:g} ({interval.num_cells} cells, n={n})"))
