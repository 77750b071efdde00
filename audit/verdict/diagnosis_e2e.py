"""The diagnosis of an end-to-end audit: the parts of an engine's generate loop.

An end-to-end case (:mod:`specexact.audit.cases.e2e`) checks an engine's outputs, not its
verifier's per-event decisions, so its diagnosis names the parts of a generate loop
(:data:`E2E_PARTS`): drafting, the target's forward pass and its position alignment,
per-prefix processing (penalties, truncation, ``min_tokens``), the acceptance rule, the
recovered and bonus tokens, EOS / length bookkeeping, seeds, batching, the protocol (crash,
hang, output) and the emitted law. Each part lists the checks that tested it (``tested_by``,
``"case / check"``), from what each check covers (:func:`coverage`):

- ``sequence_law[class c]`` (the speculative outputs against the exact law) and
  ``sequences_vs_plain[class c]`` (against the engine's own plain outputs): drafting (drafts
  verified against another law than they came from change the law), the target forward and
  alignment, the acceptance rule, the recovered token, the bonus token (where the class's
  ``max_tokens`` reaches past the γ drafts), EOS / length bookkeeping, batching (every call
  holds the requests of every class, interleaved) and per-prefix processing where the class
  processes (temperature, truncation, penalties, ``min_tokens``);
- ``plain_sequence_law[class c]``: the parts the plain path shares (target forward,
  processing, EOS / length, batching);
- ``accepted_length[class c]`` (the first round's accepted count against its exact law):
  drafting, target forward, the acceptance rule, batching and the class's processing;
- ``reproducible``, ``reproducible_in_mix``, ``reproducible_alone`` and ``independent_requests``
  (:mod:`~specexact.audit.cases.e2e.seed_checks`): seeds; ``defect`` (crash, hang, protocol break): the protocol,
  and where its output-protocol violation names one, that part too (tokens after EOS or an
  output of the wrong length: EOS / length bookkeeping; EOS before ``min_tokens``: per-prefix
  processing; logprobs: the reported logprobs);
  ``token_logprobs`` / ``plain_token_logprobs`` (the reported logprobs against the exact
  law): the reported logprobs;
- a long case's ``token_law[positions a-b]`` / ``plain_token_law[...]`` (every emitted token
  of every class in a band of output positions): as ``sequence_law`` / ``plain_sequence_law``;
  located by band, not class (:mod:`~specexact.audit.verdict.diagnosis_bands`).

A part reads ``"pass"`` when its checks ran and passed, ``"not_tested"`` when none covered
it. Failures are located, where the checks allow (**heuristics**, ``heuristic`` true):

- ``defect`` fails the protocol, ``reproducible``, ``reproducible_in_mix``, ``reproducible_alone`` and
  ``independent_requests`` the seeds and a logprob check the reported logprobs (direct); a
  failing ``independent_requests`` also explains its case's failing law checks (dependent
  draws pooled as independent ones), which then name no suspects;
- *by class*: when the failing classes share a feature that a passing class lacks (an
  operation of their processing, ``min_tokens``, EOS), the fault follows that
  feature: per-prefix processing (or EOS / length for EOS), the other parts their checks
  cover failing, ``explained_by`` it (e.g. the request's temperature not applied to the
  target: only the classes with a temperature fail);
- otherwise the checks cannot tell the parts they cover apart: those parts are
  ``"suspect"`` (listed in ``suspects``, likelier first: a failing ``accepted_length``
  points at the first round's drafting, target forward and acceptance; a passing one in a
  failing class away from drafting and acceptance), and the emitted law is the culprit
  (``"fail"``: the law is wrong, the part is not located). A failing plain path
  (``plain_sequence_law``) puts the suspicion on the parts both paths share.
"""

from __future__ import annotations

import re
from collections import defaultdict

from specexact.audit.verdict.diagnosis_bands import BAND_CHECK_TYPES, band_notes
from specexact.audit.verdict.diagnosis_parts import check_label, check_type, tested
from specexact.audit.verdict.tiers import TIERS, tier_of_check

__all__ = ["E2E_PARTS", "E2E_CHECK_TYPES", "is_e2e_report", "coverage", "diagnose_e2e"]

