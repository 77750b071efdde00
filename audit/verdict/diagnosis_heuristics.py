"""The diagnosis's derived parts and hints — **heuristics**, stated as such in the report
(:mod:`specexact.audit.verdict.diagnosis` describes them): position alignment
(:func:`alignment`: the failing events fit a neighbouring position's law), per-prefix
processing of a logits-level sampler (:func:`per_prefix`), a dropped bonus token read as a
rejected last draft (:func:`dropped_bonus`), and the hints on near ties and
scaled-down acceptance (:func:`hints`); with the thresholds they use.
"""

from __future__ import annotations

from specexact.audit.verdict.diagnosis_parts import FAMILIES, PARTS, by_case_type, check_label, check_type, tested

__all__ = ["ALIGN_MIN_NATS", "ALIGN_NATS_PER_EVENT", "ALIGN_PIT_P", "POSITION_0_P", "neighbour_gain",
           "fits_better", "alignment", "per_prefix", "dropped_bonus", "hints"]

ALIGN_MIN_NATS = 20.0
"""Smallest log-likelihood gain (nats) of a neighbouring position's law that counts as
evidence of misalignment."""
ALIGN_NATS_PER_EVENT = 0.01
"""... and per event of the check."""

ALIGN_PIT_P = 1e-4
"""The neighbour's PIT reading must not fall below this p-value (it must fit, not only be
less bad)."""
POSITION_0_P = 1e-6
"""A PIT reading at position 0 below this p-value counts as a failure there (heuristic)."""

_NEAR_TIE = 0.02


def neighbour_gain(chk: dict | None, side: str) -> tuple[float, int, int, float | None] | None:
    """``(log-likelihood gain, events, events impossible under the neighbour's law, the
    neighbour's PIT reading p-value or None)`` of a check's events under position ``side``."""
    if chk is None:
        return None
    alt = (chk.get("details") or {}).get("alternatives") or {}
    ll = alt.get("log_likelihood") or {}
    g = alt.get(f"ll_gain_{side}")
    n = ll.get(f"n_{side}", 0)
    pit = (alt.get(f"pit_{side}") or {}).get("pvalue")
    return (float(g), int(n), int(ll.get(f"impossible_{side}", 0)), pit) if g is not None and n else None


def fits_better(gain) -> bool:
    """The neighbour's law explains the events: a large log-likelihood gain, no event it
    makes impossible, and (where measured) a PIT reading that does not reject it."""
    if gain is None:
        return False
    g, n, impossible, pit = gain
    return (g > max(ALIGN_MIN_NATS, ALIGN_NATS_PER_EVENT * n) and impossible == 0
            and (pit is None or pit >= ALIGN_PIT_P))


def _fails_at_position_0(stat: dict | None, exact: dict | None) -> bool:
    """Whether a family's events fail at position 0: an exact violation there, or a PIT
    reading of p-value below :data:`POSITION_0_P`."""
    if exact is not None and ((exact.get("details") or {}).get("violations_by_position") or [0])[0] > 0:
        return True
    per = ((stat or {}).get("details") or {}).get("per_position") or []
    return bool(per) and per[0].get("pvalue") is not None and per[0]["pvalue"] < POSITION_0_P


