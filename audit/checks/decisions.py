"""An observer that judges every decision of a speculative decoder online.

:class:`DecisionObserver` is handed to
:func:`~specexact.decoders.speculative_generate` as its ``observer``: after every round it
reads the drafts, both laws at every position, the verifier's output and the cut
(:class:`~specexact.decoders.RoundRecord`) and accumulates, without storing any ``[events,
V]`` array:

- **exact rule violations** (:mod:`~specexact.audit.checks.decisions_rules`): a draft that had to
  be accepted (``p(d) >= q(d)``) or rejected (``p(d) = 0``) but was not; a token after a
  rejection outside the residual's support; a bonus token of target probability 0; a
  round cut wrongly at EOS / ``max_new_tokens``, or a row that goes on after its cut;
- **randomised PITs** (:mod:`~specexact.exactness.pit`) of every decision under its own
  acceptance probability, of every recovered token under its own normalised residual and
  of every bonus token under its own ``p_γ``: counted in fixed cells on a number of
  *slots* fixed before sampling (:class:`~specexact.audit.checks.decisions_tally.SlotPlan`),
  so their counts are exactly multinomial for a correct sampler;
- for the diagnosis: the same PITs per row class and position (events only), the
  log-likelihood of the events under the neighbouring positions' laws (position
  alignment; first :data:`~specexact.audit.checks.decisions_tally.ALT_CALLS` calls), the
  expected cell probabilities under acceptance scaled by factors
  (:data:`~specexact.audit.checks.decisions_tally.SCALE_GRID`, the detectable scale; from the
  first :data:`~specexact.audit.checks.decisions_tally.SCALE_CALLS` calls),
  and the most surprising event of each kind with its context and laws.

:meth:`DecisionObserver.summary` returns all of it JSON-ready;
:mod:`~specexact.audit.checks.decisions_checks` turns it into checks.

Slot plan (one decoder call of ``B`` rows, ``γ`` drafts, ``L = max_new_tokens``):
``L - 1 + γ`` decision slots per row (a round makes at most as many decisions as it emits
tokens, and only the last round of a row is cut, so a row decides at most ``L - 1 + γ``
times); ``L`` recovered-token slots per row (one per round at most); and ``1 + (L - 1) //
(γ + 1)`` bonus slots (a full acceptance that is not a row's last round keeps ``γ + 1``
tokens). Slot ``j`` of a row holds that row's ``j``-th event of the kind; slots left empty
when the call ends get an independent uniform (filler). Within a call events are taken in
time order (round, then row, then position), and each is uniform given everything before
it for a correct sampler (rows of one call are independent given their inputs), which
is all the exactness of the null needs (:mod:`~specexact.exactness.pit`).

The observer's parts: the slot plan and the accumulators of each kind of event
(:mod:`~specexact.audit.checks.decisions_tally`), the PIT and log-likelihood arithmetic
(:mod:`~specexact.audit.checks.decisions_scores`), and the mixins reading one round: the
draft decisions (:mod:`~specexact.audit.checks.decisions_drafts`), the recovered and bonus
tokens (:mod:`~specexact.audit.checks.decisions_tokens`) and the cut
(:mod:`~specexact.audit.checks.decisions_cut`). This module holds the observer itself: its
state, the per-call and per-round bookkeeping, the event records and the slots.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from specexact.audit.checks.decisions_cut import CutChecks
from specexact.audit.checks.decisions_drafts import DraftDecisions
from specexact.audit.checks.decisions_rules import KAPPA, SCHEMES_CHECKED
from specexact.audit.checks.decisions_tally import SCALE_CALLS, SCALE_GRID, EventTally, SlotPlan, slot_plan
from specexact.audit.checks.decisions_tokens import TokenEvents
from specexact.exactness.pit import FINE_CELLS

__all__ = ["DecisionObserver"]


class DecisionObserver(CutChecks, DraftDecisions, TokenEvents):
    """Accumulate the per-event statistics of a case's decoder calls (module docstring).

    Parameters
    ----------
    batch_size : int
        Rows ``B`` of every decoder call.
    num_draft_tokens : int
        γ.
    max_new_tokens : int
        ``L`` (the cut the decoder applies).
    row_class : torch.LongTensor
        Shape ``[B]``: the row class of each batch row (for the per-class breakdown).
    num_classes : int
    prompts : torch.LongTensor
        Shape ``[B, T0]``: each row's prompt (events carry their context).
    eos_token_id : int or None
    scheme : str
        The sampler's declared verification scheme; per-decision laws exist for
        :data:`~specexact.audit.checks.decisions_rules.SCHEMES_CHECKED`, for the others only the
        cut is checked.
    seed : int
        Seed of the observer's own generator (the PIT randomisation ``W`` and the fillers),
        independent of the sampler's.
    slots : SlotPlan, optional
        Default :func:`slot_plan`.
    token_laws : bool
        Compute the PITs of recovered and bonus tokens (``O(V)`` per event); False keeps
        only their exact support checks (the verify-level case tests those laws itself).
    check_cut : bool
        Check the EOS / ``max_new_tokens`` cut (False at the verify level, which has none).

    Raises
    ------
    ValueError
        On inconsistent sizes.
    """

    def __init__(self, *, batch_size: int, num_draft_tokens: int, max_new_tokens: int, row_class: torch.Tensor,
                 num_classes: int, prompts: torch.Tensor, eos_token_id: int | None, scheme: str = "tokenwise",
                 seed: int = 0, slots: SlotPlan | None = None, token_laws: bool = True,
                 check_cut: bool = True) -> None:
        self.B, self.gamma, self.L = int(batch_size), int(num_draft_tokens), int(max_new_tokens)
        row_class = torch.as_tensor(row_class, dtype=torch.int64).cpu()
        if row_class.shape != (self.B,):
            raise ValueError(f"row_class must have shape [{self.B}], got {tuple(row_class.shape)}")
        self.row_class = row_class
        self.C = int(num_classes)
        self.prompts = prompts.cpu()
        self.eos = eos_token_id
        self.scheme = scheme
        self.applicable = scheme in SCHEMES_CHECKED
        self.slots = slots or slot_plan(self.gamma, self.L)
        self.token_laws = bool(token_laws)
        self.check_cut = bool(check_cut)
        self.gen = torch.Generator().manual_seed(int(seed) % (2**63))
        self.rng = np.random.default_rng(int(seed) % (2**63))
        self.dec = EventTally(self.C, self.gamma)
        self.rec = EventTally(self.C, self.gamma)
        self.bonus = EventTally(self.C, 1)
        self.must = {"accept": 0, "accept_violations": 0, "reject": 0, "reject_violations": 0}
        self.scale = torch.zeros(len(SCALE_GRID), FINE_CELLS, dtype=torch.float64)
        self.scale_slots = 0
        self.cut = {"rounds": 0, "calls": 0, "violations": 0, "events": []}
        self.call = -1
        self.round = 0
        self.seconds = 0.0

    # ------------------------------------------------------------------ per call
    def start_call(self) -> None:
        """Reset the per-call state before a decoder call."""
        self.call += 1
        self.round = 0
        self.hist = torch.full((self.B, self.L), -1, dtype=torch.int64)
        self.length = torch.zeros(self.B, dtype=torch.int64)
        self.done = torch.zeros(self.B, dtype=torch.bool)
        self.used = {k: torch.zeros(self.B, dtype=torch.int64) for k in ("dec", "rec", "bonus")}

    def finish_call(self, output=None) -> None:
        """Close the call: fill the empty slots and (with ``output``, a
        :class:`~specexact.decoders.GenerationOutput`) check the final tokens against the
        rounds' kept tokens and the cut."""
        uniform = np.full(FINE_CELLS, 1.0 / FINE_CELLS)
        rows_per_class = np.bincount(self.row_class.numpy(), minlength=self.C)
        for fam, key, per_row in ((self.dec, "dec", self.slots.decisions), (self.rec, "rec", self.slots.recovered),
                                  (self.bonus, "bonus", self.slots.bonus)):
            used = np.bincount(self.row_class.numpy(), weights=self.used[key].numpy(), minlength=self.C).astype(np.int64)
            fam.slots += self.B * per_row
            fill = rows_per_class * per_row - used  # [C]: each class's empty slots, filled independently
            for c in np.flatnonzero(fill > 0):
                cells = self.rng.multinomial(int(fill[c]), uniform)
                fam.slot_fine += cells
                fam.slot_fine_by_class[c] += cells
            if key == "dec" and self.call < SCALE_CALLS:
                self.scale += float(fill.sum()) / FINE_CELLS
                self.scale_slots += self.B * per_row
        if output is not None and self.check_cut:
            self._check_output(output)
        self.cut["calls"] += 1

    # ------------------------------------------------------------------ per round
    def __call__(self, rec) -> None:
        start = time.perf_counter()
        rows = rec.rows.cpu().long()
        ids = rec.draft_token_ids.long()
        out = rec.output.long()
        num = rec.num_emitted.cpu().long()
        kept = rec.num_kept.cpu().long()
        ngen = rec.num_generated.cpu().long()
        if self.check_cut:
            self._check_round(rows, out.cpu(), num, kept, ngen)
        if self.applicable:
            self._decisions(rec, rows, ids, out, num, ngen)
        # Append the kept tokens to the rows' histories (contexts of later events).
        out_c = out.cpu()
        n0 = self.length[rows]
        cols = n0[:, None] + torch.arange(out_c.shape[1])[None]
        put = (torch.arange(out_c.shape[1])[None] < kept[:, None]) & (cols < self.L)
        ai, ci = put.nonzero(as_tuple=True)
        self.hist[rows[ai], cols[ai, ci]] = out_c[ai, ci]
        self.length[rows] = n0 + put.sum(1)
        self.round += 1
        self.seconds += time.perf_counter() - start

    # ------------------------------------------------------------------ events and slots
    def _event(self, rec, a: int, position: int, kind: str, token: int | None, extra: dict) -> dict:
        """The context and the laws at the relevant tokens of one event (for the diagnosis)."""
        row = int(rec.rows[a])
        ids = rec.draft_token_ids[a].cpu().long()
        p = rec.target_probs[a, position].double().cpu()
        q = rec.draft_probs[a, min(position, self.gamma - 1)].double().cpu() if position < self.gamma else None
        V = p.numel()
        relevant = sorted({int(t) for t in ([int(ids[position])] if position < self.gamma else [])
                           + ([token] if token is not None else [])})
        top = torch.topk(p, min(5, V)).indices.tolist()
        if q is not None:
            top += torch.topk(q, min(5, V)).indices.tolist()
        laws = {str(v): {"p": float(p[v]), **({"q": float(q[v])} if q is not None else {})}
                for v in sorted(set(top) | set(relevant))}
        ev = {"kind": kind, "call": self.call, "round": self.round, "row": row, "class": int(self.row_class[row]),
              "position": position, "prompt": self.prompts[row].tolist(),
              "history": self.hist[row, :int(self.length[row])].tolist(), "drafts": ids.tolist(),
              "token": token, "laws_at": laws, **extra}
        if V <= 16:
            ev["target_law"] = [float(x) for x in p]
            if q is not None:
                ev["draft_law"] = [float(x) for x in q]
        return ev

    def _slots(self, key: str, batch_rows: torch.Tensor, per_row: int) -> torch.Tensor:
        """Which of these events (in time order, ``batch_rows`` their rows) get a slot."""
        batch_rows = batch_rows.cpu()
        if batch_rows.numel() == 0:
            return torch.zeros(0, dtype=torch.bool)
        used = self.used[key]
        # rank of each event among this round's events of its row (events are row-sorted)
        order = torch.arange(batch_rows.numel())
        first = torch.ones_like(batch_rows, dtype=torch.bool)
        first[1:] = batch_rows[1:] != batch_rows[:-1]
        start = torch.cummax(torch.where(first, order, torch.zeros_like(order)), 0).values
        rank = order - start
        ok = used[batch_rows] + rank < per_row
        self.used[key] += torch.bincount(batch_rows[ok], minlength=self.B)
        return ok


    # ------------------------------------------------------------------ result
    def summary(self) -> dict:
        """Everything accumulated, JSON-ready (read by
        :func:`~specexact.audit.checks.decisions_checks.decision_checks`)."""
        return {
            "scheme": self.scheme, "applicable": self.applicable, "kappa": KAPPA, "slot_plan": self.slots.to_dict(),
            "calls": self.call + 1, "observer_seconds": self.seconds, "token_laws": self.token_laws,
            "must": dict(self.must), "decisions": self.dec.to_dict(), "recovered": self.rec.to_dict(),
            "bonus": self.bonus.to_dict(), "scale_grid": list(SCALE_GRID),
            "scale_fine": self.scale.tolist(), "scale_slots": int(self.scale_slots),
            "cut": {**self.cut, "checked": self.check_cut},
        }
