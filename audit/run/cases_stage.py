"""The middle stages of an audit: plan the sample sizes, then run the cases.

- :func:`open_audit` (stage 2, *plan*): opens the journal of this audit (resuming the
  cases an interrupted run finished) or starts one, and, with a time budget, times one
  call of every case (the pilot, :func:`~specexact.audit.run.pilot.pilot_costs`); a resumed
  audit keeps its pilot. Returns an :class:`AuditRun`, which plans the cases not yet run
  from the time left (:meth:`AuditRun.plan`).
- :func:`run_cases` (stage 3, *run cases*): runs every case of the shard in order (in
  process or isolated), re-planning the rest after each from the time actually left and
  the speed actually measured, journals each finished case, and reports progress events.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from specexact.audit.cases.dispatch import run_case
from specexact.audit.cases.e2e.shrink import SHRINK_ALLOWANCE, shrink_failures
from specexact.audit.cases.result import CaseResult
from specexact.audit.core.json_io import to_jsonable
from specexact.audit.core.levels import MIN_EXPECTED
from specexact.audit.run.fresh_processes import in_fresh_processes
from specexact.audit.run.isolation import case_result_from_dict, run_case_isolated
from specexact.audit.run.journal import Journal, journal_path
from specexact.audit.run.pilot import PILOT_SHARE, PROBE_SHARE, ThreadChoice, pilot_costs, pilot_with_thread_choice
from specexact.audit.run.plan import (  # report_reserve_s: imported by callers from here too
    FLOOR_SHARE,
    report_reserve_s,
    AuditPlan,
    CasePlan,
    cases_within_budget,
    floor_batches,
    plan_batches,
    required_batches,
)
from specexact.audit.run.resolve import ResolvedAudit
from specexact.audit.run.sample_sizes import MIN_BATCHES, approx_detectable_tv, fixed_calls, rows_per_class
from specexact.decoders import workspace

__all__ = ["AuditRun", "CasesOutcome", "open_audit", "run_cases", "now"]

#: Prior of the per-case time outside sampling (models, enumeration, checks), seconds.
_OVERHEAD_PRIOR_S = 1.0
#: Prior of the start-up time of an isolated case's process (imports torch), seconds.
_SPAWN_PRIOR_S = 3.0
Status = Callable[[dict], None]


def now() -> str:
    """UTC time, ISO 8601 to the second."""
    import datetime as _dt

    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


@dataclass
class AuditRun:
    """A running audit: its journal, pilot, the cases already finished, and the speed model
    the planner uses (see :func:`open_audit`)."""

    resolved: ResolvedAudit
    journal: Journal | None
    header: dict
    finished: dict  # case name -> journal record of a case finished by an earlier run
    prior_s: float  # time spent by earlier (killed) runs of this audit
    threads: ThreadChoice | None = None
    initial_plan: dict = field(default_factory=dict)  # case name -> planned calls of the first plan
    t0: float = field(default_factory=time.perf_counter)
    ratios: list = field(default_factory=list)  # measured / pilot seconds per call
    overheads: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    cases_run: int = 0  # cases this process ran (not resumed ones)
    fuzz_plan: dict | None = None  # set by the fuzz stage (audit/fuzz_stage.py), shown in every plan
    floor_time_s: float | None = None  # the floors' time (floor_batches), fixed by the first budget plan
    unmet: dict = field(default_factory=dict)  # case name -> why its floor is short of its requirement (last plan)
    fuzz_record: dict | None = None  # the fuzz stage's result an earlier run of this audit journaled

    @property
    def pilot_s(self) -> float:
        return float(self.header.get("pilot_s") or 0.0)

    @property
    def started_at(self) -> str:
        return self.header["started_at"]

    @property
    def cost_of(self) -> dict:
        return dict(zip(self.header.get("cases") or [], self.header.get("costs") or []))

    @property
    def estimated(self) -> dict:
        """Case name -> the pilot's estimate of a case that loads only in a fresh process
        (:mod:`~specexact.audit.run.pilot_estimates`: ``seconds_per_call``, ``start_s``, ``how``)."""
        return dict(self.header.get("estimated") or {})

    def start_s(self, name: str) -> float:
        """Seconds a case spends starting before its calls beyond the per-case overhead: its
        fresh process's start where the pilot estimated it (0 otherwise)."""
        return float((self.estimated.get(name) or {}).get("start_s") or 0.0)

    def speed(self) -> float:
        """Measured / pilot seconds per call so far (1 before any case ran)."""
        return float(np.median(self.ratios)) if self.ratios else 1.0

    def overhead(self) -> float:
        """Per-case seconds outside sampling (measured mean, or a prior)."""
        spawn = _SPAWN_PRIOR_S if self.resolved.settings.isolate else 0.0
        return float(np.mean(self.overheads)) if self.overheads else _OVERHEAD_PRIOR_S + spawn

    def report_reserve(self) -> float:
        """:func:`report_reserve_s` of the budget, at the slowdown this process has seen: its
        wall seconds (:meth:`elapsed`) per CPU second (``time.process_time``)."""
        cpu = time.process_time()
        return report_reserve_s(self.resolved.settings.budget_s or 0.0,
                                self.elapsed() / cpu if cpu > 0 else 1.0)

    def elapsed(self) -> float:
        """Seconds this audit has run, earlier killed runs and the caller's start-up
        (``settings.elapsed_before_s``) included."""
        return self.prior_s + self.resolved.settings.elapsed_before_s + (time.perf_counter() - self.t0)

    def plan(self, remaining: list) -> AuditPlan:
        """The plan of the cases ``remaining`` from the time left now."""
        settings = self.resolved.settings
        alpha = self.resolved.per_check_false_fail_rate
        if settings.mode == "batches":
            nb = settings.num_batches + settings.num_batches % 2
            cps = [CasePlan(c.name, None, rows_per_class(c), nb, None, nb * rows_per_class(c),
                            approx_detectable_tv(c, nb * rows_per_class(c), alpha)) for c in remaining]
            return AuditPlan("batches", None, 0.0, alpha, None, True, cps, fuzz=self.fuzz_plan)
        budget = settings.budget_s
        cost_of = self.cost_of
        overhead = self.overhead()
        # cases the pilot did not time (its share of the budget was spent): left out
        untimed = [{"case": c.name, "seconds_per_call": None,
                    "reason": (f"budget: {self.estimated[c.name]['how']}" if c.name in self.estimated else
                               f"budget: not timed — the pilot spent its share of the budget "
                               f"({PILOT_SHARE:.0%}, {PILOT_SHARE * budget:.0f} s) on the cases before it")}
                   for c in remaining if cost_of.get(c.name) is None]
        remaining = [c for c in remaining if cost_of.get(c.name) is not None]
        all_rc = [cost_of[c.name] * self.speed() for c in remaining]
        # The cheapest case runs anyway only if no case of this audit has run yet.
        reserve = self.report_reserve()
        time_left = budget - reserve - self.elapsed()
        if settings.case_set == "quick":
            # --quick is a smoke test of every quick case: none is left out for the budget (a
            # guess of the per-case overhead, _OVERHEAD_PRIOR_S, left out 3-6 of 8 on a loaded
            # machine and the audit said pass); short of time, each runs its minimum and the
            # plan says the budget is overrun.
            keep = [True] * len(remaining)
        else:
            keep = cases_within_budget(all_rc, time_left, overhead, extra_calls=[fixed_calls(c) for c in remaining],
                                       keep_one=not self.finished and not self.cases_run,
                                       extra_s=[self.start_s(c.name) for c in remaining])
        skipped = [{"case": c.name, "seconds_per_call": cost,
                    "reason": (f"budget: its minimum of {_minimum_calls(c)} decoder calls "
                               f"(≈{(MIN_BATCHES + fixed_calls(c)) * cost + self.start_s(c.name):.0f} s at the measured speed"
                               f"{', its fresh process started' if self.start_s(c.name) else ''}) did not fit the {max(time_left, 0):.0f} s left with the "
                               "cheaper cases first")}
                   for c, cost, k in zip(remaining, all_rc, keep) if not k] + untimed
        remaining = [c for c, k in zip(remaining, keep) if k]
        rc = [cost for cost, k in zip(all_rc, keep) if k]
        # an end-to-end case's reproducibility pair comes out of the time first (fixed_calls)
        # (and a fresh process's start, where the case loads only there: AuditRun.start_s)
        left = time_left - overhead * len(remaining) - sum(fixed_calls(c) * cost + self.start_s(c.name)
                                                           for c, cost in zip(remaining, rc))
        if self.floor_time_s is None:  # the floors' time: a share of the first plan's sampling time
            self.floor_time_s = FLOOR_SHARE * max(left, 0.0)
        floors = floor_batches(remaining, rc, left, alpha, floor_time_s=self.floor_time_s)
        batches, tv, feasible = plan_batches(remaining, rc, left, alpha, floors=floors)
        if not feasible:
            floors = [MIN_BATCHES] * len(remaining)
        cps = [CasePlan(c.name, cost, rows_per_class(c), b, b * cost, b * rows_per_class(c),
                        approx_detectable_tv(c, b * rows_per_class(c), alpha), f)
               for c, cost, b, f in zip(remaining, rc, batches, floors)]
        self.unmet = {c.name: (f"{c.name} needs ≈{w} decoder calls (≈{w * cost:.0f} s) for its required "
                               f"first-token TV {getattr(c, 'required_first_token_tv', None)}, more than the budget "
                               f"leaves for it: it gets at least {f}")
                      for c, cost, f, w in zip(remaining, rc, floors, (required_batches(c, alpha) for c in remaining))
                      if f < w}
        need = sum((MIN_BATCHES + fixed_calls(c)) * x + self.start_s(c.name)
                   for c, x in zip(remaining, rc)) + overhead * len(remaining)
        short = "" if feasible else (f"budget too small: {len(remaining)} case(s) need at least "
                                     f"{need - max(time_left, 0.0):.0f} s more ({need:.0f} s in all, "
                                     f"{reserve:.1f} s kept for the report beside it); each runs "
                                     f"its minimum of {MIN_BATCHES} decoder calls"
                                     + (" (an end-to-end case two call pairs and its reproducibility pair)"
                                        if any(fixed_calls(c) for c in remaining) else "")
                                     + (", a fresh process's start where it loads only there"
                                        if any(self.start_s(c.name) for c in remaining) else "")
                                     + f", and ≈{overhead:.1f} s per case for its laws and checks ("
                                     + ("measured on the cases run so far)" if self.overheads else
                                        "a prior: no case has run yet)")
                                     + f"; this audit needs a budget of at least ≈{self.elapsed() + need + reserve:.0f} s "
                                       f"({self.elapsed():.0f} s spent before these cases: imports, the cases' set-up, "
                                       f"the pilot and the cases before)")
        if short and not self.notes:
            self.notes.append(short)
        note = "; ".join(filter(None, [
            (f"budget too small for every case: {len(skipped)} case(s) to be left out "
             f"({', '.join(s['case'] for s in skipped)}), the cheaper ones run") if skipped else "", short]))
        # (a floor short of its requirement is said when its case starts, from the plan it
        # runs under: run_cases; an early plan's shortfall may not last)
        return AuditPlan("budget", budget, self.pilot_s, alpha, tv, feasible and not skipped, cps, note,
                         fuzz=self.fuzz_plan, skipped=skipped)


