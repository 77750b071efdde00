"""An end-to-end case's work in fresh processes, when its engine cannot be loaded again in the
audit's process after a crash (:mod:`specexact.audit.cases.e2e.fresh_process` decides what is
left; the processes are started here, :func:`~specexact.audit.run.isolation.run_e2e_isolated`).
"""

from __future__ import annotations

from specexact.audit.cases.e2e.fresh_process import continue_in_fresh_processes
from specexact.audit.cases.result import CaseResult
from specexact.audit.run.isolation import run_e2e_isolated
from specexact.audit.run.plan import CasePlan
from specexact.audit.sampler.call_timeout import untimed
from specexact.audit.sampler.samplers import ENGINE_SAMPLER_PREFIX

__all__ = ["in_fresh_processes"]



def in_fresh_processes(res: CaseResult, settings, verifier, cp: CasePlan, **run) -> tuple[CaseResult, list]:
    """An end-to-end case whose engine could not be loaded again in this process after a crash
    (``res.fresh_process``): its work goes on in fresh processes, the engine made there from
    its ``--engine`` name (:func:`~specexact.audit.run.isolation.run_e2e_isolated`,
    :func:`~specexact.audit.cases.e2e.fresh_process.continue_in_fresh_processes`). Returns the
    case's result and the processes' records (empty when none ran: no such work, or an engine
    given as an object, with no name a fresh process could make it from)."""
    work, res.fresh_process = res.fresh_process, None
    name = settings.sampler_name or ""
    if work is None or not name.startswith(ENGINE_SAMPLER_PREFIX):
        return res, []
    res.fresh_process = work
    engine = name[len(ENGINE_SAMPLER_PREFIX):]
    _, call_timeout_s = untimed(verifier)
    timeout = 4 * cp.planned_time_s + 300 if (settings.mode == "budget" and cp.planned_time_s) else 1800.0

    def start(w, time_budget_s):
        sizes = dict(run)
        if sizes.get("time_budget_s") is not None:
            sizes["time_budget_s"] = time_budget_s
        return run_e2e_isolated(res.case, engine, w, call_timeout_s=call_timeout_s, timeout_s=timeout, **sizes)

    return continue_in_fresh_processes(res, start, time_budget_s=run.get("time_budget_s"))
