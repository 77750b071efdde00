"""An end-to-end case that goes on in fresh processes after its engine could not be loaded again.

Some engines cannot start a second time in a process after a crash (vLLM after numba): the
crash search (:func:`~specexact.audit.cases.e2e.engine_call.search_crashing_classes`) then
stops at its first reload and the case's result holds a
:class:`~specexact.audit.cases.e2e.engine_call.FreshProcessWork`
(``CaseResult.fresh_process``). This module is both sides of what follows; the run room
(:mod:`specexact.audit.run.isolation`) only starts the processes:

- :func:`run_e2e_fresh` runs in a fresh process, on a newly started engine: it searches the
  classes not searched yet, each alone, up to the next crash that leaves the engine
  unloadable, then, with every class searched, checks the laws of the classes that do not
  crash (:func:`~specexact.audit.cases.e2e.sampling.run_e2e_case` of the case restricted to
  them);
- :func:`continue_in_fresh_processes` runs in the audit's process: it hands the work to fresh
  processes until none is left and combines their results with the case's. The crash stays
  the case's one defect (its replay is the case's); the classes found crashing in a fresh
  process are named in it and are not run again. Each process's part is recorded
  (:func:`continue_in_fresh_processes`' ``processes``) for the report's ``execution``.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable

from specexact.audit.cases.e2e.case import E2ECase
from specexact.audit.cases.e2e.engine_call import FreshProcessWork, ensure_loaded, search_crashing_classes
from specexact.audit.cases.e2e.sampling import run_e2e_case
from specexact.audit.cases.result import CaseResult, case_seed, NOT_STARTED
from specexact.audit.core.levels import MIN_EXPECTED

__all__ = ["run_e2e_fresh", "continue_in_fresh_processes", "MAX_FRESH_PROCESSES"]

MAX_FRESH_PROCESSES = 64
"""At most this many fresh processes per case (each one classifies a class or runs the rest,
so a case of C classes needs at most C + 1)."""

def _ids(case: E2ECase, classes) -> list[int]:
    return [case.class_id(c) for c in sorted(classes)]


def run_e2e_fresh(case: E2ECase, engine, work: FreshProcessWork, *, false_fail_rate: float, seed: int = 0,
                  num_batches: int | None = None, time_budget_s: float | None = None, min_batches: int = 2,
                  device="cpu", progress=None, min_expected: float = MIN_EXPECTED) -> tuple[CaseResult, dict]:
    """Do ``work`` in this (fresh) process with ``engine``, newly made: ``(result, record)``.

    ``result`` holds what this process checked (the laws of the classes that do not crash,
    once every class is searched; its sample counts and phase times), with the updated work
    in ``result.fresh_process`` (``None`` when no process need follow: done, or no progress is
    possible). With ``work.whole_case`` the whole case runs
    (:func:`~specexact.audit.cases.e2e.sampling.run_e2e_case`) and its result is the case's.
    ``record`` says what this process did (``searched``, ``crashing``, ``checked``: class ids;
    ``note``). The run settings are :func:`~specexact.audit.cases.dispatch.run_case`'s; the
    search is paid from ``time_budget_s``.
    """
    run = dict(false_fail_rate=false_fail_rate, seed=seed, min_batches=min_batches, device=device,
               progress=progress, min_expected=min_expected)
    start = time.perf_counter()
    if work.whole_case:
        res = run_e2e_case(case, engine, num_batches=num_batches, time_budget_s=time_budget_s, **run)
        # the engine ran in the audit's process before this one was started: a first load
        # failing here is the case's defect, not an engine that did not start
        res.extras.pop(NOT_STARTED, None)
        left = res.fresh_process
        checked = [] if res.num_sequences == 0 else _ids(res.case, range(len(res.case.row_classes)))
        searched = [] if left is None else _ids(case, left.searched)
        crashing = [] if left is None else _ids(case, left.crashing)
        return res, {"whole_case": True, "searched": searched, "crashing": crashing, "checked": checked,
                     "note": None}
    result = CaseResult(case=case, seed=case_seed(seed, case))
    phases = result.phase_times_s
    timed = result.timed

    def record(searched=(), crashing=(), checked=(), note=None) -> dict:
        return {"whole_case": False, "searched": _ids(case, searched), "crashing": _ids(case, crashing),
                "checked": _ids(case, checked), "note": note}

    try:
        try:
            timed("engine_load", ensure_loaded, engine, case)
        except Exception as exc:  # noqa: BLE001 - a fresh engine that cannot load: no process can go on
            note = f"the engine could not be loaded in a fresh process either ({type(exc).__name__}: {exc})"
            return result, record(note=note)
        found = search_crashing_classes(case, engine, work.call, classes=work.pending,
                                        speculative=work.speculative, timed=timed)
        left = replace(work, crashing=work.crashing + found.crashing, ok=work.ok + found.ok,
                       pending=found.pending, reason=found.stopped or "", searched=found.crashing + found.ok)
        done = record(found.crashing + found.ok, found.crashing)
        if found.stopped is not None and not found.unloadable:  # a hang: the search ends here, as in process
            done["note"] = found.stopped
            return result, done
        if found.pending:  # the next crash left the engine unloadable: the next process goes on
            result.fresh_process = left
            return result, done
        if not left.ok:
            return result, done
        try:
            timed("engine_load", ensure_loaded, engine, case)
        except Exception as exc:  # noqa: BLE001 - the last class crashed it: the next process runs the rest
            result.fresh_process = replace(left, reason=f"the engine could not be loaded again after a crash "
                                                        f"({type(exc).__name__}: {exc})")
            return result, done
        keep = sorted(left.ok)
        budget = None if time_budget_s is None else max(time_budget_s - (time.perf_counter() - start), 0.0)
        rest = run_e2e_case(case.restricted(keep), engine, num_batches=num_batches, time_budget_s=budget, **run)
        result.checks, result.defect = rest.checks, rest.defect
        result.num_batches, result.num_sequences = rest.num_batches, rest.num_sequences
        for k, v in rest.phase_times_s.items():
            phases[k] = phases.get(k, 0.0) + v
        done["checked"] = _ids(case, keep)
        return result, done
    finally:
        result.wall_time_s = time.perf_counter() - start


def continue_in_fresh_processes(result: CaseResult, start: Callable[[FreshProcessWork, float], object],
                                *, time_budget_s: float | None = None) -> tuple[CaseResult, list[dict]]:
    """Go on with ``result.fresh_process`` in fresh processes: ``(the case's result, processes)``.

    Parameters
    ----------
    result : CaseResult
        The case's result from the audit's process, with ``fresh_process`` set (else it is
        returned as it is, with no processes).
    start : callable
        ``start(work, time_budget_s)`` runs :func:`run_e2e_fresh` in a fresh process (the run
        room's child) and returns its ``(result, record)``, or a string: why the process gave
        no result (it hung, or died); ``time_budget_s`` is what is left of the case's time
        (None when the case runs a fixed number of calls).
    time_budget_s : float, optional
        The case's time, of which ``result.wall_time_s`` is spent. No further process starts
        once what is left of it is less than the cheapest fresh process so far took (before
        the first: the engine's load in this process, ``result.phase_times_s["engine_load"]``);
        the case's finding then names the classes not searched and those whose laws were not
        checked. ``None``: every process the work needs.

    Returns
    -------
    tuple of (CaseResult, list of dict)
        The case's result: the audit process's crash (its defect, named classes and replay)
        with the checks, sample counts and phase times of the fresh process that checked the
        classes that do not crash; or, for ``whole_case`` work, the fresh process's result.
        ``processes``: one record per process, the audit's first (``process``: ``"audit"`` or
        ``"fresh"``, ``searched``, ``crashing``, ``checked``: class ids; ``note``).
    """
    work = result.fresh_process
    if work is None:
        return result, []
    case = result.case
    result.fresh_process = None
    processes = [{"process": "audit", "whole_case": False, "searched": _ids(case, work.searched),
                  "crashing": _ids(case, work.crashing), "checked": [], "note": work.reason}]
    spent = result.wall_time_s
    base, extra = result, None
    cheapest = None  # the least a fresh process has cost so far (its start, the engine's load, its calls)
    for _ in range(MAX_FRESH_PROCESSES):
        # a fresh process costs at least the engine's load (measured here) until one is measured
        floor = result.phase_times_s.get("engine_load", 0.0) if cheapest is None else cheapest
        if time_budget_s is not None and time_budget_s - spent <= floor:
            extra = _out_of_time(case, work, time_budget_s, spent, floor, measured=cheapest is not None)
            break
        budget = None if time_budget_s is None else max(time_budget_s - spent, 1e-3)
        t = time.perf_counter()
        got = start(work, budget)
        took = time.perf_counter() - t
        spent += took  # the process's start and its imports included
        cheapest = took if cheapest is None else min(cheapest, took)
        if isinstance(got, str):
            processes.append({"process": "fresh", "whole_case": work.whole_case, "searched": [], "crashing": [],
                              "checked": [], "note": got})
            extra = f"a fresh process gave no result ({got.splitlines()[0] if got else got})"
            break
        res, rec = got
        processes.append({"process": "fresh", **rec})
        starts = max(time.perf_counter() - t - res.wall_time_s, 0.0)  # the process's start, its imports, the engine's
        base.phase_times_s["fresh_process_start"] = base.phase_times_s.get("fresh_process_start", 0.0) + starts
        if work.whole_case:  # the case ran in the fresh process: its result is the case's
            base = res
        else:
            base.checks.extend(res.checks)
            if res.defect:
                base.defect = (base.defect or "") + f"\nthen, on the other classes (in a fresh process): {res.defect}"
            if res.num_sequences:
                base.num_batches, base.num_sequences = res.num_batches, res.num_sequences
            for k, v in res.phase_times_s.items():
                base.phase_times_s[k] = base.phase_times_s.get(k, 0.0) + v
        nxt = res.fresh_process
        res.fresh_process = None
        if rec.get("note"):
            extra = rec["note"]
        if nxt is None:
            break
        work = nxt
    else:
        extra = f"more than {MAX_FRESH_PROCESSES} fresh processes: the case stopped there"
    base.wall_time_s = spent
    _name_in_defect(base, processes, extra)
    return base, processes


def _out_of_time(case: E2ECase, work, time_budget_s: float, spent: float, floor: float, *, measured: bool) -> str:
    """Why no further fresh process starts: what is left of the case's time is less than the
    cheapest fresh process so far took (each one starts the engine again), or, before any,
    than the engine's load took in the audit's process."""
    left = max(time_budget_s - spent, 0.0)
    what = (f"what is left of the case's time ({left:.1f} s of {time_budget_s:.1f} s) is less than "
            + (f"a fresh process took ({floor:.1f} s at the least)" if measured else
               f"the engine's load took here ({floor:.1f} s)"))
    if work.whole_case:
        return f"{what}: the case was not run in a fresh process"
    pending = _ids(case, work.pending)
    ok = _ids(case, work.ok)
    parts = [f"no further fresh process: {what}"]
    if pending:
        parts.append(f"classes not searched: {', '.join(map(str, pending))}")
    if ok:
        parts.append(f"classes that run alone, their laws not checked: {', '.join(map(str, ok))}")
    return "; ".join(parts)


def _name_in_defect(result: CaseResult, processes: list[dict], extra: str | None) -> None:
    """Add what the fresh processes found to the first line of the case's defect and of its
    defect check's message (the crash's finding): the classes that crash alone, the classes
    the case went on with, and why it stopped."""
    fresh = [p for p in processes if p["process"] == "fresh" and not p["whole_case"]]  # a whole case names its own
    crashing = sorted({c for p in fresh for c in p["crashing"]})
    checked = sorted({c for p in fresh for c in p["checked"]})
    case = result.case
    parts = []
    if crashing:
        where = {case.class_id(c): c for c in range(len(case.row_classes))}
        named = "; ".join(f"class {i} ({case.row_classes[where[i]].describe()})" if i in where else f"class {i}"
                          for i in crashing)
        parts.append(f"in fresh processes, alone, these crash: {named}")
    if checked:
        parts.append(f"the case went on with classes {', '.join(map(str, checked))} in a fresh process")
    if extra:
        parts.append(extra)
    if not parts or result.defect is None:
        return
    note = "; " + "; ".join(parts)
    first, nl, rest = result.defect.partition("\n")
    result.defect = first + note + nl + rest
    for i, chk in enumerate(result.checks):
        if chk.name == "defect" and not chk.passed and (chk.details or {}).get("message") == first:
            result.checks[i] = replace(chk, details={**chk.details, "message": first + note})
            break
