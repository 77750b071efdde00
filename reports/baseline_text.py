"""The regression-mode comparison (a report's ``baseline`` entry) as lines, for the Markdown
and HTML: the verdict of the comparison first, then every regression, what still fails,
what was fixed, what could not be compared, and the notes (e.g. a baseline of another
sampler)."""

from __future__ import annotations

__all__ = ["baseline_headline", "baseline_lines"]


def baseline_headline(baseline: dict) -> str:
    """One line: ``regression mode against PATH: REGRESSED (...)`` or ``no regression (...)``."""
    drops = [a for a in baseline.get("acceptance") or [] if a.get("dropped")]
    return (f"regression mode against {baseline.get('path', 'a baseline')}: "
            f"{'REGRESSED' if baseline.get('regressed') else 'no regression'} "
            f"({len(baseline.get('new_failures') or [])} new failures, {len(baseline.get('new_defects') or [])} "
            f"new defects, {len(drops)} acceptance drops of {len(baseline.get('acceptance') or [])} compared)")


def _check(f: dict) -> str:
    return f"{f['case']} / {f['check']}"


def baseline_lines(baseline: dict) -> list[str]:
    """The comparison's entries, one line each (without the headline)."""
    lines = []
    for f in baseline.get("new_failures") or []:
        lines.append(f"new failure: {_check(f)}")
    for f in baseline.get("new_hardening") or []:
        lines.append(f"new hardening finding (not a regression without --strict-inputs): {_check(f)}")
    for d in baseline.get("new_defects") or []:
        lines.append(f"new defect: {d['case']}: {str(d.get('defect') or '').splitlines()[0][:160]}")
    for a in baseline.get("acceptance") or []:
        if a.get("dropped"):
            lines.append(f"acceptance drop: {a.get('case')} / {a.get('row_class')}: {a.get('statistic')} "
                         f"{a.get('baseline', float('nan')):.4g} -> {a.get('current', float('nan')):.4g} "
                         f"(p={a.get('pvalue', float('nan')):.3g})")
    for f in baseline.get("still_failing") or []:
        lines.append(f"still failing (known): {_check(f)}")
    for f in baseline.get("fixed") or []:
        lines.append(f"fixed since the baseline: {_check(f)}")
    for n in baseline.get("not_compared") or []:
        lines.append(f"not compared: {n}")
    for n in baseline.get("notes") or []:
        lines.append(f"note: {n}")
    return lines