E2E_PARTS = (
    ("drafting", "drafting (drafts and their law)"),
    ("target_forward", "target forward and position alignment"),
    ("per_prefix_processing", "per-prefix processing (penalties, truncation, min_tokens)"),
    ("acceptance_rule", "acceptance rule"),
    ("recovered_token", "recovered token"),
    ("bonus_token", "bonus token"),
    ("eos_cut", "EOS / length bookkeeping"),
    ("seeds", "seeds (same seed, same output; unseeded requests independent)"),
    ("batching", "batching (all classes in one call)"),
    ("logprobs", "reported logprobs"),
    ("protocol", "protocol (crash, hang, output)"),
    ("emitted_law", "emitted law (sequences)"),
)
"""The parts of an end-to-end diagnosis, in report order: ``(key, label)``."""

_DIRECT = {"defect": "protocol", "reproducible": "seeds", "reproducible_in_mix": "seeds", "reproducible_alone": "seeds",
           "independent_requests": "seeds", "token_logprobs": "logprobs", "plain_token_logprobs": "logprobs"}
"""Check types that name their part directly (no heuristic)."""

_PROTOCOL_PARTS = (("continue after EOS", "eos_cut"), ("without EOS at the end", "eos_cut"),
                   ("tokens for max_tokens=", "eos_cut"), ("before min_tokens", "per_prefix_processing"),
                   ("logprob", "logprobs"))
"""Output-protocol violations that name a part of the loop besides the protocol: a message
fragment of :func:`~specexact.decoders.engines.protocol.check_generation_results` and the
part (tokens after an emitted EOS, an output cut short or too long: EOS / length
bookkeeping; EOS before ``min_tokens``: per-prefix processing; logprobs of the wrong
length or value: the reported logprobs)."""


def _protocol_parts(chk: dict) -> set:
    """The parts a failing ``defect`` check's protocol violation names (:data:`_PROTOCOL_PARTS`)."""
    if chk.get("passed", True):
        return set()
    message = str((chk.get("details") or {}).get("message") or "")
    if "protocol violation" not in message:
        return set()
    return {part for fragment, part in _PROTOCOL_PARTS if fragment in message}

E2E_CHECK_TYPES = ("sequence_law", "sequences_vs_plain", "plain_sequence_law", "accepted_length", "reproducible",
                   "reproducible_in_mix", "reproducible_alone", "independent_requests", "defect", "token_logprobs", "plain_token_logprobs", *BAND_CHECK_TYPES)
"""The check types of an end-to-end case (:mod:`specexact.audit.cases.e2e.checks`)."""

_SPECULATIVE = ("drafting", "target_forward", "acceptance_rule", "recovered_token", "bonus_token", "eos_cut",
                "batching", "emitted_law")
_PLAIN = ("target_forward", "eos_cut", "batching", "emitted_law")
_FIRST_ROUND = ("drafting", "target_forward", "acceptance_rule", "batching")
_SPECULATIVE_LAW = ("sequence_law", "sequences_vs_plain", "accepted_length")

_OPS = {"T": "temperature", "top_k": "top-k", "top_p": "top-p", "min_p": "min-p",
        "repetition_penalty": "repetition penalty", "presence_penalty": "presence penalty",
        "frequency_penalty": "frequency penalty"}
_CLASS = re.compile(r"\[class (\d+)\]")


def is_e2e_report(report: dict) -> bool:
    """Whether every case of ``report`` is an end-to-end case (its config's ``kind``
    ``"e2e"``); a report without ``cases`` is judged by its checks' types (an end-to-end
    type that only end-to-end cases have, and none of another level)."""
    cases = report.get("cases")
    if cases:
        return all((c.get("config") or {}).get("kind") == "e2e" for c in cases)
    types = {check_type(c) for c in report.get("checks") or []}
    return bool(types & {"sequences_vs_plain", "plain_sequence_law", "reproducible"}) and types <= set(E2E_CHECK_TYPES)


def _class_info(report: dict) -> dict:
    """``{case: {class id: {"features": set, "bonus": bool, "text": str}}}`` from the cases'
    configs (``row_classes``, as :meth:`~specexact.audit.cases.e2e.case.E2ERowClass.describe`
    writes them)."""
    out = {}
    for rep in report.get("cases") or []:
        cfg = rep.get("config") or {}
        gamma = int(cfg.get("num_speculative_tokens") or cfg.get("num_draft_tokens") or 0)
        ids = cfg.get("class_ids")
        info = {}
        for i, text in enumerate(cfg.get("row_classes") or []):
            fields = str(text).split("; ")
            params = fields[1] if len(fields) > 1 else ""
            feats = {_OPS.get(tok.split("=", 1)[0], tok.split("=", 1)[0]) for tok in params.split()
                     if "=" in tok}
            limits = fields[2] if len(fields) > 2 else ""
            m = re.search(r"max_tokens=(\d+)", limits)
            if "min_tokens=" in limits:
                feats.add("min_tokens")
            if len(fields) > 3 and fields[3].strip().startswith("eos on"):  # "eos on (stop token t)" too
                feats.add("EOS")
            info[ids[i] if ids else i] = {"features": feats, "text": text,
                                          "bonus": m is None or not gamma or int(m.group(1)) > gamma}
        out[rep.get("name")] = info
    return out


