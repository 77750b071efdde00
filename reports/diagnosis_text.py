"""The report's diagnosis (schema 1.3+) as one line per part, for the Markdown and HTML."""

from __future__ import annotations

import re

__all__ = ["SYMBOLS", "diagnosis_rows", "tested_by_text"]

SYMBOLS = {"pass": "✔", "fail": "✗", "not_tested": "–", "hardening": "!", "suspect": "?"}
"""Status of a part: ✔ its checks passed, ✗ found faulty, – not tested, ! failing only at
the hardening tier (invalid input not refused: listed, fails the audit only with
``--strict-inputs``), ? suspect (an end-to-end check covering it failed, and the checks cannot
tell it from the other suspects)."""

_TIER_WORDS = {"inexact": "inexact", "defect": "defect on valid input", "under_accepting": "under-accepting",
               "hardening": "hardening"}


def diagnosis_rows(diagnosis: dict, *, strict: bool = False) -> list[dict]:
    """One row per part of ``diagnosis`` (the report's ``diagnosis`` entry): ``symbol``,
    ``status``, ``label``, ``text`` (verdict, tier and evidence), ``tier`` (or None),
    ``replay`` (or None)."""
    strict = strict or bool(set(diagnosis.get("hardening") or ()) & set(diagnosis.get("culprits") or ()))
    rows = []
    labels = {p.get("part"): p.get("label") for p in diagnosis.get("parts") or []}
    for p in diagnosis.get("parts") or []:
        status = p.get("status", "not_tested")
        if status == "not_tested":
            text = "not tested"
        elif status == "pass":
            text = "ok"
        elif status == "suspect":
            text = "SUSPECT"
        elif p.get("explained_by"):
            text = f"fails, explained by {labels.get(p['explained_by'], p['explained_by'])}"
        elif p.get("tier") == "hardening":
            text = "HARDENING" + ("" if strict else " (does not fail the audit without --strict-inputs)")
        else:
            text = "FAULTY" + (" (heuristic)" if p.get("heuristic") else "")
        tier = p.get("tier") if status == "fail" else None
        if tier and tier != "hardening":
            text += f" [{_TIER_WORDS.get(tier, tier)}]"
        if p.get("evidence"):
            text += f": {p['evidence']}"
        if p.get("tested_by"):
            text += f" (tested by {tested_by_text(p['tested_by'])})"
        symbol = SYMBOLS["hardening"] if tier == "hardening" and not strict else SYMBOLS.get(status, "?")
        rows.append({"symbol": symbol, "status": status, "label": p.get("label") or p.get("part"),
                     "text": text, "tier": tier, "replay": p.get("replay") if status == "fail" else None})
    return rows


def tested_by_text(labels: list[str]) -> str:
    """``"case / check"`` labels (an end-to-end part's ``tested_by``) in short: per case, each
    check type once with its classes, e.g. ``"e2e-x: sequence_law[class 0-7], reproducible"``."""
    cases: dict = {}
    for label in labels:
        case, _, check = str(label).partition(" / ")
        m = re.fullmatch(r"(.+)\[class (\d+)\]", check)
        name, cls = (m.group(1), int(m.group(2))) if m else (check, None)
        by_type = cases.setdefault(case, {})
        by_type.setdefault(name, [])
        if cls is not None:
            by_type[name].append(cls)
    out = []
    for case, by_type in cases.items():
        items = [f"{name}[class {_ranges(sorted(set(cls)))}]" if cls else name for name, cls in by_type.items()]
        out.append(f"{case}: {', '.join(items)}")
    return "; ".join(out)


def _ranges(ids: list[int]) -> str:
    """``[0, 1, 2, 5]`` as ``"0-2, 5"``."""
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def not_started_text(report: dict) -> str | None:
    """The words every renderer puts under the title when no case of an end-to-end audit got
    its engine started (:func:`~specexact.audit.verdict.verdict.not_started`: the command's
    verdict is ``error``, exit status 2), else None. The report's own ``verdict`` stays
    ``fail`` (the schema's pass / fail), so the text says what it means."""
    from specexact.audit.verdict.verdict import not_started

    why = not_started(report.get("cases") or [])
    if why is None:
        return None
    return ("Not audited: the engine did not start here (its first load raised in every case: "
            f"{why.removeprefix('crash in engine load: ')}). The command's verdict is error (exit status 2); "
            "the defect below is that load's error, not a finding on the engine.")

