"""Audit cases, the case runner and the audit behind ``specexact audit``.

Also: :mod:`~specexact.audit.plan` (sample sizes for a time budget),
:mod:`~specexact.audit.journal` (resume), :mod:`~specexact.audit.isolation` (cases in
subprocesses), :mod:`~specexact.audit.shard` (``--shard`` and ``specexact merge``).
"""

from .audit import SCHEMA, SCHEMA_VERSION, accepted_length_histograms, audit_key, build_report, run_audit
from .cases import AuditCase, RowClass, default_cases, quick_cases
from .runner import CaseResult, checks_per_case, run_case
from .samplers import SamplerError, available_samplers, resolve_sampler

__all__ = [
    "AuditCase",
    "CaseResult",
    "RowClass",
    "SCHEMA",
    "SCHEMA_VERSION",
    "accepted_length_histograms",
    "audit_key",
    "build_report",
    "SamplerError",
    "available_samplers",
    "checks_per_case",
    "default_cases",
    "quick_cases",
    "resolve_sampler",
    "run_audit",
    "run_case",
]
