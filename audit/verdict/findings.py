"""The report's findings: one per failing check of a case (:func:`check_findings`), the
failing combined check's (:func:`combined_finding`) and the fuzz phase's
(:func:`fuzz_report_findings`), each with its kind, tier, message and reproduction; and
every finding of a report, older ones included (:func:`report_findings`, for the renderers).
"""

from __future__ import annotations

from typing import Sequence

from specexact.audit.verdict.finding_kinds import acceptance_below, finding_kind
from specexact.audit.verdict.reproduction_commands import case_reproduction, combined_reproduction, fuzz_command
from specexact.audit.verdict.tiers import tier_of, tier_of_check

__all__ = ["check_findings", "combined_finding", "fuzz_report_findings", "report_findings"]


def check_findings(case_dicts: Sequence[dict], settings: dict, sampler: dict) -> list[dict]:
    """One finding per failing check of ``case_dicts`` (a defect too: its ``defect`` check),
    in the cases' and checks' order: ``source`` ``"check"``, the case and check, the
    finding's kind and tier, its message at the level the check was decided at, p-value,
    worst outcomes, the case's defect and the reproduction."""
    findings = []
    for case in case_dicts:
        for chk in case["checks"]:
            if chk["passed"]:
                continue
            kind = finding_kind(case, chk)
            # The level this check was decided at: its own false-fail rate (a chi-square check
            # runs at a third of the per-check share, audit/core/levels.py), not the audit's share:
            # the terminal, the report and the diagnosis then state the same threshold.
            level = float(chk.get("false_fail_rate") or settings["per_check_false_fail_rate"])
            message = (chk.get("details") or {}).get("message") or (
                f"{chk['name']}: p={float(chk['pvalue']):.3g} <= {level:.3g}"
                + (f" — {chk['description']}" if chk.get("description") else ""))
            if kind == "under_accepting" and chk["name"].startswith("first_acceptance"):
                observed, expected = acceptance_below(chk)
                message = (f"{chk['name']}: under-accepting: every law check of the case passes, but the first "
                           f"draft is accepted with frequency {observed:.4g}, below its scheme's law's P(N >= 1) = "
                           f"{expected:.4g}"
                           f"; p={float(chk['pvalue']):.3g} <= {level:.3g}")
            elif kind == "under_accepting":
                d = chk["details"]
                optimum = d.get("tokenwise_optimum_mean_accepted_length")
                message = (f"{chk['name']}: under-accepting: every law check of the case passes, but the mean "
                           f"accepted length {d['mean_accepted_length']:.4g} is below its "
                           f"{d.get('scheme', 'tokenwise')} law's {d['expected_mean_accepted_length']:.4g}"
                           + (f" (token-wise optimum {optimum:.4g})" if isinstance(optimum, (int, float)) else "")
                           + f"; p={float(chk['pvalue']):.3g} <= {level:.3g}")
            findings.append({
                "source": "check",
                "case": case["name"],
                "check": chk["name"],
                "kind": kind,
                "tier": tier_of_check(chk["name"], kind),
                "message": message,
                "pvalue": chk["pvalue"],
                "worst": [list(w) for w in chk.get("worst", [])],
                "defect": case.get("defect"),
                "reproduction": case_reproduction(case, settings, sampler),
            })
    return findings


def combined_finding(combined: dict, settings: dict, sampler: dict, kind: str = "inexactness",
                     configs: Sequence[dict] = ()) -> dict:
    """The finding of a failing combined check, of ``kind``
    (:func:`~specexact.audit.verdict.finding_kinds.combined_kind`; tier ``inexact`` or
    ``under_accepting``); its reproduction reruns the whole audit
    (:func:`~specexact.audit.verdict.reproduction_commands.combined_reproduction`)."""
    strongest = ", ".join(f"{s['case']} / {s['check']} p={s['pvalue']:.3g}" for s in combined["strongest"])
    message = (f"combined: the Cauchy combination of {combined['num_pvalues']} checks' p-values is "
               f"p={combined['pvalue']:.3g} <= {combined['false_fail_rate']:.3g}: evidence spread over several checks, "
               f"none of which fails on its own"
               + (f" (the {combined['neutralised']} that fail on their own left out)" if combined["neutralised"] else "")
               + f"; strongest: {strongest}")
    if kind == "under_accepting":
        message += ("; under-accepting: without the accepted-length checks the combination passes, and their "
                    "evidence that makes it fail reads below the law, in cases whose law checks all pass")
    return {
        "source": "combined",
        "case": "(all cases)",
        "check": "combined",
        "kind": kind,
        "tier": tier_of_check("combined", kind),
        "message": message,
        "pvalue": combined["pvalue"],
        "worst": [],
        "defect": None,
        "reproduction": combined_reproduction(settings, sampler, configs),
    }


def fuzz_report_findings(fuzz: dict | None, sampler: dict) -> list[dict]:
    """The fuzz phase's findings as entries of the report's ``findings`` (since 1.6):
    ``source`` ``"fuzz"``, ``case`` ``"fuzz"``, ``check`` ``"family / rule"``, ``kind``
    ``"fuzz"``, the tier of the rule, p-value 0 (an exact rule), ``fuzz_index`` (the
    finding's index in ``fuzz.findings``) and a ``reproduction`` whose ``python`` is the
    finding's replay script."""
    out = []
    for i, f in enumerate((fuzz or {}).get("findings") or []):
        out.append({
            "source": "fuzz",
            "case": "fuzz",
            "check": f"{f['family']} / {f['rule']}",
            "kind": "fuzz",
            "tier": tier_of(f),
            "message": f["message"] + (f" (= {f['known_as']})" if f.get("known_as") else ""),
            "pvalue": 0.0,
            "worst": [],
            "defect": None,
            "family": f["family"],
            "rule": f["rule"],
            "example": f.get("example"),
            "known_as": f.get("known_as"),
            "fuzz_index": i,
            "reproduction": {"command": fuzz_command(sampler, fuzz), "python": f.get("replay") or ""},
        })
    return out


def report_findings(report: dict) -> list[dict]:
    """Every finding of ``report``, each with its ``tier``: the report's ``findings``, and
    for a report older than 1.6 (whose ``findings`` left the fuzz phase's out) its fuzz
    findings too. For the renderers, which also read older reports."""
    findings = [f if f.get("tier") else {**f, "tier": tier_of(f)} for f in report.get("findings") or []]
    if "tiers" not in report and not any(f.get("source") == "fuzz" for f in findings):
        findings += fuzz_report_findings(report.get("fuzz"), report.get("sampler") or {"name": "?"})
    return findings
