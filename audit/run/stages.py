"""The audit behind ``specexact audit``, as a sequence of stages a reader can find by name:

1. *resolve* — :func:`~specexact.audit.run.resolve.resolve_audit`: which cases (and classes)
   can drive the sampler, this shard's slice, the per-check false-fail rate, the key;
2. *plan* — :func:`~specexact.audit.run.cases_stage.open_audit`: journal (resume) and pilot;
3. *fuzz* — :func:`~specexact.audit.run.fuzz_stage.run_fuzz_stage`: the fuzz phase's exact
   families (generated inputs, exact rules, boundary-uniform probes) with its share of the
   budget, when ``settings.fuzz``; its generated statistical cases are among the cases;
4. *run cases* — :func:`~specexact.audit.run.cases_stage.run_cases`: every case, re-planned after
   each from the time left;
5. *report* — :func:`assemble_report` (:func:`~specexact.audit.verdict.build.build_report`).

:func:`run_audit` runs them in order with one :class:`~specexact.audit.core.settings.AuditSettings`.
The report is a JSON-ready dict whose layout is the versioned schema ``specexact.audit/1``
(``reports/audit.schema.json``, described in ``reports/schema.md``).
"""

from __future__ import annotations

import time

from typing import Callable

import torch

from specexact.audit.checks.combined import combination_settings
from specexact.audit.core.environment import environment
from specexact.audit.core.json_io import report_to_jsonable
from specexact.audit.core.settings import AuditSettings
from specexact.audit.run.cases_stage import AuditRun, CasesOutcome, now, open_audit, run_cases
from specexact.audit.run.fuzz_stage import run_fuzz_stage
from specexact.audit.run.resolve import ResolvedAudit, audit_key, resolve_audit
from specexact.audit.verdict.build import SCHEMA, SCHEMA_VERSION, accepted_length_histograms, build_report

__all__ = ["run_audit", "assemble_report", "build_report", "environment", "audit_key", "AuditSettings",
           "SCHEMA", "SCHEMA_VERSION", "accepted_length_histograms"]


def _settings_dict(resolved: ResolvedAudit) -> dict:
    s = resolved.settings
    return {
        "seed": s.seed,
        "budget_s": s.effective_budget_s,
        "num_batches": s.num_batches,
        "false_fail_rate": s.false_fail_rate,
        "num_checks": resolved.num_checks,
        "per_check_false_fail_rate": resolved.per_check_false_fail_rate,
        "correction": "bonferroni+cauchy",
        "combination": combination_settings(s.false_fail_rate),
        "device": str(resolved.device),
        "isolate": bool(s.isolate),
        "case_timeout_s": s.case_timeout_s,
        "case_set": s.case_set,
        "all_cases": [c.name for c in resolved.cases],
        "shard": None if s.shard is None else {"index": s.shard[0], "count": s.shard[1],
                                               "cases": [c.name for c in resolved.run_cases]},
        "audit_key": resolved.key,
        "strict_inputs": bool(s.strict_inputs),
        "processing": {"level": resolved.sampler.level, **resolved.sampler.processing.to_dict()},
        "skipped_cases": resolved.skipped,
    }


def assemble_report(run: AuditRun, outcome: CasesOutcome, fuzz=None) -> dict:
    """Stage 5 (*report*): the JSON-ready report of a finished run (schema ``specexact.audit/1``);
    ``fuzz`` is the fuzz stage's :class:`~specexact.fuzz.FuzzResult` (or None)."""
    resolved = run.resolved
    case_dicts = []
    for res, execution in outcome.results:
        d = res.to_dict()
        d["execution"] = execution
        case_dicts.append(d)
    settings = _settings_dict(resolved)
    settings["skipped_cases"] = [*resolved.skipped, *outcome.skipped]
    environment = dict(resolved.environment)
    if run.threads is not None:  # chosen after the environment was read
        settings["threads"] = run.threads.to_dict()
        environment["torch_num_threads"] = run.threads.threads
    report = build_report(
        case_dicts, sampler=resolved.sampler.to_dict(), settings=settings,
        environment=environment, started_at=run.started_at, finished_at=now(),
        wall_time_s=outcome.wall_time_s, plan=outcome.plan.to_dict(), resumed_cases=outcome.resumed,
        fuzz=None if fuzz is None else fuzz.to_dict(),
    )
    report = report_to_jsonable(report)
    if run.journal is not None:
        report["journal"] = str(run.journal.path)
    return report


def run_audit(verifier, settings: AuditSettings | None = None, *,
              on_status: Callable[[dict], None] | None = None, **fields) -> dict:
    """Audit ``verifier`` and return the report as a JSON-ready dict.

    Parameters
    ----------
    verifier : callable or logits-level adapter
        Anything with the :func:`~specexact.decoders.verify` protocol, or a logits-level
        adapter (``verify_logits``). ``None`` is allowed with ``isolate=True`` (each case's
        process resolves the sampler by ``sampler_name``).
    settings : AuditSettings, optional
        What to run (cases, false-fail rate, budget or batches, seed, device, shard,
        journal, isolation). Default: ``AuditSettings()``.
    on_status : callable, optional
        ``on_status(event)`` with dicts ``{"event": "pilot" | "fuzz_start" |
        "fuzz_family_start" | "fuzz_family_end" | "fuzz_end" | "plan" | "case_start" |
        "batch" | "case_end", ...}`` for progress displays (see the CLI).
    **fields
        Fields of :class:`AuditSettings` that replace those of ``settings`` (e.g.
        ``run_audit(fn, cases=quick_cases(), num_batches=4)``).

    Returns
    -------
    dict
        The report (``reports/schema.md``); ``verdict`` is ``"pass"`` or ``"fail"``.

    Raises
    ------
    ValueError
        Invalid settings, or no case can drive this sampler.
    TypeError
        An unknown settings field.
    specexact.audit.run.journal.JournalBusy
        With ``journal_dir``: another process is running the same audit.
    OSError
        With ``journal_dir``: the journal cannot be written there.

    Notes
    -----
    With ``journal_dir`` the journal stays locked by this process after the return (its
    path is the report's ``journal``), so that whoever writes the reports can then remove
    it (:meth:`~specexact.audit.run.journal.Journal.finish` of
    :func:`~specexact.audit.run.journal.held_journal`); a later audit with the same key in this
    process takes it over. The number of torch threads is restored on return.
    """
    settings = AuditSettings() if settings is None else settings
    if fields:
        settings = settings.with_(**fields)
    threads_before = torch.get_num_threads()
    started = time.perf_counter()  # the budget's clock: the cases' resolution counts too
    try:
        resolved = resolve_audit(verifier, settings)
        run = open_audit(resolved, on_status, started=started)
        fuzz = run_fuzz_stage(run, on_status)
        outcome = run_cases(run, on_status)
        return assemble_report(run, outcome, fuzz)
    finally:
        torch.set_num_threads(threads_before)
