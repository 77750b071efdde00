"""The report's diagnosis (schema 1.3+) as one line per part, for the Markdown and HTML."""

from __future__ import annotations

__all__ = ["SYMBOLS", "diagnosis_rows"]

SYMBOLS = {"pass": "✔", "fail": "✗", "not_tested": "–"}
"""Status of a part: ✔ its checks passed, ✗ found faulty, – not tested."""


def diagnosis_rows(diagnosis: dict) -> list[dict]:
    """One row per part of ``diagnosis`` (the report's ``diagnosis`` entry): ``symbol``,
    ``status``, ``label``, ``text`` (verdict and evidence), ``replay`` (or None)."""
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
        else:
            text = "FAULTY" + (" (heuristic)" if p.get("heuristic") else "")
        if p.get("evidence"):
            text += f": {p['evidence']}"
        rows.append({"symbol": SYMBOLS.get(status, "?"), "status": status, "label": p.get("label") or p.get("part"),
                     "text": text, "replay": p.get("replay") if status == "fail" else None})
    return rows
