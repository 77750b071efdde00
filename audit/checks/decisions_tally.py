"""The slot plan and the accumulators of the per-event observer.

:class:`~specexact.audit.checks.decisions.DecisionObserver` counts the PITs of each kind of
event (decisions, recovered tokens, bonus tokens) in an :class:`EventTally`, on the number
of slots per row and decoder call fixed before sampling by :class:`SlotPlan`
(:func:`slot_plan`; the module docstring of :mod:`~specexact.audit.checks.decisions` derives
it). The constants say which calls also feed the diagnosis (:data:`SCALE_CALLS`,
:data:`ALT_CALLS`), at which acceptance scales (:data:`SCALE_GRID`), and how many violating
events are kept (:data:`MAX_EVENTS`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from specexact.exactness.pit import FINE_CELLS, fine_cell_counts

__all__ = ["SCALE_GRID", "SCALE_CALLS", "ALT_CALLS", "MAX_EVENTS", "SlotPlan", "slot_plan", "EventTally"]

SCALE_GRID = (0.5, 0.7, 0.8, 0.9, 0.95, 0.97, 0.98, 0.99, 0.995, 0.998, 0.999,
              1.001, 1.002, 1.005, 1.01, 1.02, 1.03, 1.05, 1.1, 1.2, 1.5, 2.0)
"""Acceptance scale factors ``s`` (acceptance ``min(1, s p / q)``) at which the observer
accumulates the expected PIT cell probabilities, to state the smallest scale the
acceptance check detects."""

SCALE_CALLS = 2
"""Decoder calls whose decisions give the expected cells under scaled acceptance (every
call's decisions have one law, so the first calls' average stands for all; the power
figure costs two small matrix products per round, the largest part of the observer's
cost on small vocabularies)."""

ALT_CALLS = 4
"""Decoder calls whose events are also scored under the neighbouring positions' laws
(the diagnosis' alignment reading; a misalignment moves the log-likelihood by nats per
event, so a few calls suffice, and at large V each recovered event costs two more passes)."""

MAX_EVENTS = 3
"""Violating events kept (with context and laws) per exact check."""


@dataclass(frozen=True)
class SlotPlan:
    """Slots per row and decoder call for each kind of event (derived in the module docstring
    of :mod:`~specexact.audit.checks.decisions`)."""

    decisions: int
    recovered: int
    bonus: int

    def to_dict(self) -> dict:
        return {"decisions": self.decisions, "recovered": self.recovered, "bonus": self.bonus}


def slot_plan(num_draft_tokens: int, max_new_tokens: int) -> SlotPlan:
    """The decoder-level slot plan: ``L - 1 + γ`` decisions, ``L`` recovered tokens and
    ``1 + (L - 1) // (γ + 1)`` bonus tokens per row and call (the most a row can have)."""
    g, L = int(num_draft_tokens), int(max_new_tokens)
    if g < 1 or L < 1:
        raise ValueError(f"num_draft_tokens and max_new_tokens must be >= 1, got {g}, {L}")
    return SlotPlan(decisions=L - 1 + g, recovered=L, bonus=1 + (L - 1) // (g + 1))


class EventTally:
    """Accumulators of one kind of event (decisions, recovered tokens, bonus tokens)."""

    def __init__(self, num_classes: int, num_positions: int) -> None:
        self.slot_fine = np.zeros(FINE_CELLS, dtype=np.int64)  # slots: events + fillers
        self.slot_fine_by_class = np.zeros((num_classes, FINE_CELLS), dtype=np.int64)
        self.events_in_slots_by_class = np.zeros(num_classes, dtype=np.int64)
        self.events_in_slots = 0
        self.events = 0  # all events, in slots or not
        self.slots = 0
        self.by_cp = np.zeros((num_classes, num_positions, FINE_CELLS), dtype=np.int64)
        self.ll = {"own": 0.0, "next": 0.0, "n_next": 0, "own_prev": 0.0, "prev": 0.0, "n_prev": 0,
                   "impossible_own": 0, "impossible_next": 0, "impossible_prev": 0}
        self.alt_fine = {"next": np.zeros(FINE_CELLS, dtype=np.int64), "prev": np.zeros(FINE_CELLS, dtype=np.int64)}
        self.strongest: tuple[float, dict] | None = None
        self.checked = 0  # events the exact rule was applied to
        self.violations = 0
        self.violation_events: list[dict] = []
        self.checked_by_position = np.zeros(num_positions + 1, dtype=np.int64)
        self.violations_by_position = np.zeros(num_positions + 1, dtype=np.int64)

    def count(self, positions: torch.Tensor, bad: torch.Tensor | None = None) -> None:
        """Count exact-rule applications (and violations) by position."""
        P = self.checked_by_position.size
        self.checked_by_position += np.bincount(positions.cpu().numpy(), minlength=P)[:P]
        if bad is not None and bool(bad.any()):
            self.violations_by_position += np.bincount(positions[bad].cpu().numpy(), minlength=P)[:P]

    def add_pits(self, u: torch.Tensor, in_slot: torch.Tensor, cls: torch.Tensor, pos: torch.Tensor) -> None:
        u = u.cpu()
        self.events += int(u.numel())
        if u.numel() == 0:
            return
        in_slot = in_slot.cpu()
        self.slot_fine += fine_cell_counts(u[in_slot])
        self.events_in_slots += int(in_slot.sum())
        cells = (u * FINE_CELLS).floor_().clamp_(0, FINE_CELLS - 1).long()
        C = self.slot_fine_by_class.shape[0]
        sc = cls.cpu()[in_slot]
        self.slot_fine_by_class += np.bincount((sc * FINE_CELLS + cells[in_slot]).numpy(),
                                               minlength=C * FINE_CELLS).reshape(C, FINE_CELLS)
        self.events_in_slots_by_class += np.bincount(sc.numpy(), minlength=C)
        flat = (cls.cpu() * self.by_cp.shape[1] + pos.cpu()) * FINE_CELLS + cells
        self.by_cp += np.bincount(flat.numpy(), minlength=self.by_cp.size).reshape(self.by_cp.shape)

    def offer(self, score: float, make_event) -> None:
        if self.strongest is None or score < self.strongest[0]:
            self.strongest = (float(score), make_event())

    def violation(self, count: int, make_events) -> None:
        self.violations += count
        if count and len(self.violation_events) < MAX_EVENTS:
            self.violation_events.extend(make_events(MAX_EVENTS - len(self.violation_events)))

    def to_dict(self) -> dict:
        return {
            "slot_fine": self.slot_fine.tolist(), "slots": int(self.slots),
            "slot_fine_by_class": self.slot_fine_by_class.tolist(),
            "events_in_slots_by_class": self.events_in_slots_by_class.tolist(),
            "events_in_slots": int(self.events_in_slots), "events": int(self.events),
            "by_class_position": self.by_cp.tolist(), "log_likelihood": dict(self.ll),
            "alternative_fine": {k: v.tolist() for k, v in self.alt_fine.items()},
            "strongest_event": None if self.strongest is None else self.strongest[1],
            "strongest_score": None if self.strongest is None else self.strongest[0],
            "checked": int(self.checked), "violations": int(self.violations),
            "violation_events": list(self.violation_events),
            "checked_by_position": self.checked_by_position.tolist(),
            "violations_by_position": self.violations_by_position.tolist(),
        }

