"""Which part of the sampler is wrong: a diagnosis of an audit report from its failing checks.

Every check of the audit belongs to one *part* of speculative decoding
(:data:`CHECK_PARTS`); :func:`diagnose` gives each part of :data:`PARTS` a status —
``"fail"`` (a check of it failed), ``"pass"`` (its checks ran and passed), ``"not_tested"``
— names the parts at fault (``culprits``), and for each failing part the check and the event
of the strongest evidence (an exact violation before a small p-value) with a replay snippet
(:func:`~specexact.audit.decisions_replay.replay_snippet`).

Direct parts (their checks say it): acceptance rule (``acceptance_exact``, ``acceptance``,
``accepted_length``, ``first_acceptance``), recovered token (``recovered_support``,
``recovered_token_law``), bonus token (``bonus_token_law``), EOS / ``max_new_tokens``
(``eos_cut``), independence (``independent_rows``: rows of one call share randomness),
reproducibility (``independent_calls``: a call replays the randomness of the previous one,
e.g. a generator reseeded per call), protocol (``defect``: crash, hang, bad output), and the
emitted law (``sequence_law``, ``first_token_law``, ``sequences_vs_naive``).

Derived parts — **heuristics**, stated as such in the report:

- *position alignment*: the failing events' log-likelihood under the law of the next (or
  previous) position — acceptance ``min(1, p_{i±1}(d_i) / q_i(d_i))``, residual
  ``max(p_{i±1} - q_i, 0)`` — exceeds that under their own by more than
  :data:`ALIGN_MIN_NATS` and :data:`ALIGN_NATS_PER_EVENT` per event, the neighbour's law
  makes no observed event impossible and (decisions) its PIT reading is not below
  :data:`ALIGN_PIT_P` (it must explain the events, not only be less wrong), and the family fails
  at position 0 already (an exact violation there, or a PIT reading below
  :data:`POSITION_0_P`): a misaligned target law is wrong at every position, while a bug
  in the per-prefix histories leaves position 0 clean. The decisions themselves must fit the
  neighbour (a misaligned target law judges the drafts wrongly): recovered tokens that fit
  the neighbour's residual while the acceptance checks pass are reported on the recovered
  part (drawn from the wrong position), and a bonus token that fits ``p_{γ-1}`` better on the
  bonus part, not as misalignment. When nothing fits, the part's evidence states the best
  neighbour's measured gain and why it does not count (or that none was measured).
- *per-prefix processing* (logits-level samplers only: at the probability level the decoder
  processes the laws): exact violations only past position 0 while position 0 was checked
  clean (the penalties of a candidate prefix miss or add drafts), or two of the three
  per-event families (acceptance, recovered, bonus) failing together (the sampler's own
  target law differs from its declared processing), or the sequence law failing while no
  per-event check does.
- *attribution*: failures of the acceptance / recovered / bonus parts are "explained by" a
  derived culprit above; statistical per-event failures without an exact violation are
  explained by failing independence checks (the PIT tests assume independent rows); the
  emitted law's failure is explained by any other culprit, else it is the culprit itself
  (not located by the per-event checks).
- *fuzz findings* (exact, from the fuzz phase's rules, :data:`FUZZ_RULE_PARTS`) fail their
  part too: the acceptance-rule probes and an accepted draft of target probability 0 the
  acceptance rule; a zero-probability last token (recovered or bonus) the recovered token;
  a crash, hang, protocol violation or modified input the protocol; invalid input not
  refused (or refused with the wrong exception) the input validation; a generator not
  used, or the same generator state giving different output, reproducibility. Never
  explained away by another culprit.
- *tiers* (:mod:`specexact.audit.tiers`): every failing part carries the tier of its most
  severe failure (``tier``: ``inexact``, ``defect``, ``under_accepting`` or
  ``hardening``; null when it does not fail). A part that fails only at the hardening
  tier (input validation) is named after the culprits (``summary``: ``hardening: ...``),
  and is a culprit itself only under ``strict_inputs``.
- *hints*: violations that all sit at near ties ``p ~ q`` point at a verifier that uses a
  slightly different law than it was given (rounded to a lower precision, renormalised);
  rejections of sure drafts that all have ``p / q`` just above 1 point at a scaled-down
  acceptance.
"""

