"""Which part of the sampler is wrong: a diagnosis of an audit report from its failing checks.

Every check of the audit belongs to one *part* of speculative decoding
(:data:`CHECK_PARTS`); :func:`diagnose` gives each part of :data:`PARTS` a status —
``"fail"`` (a check of it failed), ``"pass"`` (its checks ran and passed), ``"not_tested"``
— names the parts at fault (``culprits``), and for each failing part the check and the event
of the strongest evidence (an exact violation before a small p-value) with a replay snippet
(:func:`~specexact.audit.verdict.decisions_replay.replay_snippet`). The parts and their
checks are :mod:`~specexact.audit.verdict.diagnosis_parts`'s, the derived parts' heuristics
:mod:`~specexact.audit.verdict.diagnosis_heuristics`'s.

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
  :data:`~specexact.audit.verdict.diagnosis_heuristics.ALIGN_PIT_P` (it must explain the
  events, not only be less wrong), and the family fails at position 0 already (an exact
  violation there, or a PIT reading below
  :data:`~specexact.audit.verdict.diagnosis_heuristics.POSITION_0_P`): a misaligned target
  law is wrong at every position, while a bug in the per-prefix histories leaves position 0
  clean. The decisions themselves must fit the
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
- *dropped bonus token* (:func:`~specexact.audit.verdict.diagnosis_heuristics.dropped_bonus`):
  every exact violation sits at the last draft position and every kept event's token is
  that draft itself — a row ``[d_1 .. d_K, -1]`` read by the protocol as ``d_K`` rejected and
  recovered as itself, which a correct residual never gives. The bonus token is named
  (both readings in its evidence) and the acceptance and recovered parts' failures are
  explained by it.
- *attribution*: failures of the acceptance / recovered / bonus parts are "explained by" a
  derived culprit above; statistical per-event failures without an exact violation are
  explained by failing independence checks (the PIT tests assume independent rows); the
  emitted law's failure is explained by any other culprit, else it is the culprit itself
  (not located by the per-event checks).
- *fuzz findings* (exact, from the fuzz phase's rules, :data:`FUZZ_RULE_PARTS`) fail their
  part too: the acceptance-rule probes and an accepted draft of target probability 0 the
  acceptance rule; at the logits level a probe decision that only the law of the declared
  order with two operations swapped explains (rule ``declared_processing``) the per-prefix
  processing; a zero-probability last token (recovered or bonus) the recovered token;
  a crash, hang, protocol violation or modified input the protocol; invalid input not
  refused (or refused with the wrong exception) the input validation; a generator not
  used, or the same generator state giving different output, reproducibility. Never
  explained away by another culprit.
- *tiers* (:mod:`specexact.audit.verdict.tiers`): every failing part carries the tier of its most
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

from collections import defaultdict

from specexact.audit.verdict.decisions_replay import replay_snippet
from specexact.audit.verdict.diagnosis_e2e import diagnose_e2e, is_e2e_report
from specexact.audit.verdict.diagnosis_heuristics import (
    ALIGN_MIN_NATS,
    ALIGN_NATS_PER_EVENT,
    alignment,
    fits_better,
    hints,
    dropped_bonus,
    neighbour_gain,
    per_prefix,
)
from specexact.audit.verdict.diagnosis_parts import (
    CHECK_PARTS,
    FAMILIES,
    FUZZ_RULE_PARTS,
    PARTS,
    check_label,
    check_type,
    tested,
)
from specexact.audit.verdict.tiers import TIERS, tier_of_check, tier_of_fuzz_rule

__all__ = ["PARTS", "CHECK_PARTS", "FUZZ_RULE_PARTS", "ALIGN_MIN_NATS", "ALIGN_NATS_PER_EVENT", "diagnose"]


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
    text = f"{check_label(chk)}: p={_p(chk):.3g}"
    if d.get("violations"):
        text += f", {d['violations']} exact violation(s)"
    msg = d.get("message")
    if msg:
        text += f" — {msg}"
    elif chk.get("description"):
        text += f" — {chk['description']}"
    return text


def _part(key: str, label: str, checks: list[dict], sampler: str, case_set: str) -> dict:
    run = [c for c in checks if tested(c)]
    failed = [c for c in checks if not c["passed"]]
    status = "fail" if failed else ("pass" if run else "not_tested")
    out = {"part": key, "label": label, "status": status, "checks_run": len(run),
           "failed": [check_label(c) for c in failed], "evidence": None, "explained_by": None, "heuristic": False,
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


def _fuzz_part(finding: dict) -> str | None:
    part = FUZZ_RULE_PARTS.get(finding.get("rule"))
    if finding.get("rule") == "zero_probability_token" and "an accepted draft" not in finding.get("message", ""):
        part = "recovered_token"  # the last token of the row: recovered (or bonus)
    return part


def _add_fuzz_findings(report: dict, parts: dict) -> set:
    """Fail the part of each fuzz finding (module docstring) among ``parts``; return those
    parts (a part not yet in ``parts``, e.g. the derived per-prefix processing, is left for
    a later call)."""
    hit = set()
    for f in (report.get("fuzz") or {}).get("findings") or []:
        key = _fuzz_part(f)
        if key is None or key not in parts:
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
        p["heuristic"] = False  # an exact finding
        hit.add(key)
    return hit


def _worst_tier(tiers) -> str | None:
    """The most severe of ``tiers`` (:data:`~specexact.audit.verdict.tiers.TIERS` order), or None."""
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
    if is_e2e_report(report):  # an engine's generate loop: its own parts (diagnosis_e2e)
        return diagnose_e2e(report)
    checks = list(report["checks"])
    settings = report.get("settings") or {}
    level = (settings.get("processing") or {}).get("level", "probability")
    case_set = settings.get("case_set") or "default"
    sampler = report["sampler"]["name"]
    grouped = defaultdict(list)
    for c in checks:
        if check_type(c) in CHECK_PARTS:  # checks of other stages (e.g. fuzzing) are not parts here
            grouped[CHECK_PARTS[check_type(c)]].append(c)
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
    parts["position_alignment"], recovered_shift = alignment(checks, parts)
    parts["per_prefix_processing"] = per_prefix(checks, parts, level)
    fuzz_hit |= _add_fuzz_findings(report, {"per_prefix_processing": parts["per_prefix_processing"]})
    rec = parts["recovered_token"]
    if rec["status"] == "fail" and recovered_shift:
        gain, case, n, pos = max(recovered_shift)
        rec["evidence"] += (f"; {case}: the recovered tokens fit the residual of position {pos} better than their "
                            f"own (log-likelihood +{gain:.0f} nats over {n} events) while the decisions follow their "
                            "own position's law: drawn from the wrong position")
    bonus = parts["bonus_token"]
    if bonus["status"] == "fail":
        for c in grouped["bonus_token"]:
            g = neighbour_gain(c, "prev")
            if not c["passed"] and fits_better(g):
                bonus["evidence"] += (f"; the bonus tokens fit the target law of position γ-1 better than that of "
                                      f"position γ (log-likelihood +{g[0]:.0f} nats over {g[1]}): drawn from the wrong "
                                      "position")
                break
    dropped = dropped_bonus(checks)
    if dropped is not None:  # rows [d_1 .. d_K, -1]: the bonus token dropped, read as d_K rejected and recovered
        failed, text = dropped
        bonus.update(status="fail", heuristic=True, failed=failed + [x for x in bonus["failed"] if x not in failed],
                     evidence=text if not bonus["evidence"] else bonus["evidence"] + "; " + text)
    _add_tiers(report, parts, grouped)
    strict = bool(settings.get("strict_inputs"))
    hardening = [k for k, _ in PARTS if parts[k]["tier"] == "hardening"]
    culprits = []
    for k in ("protocol", "position_alignment", "per_prefix_processing", "independence", "reproducibility", "eos_cut"):
        if parts[k]["status"] == "fail":
            culprits.append(k)
    derived = [k for k in ("position_alignment", "per_prefix_processing") if k in culprits]
    dependent = [k for k in ("independence", "reproducibility") if k in culprits]
    for f in FAMILIES:
        p = parts[f]
        if p["status"] != "fail":
            continue
        if f in fuzz_hit:  # an exact fuzz finding: the part itself is wrong
            culprits.append(f)
        elif dropped is not None and f != "bonus_token":
            p["explained_by"] = "bonus_token"
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
    notes = hints(checks)
    combined = report.get("combined")
    if combined and not combined["passed"]:
        kinds = [s["check"].split("[", 1)[0] for s in combined["strongest"]]
        # a combined finding read as under-accepting (audit/verdict/finding_kinds.py, combined_kind): its
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