def _class_of(chk: dict) -> int | None:
    m = _CLASS.search(chk["name"])
    return int(m.group(1)) if m else None


def coverage(chk: dict, classes: dict | None = None) -> set:
    """The parts check ``chk`` tests (module docstring); ``classes`` is its case's
    ``{class id: info}`` (processing, EOS and whether the bonus token is reached: all
    assumed where unknown)."""
    t = check_type(chk)
    info = (classes or {}).get(_class_of(chk))
    feats = info["features"] if info else {"processing"}
    processing = bool(feats - {"EOS"})
    if t in ("sequence_law", "sequences_vs_plain", "token_law"):
        parts = set(_SPECULATIVE)
        if info and not info["bonus"]:
            parts.discard("bonus_token")
    elif t in ("plain_sequence_law", "plain_token_law"):
        parts = set(_PLAIN)
    elif t == "accepted_length":
        parts = set(_FIRST_ROUND)
    elif t in _DIRECT:
        return {_DIRECT[t]} | (_protocol_parts(chk) if t == "defect" else set())
    else:
        return set()
    if processing:
        parts.add("per_prefix_processing")
    return parts


def _evidence(chk: dict) -> str:
    d = chk.get("details") or {}
    text = f"{check_label(chk)}: p={float(chk['pvalue']):.3g}"
    if d.get("message"):
        text += f" — {str(d['message']).splitlines()[0]}"
    return text


def _class_names(case: str, ids, classes: dict) -> str:
    return ", ".join(f"{c} ({', '.join(sorted(classes.get(c, {}).get('features') or ())) or 'plain'})"
                     for c in sorted(ids))


def _localise(case: str, failing: set, passing: set, classes: dict) -> tuple[set, str] | None:
    """The features every failing class has and some passing class lacks (the loop works
    without them; a passing class with one may use it where the fault does not show), with
    the sentence that says so, or None (no passing class, or no such feature)."""
    if not failing or not passing or not all(c in classes for c in failing | passing):
        return None
    common = set.intersection(*(set(classes[c]["features"]) for c in failing))
    common = {f for f in common if any(f not in classes[c]["features"] for c in passing)}
    if not common:
        return None
    text = (f"{case}: classes {_class_names(case, failing, classes)} fail and classes "
            f"{_class_names(case, passing, classes)} pass: the fault follows {', '.join(sorted(common))}")
    return common, text


def _worst_tier(report: dict, failed: list[dict]) -> str | None:
    stated = {(f.get("case"), f.get("check")): f.get("tier") for f in report.get("findings") or []
              if f.get("source") != "fuzz" and f.get("tier")}
    tiers = {stated.get((c["case"], c["name"])) or tier_of_check(c["name"]) for c in failed}
    found = [t for t in TIERS if t in tiers]
    return found[0] if found else "inexact"