from __future__ import annotations

import math
from collections import defaultdict

from .decisions_replay import replay_snippet
from .tiers import TIERS, tier_of_check, tier_of_fuzz_rule

__all__ = ["PARTS", "CHECK_PARTS", "FUZZ_RULE_PARTS", "ALIGN_MIN_NATS", "ALIGN_NATS_PER_EVENT", "diagnose"]

PARTS = (
    ("acceptance_rule", "acceptance rule"),
    ("recovered_token", "recovered token"),
    ("bonus_token", "bonus token"),
    ("position_alignment", "position alignment"),
    ("per_prefix_processing", "per-prefix processing (penalties, truncation)"),
    ("independence", "independence (rows of a call)"),
    ("reproducibility", "reproducibility (fresh randomness per call)"),
    ("eos_cut", "EOS / max_new_tokens"),
    ("protocol", "protocol (crash, hang, output)"),
    ("input_validation", "input validation (invalid input refused)"),
    ("emitted_law", "emitted law (sequences)"),
)
"""Every part, in report order: ``(key, label)``."""

CHECK_PARTS = {
    "acceptance_exact": "acceptance_rule", "acceptance": "acceptance_rule", "accepted_length": "acceptance_rule",
    "first_acceptance": "acceptance_rule",
    "recovered_support": "recovered_token", "recovered_token_law": "recovered_token",
    "bonus_token_law": "bonus_token",
    "eos_cut": "eos_cut",
    "independent_rows": "independence",
    "independent_calls": "reproducibility",
    "defect": "protocol",
    "sequence_law": "emitted_law", "first_token_law": "emitted_law", "sequences_vs_naive": "emitted_law",
    # end-to-end cases (audit/e2e_case.py)
    "plain_sequence_law": "emitted_law", "sequences_vs_plain": "emitted_law", "reproducible": "reproducibility",
}
"""The part each check type belongs to."""

FUZZ_RULE_PARTS = {
    "acceptance_rule": "acceptance_rule", "zero_probability_token": "acceptance_rule",
    "no_crash": "protocol", "no_hang": "protocol", "output_protocol": "protocol", "inputs_unmodified": "protocol",
    "refuses_invalid_input": "input_validation",
    "uses_generator": "reproducibility", "same_generator_same_output": "reproducibility",
}
"""The part a fuzz finding's rule fails (a zero-probability *last* token goes to the
recovered token instead: :func:`_fuzz_part`)."""

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
_FAMILIES = ("acceptance_rule", "recovered_token", "bonus_token")


def _type(chk: dict) -> str:
    return chk["name"].split("[", 1)[0]


def _tested(chk: dict) -> bool:
    d = chk.get("details") or {}
    return int(chk.get("n") or 0) > 0 and not d.get("not_applicable") and chk.get("detectable_tv") != "inf" \
        and chk.get("detectable_tv") != math.inf


def _label(chk: dict) -> str:
    return f"{chk['case']} / {chk['name']}"


def _p(chk: dict) -> float:
    return float(chk["pvalue"])


def _event_of(chk: dict) -> dict | None:
    d = chk.get("details") or {}
    ev = (d.get("violation_events") or [None])[0] or d.get("strongest_event")
    return dict(ev) if isinstance(ev, dict) else None


def _strongest(failed: list[dict]) -> dict:
    """The failing check of the strongest evidence: exact violations with an event first."""
    def key(item):
        k, c = item
        d = c.get("details") or {}
        exact_event = c.get("method") == "exact" and _p(c) == 0.0 and bool(d.get("violation_events"))
        return (not exact_event, _p(c), -int(d.get("violations") or 0), k)

    return sorted(enumerate(failed), key=key)[0][1]


def _evidence(chk: dict) -> str:
    d = chk.get("details") or {}
    text = f"{_label(chk)}: p={_p(chk):.3g}"
    if d.get("violations"):
        text += f", {d['violations']} exact violation(s)"
    msg = d.get("message")
    if msg:
        text += f" — {msg}"
    elif chk.get("description"):
        text += f" — {chk['description']}"
    return text


