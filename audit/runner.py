"""Run one audit case against a sampler and collect its calibrated check results.

:func:`run_case` serves every kind of case through its :class:`~specexact.audit.case_kind.CaseKind`
(:func:`~specexact.audit.case_kind.kind_of`): decoder-level cases
(:mod:`~specexact.audit.decoder_kind`, whose docstring lists their checks), verify-level
(:mod:`~specexact.audit.verify_case`), tree-level (:mod:`~specexact.audit.tree_case`) and
end-to-end cases (:mod:`~specexact.audit.e2e_case`). :func:`checks_per_case`,
:func:`restrict_to_sampler` and :func:`unsupported_reason` answer for any kind as well.
"""

from __future__ import annotations

from typing import Callable

import torch

from .case_kind import kind_of
from .case_result import CaseResult, case_seed
from .cases import AuditCase
from .decoder_kind import decision_observer
from .levels import CHI2_TAIL_INFLATION, MIN_EXPECTED

__all__ = ["CaseResult", "run_case", "decision_observer", "unsupported_reason", "restrict_to_sampler", "checks_per_case",
           "case_seed", "CHI2_TAIL_INFLATION", "MIN_EXPECTED"]


def checks_per_case(case: AuditCase) -> int:
    """How many checks :func:`run_case` runs for ``case`` (known before sampling, so the
    audit can split its false-fail rate in advance)."""
    return kind_of(case).checks(case)


def run_case(
    case: AuditCase,
    verifier: Callable,
    *,
    false_fail_rate: float,
    seed: int = 0,
    num_batches: int | None = None,
    time_budget_s: float | None = None,
    min_batches: int = 2,
    device: torch.device | str = "cpu",
    progress: Callable[[int, int], None] | None = None,
    min_expected: float = MIN_EXPECTED,
) -> CaseResult:
    """Sample ``case`` with ``verifier`` inside the built-in decoder and check its laws.

    A verify-level case (:class:`~specexact.audit.verify_case.VerifyCase`) calls the
    verifier directly instead, a tree-level case runs the tree decoder, an end-to-end case
    the engine's own generate loop: each kind's ``run`` (:mod:`~specexact.audit.case_kind`).

    Parameters
    ----------
    case : AuditCase
    verifier : callable or logits-level adapter
        Anything with the :func:`~specexact.decoders.verify` protocol, or a logits-level
        adapter (its reference laws then use its declared order of operations).
    false_fail_rate : float
        Per-check false-fail rate (the audit's total divided by its number of checks).
    seed : int
        Audit seed; the case's generator is seeded with :func:`case_seed`.
    num_batches : int, optional
        Fixed number of decoder calls (rounded up to even). Exactly one of ``num_batches``
        and ``time_budget_s`` must be given.
    time_budget_s : float, optional
        Sample until this many seconds have passed (at least 2 calls). The sample size
        then depends on the machine's speed but never on the data.
    min_batches : int, default 2
        With ``time_budget_s``: make at least this many calls (rounded up to even) however
        long they take (the plan's floor, :func:`~specexact.audit.plan.floor_batches`).
    device : torch.device or str
    progress : callable, optional
        ``progress(num_sequences, num_batches)`` after each call.
    min_expected : float
        Smallest expected count per bin of the chi-square checks (default
        :data:`MIN_EXPECTED`; smaller values only for calibration studies at relaxed rates).

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
    if (num_batches is None) == (time_budget_s is None):
        raise ValueError("give exactly one of num_batches and time_budget_s")
    runnable, reason = restrict_to_sampler(case, verifier)
    if runnable is None:
        raise ValueError(f"case {case.name!r} cannot audit this sampler: {reason}")
    return kind_of(runnable).run(runnable, verifier, false_fail_rate=false_fail_rate, seed=seed,
                                 num_batches=num_batches, time_budget_s=time_budget_s, min_batches=min_batches,
                                 device=device, progress=progress, min_expected=min_expected)


def unsupported_reason(case: AuditCase, verifier) -> str | None:
    """Why some classes of ``case`` cannot audit ``verifier`` (a logits-level sampler whose
    declared operations do not cover their target parameters; any logits-level sampler on
    a verify-level case, which hands the verifier probabilities; a sampler of another protocol
    or scheme than the case serves: :func:`~specexact.audit.tree_case.restrict_tree_case`,
    :func:`~specexact.audit.tree_case.chain_case_reason`; an end-to-end case and anything but
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
