"""How reports state the false-fail split and the combined check (plain text, one line each),
shared by the terminal, Markdown and HTML renderers (``audit/combined.py``, since 1.7)."""

from __future__ import annotations

__all__ = ["split_text", "combined_text"]


def split_text(settings: dict) -> str:
    """The false-fail split of a report's ``settings``: the combined check's share and rate,
    then the per-check rate (a report older than 1.7: Bonferroni alone)."""
    comb = settings.get("combination")
    per_check = (f"split ({settings.get('correction', 'bonferroni')}) over {settings['num_checks']} checks: "
                 f"{settings['per_check_false_fail_rate']:.3g} each")
    if not comb:
        return f"false-fail rate of the whole audit: {settings['false_fail_rate']:g}, {per_check}"
    return (f"false-fail rate of the whole audit: {settings['false_fail_rate']:g}: {comb['share']:g} of it "
            f"({comb['false_fail_rate']:.3g}) for the combined check ({comb['method']} combination of the checks' "
            f"p-values), the rest split (bonferroni) over {settings['num_checks']} checks: "
            f"{settings['per_check_false_fail_rate']:.3g} each")


def combined_text(report: dict) -> str | None:
    """The combined check's outcome: its p-value, threshold and verdict; None when the report
    has none (older than 1.7)."""
    comb = report.get("combined")
    if not comb:
        return None
    verdict = "pass" if comb["passed"] else "FAIL"
    sign = ">" if comb["passed"] else "<="
    text = (f"combined check ({comb['method']} combination of {comb['num_pvalues']} checks' p-values"
            + (f", {comb['neutralised']} failing on their own left out" if comb.get("neutralised") else "")
            + (f", {comb['randomised']} discrete ones randomised within their atom" if comb.get("randomised") else "")
            + f"): p = {comb['pvalue']:.3g} {sign} {comb['false_fail_rate']:.3g}: {verdict}")
    if not comb["passed"] and comb.get("strongest"):
        text += "; strongest: " + ", ".join(f"{s['case']} / {s['check']} p={s['pvalue']:.3g}"
                                            for s in comb["strongest"])
    return text
