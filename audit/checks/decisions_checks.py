"""The per-event checks of a case, from a :class:`~specexact.audit.checks.decisions.DecisionObserver`.

Decoder level (per case, :data:`DECISION_CHECKS` of them; the verify level runs the first
three, :data:`VERIFY_DECISION_CHECKS`):

``acceptance_exact`` (exact)
    Every draft with ``p(d) >= (1 + KAPPA) q(d)`` was accepted and every draft with
    ``p(d) = 0`` rejected (:mod:`~specexact.audit.checks.decisions_rules`). One violation fails
    (p-value 0). False-fail rate 0 for a correct sampler (the slack covers
    renormalisation and rounding); ``detectable_tv`` is ``ln(1 / beta) / n`` for ``n``
    sure decisions: a sampler that breaks the rule with that probability per sure
    decision (the TV of that decision's law from the certain one) fails with probability
    ``>= 1 - beta``.
``acceptance`` (statistical)
    Each decision is a Bernoulli trial of known probability ``a = min(1, p(d) / q(d))``.
    Randomised PIT ``U = a W`` (accepted) or ``a + (1 - a) W`` (rejected), ``W`` from the
    observer's own generator, on the slots of the :class:`~specexact.audit.checks.decisions_tally.SlotPlan`
    (fillers: independent uniforms), counted in up to 10 equal cells: exactly multinomial
    under the null; Pearson chi-square at the audit's chi-square level
    (``alpha / CHI2_TAIL_INFLATION``). ``detectable_tv``: TV from uniform of the binned PIT
    law of the decisions (the slots' detectable TV over the fraction of slots holding a
    decision). For one decision law the PIT law's TV *equals* the TV of the decision law
    ``|a' - a|``; over many decisions it is at most their average (errors of opposite
    signs at different ``a`` partly cancel). ``details`` also give the smallest
    acceptance scale detected (``detectable_scale_low`` / ``_high``: acceptance
    ``min(1, s p / q)`` instead of ``min(1, p / q)``) from the exact expected cell
    probabilities of the observed decisions under each scale of
    :data:`~specexact.audit.checks.decisions_tally.SCALE_GRID` (noncentral chi-square, power
    ``1 - beta``; log-log interpolation between grid points; the cell probabilities per
    slot are those of the first ``SCALE_CALLS`` calls). Sure decisions add no
    information here (their ``U`` is uniform); ``acceptance_exact`` covers them.
``recovered_support`` (exact)
    Every token emitted after a rejection has ``p(t) > 0`` and ``(1 + KAPPA) p(t) >
    q(t)`` (or the residual was empty up to rounding). Rate and ``detectable_tv`` as for
    ``acceptance_exact``, per rejection.
``recovered_token_law`` (statistical)
    The PIT of each recovered token under its own event's normalised residual
    ``max(p_i - q_i, 0) / sum`` (tokens ordered by decreasing residual mass, ties by id),
    on ``L`` slots per row and call. Same test; ``detectable_tv``: TV of the binned PIT
    law of the recovered tokens, which equals the residual law's TV for one event law and
    is reached by faults that move mass the same way in probability order (e.g. from the
    tail to the head) at every event.
``bonus_token_law`` (statistical, exact support)
    A bonus token of ``p_γ`` probability 0 fails at once; otherwise the PIT of each bonus
    token under its own ``p_γ``, as above, on ``1 + (L - 1) // (γ + 1)`` slots per row.
``eos_cut`` (exact)
    Every round keeps exactly the emitted tokens up to the first EOS and up to
    ``max_new_tokens``; a row that finished gets no further round (no bonus past a cut);
    the returned tokens are the kept tokens of the rounds. ``detectable_tv``:
    ``ln(1 / beta) / rounds``.

The per-position and per-class PIT p-values, the log-likelihood of the events under the
neighbouring positions' laws and the most surprising events are in ``details`` for the
diagnosis (:mod:`~specexact.audit.verdict.diagnosis`); they are readings, not checks (their event
counts are random, so their chi-square p-values are asymptotic).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from specexact.audit.core.levels import CHI2_TAIL_INFLATION
from specexact.exactness.pit import (
    coarsen,
    noncentrality_of_cells,
    num_cells,
    pit_uniformity_check,
    required_noncentrality,
)
from specexact.exactness.results import CheckResult

__all__ = ["DECISION_CHECKS", "VERIFY_DECISION_CHECKS", "decision_checks", "DECISION_CHECK_NAMES"]

DECISION_CHECK_NAMES = ("acceptance_exact", "acceptance", "recovered_support", "recovered_token_law",
                        "bonus_token_law", "eos_cut")
DECISION_CHECKS = len(DECISION_CHECK_NAMES)
"""Per-event checks of a decoder-level case."""
VERIFY_DECISION_CHECKS = 3
"""Per-event checks of a verify-level case (``acceptance_exact``, ``acceptance``,
``recovered_support``; it tests the recovered and bonus laws on counts itself)."""

_READING_MIN_EXPECTED = 20.0
_FALSE_PASS = 0.01


def _exact(name: str, *, n: int, violations: int, alpha: float, what: str, details: dict,
           worst=()) -> CheckResult:
    detectable = math.log(1.0 / _FALSE_PASS) / n if n > 0 else math.inf
    if detectable > 1.0:
        detectable = math.inf
    if violations:
        desc = f"{violations} of {n} {what} broke a rule a correct sampler never breaks (exact failure)"
    else:
        desc = (f"all {n} {what} followed the exact rule; a sampler breaking it with probability "
                f">= {detectable:.3g} per event would fail with probability >= {1 - _FALSE_PASS:g}")
    return CheckResult(name=name, method="exact", statistic=float(violations), pvalue=0.0 if violations else 1.0,
                       dof=None, n=int(n), false_fail_rate=alpha, detectable_tv=detectable, false_pass_rate=_FALSE_PASS,
                       passed=violations == 0, worst=tuple(worst), details={
                           **details, "violations": int(violations),
                           "detectable_tv_of": f"probability per {what[:-1] if what.endswith('s') else what} of "
                                               "breaking the rule"},
                       description=desc)


def _by_position(fam: dict) -> dict:
    return {"checked_by_position": fam["checked_by_position"], "violations_by_position": fam["violations_by_position"]}


def _not_applicable(name: str, alpha: float, why: str) -> CheckResult:
    return CheckResult(name=name, method="exact", statistic=0.0, pvalue=1.0, dof=None, n=0, false_fail_rate=alpha,
                       detectable_tv=math.inf, false_pass_rate=_FALSE_PASS, passed=True, worst=(),
                       details={"not_applicable": why}, description=f"not applicable: {why}")


def _reading(fine: np.ndarray) -> dict:
    """Chi-square p-value of realised events' PIT counts (a reading for the diagnosis)."""
    fine = np.asarray(fine, dtype=np.int64)
    n = int(fine.sum())
    m = num_cells(n, min_expected=_READING_MIN_EXPECTED)
    if m < 2:
        return {"events": n, "pvalue": None, "cells": fine.tolist() if n else []}
    cells = coarsen(fine, m)
    p = float(stats.chisquare(cells, np.full(m, n / m)).pvalue)
    return {"events": n, "pvalue": p, "cells": cells.tolist()}


