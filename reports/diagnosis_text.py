"""The report's diagnosis (schema 1.3+) as one line per part, for the Markdown and HTML."""

from __future__ import annotations

__all__ = ["SYMBOLS", "diagnosis_rows"]

SYMBOLS = {"pass": "✔", "fail": "✗", "not_tested": "–", "hardening": "!"}
"""Status of a part: ✔ its checks passed, ✗ found faulty, – not tested, ! failing only at
the hardening tier (invalid input not refused: listed, fails the audit only with
``--strict-inputs``)."""

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
        symbol = SYMBOLS["hardening"] if tier == "hardening" and not strict else SYMBOLS.get(status, "?")
        rows.append({"symbol": symbol, "status": status, "label": p.get("label") or p.get("part"),
                     "text": text, "tier": tier, "replay": p.get("replay") if status == "fail" else None})
    return rows
