#!/usr/bin/env python
"""Exact false-fail rate of the asymptotic Pearson chi-square test at tiny levels.

The audit refers Pearson's statistic to the chi-square law at per-check levels of 1e-8 and
below, where no Monte Carlo can measure the actual rate. This script computes it exactly
for a small binned law: the multinomial is a vector of independent Poisson counts
conditioned on their total, so

    P_mult(X2 >= c) = P_pois(X2 >= c, total = n) / P_pois(total = n),

and the joint law of (total, statistic) is built bin by bin by dynamic programming, with the
statistic on a grid of width ``--grid``; rounding every bin's contribution down and up
brackets the probability. Cost ~ n * (c / grid) * (counts per bin) * bins: keep n in the
hundreds to low thousands.

Usage::

    python scripts/pearson_tail.py --expected 400,100,20 --alpha 2e-8,5e-10
    python scripts/pearson_tail.py            # the table quoted in the calibration report
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from scipy import stats

DEFAULT = [
    ([50] * 3, 1e-5), ([50] * 3, 5e-10), ([50] * 5, 5e-10), ([50] * 10, 1e-5), ([50] * 10, 5e-10),
    ([20] * 5, 2e-8), ([400, 100, 20], 2e-8), ([400, 100, 20], 5e-10),
    ([300, 150, 75, 50, 50], 5e-10), ([1000, 200, 50], 5e-10),
]


def pearson_tail(expected, threshold: float, grid: float, round_up: bool) -> float:
    """P(Pearson >= threshold) for Multinomial(n, expected / n), with n = sum(expected)."""
    expected = np.asarray(expected, dtype=np.float64)
    n = int(round(expected.sum()))
    size = int(math.ceil(threshold / grid))
    joint = np.zeros((n + 1, size))  # P(total = s, statistic index = g), statistic < threshold
    joint[0, 0] = 1.0
    tail = np.zeros(n + 1)  # P(total = s, statistic >= threshold)
    for e in expected:
        new, new_tail = np.zeros_like(joint), np.zeros(n + 1)
        top = min(n, int(e + 20 * math.sqrt(e) + 50))
        for count in range(top + 1):
            weight = stats.poisson.pmf(count, e)
            if weight < 1e-300:
                continue
            value = (count - e) ** 2 / e / grid
            index = int(math.ceil(value)) if round_up else int(math.floor(value))
            new_tail[count:] += weight * tail[: n + 1 - count]
            if index >= size:
                new_tail[count:] += weight * joint[: n + 1 - count].sum(axis=1)
            else:
                new[count:, index:] += weight * joint[: n + 1 - count, : size - index]
                new_tail[count:] += weight * joint[: n + 1 - count, size - index:].sum(axis=1)
        joint, tail = new, new_tail
    return float(tail[n] / stats.poisson.pmf(n, expected.sum()))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--expected", default=None, help="expected counts per bin, comma-separated")
    parser.add_argument("--alpha", default="5e-10", help="levels, comma-separated")
    parser.add_argument("--grid", type=float, default=0.05)
    args = parser.parse_args(argv)
    if args.expected:
        configs = [([float(x) for x in args.expected.split(",")], float(a)) for a in args.alpha.split(",")]
    else:
        configs = DEFAULT
    print("| expected counts per bin | n | level | actual / nominal (bracket) |")
    print("|---|---|---|---|")
    for expected, alpha in configs:
        threshold = stats.chi2.isf(alpha, len(expected) - 1)
        low = pearson_tail(expected, threshold, args.grid, round_up=False) / alpha
        high = pearson_tail(expected, threshold, args.grid, round_up=True) / alpha
        print(f"| {', '.join(f'{e:g}' for e in expected)} | {int(sum(expected))} | {alpha:g} | "
              f"[{low:.3g}, {high:.3g}] |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
