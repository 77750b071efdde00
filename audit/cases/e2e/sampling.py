"""Running an end-to-end case: generate calls until the budget is spent, then the checks.

:func:`run_e2e_case` loads the engine
(:func:`~specexact.audit.cases.e2e.engine_call.ensure_loaded`), makes speculative and plain
generate calls of the case's requests
(:func:`~specexact.audit.cases.e2e.engine_call.generate_call`), the first call's requests
again for reproducibility (and, where the engine promises it, its seeded requests in another
mix), and checks each class's outputs
(:mod:`~specexact.audit.cases.e2e.checks`), or, for a long case, every emitted token
(:mod:`~specexact.audit.cases.e2e.token_checks`), and the seed checks
(:mod:`~specexact.audit.cases.e2e.seed_checks`); for an engine that declares logprobs, the
logprobs it reported on the first call's outputs, against the exact law
(:mod:`~specexact.audit.cases.e2e.logprob_checks`: deterministic, checked once the first call
pair is back). A crash, a hang or a break of the output
protocol is a defect (but an engine whose first load in the process raises did not start
here: its case dict says ``engine_not_started``, and an audit none of whose cases started is
an error, :func:`~specexact.audit.verdict.verdict.not_started`); after a crash of a call
holding several classes, the classes that crash alone are named and the case goes on with the others. An engine that cannot be loaded
again in this process after a crash leaves the rest to a fresh process
(:attr:`CaseResult.fresh_process <specexact.audit.cases.result.CaseResult.fresh_process>`,
:mod:`~specexact.audit.cases.e2e.fresh_process`).
"""

from __future__ import annotations

import time
from typing import Callable

import torch

from specexact.audit.cases.e2e.case import E2ECase
from specexact.audit.cases.e2e.checks import class_checks, reproducible_check
from specexact.audit.cases.e2e.laws import case_models, class_laws
from specexact.audit.cases.e2e.logprob_checks import padded_tokens as _padded
from specexact.audit.cases.e2e.logprob_checks import results_logprob_checks
from specexact.audit.cases.e2e.seed_checks import (independent_requests_check, reproducible_alone_check,
                                                    reproducible_in_mix_check)
from specexact.audit.cases.e2e.token_checks import band_checks
from specexact.audit.cases.e2e.engine_call import (
    FreshProcessWork,
    ensure_loaded,
    generate_call,
    is_crash,
    loaded_before,
    search_crashing_classes,
    stale_exception,
    stale_reason,
)
from specexact.audit.cases.result import CaseResult, case_seed, enough_calls, sampler_failure, NOT_STARTED
from specexact.audit.core.errors import AuditInternalError
from specexact.audit.core.levels import MIN_EXPECTED
from specexact.audit.sampler.call_timeout import SamplerCallTimeout

__all__ = ["run_e2e_case"]


def _call_pair(timed, engine, case: E2ECase, call: int, **kwargs):
    """Call ``call`` of the case speculative, then plain (``kwargs`` to
    :func:`~specexact.audit.cases.e2e.engine_call.generate_call`), each timed in its phase:
    ``(spec, plain)``, ``[n, case.length]`` int64, ``-1`` after each output's end."""
    spec = _padded(timed("speculative_calls", generate_call, engine, case, call, speculative=True, **kwargs)[1],
                   case.length)
    plain = _padded(timed("plain_calls", generate_call, engine, case, call, speculative=False, **kwargs)[1],
                    case.length)
    return spec, plain


