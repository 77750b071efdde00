"""Failures of the audit's own code, kept apart from the sampler's.

A sampler that raises is a finding (a ``defect`` of its case). Code of the audit itself
that raises while judging the sampler — the per-event observer, a reference law — must not
be recorded as the sampler's crash: it raises :class:`AuditInternalError`, which the case
runner lets through and the command line reports with exit status 2.
"""

from __future__ import annotations

__all__ = ["AuditInternalError"]


class AuditInternalError(RuntimeError):
    """The audit's own code failed (not the sampler under audit): exit status 2."""
