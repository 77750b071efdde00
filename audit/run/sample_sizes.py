"""How many decoder calls a case needs, and what it detects with them: the planner's power arithmetic.

The planned detectable TV of a case is the smallest total-variation distance its
chi-square checks detect with power ``1 -`` :data:`FALSE_PASS_RATE` at the per-check
false-fail rate, on stand-in bins (:func:`planning_checks`; see the module docstring of
:mod:`~specexact.audit.run.plan`): :func:`approx_detectable_tv` for a number of sequences,
:func:`batches_for_tv` for the calls a TV needs, and :func:`tv_constant` for the constant
``K`` of ``TV**2 = K / n`` that :func:`~specexact.audit.run.plan.plan_batches` allocates
with. Call counts are even and at least :data:`MIN_BATCHES` (:func:`even_batches`);
:func:`minimum_time` is what those minimum calls cost.
"""

from __future__ import annotations

import math
from typing import Sequence

from specexact.audit.cases.decoder_case import AuditCase
from specexact.audit.cases.kinds import kind_of
from specexact.exactness.power import min_detectable_tv_chisquare, min_num_samples_chisquare

__all__ = [
    "MIN_BATCHES",
    "FALSE_PASS_RATE",
    "planning_checks",
    "fixed_calls",
    "rows_per_class",
    "approx_detectable_tv",
    "even_batches",
    "batches_for_tv",
    "minimum_time",
    "tv_constant",
]

#: Fewest decoder calls a case makes (the independence checks compare pairs of calls).
MIN_BATCHES = 2
#: Allowed miss probability of the planned detectable TV (power 0.99, as the checks).
FALSE_PASS_RATE = 0.01


def planning_checks(case: AuditCase) -> list[tuple[int, bool]]:
    """``(num_bins, two_sample)`` of the chi-square checks a class of ``case`` runs (stand-ins),
    as its kind says (:meth:`~specexact.audit.cases.protocol.CaseKind.planning_checks`).

    A verify-level case: ``first_token_law`` and ``accepted_length``. An exact
    decoder-level or tree-level case: the sequence law (``min(V ** length,
    PLAN_MAX_BINS)`` bins) and the accepted length. A two-sample decoder-level case:
    ``first_token_law`` with :func:`~specexact.audit.cases.planning.first_token_bins` bins (the target's ``top_k`` where
    every class sets one) and ``sequences_vs_naive``.
    """
    return kind_of(case).planning_checks(case)

def fixed_calls(case: AuditCase) -> int:
    """Calls ``case`` makes beyond its planned ones (:meth:`~specexact.audit.cases.protocol.CaseKind.fixed_calls`:
    an end-to-end case's reproducibility pair), each at the cost of a planned call."""
    return int(kind_of(case).fixed_calls(case))


def rows_per_class(case: AuditCase) -> int:
    return case.batch_size // len(case.row_classes)


def approx_detectable_tv(case: AuditCase, num_sequences_per_class: int, alpha: float) -> float:
    """Planned detectable TV of ``case`` with ``num_sequences_per_class`` sequences per class.

    The largest over the case's chi-square checks (stand-in bins); ``math.inf`` when some
    check cannot yet guarantee any TV up to 1.
    """
    if num_sequences_per_class < 1:
        return math.inf
    return max(
        min_detectable_tv_chisquare(int(num_sequences_per_class), num_bins=bins, false_fail_rate=alpha,
                                    false_pass_rate=FALSE_PASS_RATE, two_sample=two)
        for bins, two in planning_checks(case)
    )


def even_batches(x: float) -> int:
    """``x`` rounded up to an even count of at least :data:`MIN_BATCHES` decoder calls."""
    k = max(MIN_BATCHES, math.ceil(x - 1e-9))
    return k + (k % 2)


def batches_for_tv(case: AuditCase, tv: float, alpha: float) -> int:
    """Decoder calls ``case`` needs so that every chi-square check detects TV ``tv``."""
    n = max(
        min_num_samples_chisquare(tv, num_bins=bins, false_fail_rate=alpha, false_pass_rate=FALSE_PASS_RATE,
                                  two_sample=two)
        for bins, two in planning_checks(case)
    )
    return even_batches(n / rows_per_class(case))


def minimum_time(cases: Sequence[AuditCase], costs: Sequence[float]) -> float:
    """Sampling time of :data:`MIN_BATCHES` calls per case."""
    return sum(MIN_BATCHES * c for c in costs)


def tv_constant(case: AuditCase, alpha: float) -> float:
    """``K`` with ``(planned detectable TV)**2 = K / n`` at ``n`` sequences per class.

    The noncentral chi-square bound gives ``TV = sqrt(lambda* / (4 n_eff))``; ``K`` is the
    largest ``lambda* / 4`` (over the case's checks, two-sample ones doubled).
    """
    big = 10**12
    return max(
        min_detectable_tv_chisquare(big, num_bins=bins, false_fail_rate=alpha, false_pass_rate=FALSE_PASS_RATE,
                                    two_sample=two) ** 2 * big
        for bins, two in planning_checks(case)
    )