def _part(key: str, label: str, checks: list[dict], sampler: str, case_set: str) -> dict:
    run = [c for c in checks if _tested(c)]
    failed = [c for c in checks if not c["passed"]]
    status = "fail" if failed else ("pass" if run else "not_tested")
    out = {"part": key, "label": label, "status": status, "checks_run": len(run),
           "failed": [_label(c) for c in failed], "evidence": None, "explained_by": None, "heuristic": False,
           "event": None, "replay": None}
    if failed:
        best = _strongest(failed)
        out["evidence"] = _evidence(best)
        ev = _event_of(best)
        if ev is not None:
            ev["case"], ev["case_set"] = best["case"], case_set
            out["event"] = ev
            if ev.get("kind") in ("decision", "recovered", "bonus"):
                out["replay"] = replay_snippet(ev, sampler)
    return out


def _by_case_type(checks: list[dict]) -> dict:
    out = defaultdict(dict)
    for c in checks:
        out[c["case"]][_type(c)] = c
    return out


def _gain(chk: dict | None, side: str) -> tuple[float, int, int, float | None] | None:
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


def _fits_better(gain) -> bool:
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


def _alignment(checks: list[dict], parts: dict) -> tuple[dict, list]:
    """The position-alignment part, and ``[(gain, case, events, side)]`` of the cases whose
    recovered tokens alone fit a neighbour's residual (acceptance right: the recovered
    token is drawn from the wrong position, a fault of the recovered-token part)."""
    out = {"part": "position_alignment", "label": dict(PARTS)["position_alignment"], "status": "not_tested",
           "checks_run": 0, "failed": [], "evidence": None, "explained_by": None, "heuristic": True,
           "event": None, "replay": None, "cases": []}
    table = _by_case_type(checks)
    stats = [c for c in checks if _type(c) in ("acceptance", "recovered_token_law") and _tested(c)]
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
                g = _gain(types.get(fam), side)
                if g is None:
                    continue
                seen.append((case, what, pos, g, at0))
                if at0 and _fits_better(g):  # a misaligned law is wrong at position 0 too (p_1 judges d_0)
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
        if _type(c) not in ("acceptance_exact", "recovered_support"):
            continue
        d = c.get("details") or {}
        vb, cb = d.get("violations_by_position") or [], d.get("checked_by_position") or []
        if vb:
            v0 += int(vb[0])
            later += int(sum(vb[1:]))
        if cb:
            c0 += int(cb[0])
    return v0, later, c0


def _per_prefix(checks: list[dict], parts: dict, level: str) -> dict:
    out = {"part": "per_prefix_processing", "label": dict(PARTS)["per_prefix_processing"], "status": "not_tested",
           "checks_run": 0, "failed": [], "evidence": None, "explained_by": None, "heuristic": True,
           "event": None, "replay": None}
    if level != "logits":
        out["evidence"] = ("probability-level sampler: the decoder applies penalties and truncation per candidate "
                           "prefix itself; only a logits-level sampler does it")
        return out
    fam_fail = [f for f in _FAMILIES if parts[f]["status"] == "fail"]
    tested = sum(parts[f]["checks_run"] for f in _FAMILIES) + parts["emitted_law"]["checks_run"]
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


def _hints(checks: list[dict]) -> list[str]:
    notes = []
    rec_events, dec_events = [], []
    for c in checks:
        d = c.get("details") or {}
        if _type(c) == "recovered_support" and d.get("violations"):
            rec_events += [e for e in d.get("violation_events") or [] if e.get("q_token")]
        if _type(c) == "acceptance_exact" and d.get("violations"):
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


def _fuzz_part(finding: dict) -> str | None:
    part = FUZZ_RULE_PARTS.get(finding.get("rule"))
    if finding.get("rule") == "zero_probability_token" and "an accepted draft" not in finding.get("message", ""):
        part = "recovered_token"  # the last token of the row: recovered (or bonus)
    return part


