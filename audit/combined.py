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
"""

from __future__ import annotations

import math
from typing import Sequence

from specexact.exactness.combination import cauchy_combination

__all__ = ["COMBINED_SHARE", "EXACT_RULES", "METHOD", "split_false_fail_rate", "combination_settings",
           "enters_combination", "combined_check"]

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


def combined_check(checks: Sequence[dict], false_fail_rate: float) -> dict:
    """The combined check of a report's checks (module docstring).

    Parameters
    ----------
    checks : sequence of dict
        The report's flat checks (each with ``case``, ``name``, ``pvalue``, ``passed``,
        ``dof``, ``detectable_tv``).
    false_fail_rate : float
        The combined check's threshold (``settings.combination.false_fail_rate``), in (0, 1).

    Returns
    -------
    dict
        ``method``, ``pvalue``, ``false_fail_rate``, ``passed`` (``pvalue >
        false_fail_rate``), ``num_pvalues`` (checks combined), ``neutralised`` (of them,
        those failing on their own) and ``strongest`` (up to five ``{"case", "check",
        "pvalue"}`` of the smallest p-values that entered, smallest first). With no check
        to combine: p-value 1, passed.

    Raises
    ------
    ValueError
        ``false_fail_rate`` outside (0, 1), or a p-value outside [0, 1].
    """
    if not 0 < false_fail_rate < 1:
        raise ValueError(f"false_fail_rate must be in (0, 1), got {false_fail_rate!r}")
    members = [c for c in checks if enters_combination(c)]
    pvalues = [0.5 if not c["passed"] else float(c["pvalue"]) for c in members]
    pvalue = cauchy_combination(pvalues) if pvalues else 1.0
    live = sorted((float(c["pvalue"]), c["case"], c["name"]) for c in members if c["passed"])
    return {
        "method": METHOD,
        "pvalue": float(pvalue),
        "false_fail_rate": float(false_fail_rate),
        "passed": bool(pvalue > false_fail_rate),
        "num_pvalues": len(pvalues),
        "neutralised": sum(1 for c in members if not c["passed"]),
        "strongest": [{"case": case, "check": name, "pvalue": p} for p, case, name in live[:_STRONGEST]],
    }