def alignment(checks: list[dict], parts: dict) -> tuple[dict, list]:
    """The position-alignment part, and ``[(gain, case, events, side)]`` of the cases whose
    recovered tokens alone fit a neighbour's residual (acceptance right: the recovered
    token is drawn from the wrong position, a fault of the recovered-token part)."""
    out = {"part": "position_alignment", "label": dict(PARTS)["position_alignment"], "status": "not_tested",
           "checks_run": 0, "failed": [], "evidence": None, "explained_by": None, "heuristic": True,
           "event": None, "replay": None, "cases": []}
    table = by_case_type(checks)
    stats = [c for c in checks if check_type(c) in ("acceptance", "recovered_token_law") and tested(c)]
    out["checks_run"] = len(stats)
    if stats:
        out["status"] = "pass"
    found, recovered_only, seen = [], [], []
    for case, types in table.items():
        failing = [t for t in ("acceptance", "acceptance_exact", "recovered_token_law", "recovered_support")
                   if t in types and not types[t]["passed"]]
        if not failing:
            continue
        acceptance_fails = any(t in failing for t in ("acceptance", "acceptance_exact"))
        fits = {}
        for fam, exact, what in (("acceptance", "acceptance_exact", "decisions"),
                                 ("recovered_token_law", "recovered_support", "recovered tokens")):
            if fam not in failing and exact not in failing:
                continue
            at0 = _fails_at_position_0(types.get(fam), types.get(exact))
            for side, pos in (("next", "i+1"), ("prev", "i-1")):
                g = neighbour_gain(types.get(fam), side)
                if g is None:
                    continue
                seen.append((case, what, pos, g, at0))
                if at0 and fits_better(g):  # a misaligned law is wrong at position 0 too (p_1 judges d_0)
                    fits.setdefault(fam, []).append((g, pos, what))
        if "acceptance" in fits:  # the target law itself is misaligned: the decisions fit a neighbour
            for fam_fits in fits.values():
                for g, pos, what in fam_fits:
                    found.append((g[0], case, f"{case}: the {what} fit the target law of position {pos} better "
                                              f"than their own (log-likelihood +{g[0]:.0f} nats over {g[1]} events)"))
        elif "recovered_token_law" in fits and not acceptance_fails:
            g, pos, _ = max(fits["recovered_token_law"], key=lambda x: x[0][0])
            recovered_only.append((g[0], case, g[1], pos))
    if found:
        found.sort(reverse=True)
        out["status"] = "fail"
        out["evidence"] = "; ".join(f[2] for f in found[:3])
        out["cases"] = sorted({f[1] for f in found})
        out["failed"] = [f"{c} / acceptance" for c in out["cases"]]
    elif recovered_only:
        out["evidence"] = ("the decisions fit their own position's law (acceptance passes); only the recovered tokens "
                           "fit a neighbour's residual: a fault of the recovered token, not of the target law's "
                           "alignment")
    elif any(parts[f]["status"] == "fail" for f in ("acceptance_rule", "recovered_token")):
        if seen:
            case, what, pos, g, at0 = max(seen, key=lambda x: x[3][0])
            why = []
            if g[0] <= max(ALIGN_MIN_NATS, ALIGN_NATS_PER_EVENT * g[1]):
                why.append(f"a log-likelihood gain of {g[0]:+.0f} nats over {g[1]} events (needs more than "
                           f"{max(ALIGN_MIN_NATS, ALIGN_NATS_PER_EVENT * g[1]):.0f})")
            if g[2]:
                why.append(f"{g[2]} event(s) impossible under it")
            if g[3] is not None and g[3] < ALIGN_PIT_P:
                why.append(f"its PIT reading p={g[3]:.3g} rejects it")
            if not at0:
                why.append("the family passes at position 0 (a misaligned law fails there too)")
            out["evidence"] = (f"no neighbouring position's law explains the failing events; the best candidate, "
                               f"{case}: the {what} under position {pos}'s law, has " + ", ".join(why or ["no fit"]))
        else:
            out["evidence"] = "not measured: the failing checks recorded no neighbouring-position alternatives"
    return out, recovered_only


def _positions(checks: list[dict]) -> tuple[int, int, int]:
    """(violations at position 0, violations later, exact checks at position 0) over the
    failing exact per-event checks (and the checks at position 0 of all of them)."""
    v0 = later = c0 = 0
    for c in checks:
        if check_type(c) not in ("acceptance_exact", "recovered_support"):
            continue
        d = c.get("details") or {}
        vb, cb = d.get("violations_by_position") or [], d.get("checked_by_position") or []
        if vb:
            v0 += int(vb[0])
            later += int(sum(vb[1:]))
        if cb:
            c0 += int(cb[0])
    return v0, later, c0


def per_prefix(checks: list[dict], parts: dict, level: str) -> dict:
    out = {"part": "per_prefix_processing", "label": dict(PARTS)["per_prefix_processing"], "status": "not_tested",
           "checks_run": 0, "failed": [], "evidence": None, "explained_by": None, "heuristic": True,
           "event": None, "replay": None}
    if level != "logits":
        out["evidence"] = ("probability-level sampler: the decoder applies penalties and truncation per candidate "
                           "prefix itself; only a logits-level sampler does it")
        return out
    fam_fail = [f for f in FAMILIES if parts[f]["status"] == "fail"]
    tested = sum(parts[f]["checks_run"] for f in FAMILIES) + parts["emitted_law"]["checks_run"]
    out["checks_run"] = tested
    if tested:
        out["status"] = "pass"
    v0, later, c0 = _positions(checks)
    reason = None
    if later and not v0 and c0 >= 100:
        reason = (f"position 0 clean ({c0} exact-rule checks, no violation) but {later} violation(s) past it: the "
                  "penalties of a candidate prefix likely miss (or add) the drafts before it")
    elif len(fam_fail) >= 2:
        reason = (f"{' and '.join(dict(PARTS)[f] for f in fam_fail)} fail together: the target law the sampler uses "
                  "differs from its declared processing (order of operations, penalty scope or truncation)")
    elif not fam_fail and parts["emitted_law"]["status"] == "fail":
        reason = ("the emitted law fails while every per-event check passes: for a logits-level sampler the likely "
                  "part is its processing")
    if reason:
        out["status"] = "fail"
        out["evidence"] = reason
        out["failed"] = [x for f in fam_fail + ["emitted_law"] for x in parts[f]["failed"]][:10]
    return out


