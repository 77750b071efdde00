"""Pairs of draws that must be independent, pooled over groups of different laws: an exact test.

Two independent draws of a law ``P`` agree with probability ``pi = sum_s P(s)**2``
(:func:`~specexact.exactness.independence.collision_probability`). Pairs of several groups
(e.g. the row classes of an end-to-end case, each its own law) agree independently, group
``g``'s ``n_g`` pairs each with its ``pi_g``: the number of agreeing pairs ``K`` is a sum of
binomials ``Binomial(n_g, pi_g)``, whose law is their convolution, computed exactly here
(float64, no approximation). :func:`pooled_pair_agreement_check` tests ``K`` one-sided
against it: draws that share randomness (a shared stream makes identical requests give
identical outputs) agree more often.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy import stats

from ._validate import check_name, check_rates
from .results import CheckResult

__all__ = ["agreement_pmf", "pooled_pair_agreement_check"]


def agreement_pmf(num_pairs: Sequence[int], agree_probs: Sequence[float]) -> np.ndarray:
    """The exact law of the number of agreeing pairs: ``[sum(num_pairs) + 1]`` float64, the
    convolution of ``Binomial(num_pairs[g], agree_probs[g])`` (``scipy.stats.binom.pmf``)."""
    pmf = np.ones(1)
    for n, p in zip(num_pairs, agree_probs):
        if n:
            pmf = np.convolve(pmf, stats.binom.pmf(np.arange(int(n) + 1), int(n), float(p)))
    return pmf


def _tail(pmf: np.ndarray, k: int) -> float:
    """``P(K >= k)``, summed from the small end."""
    return float(min(1.0, np.sum(pmf[k:][::-1]))) if k < pmf.size else 0.0


def pooled_pair_agreement_check(num_equal: Sequence[int], num_pairs: Sequence[int],
                                collision_probs: Sequence[float], *, false_fail_rate: float,
                                false_pass_rate: float = 0.01, name: str = "pooled_pair_agreement",
                                labels: Sequence[str] | None = None) -> CheckResult:
    """Test that pairs of draws, pooled over groups, agree no more often than independent draws.

    Parameters
    ----------
    num_equal : sequence of int
        Per group, the pairs whose two draws are equal.
    num_pairs : sequence of int
        Per group, its pairs (each two draws that must be independent, every pair
        independent of the others); ``0 <= num_equal[g] <= num_pairs[g]``.
    collision_probs : sequence of float
        Per group, ``pi_g = sum_s P_g(s)**2`` in [0, 1], the exact agreement probability of
        two independent draws of its law. A group with ``pi_g == 1`` (a point mass) always
        agrees and tests nothing: it is left out (``details["left_out"]``).
    false_fail_rate : float
        The check's false-fail rate, in (0, 1); exact (the law of the count is exact).
    false_pass_rate : float, default 0.01
        Miss probability of the detectable deviation.
    name : str
    labels : sequence of str, optional
        Per group, its name in ``details["groups"]``.

    Returns
    -------
    CheckResult
        ``method="exact"``; ``statistic``: agreeing pairs; ``pvalue = P(K >= k)`` under the
        convolution (:func:`agreement_pmf`), ``details["pvalue_lower"] = P(K > k)``.
        ``details["detectable_shared_fraction"]`` is the smallest fraction ``rho`` of pairs
        drawn from one shared stream (agreeing surely; the others independent: each pair of
        group ``g`` agrees with probability ``rho + (1 - rho) pi_g``) caught with power
        ``1 - false_pass_rate``, by the exact law under that alternative (bisection);
        ``detectable_tv`` is ``rho`` times the pairs' mean ``1 - pi_g``: the total variation
        between a pair's joint law under that alternative and under independence, averaged
        over the pairs (``inf`` when even ``rho = 1`` is not caught, or no pair tests anything;
        ``detectable_shared_fraction`` is then ``None``: details hold finite floats only).

    Raises
    ------
    ValueError
        Lengths that differ, counts outside ``[0, num_pairs]``, a probability outside [0, 1],
        rates outside (0, 1); the message names the argument and its value.
    """
    alpha, beta = check_rates(false_fail_rate, false_pass_rate)
    name = check_name(name)
    equal, pairs, probs = list(num_equal), list(num_pairs), [float(p) for p in collision_probs]
    if not len(equal) == len(pairs) == len(probs) or (labels is not None and len(labels) != len(pairs)):
        raise ValueError(f"num_equal, num_pairs, collision_probs (and labels) must have one entry per group, got "
                         f"{len(equal)}, {len(pairs)}, {len(probs)}"
                         + ("" if labels is None else f", {len(labels)}"))
    labels = [str(g) for g in range(len(pairs))] if labels is None else [str(x) for x in labels]
    for g, (k, n, p) in enumerate(zip(equal, pairs, probs)):
        if int(n) != n or n < 0 or int(k) != k or not 0 <= k <= n:
            raise ValueError(f"group {labels[g]}: num_equal={k!r} and num_pairs={n!r} must be integers with "
                             "0 <= num_equal <= num_pairs")
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"group {labels[g]}: collision_probs must be in [0, 1], got {p!r}")
    keep = [g for g in range(len(pairs)) if pairs[g] and probs[g] < 1.0]
    left_out = [labels[g] for g in range(len(pairs)) if pairs[g] and probs[g] >= 1.0]
    n_g, k_g, pi_g = [int(pairs[g]) for g in keep], [int(equal[g]) for g in keep], [probs[g] for g in keep]
    N, k = sum(n_g), sum(k_g)
    groups = [{"group": labels[g], "pairs": int(pairs[g]), "equal": int(equal[g]), "collision_prob": probs[g]}
              for g in range(len(pairs))]
    details = {"groups": groups, "left_out": left_out, "num_equal_pairs": k, "num_pairs": N}
    description = ("one-sided exact test of the agreeing pairs against the convolution of Binomial(pairs, sum P^2) "
                   "per group (independent draws)")
    if N == 0:
        return CheckResult(name=name, method="exact", statistic=0.0, pvalue=1.0, dof=None, n=0,
                           false_fail_rate=alpha, detectable_tv=float("inf"), false_pass_rate=beta, passed=True,
                           worst=(), details={**details, "not_applicable": "no pair of draws with a collision "
                                                                          "probability below 1"},
                           description=description)
    null = agreement_pmf(n_g, pi_g)
    pvalue, lower = _tail(null, k), _tail(null, k + 1)
    crit = next((c for c in range(N + 1) if _tail(null, c) <= alpha), None)  # reject at K >= crit

    def power(rho: float) -> float:
        return _tail(agreement_pmf(n_g, [rho + (1.0 - rho) * p for p in pi_g]), crit)

    rho = float("inf")
    if crit is not None and power(1.0) >= 1.0 - beta:
        lo, hi = 0.0, 1.0
        for _ in range(30):
            mid = 0.5 * (lo + hi)
            lo, hi = (lo, mid) if power(mid) >= 1.0 - beta else (mid, hi)
        rho = hi
    mean_gap = sum(n * (1.0 - p) for n, p in zip(n_g, pi_g)) / N
    expected = float(sum(n * p for n, p in zip(n_g, pi_g)))
    return CheckResult(name=name, method="exact", statistic=float(k), pvalue=pvalue, dof=None, n=N,
                       false_fail_rate=alpha, detectable_tv=rho * mean_gap if np.isfinite(rho) else float("inf"),
                       false_pass_rate=beta, passed=pvalue > alpha,
                       worst=(("equal pairs", float(k), expected),),
                       details={**details, "pvalue_lower": lower, "expected_equal_pairs": expected,
                                "critical_value": crit,
                                "detectable_shared_fraction": rho if np.isfinite(rho) else None,
                                "detectable_tv_of": "a pair's joint law when a fraction of the pairs share one "
                                                    "stream (mean over the pairs)"},
                       description=description + f": {k} of {N} pairs agree, {expected:.4g} expected")