def run_e2e_case(case: E2ECase, engine, *, false_fail_rate: float, seed: int = 0, num_batches: int | None = None,
                 time_budget_s: float | None = None, min_batches: int = 2, device: torch.device | str = "cpu",
                 progress: Callable[[int, int], None] | None = None,
                 min_expected: float = MIN_EXPECTED, reproducibility: bool = True) -> CaseResult:
    """Run ``case`` on ``engine`` and check its laws (:mod:`specexact.audit.cases.e2e`'s
    docstring); the arguments and the result are those of
    :func:`~specexact.audit.cases.dispatch.run_case` (``device`` is the engine's own business;
    ``seed`` shifts every request's seed). ``reproducibility=False`` skips the
    reproducibility calls (and the in-mix ones) and their checks (a shrink's candidates that need not repeat it)."""
    if (num_batches is None) == (time_budget_s is None):
        raise ValueError("give exactly one of num_batches and time_budget_s")
    start = time.perf_counter()
    result = CaseResult(case=case, seed=case_seed(seed, case))
    shift = result.seed % (2**31)
    caps = engine.capabilities()
    C = len(case.row_classes)
    spec, plain, first_round = [], [], []
    logprob_results = []  # the logprob checks of the first call's outputs (check_logprobs)
    b = 0
    phases = result.phase_times_s
    timed = result.timed

    try:
        earlier = stale_reason(engine)
        had_loaded = loaded_before(engine)  # another configuration was loaded in this process
        try:
            timed("engine_load", ensure_loaded, engine, case)
        except Exception as exc:  # noqa: BLE001 - an engine that cannot load the models is a defect
            failure = exc
            cause = stale_exception(engine)
            if isinstance(cause, SamplerCallTimeout):  # it hung before (the pilot, an earlier case): the finding
                failure, where = cause, ("an earlier call of this engine (the audit's planning pilot or an earlier "
                                         "case); no call is made after a hang")
            elif earlier is not None:
                where = f"engine load (loading it again after an earlier call raised {earlier})"
            elif had_loaded:
                where = "engine load (after another configuration was loaded in this process)"
            else:
                where = "engine load"
                # the engine's first load in this process raised (a hang stays a defect):
                # nothing of it ever ran here, so the case audited nothing (the command's
                # verdict: verdict.not_started)
                if not isinstance(failure, SamplerCallTimeout):
                    result.extras[NOT_STARTED] = True
            result.defect, chk = sampler_failure(failure, where, false_fail_rate)
            result.checks.append(chk)
            if (earlier is not None or had_loaded) and not isinstance(cause, SamplerCallTimeout):
                # an earlier case's crash, or an earlier configuration, left an engine this
                # process cannot load again (vLLM after numba): the whole case can run in a
                # fresh process (its result then replaces this one; a load that fails there too
                # is the case's defect)
                result.fresh_process = FreshProcessWork(call=shift, speculative=True, ok=tuple(range(C)),
                                                        reason=result.defect.splitlines()[0], whole_case=True)
            return result
        # the exact laws first (cached per process): the checks after the calls are then short
        # and their time is known before the calls stop (tail_s below)
        # (a long case's laws are conditional on the outputs: computed by its checks)
        timed("laws", lambda: case_models(case) if case.position_bands else [class_laws(case, c, caps)
                                                                             for c in range(C)])
        where = "speculative generate call 0"
        checks_s = 0.0  # the checks' predicted seconds: one class's checks timed on the first call's outputs
        try:
            t_calls = time.perf_counter()
            while True:
                call = shift + b
                where = f"speculative generate call {b}"
                t_pair = time.perf_counter()
                lp = case.check_logprobs and b == 0  # the first call asks for logprobs (and its repeat)
                _, res = timed("speculative_calls", generate_call, engine, case, call, speculative=True, logprobs=lp)
                spec.append(_padded(res, case.length))
                first_round.append([r.first_round_accepted for r in res])
                where = f"plain generate call {b}"
                _, pres = timed("plain_calls", generate_call, engine, case, call, speculative=False, logprobs=lp)
                plain.append(_padded(pres, case.length))
                if lp:
                    logprob_results = timed("checks", results_logprob_checks, case, caps, res, pres, false_fail_rate)
                b += 1
                result.num_batches = b
                result.num_sequences = b * case.batch_size
                if progress is not None:
                    progress(result.num_sequences, b)
                now = time.perf_counter()
                if b == 1 and time_budget_s is not None:
                    checks_s = timed("checks", _checks_seconds, case, caps, spec[0], plain[0], first_round[0],
                                     false_fail_rate, min_expected, result.seed)
                    now = time.perf_counter()
                # stop before the next two calls, the reproducibility calls (one more pair, and the
                # in-mix pair where the case checks it: at most a pair's time, half its requests) and
                # the checks would pass the case's time (a pair at the slower of its last and mean time)
                pair_s = max(now - t_pair, (now - t_calls) / b)
                # a long case's checks grow with its outputs (one teacher-forced forward per output)
                tail_checks_s = checks_s * (b + 1) if case.position_bands else checks_s
                if enough_calls(b, num_batches, time_budget_s, now - start, min_batches, call_s=pair_s,
                                tail_s=pair_s * (1 + bool((case.check_in_mix or case.check_alone)
                                                         and reproducibility)) + tail_checks_s):
                    break
            where = "the reproducibility calls"
            if not reproducibility:
                again = again_plain = None
            else:
                # the first call's requests, as they were
                again, again_plain = _call_pair(timed, engine, case, shift, logprobs=case.check_logprobs)
            mixed = mixed_plain = None
            if case.check_in_mix and reproducibility:
                where = "the in-mix reproducibility calls"
                mixed, mixed_plain = _call_pair(timed, engine, case, shift, mix=True)
            alone = alone_plain = None
            if case.check_alone and reproducibility:
                where = "the alone reproducibility calls"
                alone, alone_plain = _call_pair(timed, engine, case, shift, alone=True)
        except AuditInternalError:
            raise
        except Exception as exc:  # noqa: BLE001 - a crash or protocol break of the engine is a finding
            note, rest, left = "", None, None
            if is_crash(exc) and C > 1:
                note, rest, left = _without_crashing_classes(case, engine, shift, false_fail_rate, timed,
                                                       speculative=where.startswith("speculative"),
                                                       seed=seed, num_batches=num_batches,
                                                       time_budget_s=time_budget_s, start=start,
                                                       min_batches=min_batches, device=device, progress=progress,
                                                       min_expected=min_expected)
            result.defect, chk = sampler_failure(exc, where, false_fail_rate, note=note)
            result.checks.append(chk)
            result.fresh_process = left
            if rest is not None:  # the other classes, audited after the crash
                result.checks.extend(rest.checks)
                if rest.defect:
                    result.defect += f"\nthen, on the other classes: {rest.defect}"
                result.num_batches, result.num_sequences = rest.num_batches, rest.num_sequences
                for k, v in rest.phase_times_s.items():
                    phases[k] = phases.get(k, 0.0) + v
            return result
        t = time.perf_counter()
        if reproducibility:
            result.checks.append(reproducible_check(again, spec[0], again_plain, plain[0], false_fail_rate,
                                                    rows=case.seeded_rows() if case.unseeded else None))
        if mixed is not None:  # the mix call's request j is the first call's request rows[j]
            rows = list(reversed(case.seeded_rows()))
            result.checks.append(reproducible_in_mix_check(mixed, spec[0][rows], mixed_plain, plain[0][rows],
                                                           false_fail_rate))
        if alone is not None:  # the alone call's request is the first call's first seeded one
            row = case.seeded_rows()[:1]
            result.checks.append(reproducible_alone_check(alone, spec[0][row], alone_plain, plain[0][row],
                                                          false_fail_rate))
        if case.unseeded:
            result.checks.append(independent_requests_check(case, caps, spec, plain, false_fail_rate))
        result.checks.extend(logprob_results)
        all_spec, all_plain = torch.cat(spec), torch.cat(plain)  # [b * B, L]
        if case.position_bands:
            result.checks.extend(band_checks(case, caps, all_spec, all_plain, result.seed, false_fail_rate,
                                             min_expected))
        else:
            for c in range(C):
                result.checks.extend(class_checks(case, c, caps, all_spec[c::C], all_plain[c::C],
                                                  [row[c::C] for row in first_round], false_fail_rate, min_expected))
        phases["checks"] = phases.get("checks", 0.0) + time.perf_counter() - t
        return result
    finally:
        result.wall_time_s = time.perf_counter() - start


