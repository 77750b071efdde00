"""The audit's *fuzz* stage: the fuzz phase's exact families, before the cases.

:func:`run_fuzz_stage` runs :func:`specexact.fuzz.run_fuzz` on the sampler under audit
(after the pilot, before the cases) and records its share of the budget in the plan
(:attr:`~specexact.audit.execute.AuditRun.fuzz_plan`). Why before the cases: its rules
are exact, so a finding there is decisive at once; and the cases are planned from the
time actually left afterwards, so fuzz time left unused (a fixed number of examples, an
early finding) goes to the cases instead of being lost. The fuzz phase's statistical part
(generated row classes and per-example laws) is not here: those cases were added to the
audit's cases by :func:`~specexact.audit.resolve.resolve_audit`, so their checks share
the false-fail split.

With ``--shard i/n`` the stage runs in shard 1 only (its results do not depend on the
cases); ``specexact merge`` carries it into the merged report.
"""

from __future__ import annotations

import time
from typing import Callable

from .execute import AuditRun

__all__ = ["run_fuzz_stage", "fuzz_case_names"]


def fuzz_case_names(cases) -> list[str]:
    """Names of the generated (``fuzz``-tagged) cases among ``cases``."""
    return [c.name for c in cases if "fuzz" in (getattr(c, "tags", ()) or ())]


def run_fuzz_stage(run: AuditRun, on_status: Callable[[dict], None] | None = None):
    """Stage 3 (*fuzz*, module docstring): the exact fuzz families on the sampler.

    Returns
    -------
    specexact.fuzz.FuzzResult or None
        None when the audit runs without the fuzz phase, or in a shard other than 1.
    """
    resolved = run.resolved
    settings = resolved.settings
    if not settings.fuzz or (settings.shard is not None and settings.shard[0] != 1):
        return None
    from specexact.fuzz import run_fuzz

    from .samplers import resolve_sampler

    status = on_status or (lambda event: None)
    fuzz_settings = settings.fuzz_settings()
    planned = fuzz_settings.time_s
    run.fuzz_plan = {"share": settings.fuzz_share if planned is not None else None, "planned_time_s": planned,
                     "time_s": None, "profile": fuzz_settings.profile,
                     "examples_per_family": fuzz_settings.examples_per_family,
                     "generated_cases": fuzz_case_names(resolved.cases)}
    status({"event": "fuzz_start", "planned_time_s": planned, "profile": fuzz_settings.profile,
            "examples_per_family": fuzz_settings.examples_per_family, "elapsed_s": run.elapsed()})
    verifier = resolved.sampler.verifier
    if verifier is None:  # an isolated audit never resolved it in this process
        verifier, _ = resolve_sampler(settings.sampler_name)
    t0 = time.perf_counter()
    result = run_fuzz(verifier, fuzz_settings, name=settings.sampler_name, device=settings.device, on_status=status)
    result.generated_cases = list(run.fuzz_plan["generated_cases"])
    run.fuzz_plan["time_s"] = time.perf_counter() - t0
    status({"event": "fuzz_end", "findings": len(result.findings), "time_s": run.fuzz_plan["time_s"],
            "error": result.error, "result": result, "elapsed_s": run.elapsed()})
    return result