def _slot_reading(fam: dict, c: int) -> dict:
    """Chi-square p-value of class ``c``'s own slots (events and fillers: exactly
    multinomial under the null, like the check itself, at a smaller size)."""
    fine = np.asarray(fam["slot_fine_by_class"][c], dtype=np.int64)
    S = int(fine.sum())
    m = num_cells(S, min_expected=_READING_MIN_EXPECTED)
    out = {"slots": S, "events": int(fam["events_in_slots_by_class"][c])}
    if m < 2:
        return {**out, "pvalue": None}
    return {**out, "pvalue": float(stats.chisquare(coarsen(fine, m), np.full(m, S / m)).pvalue)}


def _breakdown(fam: dict) -> dict:
    by = np.asarray(fam["by_class_position"], dtype=np.int64)  # [C, P, FINE]
    return {
        "per_position": [{"position": i, **_reading(by[:, i].sum(0))} for i in range(by.shape[1])],
        "per_class": [{"class": c, **_slot_reading(fam, c)} for c in range(by.shape[0])],
        "alternatives": _alternatives(fam),
        "strongest_event": fam["strongest_event"],
    }


def _alternatives(fam: dict) -> dict:
    ll = fam["log_likelihood"]
    out = {"log_likelihood": dict(ll)}
    if ll["n_next"]:
        out["ll_gain_next"] = ll["next"] - ll["own"]
        out["pit_next"] = _reading(fam["alternative_fine"]["next"]) if sum(fam["alternative_fine"]["next"]) else None
    if ll["n_prev"]:
        out["ll_gain_prev"] = ll["prev"] - ll["own_prev"]
        out["pit_prev"] = _reading(fam["alternative_fine"]["prev"]) if sum(fam["alternative_fine"]["prev"]) else None
    return out


