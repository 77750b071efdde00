"""How lossy is a lossy sampler: an estimate of ``TV(sampler, target)`` with a confidence interval.

A sampler that declares itself lossy (scheme ``"lossy"``, e.g. Medusa's typical acceptance)
is not failed for differing from the target; the audit measures how much it differs.

Method (:func:`tv_interval`), for ``n`` i.i.d. samples counted on cells fixed without the
counts (as :mod:`.tv_bounds`: every outcome of positive target probability its own cell, or
the check's bins; one more cell of target mass 0):

- *estimate*: the plug-in ``T = TV(p_hat, p0)``. It is biased upward (by at most
  ``E TV(p_hat, p) <= sqrt((K - 1) / n) / 2``), which is why the interval is not centred on a
  bias-corrected value;
- *upper end* and a first lower end: ``T +- d`` with ``d`` the deviation bound of
  :func:`~.tv_bounds.l1_deviation_bound` at ``delta / 2`` (triangle inequality both ways:
  ``|TV(p, p0) - TV(p_hat, p0)| <= TV(p_hat, p)``);
- a second lower end from an *event*: a random half of the samples (a multivariate
  hypergeometric split of the counts, seeded) picks ``A = {cells with p_hat_1 > p0}``; on the
  other half, independent of ``A``, the one-sided Clopper-Pearson lower bound of ``p(A)`` at
  level ``delta / 2`` minus ``p0(A)`` bounds ``TV(p, p0) >= p(A) - p0(A)`` from below.
  It stays informative when ``K`` is large and ``d`` swamps ``T``.

The interval ``[max(T - d, event bound, 0), min(T + d, 1)]`` holds with probability at least
``1 - delta`` (union bound over the two halves of ``delta``), for the law on the cells: with
``bins=None`` the full law, with bins the binned law (whose TV is at most the full law's, so
the lower end also bounds the full law's TV).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy import stats

from ._validate import check_int, check_rate
from .tv_bounds import cell_counts, l1_deviation_bound

__all__ = ["TVInterval", "tv_interval"]


@dataclass(frozen=True)
class TVInterval:
    """``TV(sampler, reference)`` estimated, with ``lower <= TV <= upper`` at probability ``>= 1 - delta``.

    Attributes
    ----------
    estimate : float
        Plug-in TV over the cells (biased upward).
    lower, upper : float
    delta : float
    n : int
    num_cells : int
    law : {"full", "binned"}
    method : str
    details : dict
        ``deviation`` (half-width of the deviation interval), ``deviation_method``,
        ``event_lower`` (the event bound), ``event_cells`` (size of ``A``), ``split_seed``.
    """

    estimate: float
    lower: float
    upper: float
    delta: float
    n: int
    num_cells: int
    law: str
    method: str = "plug-in +- L1 deviation (delta/2); split-sample event lower bound (delta/2)"
    details: dict = field(default_factory=dict)

    def contains(self, tv: float) -> bool:
        """Whether ``lower <= tv <= upper``."""
        return self.lower <= tv <= self.upper

    def to_dict(self) -> dict:
        """JSON-ready dict of the fields."""
        return asdict(self)


def _clopper_pearson_lower(k: int, m: int, level: float) -> float:
    """One-sided lower confidence bound of a binomial proportion: ``P(p < bound) <= level``."""
    if k == 0:
        return 0.0
    return float(stats.beta.ppf(level, k, m - k + 1))


def tv_interval(counts, reference_probs, *, delta: float, bins=None, outside_count: int = 0,
                split_seed: int = 0) -> TVInterval:
    """Estimate ``TV(sampler, reference)`` with a ``1 - delta`` confidence interval.

    Parameters
    ----------
    counts : array_like of int, shape (M,)
        Samples per listed outcome.
    reference_probs : array_like of float, shape (M,)
        The target's exact law of the listed outcomes.
    delta : float
        In (0, 1): the interval misses the TV with probability at most ``delta``.
    bins : array_like of int, shape (M,), optional
        A partition fixed without the counts; default: the full law.
    outside_count : int
        Samples on outcomes not listed (all of reference probability 0).
    split_seed : int
        Seed of the split into halves (the result is deterministic given it).

    Returns
    -------
    TVInterval

    Raises
    ------
    TypeError, ValueError
        On malformed inputs or ``delta`` outside (0, 1); fewer than 2 samples.
    """
    delta = check_rate(delta, "delta")
    split_seed = check_int(split_seed, "split_seed", minimum=0)
    observed, reference, law = cell_counts(counts, reference_probs, bins=bins, outside_count=outside_count)
    n = int(observed.sum())
    if n < 2:
        raise ValueError(f"tv_interval needs at least 2 samples, got {n}")
    K = int(observed.size)
    estimate = 0.5 * float(np.abs(observed / n - reference).sum())
    dev = l1_deviation_bound(n, K, delta / 2)
    half = dev.eps / 2

    rng = np.random.default_rng(split_seed)
    first = rng.multivariate_hypergeometric(observed, n // 2)
    second = observed - first
    n1, n2 = int(first.sum()), int(second.sum())
    event = first / n1 > reference  # A, chosen on the first half only
    k = int(second[event].sum())
    event_lower = _clopper_pearson_lower(k, n2, delta / 2) - float(reference[event].sum())

    lower = max(0.0, estimate - half, event_lower)
    upper = min(1.0, estimate + half)
    return TVInterval(estimate=estimate, lower=lower, upper=upper, delta=delta, n=n, num_cells=K, law=law,
                      details={"deviation": half, "deviation_method": dev.method,
                               "event_lower": event_lower if math.isfinite(event_lower) else 0.0,
                               "event_cells": int(event.sum()), "split_seed": split_seed})
