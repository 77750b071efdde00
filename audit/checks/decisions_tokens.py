"""The observer's reading of the recovered and bonus tokens of one round.

:class:`TokenEvents` is a mixin of :class:`~specexact.audit.checks.decisions.DecisionObserver`:
a token emitted after a rejection must lie in the residual's support and a bonus token
(after a full acceptance) must have target probability above 0 (exact checks); with
``token_laws`` each token's randomised PIT under its own law (the normalised residual, or
``p_γ``) is counted on its slots, its log-likelihood under the neighbouring positions'
laws is accumulated (first :data:`~specexact.audit.checks.decisions_tally.ALT_CALLS`
calls), and the most surprising token is kept. Rows of ``[events, V]`` are processed
:data:`CHUNK_ELEMENTS` elements at a time.
"""

from __future__ import annotations

import torch

from specexact.audit.checks.decisions_rules import KAPPA, recovered_support_ok, residual_rows
from specexact.audit.checks.decisions_scores import ll_rows, pit_rows
from specexact.audit.checks.decisions_tally import ALT_CALLS

__all__ = ["TokenEvents", "CHUNK_ELEMENTS"]

CHUNK_ELEMENTS = 1 << 21
"""Elements of the ``[c, V]`` float64 temporaries processed at once."""


class TokenEvents:
    """The recovered and bonus tokens of :class:`~specexact.audit.checks.decisions.DecisionObserver`
    (module docstring); they update the observer's ``rec`` and ``bonus`` tallies and use its
    ``_event`` and ``_slots``."""

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
        chunk = max(1, CHUNK_ELEMENTS // V)
        w = torch.rand(rej.numel(), generator=self.gen, dtype=torch.float64)
        us, surprise = [], []
        L = fam.ll
        for s in range(0, rej.numel(), chunk):
            e = min(rej.numel(), s + chunk)
            ra, ri, rt, rd = rej[s:e], i[s:e], t[s:e], d[s:e]
            q_rows = dp[ra, ri]
            r = residual_rows(tp[ra, ri], q_rows, rd, self.scheme)
            u, _, sur = pit_rows(r, rt, w[s:e])
            us.append(u.cpu())
            surprise.append(sur.cpu())
            if self.call >= ALT_CALLS:
                continue
            own, z = ll_rows(r, rt)
            L["own"] += float(own.sum())
            L["impossible_own"] += z
            nxt, z = ll_rows(residual_rows(tp[ra, ri + 1], q_rows, rd, self.scheme), rt)
            L["next"] += float(nxt.sum())
            L["impossible_next"] += z
            L["n_next"] += int(e - s)
            has_prev = ri >= 1
            if bool(has_prev.any()):
                hp = has_prev.nonzero().squeeze(1)
                L["own_prev"] += float(own[hp].sum())
                prv, z = ll_rows(residual_rows(tp[ra[hp], ri[hp] - 1], q_rows[hp], rd[hp], self.scheme), rt[hp])
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
        chunk = max(1, CHUNK_ELEMENTS // V)
        w = torch.rand(full.numel(), generator=self.gen, dtype=torch.float64)
        us, surprise = [], []
        L = fam.ll
        for s in range(0, full.numel(), chunk):
            e = min(full.numel(), s + chunk)
            fa, ft = full[s:e], t[s:e]
            r = tp[fa, g].double()
            u, _, sur = pit_rows(r, ft, w[s:e])
            us.append(u.cpu())
            surprise.append(sur.cpu())
            if self.call >= ALT_CALLS:
                continue
            own, z = ll_rows(r, ft)
            L["own_prev"] += float(own.sum())
            L["own"] += float(own.sum())
            L["impossible_own"] += z
            prv, z = ll_rows(tp[fa, g - 1].double(), ft)
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
