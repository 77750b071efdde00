"""Kinds of audit case behind one protocol: what the runner, the planner and replays ask a case.

An audit runs cases of several kinds — decoder-level cases (:mod:`.decoder_kind`: the
sampler inside the built-in decoder), verify-level cases (:mod:`.verify_kind`: one
verification call on laws specexact builds), tree-level cases (:mod:`.tree_kind`) and
end-to-end cases (:mod:`.e2e`: an engine's own generate loop). Each kind is one module
that defines ``CASE_KIND``, an object with the :class:`CaseKind` methods; the runner
(:func:`~specexact.audit.cases.dispatch.run_case`), the planner (:mod:`specexact.audit.run.plan`)
and the replay of a per-event finding (:mod:`specexact.audit.verdict.decisions_replay`) call
:func:`~specexact.audit.cases.kinds.kind_of` and never test a case's type themselves. A new
kind is a new module and one import in :mod:`specexact.audit.cases.kinds`.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, runtime_checkable

import torch

__all__ = ["CaseKind"]


@runtime_checkable
class CaseKind(Protocol):
    """What every kind of case answers.

    Attributes
    ----------
    name : str
        ``"decoder"``, ``"verify"``, ``"tree"``, ``"e2e"`` (reports, error messages).
    """

    name: str

    def handles(self, case) -> bool:
        """Whether ``case`` is of this kind."""

    def checks(self, case) -> int:
        """How many checks :meth:`run` reports for ``case`` (known before sampling, so the
        audit splits its false-fail rate in advance)."""

    def restrict(self, case, sampler) -> tuple[Any, str | None]:
        """``(case, None)`` when ``sampler`` runs all of ``case``; ``(restricted case,
        reason)`` when only some row classes; ``(None, reason)`` when none."""

    def planning_checks(self, case) -> list[tuple[int, bool]]:
        """``(num_bins, two_sample)`` stand-ins of the chi-square checks one row class
        runs (the planner's detectable TV)."""

    def fixed_calls(self, case) -> int:
        """Calls ``case`` makes beyond its planned ones, at the cost of one planned call
        each, whatever its number of calls (an end-to-end case's reproducibility pair: 1;
        other kinds: 0). The planner counts them in the case's minimum and its share."""

    def prepare(self, case, device: torch.device, sampler) -> Any:
        """What one timed call needs, built untimed (models, batches, laws)."""

    def call(self, case, prepared, sampler, *, rows: int | None, device: torch.device, full: bool) -> None:
        """One call of the sampler as :meth:`run` makes it (the pilot times it); ``rows``
        slices the batch (a warm-up), ``full`` includes what a call of :meth:`run` adds
        (observers, the naive sampler of a two-sample case)."""

    def run(self, case, sampler, *, false_fail_rate: float, seed: int, num_batches: int | None,
            time_budget_s: float | None, min_batches: int, device: torch.device | str,
            progress: Callable[[int, int], None] | None, min_expected: float):
        """Sample ``case`` and check it: a :class:`~specexact.audit.cases.result.CaseResult`."""

    def event_inputs(self, case, event: dict, sampler) -> dict:
        """The inputs of one recorded per-event check's row (:mod:`.decisions_replay`);
        raises ``ValueError`` for a kind that records no events."""
