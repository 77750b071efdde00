"""The acceptance-drop comparison of regression mode (``--baseline``).

Per case and row class, the drafts accepted in the first round are compared between a
baseline report and the current one (:func:`compare_acceptance`): the mean accepted
length (:class:`AcceptanceStats` of kind ``"counts"``) with a one-sided two-sample z test
on the pooled samples' variance, or, for two-sample cases, the first-draft acceptance rate
(kind ``"first"``) with Fisher's exact test. Each comparison
(:class:`AcceptanceComparison`) states the drop chance allows at its rate and the drop it
detects with probability :data:`POWER`;
:func:`~specexact.audit.verdict.baseline.compare_to_baseline` splits its false-alarm rate
over the comparisons.

Acceptance statistics are read, in this order, from ``case["acceptance"]``
(``{"class c": {"counts": [#N=0, ..., #N=γ]}}``), from the ``accepted_length[class c]``
check's ``details["observed_counts"]`` (unbinned counts per accepted length), from its
``worst`` entries when every bin is a single value ``N=k`` (bins merged for rare lengths
cannot be used), and from ``first_acceptance[class c]``'s ``details["successes"]``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
from scipy import stats

__all__ = ["POWER", "AcceptanceStats", "AcceptanceComparison", "acceptance_stats", "compare_acceptance"]

POWER = 0.99
"""Power at which :attr:`AcceptanceComparison.detectable_drop` is stated."""

_CLASS = re.compile(r"^(accepted_length|first_acceptance)\[(.+)\]$")
_SINGLE_BIN = re.compile(r"^N=(\d+)$")


@dataclass(frozen=True)
class AcceptanceStats:
    """First-round acceptance of one row class in one report.

    ``kind`` is ``"counts"`` (``counts[k]`` rounds accepted exactly ``k`` drafts) or
    ``"first"`` (``successes`` of ``n`` rounds accepted the first draft).
    """

    kind: str
    n: int
    counts: tuple[int, ...] = ()
    successes: int = 0

    @property
    def value(self) -> float:
        """Mean accepted length (counts) or first-draft acceptance rate (first)."""
        if self.n == 0:
            return math.nan
        if self.kind == "counts":
            return float(np.dot(np.arange(len(self.counts)), self.counts) / self.n)
        return self.successes / self.n

    @property
    def variance(self) -> float:
        """Sample variance of one observation."""
        if self.n < 2:
            return math.nan
        if self.kind == "counts":
            k = np.arange(len(self.counts))
            return float(np.dot((k - self.value) ** 2, self.counts) / (self.n - 1))
        p = self.value
        return p * (1 - p)


@dataclass(frozen=True)
class AcceptanceComparison:
    """Baseline vs current acceptance of one case / class.

    ``drop = baseline - current``; ``allowed_drop`` is the largest drop chance explains at
    the per-comparison rate ``false_alarm_rate`` (normal approximation); ``pvalue`` is
    one-sided (z with the pooled samples' variance for mean lengths, Fisher's exact test for
    rates);
    ``detectable_drop`` is the drop found with probability :data:`POWER`.
    """

    case: str
    row_class: str
    statistic: str
    baseline: float
    current: float
    n_baseline: int
    n_current: int
    drop: float
    allowed_drop: float
    detectable_drop: float
    pvalue: float
    false_alarm_rate: float
    dropped: bool


def _counts(values) -> tuple[int, ...]:
    """Non-negative integer counts, or ValueError (a report the schema let through with other
    values there: that class is not compared, rather than failing after the audit)."""
    if not isinstance(values, (list, tuple)) or not values:
        raise ValueError("no counts")
    out = []
    for x in values:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or not 0 <= x <= 2**53 or x != int(x):
            raise ValueError(f"not a count: {x!r}")
        out.append(int(x))
    return tuple(out)


def acceptance_stats(report: Mapping[str, Any]) -> dict[tuple[str, str], AcceptanceStats]:
    """``{(case, "class c"): AcceptanceStats}`` from a report (see the module docstring).

    A class whose counts are not non-negative integers is left out (not compared)."""
    out: dict[tuple[str, str], AcceptanceStats] = {}
    for case in report.get("cases", []):
        for label, entry in (case.get("acceptance") or {}).items():
            try:
                counts = _counts(entry["counts"])
            except (KeyError, TypeError, ValueError):
                continue
            out[(case["name"], label)] = AcceptanceStats("counts", int(sum(counts)), counts=counts)
    for chk in report.get("checks", []):
        try:
            _check_acceptance(chk, out)
        except (KeyError, TypeError, ValueError, OverflowError):
            continue
    return out


def _check_acceptance(chk: Mapping[str, Any], out: dict) -> None:
    """Add the acceptance of one accepted-length / first-acceptance check to ``out``."""
    m = _CLASS.match(chk["name"])
    key = (chk["case"], m.group(2)) if m else None
    if m is None or key in out:
        return
    if m.group(1) == "first_acceptance":
        succ = (chk.get("details") or {}).get("successes")
        if succ is not None:
            (n, succ) = _counts([chk["n"], succ])
            if succ <= n:
                out[key] = AcceptanceStats("first", n, successes=succ)
        return
    observed_counts = (chk.get("details") or {}).get("observed_counts")
    if isinstance(observed_counts, list) and observed_counts:
        counts = _counts(observed_counts)
        out[key] = AcceptanceStats("counts", int(sum(counts)), counts=counts)
        return
    bins = {}
    for label, observed, _expected in chk.get("worst", []):
        b = _SINGLE_BIN.match(str(label))
        if b is None:
            break
        bins[int(b.group(1))] = _counts([observed])[0]
    else:
        if bins and sum(bins.values()) == int(chk["n"]):
            counts = tuple(bins.get(k, 0) for k in range(max(bins) + 1))
            out[key] = AcceptanceStats("counts", int(chk["n"]), counts=counts)


def _pooled_variance(base: AcceptanceStats, cur: AcceptanceStats) -> float:
    """Sample variance of one observation of the two ``counts`` samples taken together."""
    size = max(len(base.counts), len(cur.counts))
    counts = np.zeros(size)
    counts[:len(base.counts)] += base.counts
    counts[:len(cur.counts)] += cur.counts
    n = counts.sum()
    if n < 2:
        return math.nan
    k = np.arange(size)
    mean = float(np.dot(k, counts) / n)
    return float(np.dot((k - mean) ** 2, counts) / (n - 1))


def compare_acceptance(case: str, label: str, base: AcceptanceStats, cur: AcceptanceStats,
                       alpha: float) -> AcceptanceComparison:
    """Whether the acceptance of ``case`` / ``label`` dropped from ``base`` to ``cur`` at the
    one-sided rate ``alpha`` (module docstring); both of one kind, each of ``n >= 2``."""
    z_a = float(stats.norm.isf(alpha))
    z_b = float(stats.norm.isf(1 - POWER))
    drop = base.value - cur.value
    if base.kind == "counts":
        # Under "no drop" both samples come from one law: its variance is estimated from
        # the two samples pooled (the score test, as for the rates below). Each sample's
        # own variance (Welch) fails where rejections are rare: a baseline of 2,048 rounds
        # that happened to accept every draft has variance 0, and a current run at the
        # same expected length (2.998 of 3) then "dropped" with p = 6e-32.
        se = math.sqrt(_pooled_variance(base, cur) * (1 / base.n + 1 / cur.n))
        if se > 0:
            pvalue = float(stats.norm.sf(drop / se))
        else:
            pvalue = 0.0 if drop > 0 else 1.0
        statistic = "mean accepted length"
    else:
        pooled = (base.successes + cur.successes) / (base.n + cur.n)
        se = math.sqrt(pooled * (1 - pooled) * (1 / base.n + 1 / cur.n))
        table = [[base.successes, base.n - base.successes], [cur.successes, cur.n - cur.successes]]
        pvalue = float(stats.fisher_exact(table, alternative="greater").pvalue)
        statistic = "first-draft acceptance rate"
    return AcceptanceComparison(
        case=case, row_class=label, statistic=statistic, baseline=base.value, current=cur.value,
        n_baseline=base.n, n_current=cur.n, drop=drop, allowed_drop=z_a * se,
        detectable_drop=(z_a + z_b) * se, pvalue=pvalue, false_alarm_rate=alpha, dropped=pvalue <= alpha,
    )

