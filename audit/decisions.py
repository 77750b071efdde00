"""An observer that judges every decision of a speculative decoder online.

:class:`DecisionObserver` is handed to
:func:`~specexact.decoders.speculative_generate` as its ``observer``: after every round it
reads the drafts, both laws at every position, the verifier's output and the cut
(:class:`~specexact.decoders.RoundRecord`) and accumulates, without storing any ``[events,
V]`` array:

- **exact rule violations** (:mod:`~specexact.audit.decisions_rules`): a draft that had to
  be accepted (``p(d) >= q(d)``) or rejected (``p(d) = 0``) but was not; a token after a
  rejection outside the residual's support; a bonus token of target probability 0; a
  round cut wrongly at EOS / ``max_new_tokens``, or a row that goes on after its cut;
- **randomised PITs** (:mod:`~specexact.exactness.pit`) of every decision under its own
  acceptance probability, of every recovered token under its own normalised residual and
  of every bonus token under its own ``p_γ``: counted in fixed cells on a number of
  *slots* fixed before sampling (:class:`SlotPlan`), so their counts are exactly
  multinomial for a correct sampler;
- for the diagnosis: the same PITs per row class and position (events only), the
  log-likelihood of the events under the neighbouring positions' laws (position
  alignment; first :data:`ALT_CALLS` calls), the expected cell probabilities under acceptance scaled by factors
  (:data:`SCALE_GRID`, the detectable scale; from the first :data:`SCALE_CALLS` calls),
  and the most surprising event of each kind with its context and laws.

:meth:`DecisionObserver.summary` returns all of it JSON-ready;
:mod:`~specexact.audit.decisions_checks` turns it into checks.

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
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from specexact.exactness.pit import FINE_CELLS, bernoulli_pit, discrete_pit, fine_cell_counts

from .decisions_rules import (
    KAPPA,
    SCHEMES_CHECKED,
    acceptance_prob,
    must_accept,
    must_reject,
    recovered_support_ok,
    residual_rows,
)

__all__ = ["SCALE_GRID", "SlotPlan", "slot_plan", "DecisionObserver", "MAX_EVENTS"]

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

_LOG_FLOOR = 1e-12
_FINE_LO = torch.arange(FINE_CELLS, dtype=torch.float64) / FINE_CELLS
_FINE_HI = (torch.arange(FINE_CELLS, dtype=torch.float64) + 1) / FINE_CELLS
_CHUNK_ELEMENTS = 1 << 21
_GRID = torch.tensor(SCALE_GRID, dtype=torch.float64)  # rows of [c, V] float64 temporaries processed at once


@dataclass(frozen=True)
class SlotPlan:
    """Slots per row and decoder call for each kind of event (module docstring)."""

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


def _scaled_cells(a: torch.Tensor, ratio: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    """Summed cell probabilities ``[G, FINE_CELLS]`` of the PITs under ``a`` (``[n]``) of
    decisions whose true acceptance probability is ``min(1, s * ratio)`` for each ``s`` of
    ``grid`` (``[G]``). A decision's PIT then has density ``a_s / a`` on ``[0, a)`` and
    ``(1 - a_s) / (1 - a)`` on ``[a, 1)``; a rejection at ``a = 1`` maps to 1 (last cell)."""
    a = a.double().cpu()
    ratio = ratio.double().cpu()
    a_s = torch.where(ratio > 0, (grid[:, None] * ratio[None]).clamp(max=1.0), torch.zeros(()))  # [G, n]
    below = (torch.minimum(_FINE_HI[None], a[:, None]) - _FINE_LO[None]).clamp_min(0.0)  # [n, C]
    above = (1.0 / FINE_CELLS) - below
    lo = torch.where(a[None] > 0, a_s / a.clamp_min(1e-300)[None], torch.zeros(()))  # [G, n]
    hi = torch.where(a[None] < 1, (1.0 - a_s) / (1.0 - a).clamp_min(1e-300)[None], torch.zeros(()))
    cells = lo @ below + hi @ above  # [G, C]
    cells[:, -1] += torch.where(a[None] >= 1, 1.0 - a_s, torch.zeros(())).sum(1)
    return cells


def _ll_bernoulli(success: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    return torch.log(torch.where(success, a, 1.0 - a).clamp_min(_LOG_FLOOR))


def _impossible_bernoulli(success: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Outcomes of probability 0 under ``a``: accepted at ``a = 0``, rejected at ``a = 1``."""
    return torch.where(success, a <= 0, a >= 1)