def _add_fuzz_findings(report: dict, parts: dict) -> set:
    """Fail the part of each fuzz finding (module docstring); return those parts."""
    hit = set()
    for f in (report.get("fuzz") or {}).get("findings") or []:
        key = _fuzz_part(f)
        if key is None:
            continue
        p = parts[key]
        label = f"fuzz / {f['family']} / {f['rule']}"
        if label not in p["failed"]:
            p["failed"].append(label)
        if key not in hit:
            known = f" (= {f['known_as']})" if f.get("known_as") else ""
            text = f"fuzz phase, exact: {f['message'].splitlines()[0]}{known}; shrunk example {f['example']}"
            p["evidence"] = text if p["status"] != "fail" or not p["evidence"] else p["evidence"] + "; " + text
        p["status"] = "fail"
        hit.add(key)
    return hit


def _worst_tier(tiers) -> str | None:
    """The most severe of ``tiers`` (:data:`~specexact.audit.tiers.TIERS` order), or None."""
    found = [t for t in TIERS if t in set(tiers)]
    return found[0] if found else None


def _add_tiers(report: dict, parts: dict, grouped: dict) -> None:
    """Set each part's ``tier``: the most severe tier of its failing checks (as the report's
    findings state them, else from the check) and fuzz findings; the derived parts fail at
    ``inexact``; null for a part that does not fail."""
    stated = {(f.get("case"), f.get("check")): f.get("tier") for f in report.get("findings") or []
              if f.get("source") != "fuzz" and f.get("tier")}
    fuzz = [f for f in (report.get("fuzz") or {}).get("findings") or []]
    for key, p in parts.items():
        if p["status"] != "fail":
            p["tier"] = None
            continue
        tiers = [stated.get((c["case"], c["name"])) or tier_of_check(c["name"])
                 for c in grouped.get(key, []) if not c["passed"]]
        tiers += [tier_of_fuzz_rule(f.get("rule")) for f in fuzz if _fuzz_part(f) == key]
        p["tier"] = _worst_tier(tiers) or "inexact"


