"""The audit behind ``specexact audit``: its stages, cases, the case runner, sampler resolution.

Stages (:mod:`~specexact.audit.audit`): :mod:`~specexact.audit.resolve` (which cases run,
at which per-check rate), :mod:`~specexact.audit.execute` (plan: journal and pilot; run
cases, re-planned after each), :mod:`~specexact.audit.report` (the JSON-ready report).
Also: :mod:`~specexact.audit.settings` (:class:`AuditSettings`), :mod:`~specexact.audit.plan`
(sample sizes for a time budget), :mod:`~specexact.audit.journal` (resume),
:mod:`~specexact.audit.isolation` (cases in subprocesses), :mod:`~specexact.audit.shard`
(``--shard`` and ``specexact merge``), :mod:`~specexact.audit.catalog` (every case by name).
"""

from .audit import assemble_report, run_audit
from .case_result import CaseResult
from .cases import AuditCase, RowClass, default_cases, quick_cases
from .report import SCHEMA, SCHEMA_VERSION, accepted_length_histograms, build_report
from .resolve import audit_key, resolve_audit
from .runner import checks_per_case, run_case
from .samplers import SamplerError, available_samplers, resolve_sampler
from .settings import AuditSettings

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
