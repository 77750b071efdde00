"""The planner's stand-ins a case kind answers with (:meth:`~specexact.audit.cases.protocol.CaseKind.planning_checks`).

Shared by the kinds and by the planner (:mod:`specexact.audit.run.plan`), which re-exports them.
"""

from __future__ import annotations

import math

from specexact.audit.cases.decoder_case import AuditCase

__all__ = ["PLAN_MAX_BINS", "support_size", "first_token_bins"]

#: Bins assumed for a sequence / first-token check when planning (its binned law's size).
PLAN_MAX_BINS = 32


def support_size(vocab_size: int, length: int) -> int:
    """``V ** length``, capped at ``10**9`` without building a huge integer (the stand-in
    support of a sequence law)."""
    if length * math.log(max(vocab_size, 2)) > math.log(10**9):
        return 10**9
    return max(2, vocab_size**length)


def first_token_bins(case: AuditCase) -> int:
    """Stand-in bins of a two-sample case's ``first_token_law`` checks: ``min(V,
    PLAN_MAX_BINS)``, or the target's ``top_k`` when every class truncates to at most that
    many tokens (its first-token law then has at most ``top_k`` outcomes)."""
    bins = min(case.model.vocab_size, PLAN_MAX_BINS)
    ks = [int(rc.target_params.top_k or 0) for rc in case.row_classes]
    if ks and all(k > 0 for k in ks):
        bins = min(bins, max(max(ks), 2))
    return bins
