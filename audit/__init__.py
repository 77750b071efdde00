"""Audit cases, the case runner and the audit behind ``specexact audit``."""

from .audit import SCHEMA, run_audit
from .cases import AuditCase, RowClass, default_cases, quick_cases
from .runner import CaseResult, checks_per_case, run_case
from .samplers import SamplerError, available_samplers, resolve_sampler

__all__ = [
    "AuditCase",
    "CaseResult",
    "RowClass",
    "SCHEMA",
    "SamplerError",
    "available_samplers",
    "checks_per_case",
    "default_cases",
    "quick_cases",
    "resolve_sampler",
    "run_audit",
    "run_case",
]