def diagnose_e2e(report: dict) -> dict:
    """The diagnosis of an end-to-end report (module docstring), in the shape of
    :func:`~specexact.audit.verdict.diagnosis.diagnose`'s, with ``level`` ``"e2e"``,
    ``suspects`` and each part's ``tested_by``.

    Parameters
    ----------
    report : dict
        An audit report whose cases are end-to-end cases (:func:`is_e2e_report`).

    Returns
    -------
    dict
        ``level``, ``summary``, ``culprits``, ``suspects`` (parts the failing checks cannot
        tell apart, likelier first), ``hardening`` (empty), ``parts`` (one per
        :data:`E2E_PARTS`) and ``notes``.

    Raises
    ------
    KeyError
        If ``report`` lacks ``checks``.
    """
    checks = [c for c in report["checks"] if check_type(c) in E2E_CHECK_TYPES]
    info = _class_info(report)
    labels = dict(E2E_PARTS)
    cov = {id(c): coverage(c, info.get(c["case"])) for c in checks}
    parts = {}
    for key, label in E2E_PARTS:
        mine = [c for c in checks if key in cov[id(c)]]
        run = [c for c in mine if tested(c)]
        failed = [c for c in mine if not c["passed"]]
        parts[key] = {"part": key, "label": label, "status": "fail" if failed else ("pass" if run else "not_tested"),
                      "tier": None, "checks_run": len(run), "failed": [check_label(c) for c in failed],
                      "evidence": None, "explained_by": None, "heuristic": False, "event": None, "replay": None,
                      "tested_by": [check_label(c) for c in mine if tested(c) or not c["passed"]]}
    if parts["protocol"]["status"] == "not_tested" and checks:  # every call kept the protocol
        parts["protocol"].update(status="pass", checks_run=len({c["case"] for c in checks}),
                                 tested_by=sorted({f"{c['case']} / every generate call" for c in checks}))
    located, explained, score, notes, direct = {}, {}, defaultdict(int), [], set()
    for ctype, key in _DIRECT.items():
        bad = [c for c in checks if check_type(c) == ctype and not c["passed"]]
        if bad and key not in located:
            located[key] = _evidence(bad[0])
        for c in bad if ctype == "defect" else ():  # a protocol violation that names a part
            for part in sorted(_protocol_parts(c)):
                located.setdefault(part, _evidence(c))
                direct.add(part)
    law_failed = [c for c in checks if not c["passed"] and check_type(c) not in _DIRECT]
    by_case = defaultdict(list)
    for c in checks:
        by_case[c["case"]].append(c)
    for case, cs in by_case.items():
        if any(check_type(c) == "independent_requests" and not c["passed"] for c in cs):
            # the case's draws are not independent: its law checks, which pool them as
            # independent draws, fail for that reason; they locate nothing else
            for c in cs:
                if not c["passed"] and check_type(c) not in _DIRECT:
                    for p in cov[id(c)] - {"seeds"}:
                        explained.setdefault(p, "seeds")
            notes.append(f"{case}: unseeded requests of one call are not independent (independent_requests "
                         "fails): the law checks that pool them fail with it and locate nothing else")
            continue
        classes = info.get(case, {})
        table = defaultdict(dict)
        for c in cs:
            if _class_of(c) is not None:
                table[_class_of(c)][check_type(c)] = c
        for path, types in (("plain", ("plain_sequence_law",)), ("speculative", _SPECULATIVE_LAW)):
            fail = {k for k, t in table.items() if any(x in t and not t[x]["passed"] for x in types)}
            if path == "speculative":  # a class whose plain path fails is read on the plain path
                fail -= {k for k, t in table.items() if "plain_sequence_law" in t and not t["plain_sequence_law"]["passed"]}
            # classes whose checks ran on samples and passed (with power or not: the failing ones fail exactly
            # or at the case's rate, and a passing class only has to show the loop can work without a feature)
            ok = {k for k, t in table.items() if any(x in t and int(t[x].get("n") or 0) > 0 for x in types)
                  and all(t[x]["passed"] for x in types if x in t)}
            if not fail:
                continue
            found = _localise(case, fail, ok, classes)
            bad = [table[k][x] for k in fail for x in types if x in table[k] and not table[k][x]["passed"]]
            if found is not None:
                feats, text = found
                keys = (["eos_cut"] if "EOS" in feats else []) + (["per_prefix_processing"] if feats - {"EOS"} else [])
                for key in keys:
                    located[key] = (located[key] + "; " if key in located else "") + text
                for c in bad:
                    for p in cov[id(c)] - set(keys):
                        explained.setdefault(p, keys[0])
                continue
            # a part that a failing class does not exercise is not needed to explain the failure
            needless = {part for part, feat in (("per_prefix_processing", None), ("eos_cut", "EOS"))
                        if any(k in classes and not (classes[k]["features"] - {"EOS"} if feat is None
                                                     else classes[k]["features"] & {feat}) for k in fail)}
            for k in fail:  # not located: every part the failing checks cover is a suspect
                t = table[k]
                suspect = set().union(*(cov[id(t[x])] for x in types if x in t and not t[x]["passed"]))
                suspect.discard("emitted_law")
                strong = set(suspect)
                acc = t.get("accepted_length")
                if path == "speculative" and acc is not None:
                    strong &= (set(cov[id(acc)]) if not acc["passed"] else
                               suspect - {"drafting", "acceptance_rule"})
                strong -= needless | {"batching"}
                for p in suspect:
                    score[p] += 1 + 2 * (p in strong)
            if path == "speculative":
                acc_fail = [k for k in fail if "accepted_length" in table[k] and not table[k]["accepted_length"]["passed"]]
                acc_pass = [k for k in fail if "accepted_length" in table[k] and table[k]["accepted_length"]["passed"]]
                if acc_fail:
                    notes.append(f"{case}: the first round's accepted length fails too (classes "
                                 f"{', '.join(map(str, sorted(acc_fail)))}): drafting, the target's forward pass or "
                                 "alignment, or the acceptance rule (heuristic)")
                if acc_pass:
                    notes.append(f"{case}: the first round's accepted length follows its law in failing classes "
                                 f"{', '.join(map(str, sorted(acc_pass)))}: likelier a recovered or bonus token, or "
                                 "the target law past the first round, than the drafts or the acceptance rule "
                                 "(heuristic)")
            else:
                notes.append(f"{case}: the plain path fails too (classes {', '.join(map(str, sorted(fail)))}): the "
                             "parts both paths share (target forward, processing, EOS / length), not speculation")
    for case, cs in by_case.items():  # a long case: located by output-position band
        notes.extend(band_notes(case, cs, cov, score))
    bad_logprobs = [c for c in checks if check_type(c) in ("token_logprobs", "plain_token_logprobs") and not c["passed"]]
    if bad_logprobs and law_failed:  # both readings: logprobs computed wrong, or a wrong law reported faithfully
        notes.append("the reported logprobs differ from the exact law, and so does the emitted law ("
                     + ", ".join(sorted({check_label(c) for c in law_failed})[:3])
                     + "): the logprobs may report the engine's own wrong law faithfully, so the fault may lie "
                     "in the parts the law checks name rather than in how logprobs are computed (heuristic)")
    order = [k for k, _ in E2E_PARTS]
    suspects = sorted((p for p in score if p not in located and p not in explained),
                      key=lambda p: (-score[p], order.index(p)))
    likely = [p for p in suspects if score[p] == score[suspects[0]]]
    for key, p in parts.items():
        if p["status"] != "fail":
            continue
        bad = [c for c in checks if not c["passed"] and key in cov[id(c)]]
        p["tier"] = _worst_tier(report, bad)
        strongest = sorted(bad, key=lambda c: (float(c["pvalue"]), c["case"], c["name"]))[0]
        if key in located:
            p["evidence"] = located[key]
            p["heuristic"] = key not in _DIRECT.values() and key not in direct
        elif key in explained:
            p["explained_by"] = explained[key]
            p["evidence"] = _evidence(strongest)
        elif key in suspects:
            p.update(status="suspect", heuristic=True,
                     evidence=_evidence(strongest) + f"; suspect {suspects.index(key) + 1} of {len(suspects)} "
                     f"({'likelier' if key in likely else 'less likely'}): the end-to-end checks cannot tell the "
                     "parts they cover apart")
        elif key == "emitted_law":
            p["evidence"] = _evidence(strongest)
        else:  # covered by a failing check whose fault is located elsewhere (seeds, protocol)
            p.update(status="pass" if p["checks_run"] else "not_tested", tier=None, failed=[])
    culprits = [k for k in ["protocol"] + order[:-2] if k in located]  # a crash or hang first
    if parts["emitted_law"]["status"] == "fail":
        if culprits:
            parts["emitted_law"]["explained_by"] = next((k for k in culprits if k not in ("seeds", "logprobs")),
                                                        culprits[0])
        elif law_failed:
            culprits.append("emitted_law")
    if culprits:
        summary = "faulty: " + ", ".join(labels[k] for k in culprits)
        if "emitted_law" in culprits:
            summary = "faulty, not located by the end-to-end checks: emitted law (sequences)"
        if suspects:
            rest = [labels[k] for k in suspects if k not in likely]
            summary += "; suspects: " + ", ".join(labels[k] for k in likely) + (
                "; less likely: " + ", ".join(rest) if rest else "")
    elif any(p["status"] == "pass" for p in parts.values()):
        summary = "no part found faulty"
    else:
        summary = "nothing was tested"
    combined = report.get("combined")
    if combined and not combined.get("passed", True):
        strongest = {(x.get("case"), x.get("check")) for x in combined.get("strongest") or []}
        named = set().union(set(), *(cov[id(c)] for c in checks if (c["case"], c["name"]) in strongest)) - {"emitted_law"}
        named_text = ", ".join(labels[k] for k in order if k in named) or "no part"
        notes.append(f"the combined check fails (p={float(combined['pvalue']):.3g}): evidence spread over several "
                     f"checks, none failing on its own; the strongest test {named_text} (heuristic)")
        if not culprits:
            summary = "faulty (combined evidence, no check failing on its own): likely " + named_text
    return {"level": "e2e", "summary": summary, "culprits": culprits, "suspects": suspects, "hardening": [],
            "parts": [parts[k] for k in order], "notes": notes}