def _detectable_scales(summary: dict, cells: int, alpha: float) -> dict:
    """Smallest acceptance scale factors below / above 1 the acceptance check detects."""
    S = summary["decisions"]["slots"]
    if cells < 2 or S == 0:
        return {"detectable_scale_low": None, "detectable_scale_high": None}
    grid = np.asarray(summary["scale_grid"])
    # expected cell probabilities per slot, from the first calls' slots (same law every call)
    fine = np.asarray(summary["scale_fine"]) / max(summary.get("scale_slots") or S, 1)  # [G, FINE]
    lam = noncentrality_of_cells(coarsen(fine, cells), S)
    need = required_noncentrality(cells, false_fail_rate=alpha, false_pass_rate=_FALSE_PASS)
    out = {}
    for side, sel in (("low", grid < 1), ("high", grid > 1)):
        c = np.abs(grid[sel] - 1.0)
        lm = lam[sel]
        order = np.argsort(c)
        c, lm = c[order], lm[order]
        hit = np.flatnonzero(lm >= need)
        if not hit.size:
            out[f"detectable_scale_{side}"] = None
            continue
        k = int(hit[0])
        if k == 0 or lm[k - 1] <= 0:
            cstar = c[0] * math.sqrt(need / lm[0]) if k == 0 and lm[0] > 0 else c[k]
        else:
            x0, x1, y0, y1 = math.log(c[k - 1]), math.log(c[k]), math.log(lm[k - 1]), math.log(lm[k])
            cstar = math.exp(x0 + (math.log(need) - y0) * (x1 - x0) / (y1 - y0)) if y1 > y0 else c[k]
        out[f"detectable_scale_{side}"] = 1.0 - cstar if side == "low" else 1.0 + cstar
    out["scale_noncentrality"] = {f"{s:g}": float(v) for s, v in zip(grid, lam)}
    out["required_noncentrality"] = float(need)
    return out