def _minimum_calls(case) -> str:
    """A case's fewest calls, in words (reports)."""
    extra = fixed_calls(case)
    return f"{MIN_BATCHES}" + (f" + {extra} (its reproducibility pair)" if extra else "")


def open_audit(resolved: ResolvedAudit, on_status: Status | None = None, started: float | None = None) -> AuditRun:
    """Stage 2 (*plan*): open or resume the journal and run the pilot (module docstring).
    ``started`` (a ``time.perf_counter()`` value, default now) is when the audit's clock
    started after ``settings.elapsed_before_s``: :func:`~specexact.audit.run.stages.run_audit`
    starts it before resolving the cases, whose time then counts against the budget."""
    settings = resolved.settings
    status = on_status or (lambda event: None)
    verifier = resolved.sampler.verifier
    t0 = time.perf_counter() if started is None else started  # the audit's clock starts before the pilot
    created = {"new": False}

    def new_header() -> dict:
        created["new"] = True
        started_at = now()  # before the pilot, which is part of the audit's wall time
        costs, pilot_s, estimated = None, 0.0, {}
        if settings.threads is not None:
            torch.set_num_threads(settings.threads)
        choice = ThreadChoice(torch.get_num_threads(), "set" if settings.threads is not None else "default")
        if settings.mode == "budget":
            status({"event": "pilot", "num_cases": len(resolved.run_cases),
                    "choose_threads": settings.threads is None and resolved.device.type == "cpu"})
            tp = time.perf_counter()
            timed = None if settings.isolate else verifier
            details: dict = {}
            # --quick times every case (a smoke test leaves none out: AuditRun.plan)
            pilot_time_s = None if settings.case_set == "quick" else PILOT_SHARE * settings.budget_s
            if settings.threads is None:
                costs, choice = pilot_with_thread_choice(resolved.run_cases, resolved.device, verifier=timed,
                                                         probe_budget_s=PROBE_SHARE * settings.budget_s,
                                                         time_s=pilot_time_s, details=details)
            else:
                costs = pilot_costs(resolved.run_cases, resolved.device, verifier=timed, time_s=pilot_time_s,
                                    details=details)
            pilot_s = time.perf_counter() - tp
            estimated = details.get("fresh_process") or {}
        return {"started_at": started_at, "costs": costs, "pilot_s": pilot_s, "threads": choice.to_dict(),
                **({"estimated": estimated} if estimated else {}),
                "cases": [c.name for c in resolved.run_cases], "sampler": settings.sampler_name}

    journal, finished, fuzz_record = None, {}, None
    if settings.journal_dir is not None:
        key = resolved.journal_key
        journal, state = Journal.open(journal_path(settings.journal_dir, key), key, new_header, fresh=settings.fresh)
        header, finished, fuzz_record = state.header, state.cases, state.fuzz
    else:
        header = new_header()
    pilot_s = float(header.get("pilot_s") or 0.0)
    prior_s = 0.0 if created["new"] else pilot_s + sum(
        float(rec["result"].get("wall_time_s", 0.0)) for rec in finished.values()) + float(
        (fuzz_record or {}).get("time_s") or 0.0)  # the earlier run's fuzz phase counts against the budget
    threads = _threads_of(header, settings)
    return AuditRun(resolved=resolved, journal=journal, header=header, finished=finished, prior_s=prior_s,
                    threads=threads, t0=t0, fuzz_record=fuzz_record)


