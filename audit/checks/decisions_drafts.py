"""The observer's reading of the draft decisions of one round.

:class:`DraftDecisions` is a mixin of :class:`~specexact.audit.checks.decisions.DecisionObserver`:
for every decided draft of a round it applies the exact rules
(:mod:`~specexact.audit.checks.decisions_rules`: sure acceptance, sure rejection), counts the
randomised PIT of the decision under its own acceptance probability on the decision slots,
accumulates the expected cells under scaled acceptance (first
:data:`~specexact.audit.checks.decisions_tally.SCALE_CALLS` calls) and the log-likelihood
under the neighbouring positions' laws (first
:data:`~specexact.audit.checks.decisions_tally.ALT_CALLS` calls), keeps the most surprising
decision, and hands the round's recovered and bonus tokens on
(:class:`~specexact.audit.checks.decisions_tokens.TokenEvents`).
"""

from __future__ import annotations

import math

import torch

from specexact.audit.checks.decisions_rules import acceptance_prob, must_accept, must_reject
from specexact.audit.checks.decisions_scores import impossible_bernoulli, ll_bernoulli, scaled_cells
from specexact.audit.checks.decisions_tally import ALT_CALLS, SCALE_CALLS, SCALE_GRID
from specexact.exactness.pit import bernoulli_pit, fine_cell_counts

__all__ = ["DraftDecisions"]

_GRID = torch.tensor(SCALE_GRID, dtype=torch.float64)


class DraftDecisions:
    """The draft decisions of :class:`~specexact.audit.checks.decisions.DecisionObserver`
    (module docstring); they update the observer's ``dec`` tally, ``must``, ``scale`` and
    use its ``_event``, ``_slots``, ``_recovered`` and ``_bonus``."""

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
            self.scale += scaled_cells(a_f[in_slot], ratio.reshape(-1)[flat][in_slot], _GRID)
        if self.call < ALT_CALLS:
            # Neighbouring positions' laws (alignment): p_{i+1}(d_i) and p_{i-1}(d_i).
            a_next = acceptance_prob(tp[:, 1:g + 1].gather(2, ids[:, :, None]).squeeze(2), q_d, self.scheme)
            ll_own = ll_bernoulli(accepted, a)
            ll_next = ll_bernoulli(accepted, a_next)
            L = self.dec.ll
            L["own"] += float(ll_own[decided].sum())
            L["next"] += float(ll_next[decided].sum())
            L["n_next"] += int(decided.sum())
            L["impossible_own"] += int((impossible_bernoulli(accepted, a) & decided).sum())
            L["impossible_next"] += int((impossible_bernoulli(accepted, a_next) & decided).sum())
            self.dec.alt_fine["next"] += fine_cell_counts(bernoulli_pit(acc_f, a_next.reshape(-1)[flat], w))
            if g > 1:
                p_prev = tp[:, :g - 1].gather(2, ids[:, 1:, None]).squeeze(2)
                a_prev = acceptance_prob(p_prev, q_d[:, 1:], self.scheme)
                d1 = decided[:, 1:]
                L["own_prev"] += float(ll_own[:, 1:][d1].sum())
                L["prev"] += float(ll_bernoulli(accepted[:, 1:], a_prev)[d1].sum())
                L["n_prev"] += int(d1.sum())
                L["impossible_prev"] += int((impossible_bernoulli(accepted[:, 1:], a_prev) & d1).sum())
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