def diagnose(report: dict) -> dict:
    """The diagnosis of a report (module docstring).

    Parameters
    ----------
    report : dict
        An audit report (``reports/schema.md``) with at least ``checks`` (each with its
        ``case``), ``sampler`` and ``settings``.

    Returns
    -------
    dict
        ``summary`` (one line), ``culprits`` (part keys at fault, strongest first; a part
        failing only at the hardening tier only with ``settings["strict_inputs"]``),
        ``hardening`` (the parts failing only at the hardening tier, since 1.6), ``parts``
        (one entry per :data:`PARTS`: ``part``, ``label``, ``status``, ``tier``,
        ``checks_run``, ``failed``, ``evidence``, ``explained_by``, ``heuristic``,
        ``event``, ``replay``) and ``notes`` (hints, heuristic).

    Raises
    ------
    KeyError
        If ``report`` lacks ``checks`` or ``sampler``.
    """
    checks = list(report["checks"])
    settings = report.get("settings") or {}
    level = (settings.get("processing") or {}).get("level", "probability")
    case_set = settings.get("case_set") or "default"
    sampler = report["sampler"]["name"]
    grouped = defaultdict(list)
    for c in checks:
        if _type(c) in CHECK_PARTS:  # checks of other stages (e.g. fuzzing) are not parts here
            grouped[CHECK_PARTS[_type(c)]].append(c)
    parts = {k: _part(k, label, grouped[k], sampler, case_set) for k, label in PARTS
             if k not in ("position_alignment", "per_prefix_processing")}
    if parts["protocol"]["status"] == "not_tested" and checks:
        # every verifier output of every case passed the protocol check (a defect check otherwise)
        parts["protocol"].update(status="pass", checks_run=len({c["case"] for c in checks}))
    invalid = [f for f in (report.get("fuzz") or {}).get("families") or []
               if str(f.get("name", "")).endswith("invalid_inputs") and f.get("examples")]
    if invalid:  # the fuzz phase tried invalid inputs
        parts["input_validation"].update(status="pass", checks_run=len(invalid))
    fuzz_hit = _add_fuzz_findings(report, parts)
    parts["position_alignment"], recovered_shift = _alignment(checks, parts)
    parts["per_prefix_processing"] = _per_prefix(checks, parts, level)
    rec = parts["recovered_token"]
    if rec["status"] == "fail" and recovered_shift:
        gain, case, n, pos = max(recovered_shift)
        rec["evidence"] += (f"; {case}: the recovered tokens fit the residual of position {pos} better than their "
                            f"own (log-likelihood +{gain:.0f} nats over {n} events) while the decisions follow their "
                            "own position's law: drawn from the wrong position")
    bonus = parts["bonus_token"]
    if bonus["status"] == "fail":
        for c in grouped["bonus_token"]:
            g = _gain(c, "prev")
            if not c["passed"] and _fits_better(g):
                bonus["evidence"] += (f"; the bonus tokens fit the target law of position γ-1 better than that of "
                                      f"position γ (log-likelihood +{g[0]:.0f} nats over {g[1]}): drawn from the wrong "
                                      "position")
                break
    _add_tiers(report, parts, grouped)
    strict = bool(settings.get("strict_inputs"))
    hardening = [k for k, _ in PARTS if parts[k]["tier"] == "hardening"]
    culprits = []
    for k in ("protocol", "position_alignment", "per_prefix_processing", "independence", "reproducibility", "eos_cut"):
        if parts[k]["status"] == "fail":
            culprits.append(k)
    derived = [k for k in ("position_alignment", "per_prefix_processing") if k in culprits]
    dependent = [k for k in ("independence", "reproducibility") if k in culprits]
    for f in _FAMILIES:
        p = parts[f]
        if p["status"] != "fail":
            continue
        if f in fuzz_hit:  # an exact fuzz finding: the part itself is wrong
            culprits.append(f)
        elif "position_alignment" in derived and f != "bonus_token":
            p["explained_by"] = "position_alignment"
        elif "per_prefix_processing" in derived:
            p["explained_by"] = "per_prefix_processing"
        elif dependent and not any(c.get("method") == "exact" and not c["passed"] for c in grouped[f]):
            p["explained_by"] = dependent[0]
        else:
            culprits.append(f)
    if parts["emitted_law"]["status"] == "fail":
        if culprits:
            parts["emitted_law"]["explained_by"] = culprits[0]
        else:
            culprits.append("emitted_law")
    if strict:
        culprits += [k for k in hardening if k not in culprits]
    labels = dict(PARTS)
    if culprits:
        summary = "faulty: " + ", ".join(labels[k] for k in culprits)
    elif any(p["status"] == "pass" for p in parts.values()):
        summary = "no part found faulty"
    else:
        summary = "nothing was tested"
    if hardening and not strict:
        summary += "; hardening (does not fail the audit without strict inputs): " + ", ".join(
            labels[k] for k in hardening)
    notes = _hints(checks)
    combined = report.get("combined")
    if combined and not combined["passed"]:
        kinds = [s["check"].split("[", 1)[0] for s in combined["strongest"]]
        # a combined finding read as under-accepting (audit/report.py, combined_kind): its
        # evidence is the accepted-length checks, the acceptance rule's
        under = any(f.get("source") == "combined" and f.get("kind") == "under_accepting"
                    for f in report.get("findings") or [])
        if under:
            kinds = [k for k in kinds if k in ("accepted_length", "first_acceptance")]
        named = sorted({labels[CHECK_PARTS[k]] for k in kinds if k in CHECK_PARTS})
        notes.append(f"the combined check fails (p={combined['pvalue']:.3g}): evidence spread over several checks, "
                     "none failing on its own; the strongest are of "
                     + (", ".join(named) if named else "no part") + " (heuristic: the parts of its smallest p-values)")
        if not culprits:
            what = "exact but under-accepting" if under else "faulty"
            summary = (f"{what} (combined evidence, no check failing on its own): likely " + ", ".join(named)
                       if named else f"{what} (combined evidence, no check failing on its own)")
    return {"summary": summary, "culprits": culprits, "hardening": hardening, "parts": [parts[k] for k, _ in PARTS],
            "notes": notes}
