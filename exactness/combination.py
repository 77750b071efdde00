"""Combining many checks' p-values into one, valid under dependence between the checks.

Bonferroni fails a family of ``m`` checks when one p-value is at most ``alpha / m``: evidence
spread over several checks (each a little above ``alpha / m``) is thrown away. The *Cauchy
combination test* turns each p-value into a standard Cauchy variable and averages them,

    T = sum_i w_i tan((0.5 - p_i) pi),        p = 0.5 - arctan(T) / pi,

with weights ``w_i >= 0`` summing to 1. Under the null each term is standard Cauchy whatever
the correlations between them, and a weighted mean of standard Cauchy variables is
standard Cauchy when they are independent *or* perfectly dependent; Liu and Xie prove that
the tail ``P(T > t)`` is ``P(C > t) (1 + o(1))`` as ``t -> inf`` under arbitrary dependence
(for test statistics that are pairwise bivariate normal), so the combined p-value is valid
for small false-fail rates, the regime the audit works in. For small p-values
``tan((0.5 - p) pi) = 1 / tan(p pi) ~ 1 / (p pi)``: the combined p-value is close to
``1 / sum_i (w_i / p_i)``, the weighted harmonic mean of the p-values, so it is never much
larger than Bonferroni's ``m * min(p)`` (equal weights) and falls below it when several
p-values are small.

Why Cauchy rather than the harmonic-mean p-value (Wilson 2019): both read the same small
p-values the same way, but the harmonic mean's own p-value needs the Landau distribution
(and is itself only asymptotically valid), while its version valid under any dependence
(Vovk and Wang 2020) pays a factor ``e log m``, which for the audit's few hundred checks
loses more than it gains over Bonferroni. The Cauchy p-value is analytic.

p-values near 1 make the Cauchy term large and negative (``-inf`` at ``p = 1``, which
discrete tests give often). :func:`cauchy_combination` caps each p-value at ``max_pvalue``
(default ``1 - 1/m``), so one check that has nothing to say moves ``T`` by at most
``w_i m / pi`` (``1 / pi`` with equal weights) instead of cancelling every other check.

A discrete test's p-value (an exact binomial or Fisher test, a count of few agreements) is
conservative: ``P(p <= t) < t`` between its atoms, often far below (``p = 1`` with
probability 0.46 for the audit's pair-agreement tests at their sample sizes). Fed to the
combination as they are, such p-values make the combined check conservative at every level.
:func:`randomized_pvalue` splits the atom at the observed statistic with an independent
uniform ``u``: ``p_lower + u (p - p_lower)``, ``p_lower = P(T > t)`` the probability of a
statistic strictly more extreme, is exactly Uniform(0, 1) under the null (Tocher's
randomised test), and never above ``p``, so a combination of randomised p-values rejects
whenever the plain one does.

Source: Y. Liu and J. Xie, "Cauchy combination test: a powerful test with analytic p-value
calculation under arbitrary dependency structures", *Journal of the American Statistical
Association* 115 (2020) 393-402; K. D. Tocher, "Extension of the Neyman-Pearson theory of
tests to discontinuous variates", *Biometrika* 37 (1950) 130-144; J. D. Habiger and E. A.
Peña, "Randomised P-values and nonparametric procedures in multiple testing", *Journal of
Nonparametric Statistics* 23 (2011) 583-604.
"""

from __future__ import annotations

import math

import numpy as np

from ._validate import check_pvalues as _pvalues, check_real

__all__ = ["cauchy_statistic", "cauchy_combination", "cauchy_pvalue", "randomized_pvalue"]


def _weights(weights, size: int) -> np.ndarray:
    if weights is None:
        return np.full(size, 1.0 / size)
    array = np.asarray(weights)
    if array.dtype.kind not in "fiu":
        raise TypeError(f"weights must be a real numeric array, got dtype {array.dtype}")
    array = array.astype(np.float64)
    if array.shape != (size,):
        raise ValueError(f"weights must have the shape of pvalues ({size},), got shape {array.shape}")
    if not np.all(np.isfinite(array)) or np.any(array < 0):
        raise ValueError(f"weights must be finite and >= 0, got {array.tolist()!r}")
    total = float(array.sum())
    if not abs(total - 1.0) <= 1e-9:
        raise ValueError(f"weights must sum to 1, got sum {total!r}")
    return array


def _term(p: np.ndarray) -> np.ndarray:
    """``tan((0.5 - p) pi)``, as ``1 / tan(p pi)`` for ``p < 0.5`` (no cancellation for tiny
    ``p``: ``0.5 - p`` rounds to 0.5 below ``p ~ 1e-17``) and ``-1 / tan((1 - p) pi)`` above;
    ``+inf`` at ``p = 0``."""
    out = np.empty_like(p)
    low = p < 0.5
    with np.errstate(divide="ignore"):
        out[low] = 1.0 / np.tan(p[low] * math.pi)
        out[~low] = -1.0 / np.tan((1.0 - p[~low]) * math.pi)
    out[p == 0.5] = 0.0
    return out


