"""Kinds of audit case behind one protocol: what the runner, the planner and replays ask a case.

An audit runs cases of several kinds — decoder-level cases (:mod:`.decoder_kind`: the
sampler inside the built-in decoder), verify-level cases (:mod:`.verify_case`: one
verification call on laws specexact builds), tree-level cases (:mod:`.tree_case`) and
end-to-end cases (:mod:`.e2e_case`: an engine's own generate loop). Each kind is one module
that defines ``CASE_KIND``, an object with the :class:`CaseKind` methods; the runner
(:func:`~specexact.audit.runner.run_case`), the planner (:mod:`.plan`) and the replay of a
per-event finding (:mod:`.decisions_replay`) call :func:`kind_of` and never test a case's
type themselves. A new kind is a new module and one entry of :data:`KIND_MODULES`.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Protocol, runtime_checkable

import torch

__all__ = ["CaseKind", "KIND_MODULES", "kinds", "kind_of"]

KIND_MODULES = (
    "specexact.audit.e2e_case",
    "specexact.audit.tree_case",
    "specexact.audit.verify_case",
    "specexact.audit.decoder_kind",
)
"""The modules whose ``CASE_KIND`` :func:`kind_of` asks, in order (the first that handles
a case serves it)."""


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

    def prepare(self, case, device: torch.device, sampler) -> Any:
        """What one timed call needs, built untimed (models, batches, laws)."""

    def call(self, case, prepared, sampler, *, rows: int | None, device: torch.device, full: bool) -> None:
        """One call of the sampler as :meth:`run` makes it (the pilot times it); ``rows``
        slices the batch (a warm-up), ``full`` includes what a call of :meth:`run` adds
        (observers, the naive sampler of a two-sample case)."""

    def run(self, case, sampler, *, false_fail_rate: float, seed: int, num_batches: int | None,
            time_budget_s: float | None, min_batches: int, device: torch.device | str,
            progress: Callable[[int, int], None] | None, min_expected: float):
        """Sample ``case`` and check it: a :class:`~specexact.audit.case_result.CaseResult`."""

    def event_inputs(self, case, event: dict, sampler) -> dict:
        """The inputs of one recorded per-event check's row (:mod:`.decisions_replay`);
        raises ``ValueError`` for a kind that records no events."""


_KINDS: list | None = None


def kinds() -> list:
    """Every kind's ``CASE_KIND``, in :data:`KIND_MODULES` order (imported on first use)."""
    global _KINDS
    if _KINDS is None:
        _KINDS = [importlib.import_module(m).CASE_KIND for m in KIND_MODULES]
    return _KINDS


def kind_of(case) -> CaseKind:
    """The kind that serves ``case``.

    Raises
    ------
    TypeError
        No kind handles ``case`` (the message names its type and the known kinds).
    """
    for kind in kinds():
        if kind.handles(case):
            return kind
    raise TypeError(f"no case kind handles {type(case).__name__} {getattr(case, 'name', case)!r}; "
                    f"known kinds: {[k.name for k in kinds()]}")
