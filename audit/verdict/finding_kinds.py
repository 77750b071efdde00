"""The kind of each finding of a report: ``inexactness``, ``decision_rule``,
``under_accepting`` or a defect kind (:func:`finding_kind`), and of a failing combined
check (:func:`combined_kind`); with the readings of a case's checks they rest on (which
checks are accepted-length or per-decision checks, whether the law checks pass, whether
acceptance reads below its law). Used by :mod:`specexact.audit.verdict.findings` and
:mod:`specexact.audit.verdict.reproduction_commands`.
"""

from __future__ import annotations

from typing import Sequence

from specexact.audit.checks.combined import combined_check
from specexact.audit.checks.decisions_checks import DECISION_CHECK_NAMES

__all__ = ["is_accepted_length", "acceptance_below", "is_decision_check", "law_checks_pass", "under_accepting",
           "finding_kind", "combined_kind"]


def is_accepted_length(chk: dict) -> bool:
    """An acceptance check of the case's accepted-length law: ``accepted_length[...]``, or
    ``first_acceptance[...]`` where the law is known only for the first draft (a
    large-vocabulary block or two-sample case: the binomial test of ``P(N >= 1)``)."""
    return chk["name"].startswith(("accepted_length", "first_acceptance"))


def acceptance_below(chk: dict) -> tuple[float, float] | None:
    """``(observed, expected)`` of an acceptance check: the mean accepted length, or for
    ``first_acceptance`` the frequency of accepting the first draft; None if not recorded."""
    d = chk.get("details") or {}
    if chk["name"].startswith("first_acceptance"):
        n, k, prob = chk.get("n"), d.get("successes"), d.get("prob")
        if isinstance(n, (int, float)) and n > 0 and isinstance(k, (int, float)) and isinstance(prob, (int, float)):
            return float(k) / float(n), float(prob)
        return None
    mean, expected = d.get("mean_accepted_length"), d.get("expected_mean_accepted_length")
    if isinstance(mean, (int, float)) and isinstance(expected, (int, float)):
        return float(mean), float(expected)
    return None


def is_decision_check(chk: dict) -> bool:
    """A per-decision check (audit/checks/decisions_checks.py): it judges each decision against the
    declared scheme's rule, not the emitted law."""
    return chk["name"] in DECISION_CHECK_NAMES


def law_checks_pass(case: dict) -> bool:
    """Every check of the case on the emitted law and its independence passed (all but the
    accepted-length and per-decision checks)."""
    return all(c["passed"] for c in case["checks"] if not (is_accepted_length(c) or is_decision_check(c)))


def under_accepting(case: dict, chk: dict) -> bool:
    """Whether a failing accepted-length check is *exact but under-accepting*: every check of
    its case on the emitted law (sequences, tokens, independence) passed, and the mean
    accepted length fell below the scheme's own law's (for a token-wise sampler, the
    token-wise optimum); in a case whose accepted-length law is known only for the first
    draft (``first_acceptance``), the frequency of accepting it fell below ``P(N >= 1)``.
    Per-decision checks may fail beside it (a sampler of another scheme declared
    token-wise); they are findings of kind ``decision_rule``."""
    if chk["passed"] or not is_accepted_length(chk) or not law_checks_pass(case):
        return False
    below = acceptance_below(chk)
    return below is not None and below[0] < below[1]


def finding_kind(case: dict, chk: dict) -> str:
    """``inexactness`` (a check of the emitted law failed, or a per-decision check beside
    one), ``decision_rule`` (per-decision checks fail while every check of the emitted law
    passes: the decisions do not follow the declared scheme — an inexactness too small for
    the law checks, or an exact sampler of another scheme), ``under_accepting``, or a defect
    kind."""
    if chk["name"] != "defect":
        if under_accepting(case, chk):
            return "under_accepting"
        if is_decision_check(chk) and law_checks_pass(case):
            return "decision_rule"
        return "inexactness"
    kind = (chk.get("details") or {}).get("kind")
    if kind in ("timeout", "crash"):
        return kind
    defect = case.get("defect") or ""
    return "protocol_violation" if defect.startswith("protocol violation") else "crash"


def combined_kind(flat: Sequence[dict], case_dicts: Sequence[dict], combined: dict, seed: int | None = None) -> str:
    """The kind of a failing combined check's finding: ``under_accepting`` or ``inexactness``.

    The combined check mixes the accepted-length checks' p-values with the law checks'. Its
    failure is read as *exact but under-accepting* (as :func:`under_accepting` reads one
    accepted-length check) when the acceptance evidence that makes it fail reads below the
    law: the same combination (same members, same threshold) *without* the accepted-length
    checks passes, and the combination of the law checks and only those accepted-length
    checks whose mean lies below their law's, in cases whose law checks all pass, still
    fails. Otherwise (the law checks' evidence alone suffices, or the acceptance evidence
    that matters reads above the law or lies in a case with a failing law check) it is
    ``inexactness``. Only the tier's reading changes: whether the audit fails is decided by
    the combined check alone, so a correct sampler's false-fail rate is unchanged.

    Parameters
    ----------
    flat : sequence of dict
        The report's flat checks (``case``, ``name``, ``pvalue``, ``passed``, ``dof``,
        ``detectable_tv``, ``details``).
    case_dicts : sequence of dict
        The report's cases (``name``, ``checks``).
    combined : dict
        The failing combined check (:func:`~specexact.audit.checks.combined.combined_check`).
    seed : int, optional
        The audit's seed, as the combined check read it (its randomised p-values).

    Returns
    -------
    str
    """
    rate = float(combined["false_fail_rate"])
    law = [c for c in flat if not is_accepted_length(c)]
    if not combined_check(law, rate, seed)["passed"]:
        return "inexactness"
    cases = {c["name"]: c for c in case_dicts}

    def reads_below(chk: dict) -> bool:
        below = acceptance_below(chk)
        case = cases.get(chk["case"])
        return below is not None and below[0] < below[1] and case is not None and law_checks_pass(case)

    under = [c for c in flat if is_accepted_length(c) and reads_below(c)]
    return "inexactness" if combined_check(law + under, rate, seed)["passed"] else "under_accepting"