def _threads_of(header: dict, settings) -> ThreadChoice:
    """The thread count in force: the user's, else the one this audit's header recorded
    (a resumed audit keeps its first run's choice, so its cases are computed alike)."""
    if settings.threads is not None:
        torch.set_num_threads(settings.threads)
        return ThreadChoice(settings.threads, "set")
    recorded = header.get("threads")
    if recorded:
        choice = ThreadChoice.from_dict(recorded)
        torch.set_num_threads(choice.threads)
        return choice
    return ThreadChoice(torch.get_num_threads(), "default")


@dataclass
class CasesOutcome:
    """What :func:`run_cases` produced.

    Attributes
    ----------
    results : list of (CaseResult, dict)
        Each case's result and how it was executed (isolated, resumed, timeout, sampling
        time, planned calls), in the shard's order.
    plan : AuditPlan
        The plan as carried out: each case's plan when it started.
    resumed : list of str
        Cases taken from the journal.
    wall_time_s : float
        Seconds this command has spent in this process, as ``--budget`` counts them: its
        start-up before the audit (imports, the cases' resolution:
        ``settings.elapsed_before_s``), then the pilot and the cases (a report once said 29 s
        of a command that ran 53 s under load: its start-up was left out).
    skipped : list of dict
        Cases left out because their minimum did not fit the time left (budget mode):
        ``{"case", "reason", "kind": "budget", "classes"}``, as ``settings.skipped_cases``.
    """

    results: list
    plan: AuditPlan
    resumed: list
    wall_time_s: float
    skipped: list = field(default_factory=list)


