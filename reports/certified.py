"""How the renderers show a check's certified TV bound and a lossy measurement (one place,
so the terminal table, the Markdown and the HTML say the same)."""

from __future__ import annotations

__all__ = ["certified_tv_text", "lossy_interval_text", "CERTIFIED_TV_NOTE"]

CERTIFIED_TV_NOTE = (
    "Certified TV ≤: for a passing χ² check, a bound on the TV between the sampler's law and the reference "
    "that holds with probability ≥ 1 − δ, δ = the check's false-fail rate (if the TV were larger, this pass "
    "with this bound would happen with probability ≤ δ); from the same counts (McDiarmid / Weissman L1 "
    "deviation), i.i.d. samples, cells fixed by the reference law and n. `full`: the full law; `binned`: the "
    "check's bins; in parentheses the same on ≤ 32 coarse bins (a coarser law, a smaller bound).")
"""A sentence the renderers print under their check tables."""


def _upper(entry) -> float | None:
    if isinstance(entry, dict) and isinstance(entry.get("upper"), (int, float)):
        return float(entry["upper"])
    return None


def certified_tv_text(check: dict) -> str:
    """``"0.041 full (0.012)"``: the check's certified TV bound, the law it bounds, and the
    coarse-partition bound in parentheses; ``"-"`` where the check has none."""
    details = check.get("details") or {}
    main = details.get("certified_tv")
    upper = _upper(main)
    if upper is None:
        return "-"
    text = f"{upper:.3g} {main.get('law', '')}".strip()
    coarse = _upper(details.get("certified_tv_coarse"))
    return text + (f" ({coarse:.3g})" if coarse is not None else "")


def lossy_interval_text(row: dict) -> str:
    """``"0.18 [0.15, 0.21] (99 %)"`` for a :func:`~specexact.audit.verdict.build.lossy_measurements` row."""
    return (f"{row['estimate']:.3g} [{row['lower']:.3g}, {row['upper']:.3g}] "
            f"({100 * (1 - row['delta']):g} %)")
