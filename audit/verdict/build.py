"""The last stage of an audit: assemble the report (schema ``specexact.audit/1``) from the
finished cases' dicts, with findings, their reproduction commands and the accepted-length
histograms. Used by :func:`~specexact.audit.run.stages.run_audit` and by
:func:`~specexact.reports.merge.merge_reports`, so a merged report is computed exactly as an
unsharded one.

The report's parts are built in the modules beside it: the findings
(:mod:`~specexact.audit.verdict.findings`, their kinds :mod:`~specexact.audit.verdict.finding_kinds`,
their reproductions :mod:`~specexact.audit.verdict.reproduction_commands`), the verdict
(:mod:`~specexact.audit.verdict.verdict`), the acceptance tables
(:mod:`~specexact.audit.verdict.acceptance_tables`) and the diagnosis
(:mod:`~specexact.audit.verdict.diagnosis`). Their public names are importable here too.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from specexact.audit.checks.combined import combined_check
from specexact.audit.verdict.acceptance_tables import acceptance_rows, accepted_length_histograms, lossy_measurements
from specexact.audit.verdict.diagnosis import diagnose
from specexact.audit.verdict.finding_kinds import combined_kind, under_accepting
from specexact.audit.verdict.findings import check_findings, combined_finding, fuzz_report_findings, report_findings
from specexact.audit.verdict.tiers import tier_counts, tier_of
from specexact.audit.verdict.verdict import decide_verdict
from specexact.exactness.budget import benjamini_hochberg

__all__ = ["SCHEMA", "SCHEMA_VERSION", "build_report", "accepted_length_histograms", "add_diagnosis",
           "acceptance_rows", "lossy_measurements", "under_accepting", "combined_kind", "fuzz_report_findings",
           "report_findings"]

SCHEMA = "specexact.audit/1"
"""Major version tag of the JSON report; readers switch on it (``reports/schema.md``)."""
SCHEMA_VERSION = "1.12"
"""Full version: additions keep the major version, removals or changes of meaning bump it."""


def build_report(
    case_dicts: Sequence[dict],
    *,
    sampler: dict,
    settings: dict,
    environment: dict,
    started_at: str,
    finished_at: str | None = None,
    wall_time_s: float,
    plan: dict | None = None,
    shards: list | None = None,
    resumed_cases: Sequence[str] = (),
    fuzz: dict | None = None,
) -> dict:
    """Assemble the report (schema ``specexact.audit/1``) from finished cases' dicts.

    Used by :func:`run_audit` and by :func:`specexact.reports.merge.merge_reports`, so a
    merged report is computed exactly as an unsharded one. ``fuzz`` is the fuzz stage's
    result (:meth:`specexact.fuzz.FuzzResult.to_dict`, since 1.3): its findings join the
    report's ``findings`` (since 1.6). Every finding has a tier (:mod:`specexact.audit.verdict.tiers`);
    ``verdict`` is :func:`~specexact.audit.verdict.verdict.decide_verdict`'s: ``"fail"`` when one
    of a failing tier is found (``hardening`` only with ``settings["strict_inputs"]``) or a
    case failed.
    """
    flat = []
    for case in case_dicts:
        for chk in case["checks"]:
            flat.append({"case": case["name"], **chk})
    pvalues = np.array([float(c["pvalue"]) for c in flat], dtype=float)
    if len(pvalues):
        for entry, adj in zip(flat, benjamini_hochberg(pvalues)):
            entry["bh_adjusted_pvalue"] = float(adj)
    findings = check_findings(case_dicts, settings, sampler)
    combined = _combined(flat, settings)
    if combined is not None and not combined["passed"]:
        findings.append(combined_finding(combined, settings, sampler,
                                         combined_kind(flat, case_dicts, combined, seed=settings.get("seed")),
                                         [c.get("config", {}) for c in case_dicts]))
    if fuzz is not None:  # each fuzz finding with its tier, also in the fuzz section
        fuzz = {**fuzz, "findings": [{**f, "tier": tier_of(f)} for f in fuzz.get("findings") or []]}
    findings += fuzz_report_findings(fuzz, sampler)
    strict = bool(settings.get("strict_inputs", False))
    # By tier, with the cases' own verdicts (audit/verdict/verdict.py): hardening findings
    # fail the audit only with strict_inputs.
    verdict = decide_verdict(findings, (c["verdict"] for c in case_dicts), strict)
    report = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "verdict": verdict,
        "sampler": sampler,
        "started_at": started_at,
        "finished_at": finished_at,
        "wall_time_s": wall_time_s,
        "settings": settings,
        "plan": plan,
        "environment": environment,
        "num_sequences": int(sum(c["num_sequences"] for c in case_dicts)),
        "resumed_cases": list(resumed_cases),
        "cases": list(case_dicts),
        "checks": flat,
        "findings": findings,
        "combined": combined,
        "tiers": tier_counts(findings),
        "accepted_length": accepted_length_histograms(flat),
        "acceptance": acceptance_rows(flat),
        "lossy_measurements": lossy_measurements(flat),
    }
    report["notes"] = [f"{r['case']} / {r['check']}: {r['note']}" for r in report["acceptance"] if r["note"]]
    if shards is not None:
        report["shards"] = shards
    if fuzz is not None:
        report["fuzz"] = fuzz
    add_diagnosis(report)
    return report


def _combined(flat: list, settings: dict) -> dict | None:
    """The combined check (since 1.7, :mod:`specexact.audit.checks.combined`) of the report's checks,
    at ``settings.combination.false_fail_rate`` (a shard's share of it in a shard's report:
    the merged report combines every shard's checks at the whole rate); None for a report
    of an older version (no ``settings.combination``)."""
    comb = settings.get("combination")
    if not comb:
        return None
    shard = settings.get("shard")
    count = int(shard["count"]) if shard else 1
    return combined_check(flat, float(comb["false_fail_rate"]) / count, seed=settings.get("seed"))


def add_diagnosis(report: dict) -> dict:
    """Add the report's ``diagnosis`` (since 1.3; :func:`~specexact.audit.verdict.diagnosis.diagnose`):
    which part of the sampler the failing checks point at, one entry per part."""
    report["diagnosis"] = diagnose(report)
    return report