def dropped_bonus(checks: list[dict]) -> tuple[list[str], str] | None:
    """``(failing checks, evidence)`` when the exact per-event failures read as a dropped bonus
    token, else None.

    A row ``[d_1 .. d_K, -1]`` (all K drafts accepted, the bonus token left out) reads, by
    the output protocol, as ``d_K`` rejected and ``d_K`` itself emitted as the recovered
    token: that breaks the acceptance rule (``d_K`` was a sure draft) or the recovered
    token's support (``max(p - q, 0)`` is 0 at every draft that can be rejected: a correct
    sampler never recovers the draft it rejected). The pattern: every exact violation
    (``acceptance_exact``, ``recovered_support``) sits at the last draft position ``K - 1``
    and every kept violating event's token is that draft itself. Heuristic, as the other
    derived readings.
    """
    failed, events = [], 0
    for c in checks:
        if check_type(c) not in ("acceptance_exact", "recovered_support") or c["passed"]:
            continue
        d = c.get("details") or {}
        evs, vb = d.get("violation_events") or [], d.get("violations_by_position") or []
        if not evs or len(vb) < 2:
            return None
        K = len(vb) - 1  # positions 0 .. K-1 hold decisions, K the bonus slot
        if any(v for i, v in enumerate(vb) if i != K - 1) or not vb[K - 1]:
            return None
        for e in evs:
            drafts = list(e.get("drafts") or [])
            if len(drafts) != K or e.get("position") != K - 1 or e.get("token") != drafts[-1]:
                return None
        failed.append(check_label(c))
        events += int(vb[K - 1])
    if not failed:
        return None
    bonus = [c for c in checks if check_type(c) == "bonus_token_law"]
    seen = sum(int((c.get("details") or {}).get("num_events") or 0) for c in bonus)
    slots = sum(int((c.get("details") or {}).get("num_slots") or 0) for c in bonus)
    text = ("two readings of the same rows: read by the output protocol, rows reject their last draft d_K and "
            f"emit d_K itself as the recovered token ({events} exact violation(s)), which breaks the acceptance rule (a sure draft "
            "rejected) or the recovered token's support (max(p - q, 0) is 0 at a draft that can be rejected); but "
            "every violation sits at the last draft position and every kept event's token is that draft, which "
            "a correct residual never gives: the rows are [d_1 .. d_K, -1], all K drafts accepted and the bonus "
            "token dropped (the likelier reading, heuristic)")
    if slots:
        text += f"; the bonus token law saw {seen} bonus token(s) in {slots} slot(s)"
    return failed, text


def hints(checks: list[dict]) -> list[str]:
    notes = []
    rec_events, dec_events = [], []
    for c in checks:
        d = c.get("details") or {}
        if check_type(c) == "recovered_support" and d.get("violations"):
            rec_events += [e for e in d.get("violation_events") or [] if e.get("q_token")]
        if check_type(c) == "acceptance_exact" and d.get("violations"):
            dec_events += [e for e in d.get("violation_events") or [] if e.get("q_draft")]
    rec_ratios = [e["p_token"] / e["q_token"] for e in rec_events if e["q_token"] > 0]
    sure = [e["p_draft"] / e["q_draft"] for e in dec_events if e["q_draft"] > 0 and e["p_draft"] >= e["q_draft"]]
    if rec_ratios and all(abs(r - 1) <= _NEAR_TIE for r in rec_ratios + sure):
        gap = max(abs(r - 1) for r in rec_ratios + sure)
        notes.append(f"every kept violation sits at a near tie p ~ q (largest |p/q - 1| = {gap:.2g}): the verifier "
                     "likely computes its ratio and residual from a law that differs from the one it was given by "
                     "about that much (rounded to a lower precision, or renormalised)")
    elif sure and not rec_ratios and max(sure) <= 1.05:
        notes.append(f"the drafts rejected although p(d) >= q(d) all had p/q in [{min(sure):.5g}, {max(sure):.5g}]: "
                     f"acceptance below min(1, p/q) just above the tie, as min(1, s p/q) with s <= {1 / max(sure):.4g} "
                     "would give (scaled-down acceptance)")
    return notes
