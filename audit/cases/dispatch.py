"""Run one audit case against a sampler and collect its calibrated check results.

:func:`run_case` serves every kind of case through its :class:`~specexact.audit.cases.protocol.CaseKind`
(:func:`~specexact.audit.cases.kinds.kind_of`): decoder-level cases
(:mod:`~specexact.audit.cases.decoder_kind`, whose docstring lists their checks), verify-level
(:mod:`~specexact.audit.cases.verify_case`), tree-level (:mod:`~specexact.audit.cases.tree_case`) and
end-to-end cases (:mod:`~specexact.audit.cases.e2e`). :func:`checks_per_case`,
:func:`restrict_to_sampler` and :func:`unsupported_reason` answer for any kind as well.
"""

from __future__ import annotations

from typing import Callable

from specexact.audit.cases.decoder_case import AuditCase
from specexact.audit.cases.decoder_kind import decision_observer
from specexact.audit.cases.kinds import kind_of
from specexact.audit.cases.result import CaseResult, case_seed
from specexact.audit.cases.sampling import RunSettings
from specexact.audit.core.levels import CHI2_TAIL_INFLATION, MIN_EXPECTED

__all__ = ["CaseResult", "run_case", "decision_observer", "unsupported_reason", "restrict_to_sampler", "checks_per_case",
           "case_seed", "CHI2_TAIL_INFLATION", "MIN_EXPECTED"]


def checks_per_case(case: AuditCase) -> int:
    """How many checks :func:`run_case` runs for ``case`` (known before sampling, so the
    audit can split its false-fail rate in advance)."""
    return kind_of(case).checks(case)


def run_case(case: AuditCase, verifier: Callable, **run) -> CaseResult:
    """Sample ``case`` with ``verifier`` inside the built-in decoder and check its laws.

    A verify-level case (:class:`~specexact.audit.cases.verify_case.VerifyCase`) calls the
    verifier directly instead, a tree-level case runs the tree decoder, an end-to-end case
    the engine's own generate loop: each kind's ``run`` (:mod:`~specexact.audit.cases.protocol`).

    Parameters
    ----------
    case : AuditCase
    verifier : callable or logits-level adapter
        Anything with the :func:`~specexact.decoders.verify` protocol, or a logits-level
        adapter (its reference laws then use its declared order of operations).
    **run
        The run's settings, keyword arguments of
        :class:`~specexact.audit.cases.sampling.RunSettings`: ``false_fail_rate`` (per
        check: the audit's total divided by its number of checks), ``seed`` (the case's
        generator is seeded with :func:`case_seed`), exactly one of ``num_batches`` (decoder
        calls) and ``time_budget_s`` (seconds of sampling), ``min_batches``, ``device``,
        ``progress(num_sequences, num_batches)`` and ``min_expected`` (default
        :data:`MIN_EXPECTED`).

    Returns
    -------
    CaseResult
        A crash or protocol violation of the verifier is recorded as ``defect`` with a
        failing check of p-value 0.

    Raises
    ------
    ValueError
        Both or neither of ``num_batches`` / ``time_budget_s``, or a logits-level sampler
        that does not implement an operation the case's parameters need
        (:func:`unsupported_reason`).
    """
    settings = RunSettings(**run)
    runnable, reason = restrict_to_sampler(case, verifier)
    if runnable is None:
        raise ValueError(f"case {case.name!r} cannot audit this sampler: {reason}")
    return kind_of(runnable).run(runnable, verifier, **settings.kwargs())


def unsupported_reason(case: AuditCase, verifier) -> str | None:
    """Why some classes of ``case`` cannot audit ``verifier`` (a logits-level sampler whose
    declared operations do not cover their target parameters; any logits-level sampler on
    a verify-level case, which hands the verifier probabilities; a sampler of another protocol
    or scheme than the case serves: :func:`~specexact.audit.cases.tree_case.restrict_tree_case`,
    :func:`~specexact.audit.cases.tree_case.chain_case_reason`; an end-to-end case and anything but
    an engine), or ``None``."""
    return kind_of(case).restrict(case, verifier)[1]


def restrict_to_sampler(case: AuditCase, verifier) -> tuple[AuditCase | None, str | None]:
    """``case`` without the classes ``verifier`` cannot run, and why they were dropped.

    Returns ``(case, None)`` when every class runs, ``(restricted case, reason)`` when some
    do (:meth:`AuditCase.restricted`: same name and seed, original class numbers), and
    ``(None, reason)`` when none does. A verify-level case runs whole or not at all (not
    for a logits-level sampler); so does a tree-level case, for the samplers whose protocol and
    scheme it serves.
    """
    return kind_of(case).restrict(case, verifier)