def _pit_rows(r: torch.Tensor, t: torch.Tensor, w: torch.Tensor):
    """PIT of tokens ``t`` under rows ``r [c, V]`` (unnormalised, float64), tokens ordered
    by decreasing mass, ties by lower id. Returns ``(U, prob, surprise)``: the PIT, the
    normalised probability of ``t`` and ``r(t) / max r``."""
    total = r.sum(1)
    r_t = r.gather(1, t[:, None])  # [c, 1]
    idx = torch.arange(r.shape[1], device=r.device)[None]
    before = (r > r_t) | ((r == r_t) & (idx < t[:, None]))
    mass_before = torch.where(before, r, 0.0).sum(1)
    r_t = r_t.squeeze(1)
    u = discrete_pit(mass_before, r_t, total, w.to(r.device))
    return u, r_t / total, r_t / r.amax(1)


def _ll_rows(r: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Log-probabilities (floored) of tokens ``t`` under rows ``r``, and how many are 0."""
    total = r.sum(1).clamp_min(1e-300)
    r_t = r.gather(1, t[:, None]).squeeze(1)
    return torch.log((r_t / total).clamp_min(_LOG_FLOOR)), int((r_t <= 0).sum())


class _Family:
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


class DecisionObserver:
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
        :data:`~specexact.audit.decisions_rules.SCHEMES_CHECKED`, for the others only the
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
        self.dec = _Family(self.C, self.gamma)
        self.rec = _Family(self.C, self.gamma)
        self.bonus = _Family(self.C, 1)
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

    # ------------------------------------------------------------------ the cut
    def _cut_violation(self, message: str, row: int) -> None:
        self.cut["violations"] += 1
        if len(self.cut["events"]) < MAX_EVENTS:
            self.cut["events"].append({"call": self.call, "round": self.round, "row": row,
                                       "class": int(self.row_class[row]), "message": message,
                                       "history": self.hist[row, :int(self.length[row])].tolist()})

    def _check_round(self, rows, out, num, kept, ngen) -> None:
        self.cut["rounds"] += int(rows.numel())
        steps = torch.arange(out.shape[1])
        keep = steps[None] < num[:, None]
        if self.eos is not None:
            is_eos = (out == self.eos) & keep
            after = (is_eos.long().cumsum(1) - is_eos.long()) > 0
            keep &= ~after
        keep &= steps[None] < (self.L - ngen)[:, None]
        expected = keep.sum(1)
        for a in torch.nonzero((expected != kept) | self.done[rows] | (ngen != self.length[rows])).squeeze(1).tolist():
            r = int(rows[a])
            if bool(self.done[r]):
                self._cut_violation(f"row {r} got another round after it finished (EOS kept or "
                                    f"{self.L} tokens): nothing may be emitted past a cut", r)
            elif int(ngen[a]) != int(self.length[r]):
                self._cut_violation(f"row {r}: the decoder reports {int(ngen[a])} generated tokens, the kept "
                                    f"tokens of its rounds are {int(self.length[r])}", r)
            else:
                self._cut_violation(f"row {r} kept {int(kept[a])} of {int(num[a])} emitted tokens; the cut at EOS / "
                                    f"max_new_tokens={self.L} keeps {int(expected[a])}", r)
        fin = (ngen + kept) >= self.L
        if self.eos is not None:
            fin |= ((out == self.eos) & keep).any(1)
        self.done[rows] |= fin

    def _check_output(self, output) -> None:
        tokens = output.tokens.cpu().long()
        if tokens.shape != (self.B, self.L):
            self._cut_violation(f"the decoder returned tokens of shape {tuple(tokens.shape)}, expected "
                                f"[{self.B}, {self.L}]", 0)
            return
        bad = torch.nonzero((tokens != self.hist).any(1)).squeeze(1).tolist()
        for r in bad[:MAX_EVENTS]:
            self._cut_violation(f"row {r}: the returned tokens {tokens[r].tolist()} differ from the kept tokens of "
                                f"its rounds {self.hist[r].tolist()}", r)
        self.cut["violations"] += max(0, len(bad) - MAX_EVENTS)
        if self.eos is not None:
            is_eos = tokens == self.eos
            after = (is_eos.long().cumsum(1) - is_eos.long()) > 0
            past = torch.nonzero((after & (tokens >= 0)).any(1)).squeeze(1).tolist()
            for r in past[:MAX_EVENTS]:
                self._cut_violation(f"row {r} has tokens after its EOS: {tokens[r].tolist()}", r)
        short = ~self.done & (self.length < self.L)
        for r in torch.nonzero(short).squeeze(1).tolist()[:MAX_EVENTS]:
            self._cut_violation(f"row {r} stopped after {int(self.length[r])} tokens without EOS or "
                                f"max_new_tokens={self.L}", r)

    # ------------------------------------------------------------------ decisions
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

    def _decisions(self, rec, rows, ids, out, num, ngen) -> None:
        A, g = ids.shape
        dev = rec.target_probs.device
        tp, dp = rec.target_probs, rec.draft_probs
        n = num.to(dev) - 1
        pos = torch.arange(g, device=dev)
        decided = pos[None] <= n[:, None]  # [A, g]
        accepted = pos[None] < n[:, None]
        p_d = tp[:, :g].gather(2, ids[:, :, None]).squeeze(2).double()
        q_d = dp.gather(2, ids[:, :, None]).squeeze(2).double()
        a = acceptance_prob(p_d, q_d, self.scheme)
        cls = self.row_class[rows].to(dev)

        # Exact rules.
        ma = must_accept(p_d, q_d, self.scheme) & decided
        mr = must_reject(p_d) & decided
        bad_a = ma & ~accepted
        if self.scheme == "tokenwise":
            # p(d) = q(d) = 1 with both laws one-hot (greedy rows): sure without any slack;
            # the sums (O(V)) are read only for the rejected ones.
            ones = decided & ~ma & (p_d == 1.0) & (q_d == 1.0)
            ma = ma | ones
            cand = (ones & ~accepted).nonzero()
            if cand.numel():
                ca, ci = cand[:, 0], cand[:, 1]
                one_hot = (tp[ca, ci].double().sum(1) == 1.0) & (dp[ca, ci].double().sum(1) == 1.0)
                ma[ca[~one_hot], ci[~one_hot]] = False
                bad_a[ca[one_hot], ci[one_hot]] = True
        bad_r = mr & accepted
        self.must["accept"] += int(ma.sum())
        self.must["reject"] += int(mr.sum())
        self.dec.checked += int((ma | mr).sum())
        sure = ma | mr
        self.dec.count(pos[None].expand(A, g)[sure], (bad_a | bad_r)[sure])
        for bad, key, text in ((bad_a, "accept_violations", "rejected although p(d) >= q(d): acceptance is certain"),
                               (bad_r, "reject_violations", "accepted although p(d) = 0: rejection is certain")):
            k = int(bad.sum())
            self.must[key] += k
            if k:
                where = bad.nonzero().tolist()
                self.dec.violation(k, lambda room, where=where, text=text: [
                    self._event(rec, ai, i, "decision", int(ids[ai, i]),
                                {"accepted": bool(accepted[ai, i]), "p_draft": float(p_d[ai, i]),
                                 "q_draft": float(q_d[ai, i]), "acceptance_prob": float(a[ai, i]),
                                 "rule": text}) for ai, i in where[:room]])

        # PITs of every decision under its own acceptance probability.
        flat = decided.reshape(-1)
        acc_f, a_f = accepted.reshape(-1)[flat], a.reshape(-1)[flat]
        pos_f = pos[None].expand(A, g).reshape(-1)[flat]
        cls_f = cls[:, None].expand(A, g).reshape(-1)[flat]
        row_f = torch.arange(A, device=dev)[:, None].expand(A, g).reshape(-1)[flat]
        w = torch.rand(int(flat.sum()), generator=self.gen, dtype=torch.float64).to(dev)
        u = bernoulli_pit(acc_f, a_f, w)
        in_slot = self._slots("dec", rows.to(dev)[row_f], self.slots.decisions)
        self.dec.add_pits(u, in_slot, cls_f, pos_f)
        if self.scheme == "tokenwise" and self.call < SCALE_CALLS and bool(in_slot.any()):
            # Expected cells under scaled acceptance (power), for the events in slots.
            ratio = torch.where(q_d > 0, p_d / q_d.clamp_min(1e-300), torch.where(p_d > 0, math.inf, 0.0))
            self.scale += _scaled_cells(a_f[in_slot], ratio.reshape(-1)[flat][in_slot], _GRID)
        if self.call < ALT_CALLS:
            # Neighbouring positions' laws (alignment): p_{i+1}(d_i) and p_{i-1}(d_i).
            a_next = acceptance_prob(tp[:, 1:g + 1].gather(2, ids[:, :, None]).squeeze(2), q_d, self.scheme)
            ll_own = _ll_bernoulli(accepted, a)
            ll_next = _ll_bernoulli(accepted, a_next)
            L = self.dec.ll
            L["own"] += float(ll_own[decided].sum())
            L["next"] += float(ll_next[decided].sum())
            L["n_next"] += int(decided.sum())
            L["impossible_own"] += int((_impossible_bernoulli(accepted, a) & decided).sum())
            L["impossible_next"] += int((_impossible_bernoulli(accepted, a_next) & decided).sum())
            self.dec.alt_fine["next"] += fine_cell_counts(bernoulli_pit(acc_f, a_next.reshape(-1)[flat], w))
            if g > 1:
                p_prev = tp[:, :g - 1].gather(2, ids[:, 1:, None]).squeeze(2)
                a_prev = acceptance_prob(p_prev, q_d[:, 1:], self.scheme)
                d1 = decided[:, 1:]
                L["own_prev"] += float(ll_own[:, 1:][d1].sum())
                L["prev"] += float(_ll_bernoulli(accepted[:, 1:], a_prev)[d1].sum())
                L["n_prev"] += int(d1.sum())
                L["impossible_prev"] += int((_impossible_bernoulli(accepted[:, 1:], a_prev) & d1).sum())
                self.dec.alt_fine["prev"] += fine_cell_counts(
                    bernoulli_pit(accepted[:, 1:][d1], a_prev[d1], w[(pos_f >= 1)]))
        # The most surprising decision (smallest probability of what happened).
        if acc_f.numel():
            p_obs = torch.where(acc_f, a_f, 1.0 - a_f)
            k = int(torch.argmin(p_obs))
            ai, i = int(row_f[k]), int(pos_f[k])
            self.dec.offer(float(p_obs[k]), lambda: self._event(
                rec, ai, i, "decision", int(ids[ai, i]),
                {"accepted": bool(acc_f[k]), "p_draft": float(p_d[ai, i]), "q_draft": float(q_d[ai, i]),
                 "acceptance_prob": float(a_f[k]), "probability_of_outcome": float(p_obs[k])}))

        self._recovered(rec, rows, ids, out, n, cls)
        self._bonus(rec, rows, ids, out, n, cls)

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

    def _recovered(self, rec, rows, ids, out, n, cls) -> None:
        g = self.gamma
        dev = n.device
        rej = torch.nonzero(n < g).squeeze(1)
        if rej.numel() == 0:
            return
        i = n[rej]
        t = out.to(dev)[rej, i]
        d = ids[rej, i]
        tp, dp = rec.target_probs, rec.draft_probs
        p_t = tp[rej, i, t].double()
        q_t = dp[rej, i, t].double()
        fam = self.rec
        fam.checked += int(rej.numel())
        # Exact support: cheap test first, full rows only for the doubtful events.
        quick = (p_t > 0) & (((1.0 + KAPPA) * p_t > q_t) if self.scheme == "tokenwise" else (t != d))
        doubt = torch.nonzero(~quick).squeeze(1)
        bad_mask = torch.zeros(rej.numel(), dtype=torch.bool, device=dev)
        if doubt.numel():
            ok = recovered_support_ok(tp[rej[doubt], i[doubt]], dp[rej[doubt], i[doubt]], d[doubt], t[doubt],
                                      self.scheme)
            bad_mask[doubt[~ok]] = True
        fam.count(i, bad_mask)
        if doubt.numel():
            bad = doubt[~ok].tolist()
            if bad:
                fam.violation(len(bad), lambda room: [self._rec_event(rec, int(rej[k]), int(i[k]), int(t[k]),
                                                                      "outside the residual's support")
                                                      for k in bad[:room]])
        if not self.token_laws:
            return
        in_slot = self._slots("rec", rows.to(dev)[rej], self.slots.recovered)
        V = tp.shape[2]
        chunk = max(1, _CHUNK_ELEMENTS // V)
        w = torch.rand(rej.numel(), generator=self.gen, dtype=torch.float64)
        us, surprise = [], []
        L = fam.ll
        for s in range(0, rej.numel(), chunk):
            e = min(rej.numel(), s + chunk)
            ra, ri, rt, rd = rej[s:e], i[s:e], t[s:e], d[s:e]
            q_rows = dp[ra, ri]
            r = residual_rows(tp[ra, ri], q_rows, rd, self.scheme)
            u, _, sur = _pit_rows(r, rt, w[s:e])
            us.append(u.cpu())
            surprise.append(sur.cpu())
            if self.call >= ALT_CALLS:
                continue
            own, z = _ll_rows(r, rt)
            L["own"] += float(own.sum())
            L["impossible_own"] += z
            nxt, z = _ll_rows(residual_rows(tp[ra, ri + 1], q_rows, rd, self.scheme), rt)
            L["next"] += float(nxt.sum())
            L["impossible_next"] += z
            L["n_next"] += int(e - s)
            has_prev = ri >= 1
            if bool(has_prev.any()):
                hp = has_prev.nonzero().squeeze(1)
                L["own_prev"] += float(own[hp].sum())
                prv, z = _ll_rows(residual_rows(tp[ra[hp], ri[hp] - 1], q_rows[hp], rd[hp], self.scheme), rt[hp])
                L["prev"] += float(prv.sum())
                L["impossible_prev"] += z
                L["n_prev"] += int(hp.numel())
        u = torch.cat(us)
        fam.add_pits(u, in_slot, cls[rej], i)
        sur = torch.cat(surprise)
        k = int(torch.argmin(sur))
        fam.offer(float(sur[k]), lambda: self._rec_event(rec, int(rej[k]), int(i[k]), int(t[k]), None,
                                                         {"relative_probability": float(sur[k])}))

    def _rec_event(self, rec, a: int, i: int, t: int, why: str | None, extra: dict | None = None) -> dict:
        p = rec.target_probs[a, i].double().cpu()
        q = rec.draft_probs[a, i].double().cpu()
        r = (p - q).clamp_min(0)
        info = {"residual_mass": float(r.sum()), "p_token": float(p[t]), "q_token": float(q[t]),
                "residual_token": float(r[t]), "accepted_before": i, **(extra or {})}
        if why:
            info["rule"] = why
        return self._event(rec, a, i, "recovered", t, info)

    def _bonus(self, rec, rows, ids, out, n, cls) -> None:
        g = self.gamma
        dev = n.device
        full = torch.nonzero(n == g).squeeze(1)
        if full.numel() == 0:
            return
        t = out.to(dev)[full, g]
        tp = rec.target_probs
        p_t = tp[full, g, t].double()
        fam = self.bonus
        fam.checked += int(full.numel())
        fam.count(torch.zeros_like(full), p_t <= 0)
        bad = torch.nonzero(p_t <= 0).squeeze(1).tolist()
        if bad:
            fam.violation(len(bad), lambda room: [self._event(rec, int(full[k]), g, "bonus", int(t[k]), {
                "p_token": float(p_t[k]), "rule": "bonus token of target probability 0"}) for k in bad[:room]])
        if not self.token_laws:
            return
        in_slot = self._slots("bonus", rows.to(dev)[full], self.slots.bonus)
        V = tp.shape[2]
        chunk = max(1, _CHUNK_ELEMENTS // V)
        w = torch.rand(full.numel(), generator=self.gen, dtype=torch.float64)
        us, surprise = [], []
        L = fam.ll
        for s in range(0, full.numel(), chunk):
            e = min(full.numel(), s + chunk)
            fa, ft = full[s:e], t[s:e]
            r = tp[fa, g].double()
            u, _, sur = _pit_rows(r, ft, w[s:e])
            us.append(u.cpu())
            surprise.append(sur.cpu())
            if self.call >= ALT_CALLS:
                continue
            own, z = _ll_rows(r, ft)
            L["own_prev"] += float(own.sum())
            L["own"] += float(own.sum())
            L["impossible_own"] += z
            prv, z = _ll_rows(tp[fa, g - 1].double(), ft)
            L["prev"] += float(prv.sum())
            L["impossible_prev"] += z
            L["n_prev"] += int(e - s)
        u = torch.cat(us)
        fam.add_pits(u, in_slot, cls[full], torch.zeros_like(full))
        sur = torch.cat(surprise)
        k = int(torch.argmin(sur))
        fam.offer(float(sur[k]), lambda: self._event(rec, int(full[k]), g, "bonus", int(t[k]), {
            "p_token": float(p_t[k]), "p_token_previous_position": float(tp[full[k], g - 1, t[k]]),
            "relative_probability": float(sur[k])}))

    # ------------------------------------------------------------------ result
    def summary(self) -> dict:
        """Everything accumulated, JSON-ready (read by
        :func:`~specexact.audit.decisions_checks.decision_checks`)."""
        return {
            "scheme": self.scheme, "applicable": self.applicable, "kappa": KAPPA, "slot_plan": self.slots.to_dict(),
            "calls": self.call + 1, "observer_seconds": self.seconds, "token_laws": self.token_laws,
            "must": dict(self.must), "decisions": self.dec.to_dict(), "recovered": self.rec.to_dict(),
            "bonus": self.bonus.to_dict(), "scale_grid": list(SCALE_GRID),
            "scale_fine": self.scale.tolist(), "scale_slots": int(self.scale_slots),
            "cut": {**self.cut, "checked": self.check_cut},
        }