def _checks_seconds(case: E2ECase, caps, spec: torch.Tensor, plain: torch.Tensor, first_round: list, alpha: float,
                    min_expected: float, seed: int) -> float:
    """The case's checks' predicted seconds: class 0's checks timed on one call's outputs
    (``[B, L]`` each; their results are not kept), times the number of classes. The laws are
    computed by then, so what is left is counting, nearly the same for one call as for many.
    A long case's per-token checks on one call's outputs: their seconds per call."""
    C = len(case.row_classes)
    t = time.perf_counter()
    if case.position_bands:
        band_checks(case, caps, spec, plain, seed, alpha, min_expected)
        return time.perf_counter() - t
    class_checks(case, 0, caps, spec[0::C], plain[0::C], [first_round[0::C]], alpha, min_expected)
    return C * (time.perf_counter() - t)


def _without_crashing_classes(case: E2ECase, engine, call: int, alpha: float, timed, *, speculative: bool,
                              time_budget_s: float | None, start: float, **run):
    """After a crash of a call holding every class: ``(note, rest, left)``. The classes that
    crash alone (:func:`~specexact.audit.cases.e2e.engine_call.search_crashing_classes`) are
    named in ``note`` (each one's request shape is its replay); ``rest`` is a fresh run of the
    case restricted to the other classes, in what is left of ``time_budget_s`` (counted from
    ``start``: the search is paid from the case's time), None when none is left, no class
    crashes alone or the search stopped. ``left`` is the work a fresh process can go on with
    when the search stopped because the engine could not be loaded again
    (:class:`~specexact.audit.cases.e2e.engine_call.FreshProcessWork`), else None."""
    found = search_crashing_classes(case, engine, call, speculative=speculative, timed=timed)
    crashing, stopped = list(found.crashing), found.stopped
    named = "; ".join(f"class {case.class_id(c)} ({case.row_classes[c].describe()})" for c in crashing)
    keep = [c for c in range(len(case.row_classes)) if c not in crashing]
    if stopped is not None:
        left = None if not found.unloadable else FreshProcessWork(
            call=call, speculative=speculative, crashing=found.crashing, ok=found.ok, pending=found.pending,
            reason=stopped, searched=tuple(sorted(found.crashing + found.ok)))
        return (f"; alone, these crash: {named}" if crashing else "") + f"; {stopped}", None, left
    note = f"; alone, these crash: {named}" if crashing else "; no class crashes alone (only together)"
    if not crashing or not keep:
        return note, None, None
    note += f"; the case went on with classes {', '.join(str(case.class_id(c)) for c in keep)}"
    budget = None if time_budget_s is None else max(time_budget_s - (time.perf_counter() - start), 0.0)
    return note, run_e2e_case(case.restricted(keep), engine, false_fail_rate=alpha, time_budget_s=budget, **run), None
