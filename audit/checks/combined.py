"""The audit's false-fail split: Bonferroni per check, and one combined check over them all.

The audit's false-fail rate ``alpha`` is split in two (:data:`COMBINED_SHARE` = one half
each):

- ``(1 - share) * alpha`` equally over every check of every case (Bonferroni, as before):
  each check fails on its own at ``(1 - share) * alpha / num_checks``;
- ``share * alpha`` for the *combined check*: the Cauchy combination
  (:func:`specexact.exactness.combination.cauchy_combination`, Liu and Xie 2020) of the
  statistical checks' p-values, equal weights, which fails at ``p <= share * alpha``. It
  catches a wrong sampler whose evidence is spread over several checks, none of them
  small enough on its own (for instance ten checks at ``p = 5e-9`` of 450 at ``alpha = 1e-6``:
  combined ``p ~ 2.3e-7``, Bonferroni's smallest-p reading ``2.3e-6``).

By Bonferroni over the two parts, a correct sampler fails the audit with probability at
most ``alpha``, under any dependence between the checks (the combination's own validity
under dependence is asymptotic for small rates: :mod:`specexact.exactness.combination`).

Which checks enter (decided by the cases and sample sizes, never by the p-values):
every check but the exact rules (:data:`EXACT_RULES`: their p-value is 0 on a violation
and 1 otherwise, so they say nothing a combination could add) and the checks without
power at their sample size (a single bin: ``dof == 0`` and an infinite detectable TV,
p-value 1 by design). A check that fails on its own is *neutralised* in the combination
(its term set to 0, as for ``p = 0.5``): the combined check then reads only the evidence
the failing checks do not already report, so an exact failure (``p = 0``) or an
under-accepting sampler's accepted-length check is not reported twice (under a second
tier). This never makes a correct sampler fail more often: a check failing on its own
has ``p < 0.5``, so neutralising it only lowers the statistic.

A discrete check's p-value enters *randomised* (since schema 1.8): where a check records
``details["pvalue_lower"]`` (``P(T > t)``, the p-value without the observed atom: the
pair-agreement Fisher tests), the combination reads
:func:`~specexact.exactness.combination.randomized_pvalue` with a uniform drawn from the
audit's seed and the check's case and name (:func:`combination_uniform`: fixed before the
data are seen, the same in every run, shard and re-rendering of the report). Under the null
it is exactly uniform where the plain p-value is conservative (``p = 1`` with probability
0.46 for the pair tests of the quick cases), so the combined check spends its share instead
of a fraction of it; it is never above the plain p-value, so the combined check rejects
whenever it did without the randomisation (nothing caught before is lost). A check's own
verdict (Bonferroni) reads its plain p-value.
"""

from __future__ import annotations

import math
import zlib
from typing import Sequence

import numpy as np

from specexact.exactness.combination import cauchy_combination, randomized_pvalue

__all__ = ["COMBINED_SHARE", "EXACT_RULES", "METHOD", "split_false_fail_rate", "combination_settings",
           "enters_combination", "combination_uniform", "combination_pvalue", "combined_check"]

COMBINED_SHARE = 0.5
"""Share of the audit's false-fail rate kept for the combined check."""

METHOD = "cauchy"
"""The combination (Liu and Xie 2020)."""

EXACT_RULES = frozenset({"acceptance_exact", "recovered_support", "eos_cut", "defect", "lossy_tv"})
"""Check types left out of the combination: exact rules (p-value 0 or 1), the defect check,
and the lossy TV measurement (it never fails)."""

_STRONGEST = 5  # checks listed as the combined check's strongest evidence


def split_false_fail_rate(false_fail_rate: float, num_checks: int, share: float = COMBINED_SHARE
                          ) -> tuple[float, float]:
    """``(per_check, combined)``: each check's false-fail rate and the combined check's.

    Parameters
    ----------
    false_fail_rate : float
        The audit's, in (0, 1).
    num_checks : int
        Checks of the whole audit, >= 1.
    share : float
        Share for the combined check, in (0, 1).

    Returns
    -------
    (float, float)
        ``((1 - share) * false_fail_rate / num_checks, share * false_fail_rate)``.

    Raises
    ------
    ValueError
        A value out of range (named with its value).
    """
    if not 0 < false_fail_rate < 1:
        raise ValueError(f"false_fail_rate must be in (0, 1), got {false_fail_rate!r}")
    if int(num_checks) != num_checks or num_checks < 1:
        raise ValueError(f"num_checks must be an integer >= 1, got {num_checks!r}")
    if not 0 < share < 1:
        raise ValueError(f"share must be in (0, 1), got {share!r}")
    return (1.0 - share) * false_fail_rate / num_checks, share * false_fail_rate