def decision_checks(summary: dict, *, alpha: float, min_expected: float, level: str = "decoder") -> list[CheckResult]:
    """The per-event checks (module docstring) from :meth:`DecisionObserver.summary`.

    Parameters
    ----------
    summary : dict
        The observer's summary.
    alpha : float
        Per-check false-fail rate of the audit; statistical checks run at
        ``alpha / CHI2_TAIL_INFLATION``, exact ones report ``alpha`` (their true rate is 0).
    min_expected : float
        Smallest expected count per PIT cell.
    level : {"decoder", "verify"}
        Which checks: :data:`DECISION_CHECKS` or :data:`VERIFY_DECISION_CHECKS`.

    Returns
    -------
    list of CheckResult
        In the order of :data:`DECISION_CHECK_NAMES` (the first three at the verify level).

    Raises
    ------
    ValueError
        Unknown ``level``.
    """
    if level not in ("decoder", "verify"):
        raise ValueError(f"level must be 'decoder' or 'verify', got {level!r}")
    a2 = alpha / CHI2_TAIL_INFLATION
    dec, rec, bon, cut, must = (summary[k] for k in ("decisions", "recovered", "bonus", "cut", "must"))
    common = {"scheme": summary["scheme"], "kappa": summary["kappa"], "slot_plan": summary["slot_plan"]}
    checks: list[CheckResult] = []
    if not summary["applicable"]:
        why = (f"the sampler declares the {summary['scheme']!r} verification scheme, whose single decisions have "
               "no per-draft law to check")
        names = DECISION_CHECK_NAMES[:5] if level == "decoder" else DECISION_CHECK_NAMES[:3]
        checks = [_not_applicable(nm, a2 if nm in ("acceptance", "recovered_token_law", "bonus_token_law") else alpha,
                                  why) for nm in names]
    else:
        n_sure = must["accept"] + must["reject"]
        checks.append(_exact(
            "acceptance_exact", n=n_sure, violations=must["accept_violations"] + must["reject_violations"],
            alpha=alpha, what="sure decisions", details={**common, **must, "violation_events": dec["violation_events"],
                                                         **_by_position(dec)},
            worst=[(lbl, float(k), 0.0) for lbl, k in (("rejected with p(d) >= q(d)", must["accept_violations"]),
                                                       ("accepted with p(d) = 0", must["reject_violations"])) if k]))
        res = pit_uniformity_check(dec["slot_fine"], num_events=dec["events_in_slots"], false_fail_rate=a2,
                                   min_expected=min_expected, name="acceptance", what="draft decisions",
                                   details={**common, "decisions": dec["events"]})
        extra = _detectable_scales(summary, res.details["num_cells"], a2)
        checks.append(_with_details(res, {**extra, **_breakdown(dec)}))
        checks.append(_exact(
            "recovered_support", n=rec["checked"], violations=rec["violations"], alpha=alpha, what="rejections",
            details={**common, "violation_events": rec["violation_events"], **_by_position(rec)},
            worst=[("token outside the residual's support", float(rec["violations"]), 0.0)] if rec["violations"] else ()))
        if level == "decoder":
            if summary["token_laws"]:
                res = pit_uniformity_check(rec["slot_fine"], num_events=rec["events_in_slots"], false_fail_rate=a2,
                                           min_expected=min_expected, name="recovered_token_law",
                                           what="recovered tokens", details={**common, "recovered": rec["events"]})
                checks.append(_with_details(res, _breakdown(rec)))
                if bon["violations"]:
                    checks.append(_with_details(_exact(
                        "bonus_token_law", n=bon["checked"], violations=bon["violations"], alpha=a2,
                        what="bonus tokens", details={**common, "violation_events": bon["violation_events"]},
                        worst=[("bonus token with p = 0", float(bon["violations"]), 0.0)]), _breakdown(bon)))
                else:
                    res = pit_uniformity_check(bon["slot_fine"], num_events=bon["events_in_slots"], false_fail_rate=a2,
                                               min_expected=min_expected, name="bonus_token_law", what="bonus tokens",
                                               details={**common, "bonus": bon["events"]})
                    checks.append(_with_details(res, _breakdown(bon)))
            else:
                checks += [_not_applicable("recovered_token_law", a2, "token laws not computed"),
                           _not_applicable("bonus_token_law", a2, "token laws not computed")]
    if level == "decoder":
        checks.append(_exact("eos_cut", n=cut["rounds"], violations=cut["violations"], alpha=alpha,
                             what="row rounds", details={"calls": cut["calls"], "violation_events": cut["events"]}))
    return checks


def _with_details(res: CheckResult, extra: dict) -> CheckResult:
    from dataclasses import replace

    return replace(res, details={**res.details, **extra})
