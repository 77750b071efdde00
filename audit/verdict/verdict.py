"""Where the audit's verdict is decided: the report's ``verdict`` (:func:`decide_verdict`)
and the verdict of a ``specexact audit`` command, which its exit status follows
(:func:`command_verdict`).

The rules, all of them (the tiers are :mod:`specexact.audit.verdict.tiers`'s):

1. A finding of a failing tier (``inexact``, ``defect``, ``under_accepting``:
   :data:`~specexact.audit.verdict.tiers.FAILING_TIERS`) fails the audit.
2. A ``hardening`` finding fails it only with ``strict_inputs`` (``--strict-inputs``);
   otherwise it is listed and counted, and the audit passes beside it.
3. A finding without a ``tier`` is given one by
   :func:`~specexact.audit.verdict.tiers.tier_of` (an unknown check or fuzz rule counts as
   ``inexact``, so it fails the audit rather than passing unseen).
4. A case whose verdict is not ``"pass"`` fails the audit, with or without a finding. A case
   passes when it has no defect and every check of it passed
   (:attr:`specexact.audit.cases.result.CaseResult.passed`, its dict's ``verdict``).
5. A failing combined check is a finding like any other (tier ``inexact`` or
   ``under_accepting``, both failing); the fuzz phase's findings are findings too, each of
   its rule's tier.
6. Otherwise the audit passes: the report's verdict is ``"pass"`` or ``"fail"``, never
   anything else.
7. A command whose comparison with ``--baseline`` failed ends in ``"error"``, whatever the
   audit found.
8. In regression mode (``--baseline``) the command's verdict is the comparison's:
   ``"fail"`` on a regression, else ``"pass"``, whatever the audit alone found.
9. Otherwise the command's verdict is the report's.
10. A command whose verdict would be ``"pass"`` (by 8 or 9) ends in ``"error"`` when its
    fuzz phase could not run (the report's ``fuzz.error``): it never passes without it.
11. A command none of whose cases got its engine started (every case's dict says
    ``engine_not_started``: the engine's first load in the process raised, nothing of it
    ran: :func:`not_started`) ends in ``"error"``, whatever else: nothing was audited. A
    case started elsewhere (another case, or the case's run in a fresh process) keeps
    rules 1-10.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from specexact.audit.cases.result import NOT_STARTED
from specexact.audit.verdict.tiers import failing_tiers, tier_of

__all__ = ["PASS", "FAIL", "ERROR", "NOT_STARTED", "fails", "decide_verdict", "not_started", "command_verdict"]

PASS, FAIL, ERROR = "pass", "fail", "error"
"""The verdicts: a report's is :data:`PASS` or :data:`FAIL`; a command's may be :data:`ERROR`."""
def fails(findings: Iterable[Mapping], strict_inputs: bool = False) -> bool:
    """Whether any of ``findings`` (each with ``tier``, or one is computed) fails the audit
    (rules 1-3)."""
    bad = failing_tiers(strict_inputs)
    return any((f.get("tier") or tier_of(f)) in bad for f in findings)


def decide_verdict(findings: Iterable[Mapping], case_verdicts: Iterable[str], strict_inputs: bool = False) -> str:
    """The report's verdict (rules 1-6): :data:`FAIL` when a finding of a failing tier is
    found (``hardening`` only with ``strict_inputs``) or a case's verdict is not ``"pass"``,
    else :data:`PASS`.

    Parameters
    ----------
    findings : iterable of mapping
        Every finding of the report (checks, the combined check, the fuzz phase).
    case_verdicts : iterable of str
        Every case's ``verdict``.
    strict_inputs : bool
        Whether ``hardening`` findings fail the audit too.

    Returns
    -------
    str
    """
    return FAIL if (fails(findings, strict_inputs) or any(v != PASS for v in case_verdicts)) else PASS


def not_started(case_dicts: Iterable[Mapping]) -> str | None:
    """Why no case of an audit got its engine started (rule 11): the first line of the first
    case's defect when there is a case and every case's dict has :data:`NOT_STARTED`, else
    None.

    Parameters
    ----------
    case_dicts : iterable of mapping
        Every case's dict (the report's ``cases``).

    Returns
    -------
    str or None
    """
    cases = list(case_dicts)
    if not cases or not all(c.get(NOT_STARTED) for c in cases):
        return None
    return (cases[0].get("defect") or "").split("\n", 1)[0]


def command_verdict(report_verdict: str, *, regressed: bool | None = None, fuzz_error: bool = False,
                    comparison_failed: bool = False, engine_not_started: bool = False) -> str:
    """The verdict of a ``specexact audit`` command, which its exit status follows
    (rules 7-11): :data:`PASS`, :data:`FAIL` or :data:`ERROR`.

    Parameters
    ----------
    report_verdict : str
        The report's verdict (:func:`decide_verdict`).
    regressed : bool, optional
        In regression mode, whether the comparison with the baseline found a regression;
        None without a baseline.
    fuzz_error : bool
        Whether the audit's fuzz phase could not run.
    comparison_failed : bool
        Whether the comparison with the baseline failed.
    engine_not_started : bool
        Whether no case got its engine started (:func:`not_started`).

    Returns
    -------
    str
    """
    if comparison_failed or engine_not_started:
        return ERROR
    if regressed is not None:
        verdict = FAIL if regressed else PASS
    else:
        verdict = PASS if report_verdict == PASS else FAIL
    return ERROR if (fuzz_error and verdict == PASS) else verdict