def cauchy_statistic(pvalues, weights=None, *, max_pvalue: float | None = None) -> float:
    """The Cauchy combination statistic ``T = sum_i w_i tan((0.5 - p_i) pi)``.

    Parameters
    ----------
    pvalues : array_like of float, shape (m,)
        The checks' p-values, in [0, 1].
    weights : array_like of float, shape (m,), optional
        Non-negative weights summing to 1 (within 1e-9), fixed before the data are seen.
        Default: ``1 / m`` each.
    max_pvalue : float, optional
        Each p-value is capped at this value, in (0.5, 1] (default ``1 - 1/m``, or 0.75
        for ``m = 1``; ``1`` caps nothing, and a p-value of 1 then gives ``-inf``).

    Returns
    -------
    float
        ``T``; ``+inf`` when a p-value with positive weight is 0.

    Raises
    ------
    TypeError
        ``pvalues`` or ``weights`` not numeric, or ``max_pvalue`` not a real number.
    ValueError
        ``pvalues`` empty, not one-dimensional or outside [0, 1] (NaN included);
        ``weights`` of another shape, negative, not finite or not summing to 1;
        ``max_pvalue`` outside (0.5, 1].

    Notes
    -----
    Source: Liu and Xie (2020), module docstring.
    """
    p = _pvalues(pvalues)
    w = _weights(weights, p.size)
    if max_pvalue is None:
        cap = 1.0 - 1.0 / p.size if p.size > 1 else 0.75
    else:
        cap = check_real(max_pvalue, "max_pvalue")
        if not 0.5 < cap <= 1.0:
            raise ValueError(f"max_pvalue must be in (0.5, 1], got {max_pvalue!r}")
    keep = w > 0
    terms = _term(np.minimum(p[keep], cap))
    if np.any(terms == math.inf):
        return math.inf
    return float(np.dot(w[keep], terms))


def cauchy_pvalue(statistic: float) -> float:
    """The p-value ``P(C >= T) = 0.5 - arctan(T) / pi`` of a standard Cauchy ``C``.

    Parameters
    ----------
    statistic : float
        ``T`` (``+inf`` gives 0, ``-inf`` gives 1).

    Returns
    -------
    float
        In [0, 1]; for large ``T`` computed as ``arctan(1 / T) / pi`` (no cancellation).

    Raises
    ------
    TypeError
        ``statistic`` is not a real number.
    ValueError
        ``statistic`` is NaN.
    """
    t = check_real(statistic, "statistic")
    if t == math.inf:
        return 0.0
    if t > 1.0:
        return math.atan(1.0 / t) / math.pi  # = 0.5 - arctan(t) / pi
    return min(1.0, max(0.0, 0.5 - math.atan(t) / math.pi))


def cauchy_combination(pvalues, weights=None, *, max_pvalue: float | None = None) -> float:
    """The Cauchy combination test's p-value of several checks' p-values.

    Valid for small false-fail rates under arbitrary dependence between the checks
    (asymptotically as the rate goes to 0; module docstring).

    Parameters
    ----------
    pvalues : array_like of float, shape (m,)
        The checks' p-values, in [0, 1].
    weights : array_like of float, shape (m,), optional
        Non-negative weights summing to 1, fixed before the data are seen; default equal.
    max_pvalue : float, optional
        Cap on each p-value (:func:`cauchy_statistic`).

    Returns
    -------
    float
        The combined p-value in [0, 1]; 0 when a p-value with positive weight is 0. Equals
        the p-value itself for ``m = 1`` (below the cap).

    Raises
    ------
    TypeError, ValueError
        As :func:`cauchy_statistic`.

    Examples
    --------
    >>> round(cauchy_combination([0.01, 0.01]), 6)
    0.01
    >>> cauchy_combination([1e-3, 0.5]) < 2 * 1e-3
    True
    """
    return cauchy_pvalue(cauchy_statistic(pvalues, weights, max_pvalue=max_pvalue))


def randomized_pvalue(pvalue: float, pvalue_lower: float, u: float) -> float:
    """A discrete test's randomised p-value ``pvalue_lower + u (pvalue - pvalue_lower)``.

    Parameters
    ----------
    pvalue : float
        The test's p-value ``P(T >= t)`` under the null, in [0, 1].
    pvalue_lower : float
        ``P(T > t)``, the probability of a statistic strictly more extreme than the observed
        one, in ``[0, pvalue]`` (equal to ``pvalue`` for a continuous statistic).
    u : float
        A uniform in [0, 1), drawn independently of the data.

    Returns
    -------
    float
        In ``[pvalue_lower, pvalue]``; exactly Uniform(0, 1) under the null when ``u`` is
        Uniform[0, 1) and independent of ``T`` (module docstring).

    Raises
    ------
    TypeError
        An argument is not a real number.
    ValueError
        ``pvalue`` outside [0, 1], ``pvalue_lower`` outside ``[0, pvalue]`` (beyond a
        rounding slack of 1e-12), ``u`` outside [0, 1), or a NaN.

    Notes
    -----
    Source: Tocher (1950); Habiger and Peña (2011) (module docstring).

    Examples
    --------
    >>> randomized_pvalue(0.3, 0.1, 0.5)
    0.2
    """
    p = check_real(pvalue, "pvalue")
    lower = check_real(pvalue_lower, "pvalue_lower")
    u = check_real(u, "u")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"pvalue must be in [0, 1], got {pvalue!r}")
    if not -1e-12 <= lower <= p + 1e-12:
        raise ValueError(f"pvalue_lower must be in [0, pvalue={p!r}], got {pvalue_lower!r}")
    if not 0.0 <= u < 1.0:
        raise ValueError(f"u must be in [0, 1), got {u!r}")
    lower = min(max(lower, 0.0), p)
    return float(lower + u * (p - lower))