def combination_settings(false_fail_rate: float, share: float = COMBINED_SHARE) -> dict:
    """The report's ``settings.combination`` (since 1.7): ``method``, ``share`` and the
    combined check's ``false_fail_rate``."""
    return {"method": METHOD, "share": float(share), "false_fail_rate": float(share * false_fail_rate)}


def _type(check: dict) -> str:
    return check["name"].split("[", 1)[0]


def enters_combination(check: dict) -> bool:
    """Whether a check (a report check dict) enters the combined check: not an exact rule
    (:data:`EXACT_RULES`) and with power at its sample size."""
    if _type(check) in EXACT_RULES:
        return False
    tv = check.get("detectable_tv", 0.0)  # "inf" after to_dict, None after the JSON round trip
    no_power = check.get("dof") == 0 and (tv is None or float(tv) == math.inf)
    return not no_power


def combination_uniform(seed: int, case: str, check: str) -> float:
    """The uniform in [0, 1) that randomises one check's p-value in the combined check.

    Parameters
    ----------
    seed : int
        The audit's seed (``settings.seed``).
    case, check : str
        The check's case and name.

    Returns
    -------
    float
        ``numpy.random.default_rng([seed mod 2**64, crc32(case), crc32(check)]).random()``:
        fixed by the audit's settings before any sampling, hence independent of the data.
    """
    key = [int(seed) % 2**64, zlib.crc32(case.encode("utf-8")), zlib.crc32(check.encode("utf-8"))]
    return float(np.random.default_rng(key).random())


def combination_pvalue(check: dict, seed: int | None) -> float:
    """The p-value a check brings to the combined check: randomised within its atom
    (:func:`~specexact.exactness.combination.randomized_pvalue`, with
    :func:`combination_uniform`) when it records ``details["pvalue_lower"]`` and ``seed`` is
    given, its plain ``pvalue`` otherwise (module docstring)."""
    pvalue = float(check["pvalue"])
    lower = (check.get("details") or {}).get("pvalue_lower")
    if seed is None or lower is None:
        return pvalue
    return randomized_pvalue(pvalue, float(lower), combination_uniform(seed, check["case"], check["name"]))


def combined_check(checks: Sequence[dict], false_fail_rate: float, seed: int | None = None) -> dict:
    """The combined check of a report's checks (module docstring).

    Parameters
    ----------
    checks : sequence of dict
        The report's flat checks (each with ``case``, ``name``, ``pvalue``, ``passed``,
        ``dof``, ``detectable_tv``).
    false_fail_rate : float
        The combined check's threshold (``settings.combination.false_fail_rate``), in (0, 1).
    seed : int, optional
        The audit's seed: discrete checks' p-values enter randomised
        (:func:`combination_pvalue`); None reads every p-value as it is (a report older
        than 1.8).

    Returns
    -------
    dict
        ``method``, ``pvalue``, ``false_fail_rate``, ``passed`` (``pvalue >
        false_fail_rate``), ``num_pvalues`` (checks combined), ``neutralised`` (of them,
        those failing on their own), ``randomised`` (of them, those whose p-value entered
        randomised; since 1.8) and ``strongest`` (up to five ``{"case", "check", "pvalue"}``
        of the smallest plain p-values that entered, smallest first). With no check to
        combine: p-value 1, passed.

    Raises
    ------
    ValueError
        ``false_fail_rate`` outside (0, 1), or a p-value outside [0, 1].
    """
    if not 0 < false_fail_rate < 1:
        raise ValueError(f"false_fail_rate must be in (0, 1), got {false_fail_rate!r}")
    members = [c for c in checks if enters_combination(c)]
    pvalues = [0.5 if not c["passed"] else combination_pvalue(c, seed) for c in members]
    randomised = sum(1 for c in members if c["passed"] and seed is not None
                     and (c.get("details") or {}).get("pvalue_lower") is not None)
    pvalue = cauchy_combination(pvalues) if pvalues else 1.0
    live = sorted((float(c["pvalue"]), c["case"], c["name"]) for c in members if c["passed"])
    return {
        "method": METHOD,
        "pvalue": float(pvalue),
        "false_fail_rate": float(false_fail_rate),
        "passed": bool(pvalue > false_fail_rate),
        "num_pvalues": len(pvalues),
        "neutralised": sum(1 for c in members if not c["passed"]),
        "randomised": randomised,
        "strongest": [{"case": case, "check": name, "pvalue": p} for p, case, name in live[:_STRONGEST]],
    }
