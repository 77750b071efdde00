"""The audit behind ``specexact audit``: its stages, cases, the case runner, sampler resolution.

Stages (:mod:`~specexact.audit.run.stages`): :mod:`~specexact.audit.run.resolve` (which cases run,
at which per-check rate), :mod:`~specexact.audit.run.cases_stage` (plan: journal and pilot; run
cases, re-planned after each), :mod:`~specexact.audit.verdict.build` (the JSON-ready report).
Also: :mod:`~specexact.audit.core.settings` (:class:`AuditSettings`), :mod:`~specexact.audit.run.plan`
(sample sizes for a time budget), :mod:`~specexact.audit.run.journal` (resume),
:mod:`~specexact.audit.run.isolation` (cases in subprocesses), :mod:`~specexact.audit.run.shard`
(``--shard`` and ``specexact merge``), :mod:`~specexact.audit.cases.catalog` (every case by name).
"""

from specexact.audit.cases.decoder_case import AuditCase, RowClass, default_cases, quick_cases
from specexact.audit.cases.dispatch import checks_per_case, run_case
from specexact.audit.cases.result import CaseResult
from specexact.audit.core.settings import AuditSettings
from specexact.audit.run.resolve import audit_key, resolve_audit
from specexact.audit.run.stages import assemble_report, run_audit
from specexact.audit.sampler.samplers import SamplerError, available_samplers, resolve_sampler
from specexact.audit.verdict.build import SCHEMA, SCHEMA_VERSION, accepted_length_histograms, build_report

__all__ = [
    "AuditCase",
    "AuditSettings",
    "CaseResult",
    "RowClass",
    "SCHEMA",
    "SCHEMA_VERSION",
    "SamplerError",
    "accepted_length_histograms",
    "assemble_report",
    "audit_key",
    "available_samplers",
    "build_report",
    "checks_per_case",
    "default_cases",
    "quick_cases",
    "resolve_audit",
    "resolve_sampler",
    "run_audit",
    "run_case",
]