def _resumed(case, rec: dict) -> tuple[CaseResult, dict]:
    res = case_result_from_dict(case, rec["result"])
    execution = dict(rec.get("execution") or {})
    execution["resumed"] = True
    return res, execution


def run_cases(run: AuditRun, on_status: Status | None = None) -> CasesOutcome:
    """Stage 3 (*run cases*): every case of the shard, re-planned after each (module docstring).

    ``on_status(event)`` gets dicts ``{"event": "plan" | "case_start" | "batch" |
    "case_end", ...}``; a ``case_end`` event carries the :class:`CaseResult` as ``result``.
    """
    resolved = run.resolved
    settings = resolved.settings
    status = on_status or (lambda event: None)
    cases = resolved.run_cases
    alpha = resolved.per_check_false_fail_rate
    dev = resolved.device
    verifier = resolved.sampler.verifier
    first_plan = run.plan([c for c in cases if c.name not in run.finished])
    run.initial_plan = {c.name: c.planned_batches for c in first_plan.cases}
    status({"event": "plan", "plan": first_plan, "resumed": sorted(run.finished), "budget_s": settings.budget_s,
            "mode": settings.mode, "num_cases": len(cases), "threads": run.threads,
            "journal": None if run.journal is None else str(run.journal.path)})
    results, resumed, planned, skipped, floor_notes = [], [], {}, [], []
    for i, case in enumerate(cases):
        common = {"case": case.name, "index": i, "num_cases": len(cases)}
        if case.name in run.finished:
            rec = run.finished[case.name]
            res, execution = _resumed(case, rec)
            results.append((res, execution))
            resumed.append(case.name)
            if rec.get("plan"):
                planned[case.name] = CasePlan(**rec["plan"])
            status({"event": "case_end", **common, "resumed": True, "passed": res.passed, "result": res})
            continue
        remaining = [c for c in cases[i:] if c.name not in run.finished]
        plan_now = run.plan(remaining)
        cp = plan_now.case(case.name)
        if cp is None:  # left out: its minimum does not fit the time left (AuditRun.plan)
            why = next(s for s in plan_now.skipped if s["case"] == case.name)
            skipped.append({"case": case.name, "reason": why["reason"], "kind": "budget",
                            "classes": [case.class_id(k) for k in range(len(case.row_classes))]})
            status({"event": "case_skipped", **common, "reason": why["reason"], "elapsed_s": run.elapsed()})
            continue
        planned[case.name] = cp
        if case.name in run.unmet:  # its floor, as it runs, is short of what it requires
            floor_notes.append(run.unmet[case.name])
        status({"event": "case_start", **common, "planned_batches": cp.planned_batches,
                "floor_note": run.unmet.get(case.name),
                "initial_planned_batches": run.initial_plan.get(case.name),
                "planned_detectable_tv": cp.planned_detectable_tv, "planned_time_s": cp.planned_time_s,
                "elapsed_s": run.elapsed()})
        if settings.mode == "budget":
            cost_of = run.cost_of
            # (an end-to-end case's reproducibility pair is part of its share: fixed_calls)
            extra_of = {c.name: fixed_calls(c) for c in cases}
            share = (cp.planned_batches + extra_of[case.name] - 0.5) * cp.seconds_per_batch + run.start_s(case.name)
            # Never more than the time left after the later cases' floors (their minimum). A no-op when the
            # plan fits; it matters when the prediction is far off (a sampler much slower,
            # relative to the pilot, on earlier cases than on this one), which would
            # otherwise stretch the case past the budget.
            later = [c for c in plan_now.cases if c.name != case.name]  # the cases that keep their place
            left = settings.budget_s - run.report_reserve() - run.elapsed() - run.overhead() * (len(later) + 1) - sum(
                (c.min_batches + extra_of[c.name]) * cost_of[c.name] * run.speed() + run.start_s(c.name)
                for c in later)  # their floors (and fresh processes' starts)
            sizes = {"num_batches": None, "time_budget_s": max(min(share, left), 1e-3),
                     "min_batches": cp.min_batches}
        else:
            sizes = {"num_batches": settings.num_batches, "time_budget_s": None}
        case_start = time.perf_counter()
        last = {"t": None}
        classes = len(case.row_classes)

        def on_batch(num_sequences: int, nb: int, case=case, common=common, cp=cp, case_start=case_start,
                     last=last, classes=classes):
            last["t"] = time.perf_counter() - case_start
            status({"event": "batch", **common, "num_sequences": num_sequences, "num_batches": nb,
                    "planned_batches": cp.planned_batches, "case_elapsed_s": last["t"],
                    "planned_time_s": cp.planned_time_s,
                    "detectable_tv": approx_detectable_tv(case, num_sequences // classes, alpha),
                    "planned_detectable_tv": cp.planned_detectable_tv, "elapsed_s": run.elapsed()})

        timeout, processes = None, []
        if settings.isolate:
            timeout = settings.case_timeout_s or (4 * cp.planned_time_s + 300 if settings.mode == "budget"
                                                  else 1800.0)
            res, sampling = run_case_isolated(case, settings.sampler_name, false_fail_rate=alpha, seed=settings.seed,
                                              device=dev, timeout_s=timeout, progress=on_batch, **sizes)
        else:
            res = run_case(case, verifier, false_fail_rate=alpha, seed=settings.seed, device=dev, progress=on_batch,
                           **sizes)
            res, processes = in_fresh_processes(res, settings, verifier, cp, false_fail_rate=alpha,
                                                 seed=settings.seed, device=dev, progress=on_batch, **sizes)
            sampling = last["t"]
        total_case = time.perf_counter() - case_start
        run.cases_run += 1
        workspace.release()  # the decoders' kept verifier-input buffers: sized for this case only
        cost = run.cost_of.get(case.name)
        fresh = bool(processes)  # its speed is not the case's own: other processes, a restricted case
        if sampling is not None and res.num_batches and cost and not fresh:
            run.ratios.append((sampling / res.num_batches) / cost)
        if sampling is not None and not fresh:
            run.overheads.append(max(total_case - sampling, 0.0))
        execution = {"isolated": bool(settings.isolate), "resumed": False, "timeout_s": timeout,
                     "sampling_time_s": sampling, "planned_batches": cp.planned_batches,
                     "initial_planned_batches": run.initial_plan.get(case.name), "planned_time_s": cp.planned_time_s}
        if fresh:  # which classes ran in which process (an engine restarted after a crash)
            execution["processes"] = processes
        results.append((res, execution))
        if run.journal is not None:
            run.journal.append_case(case.name, to_jsonable(res.to_dict()), execution=to_jsonable(execution),
                                    plan=to_jsonable(cp.to_dict()))
        status({"event": "case_end", **common, "resumed": False, "passed": res.passed, "elapsed_s": run.elapsed(),
                "result": res})
    # failing generated scenarios of a budgeted audit are shrunk now, in what is left of the budget
    # and of its 10 % allowance (SHRINK_ALLOWANCE), never past them: a scenario not shrunk then
    # keeps the original as its replay
    left = None if settings.mode != "budget" else (1.0 + SHRINK_ALLOWANCE) * settings.effective_budget_s - run.elapsed()
    shrink_failures([r for r, _ in results], verifier, false_fail_rate=alpha, seed=settings.seed,
                    min_expected=MIN_EXPECTED, time_left_s=left)
    carried = [planned[c.name] for c in cases if c.name in planned]
    finite = [c.planned_detectable_tv for c in carried if math.isfinite(c.planned_detectable_tv)]
    target_tv = max(finite) if (settings.mode == "budget" and finite) else None
    note = "; ".join(filter(None, [run.notes[0] if run.notes else "", *floor_notes]))
    if skipped:
        left_out = ", ".join(sk["case"] for sk in skipped)
        if left_out not in note:
            note = (f"{note}; " if note else "") + (f"{len(skipped)} case(s) left out for the budget: {left_out} "
                                                     "(settings.skipped_cases says why)")
    plan = AuditPlan(settings.mode, settings.effective_budget_s, run.pilot_s, alpha, target_tv,
                     not run.notes and not skipped, carried, note, fuzz=run.fuzz_plan,
                     skipped=[{"case": sk["case"], "reason": sk["reason"]} for sk in skipped])
    wall = settings.elapsed_before_s + (time.perf_counter() - run.t0)  # the whole command's, as its budget
    return CasesOutcome(results=results, plan=plan, resumed=resumed, wall_time_s=wall, skipped=skipped)
