"""Plan an audit's sample sizes from the power functions so that it fits a time budget.

With ``--budget SECONDS`` the audit

1. times one decoder call of every case with the sampler under audit (the built-in
   verifier with ``--isolate``, so the pilot cannot hang; the *pilot*, after an untimed
   warm-up call; its samples are discarded) and, unless the number of torch threads is
   given, chooses it by timing the same calls at a few thread counts
   (:func:`~specexact.audit.run.pilot.pilot_with_thread_choice`: on a busy machine one
   thread is often many times faster than torch's default);
2. chooses the number of decoder calls of every case so that the calls of all cases fit
   the time left and the sum of the cases' squared *planned detectable TVs* — the smallest
   total-variation distance that a case's chi-square checks detect with power 0.99 at the
   per-check false-fail rate — is as small as possible (:func:`plan_batches`);
3. re-plans the cases not yet run after every case, from the time actually left and the
   speed actually measured (the audited sampler may be slower than the built-in one), so
   the audit ends on time however wrong the pilot was.

The power of a check depends on its number of bins, which the binning finds only after
sampling. The plan uses a stand-in: ``min(number of outcomes, PLAN_MAX_BINS)`` bins for
the sequence / first-token checks, ``γ + 1`` for the accepted-length check, and the
two-sample law (half the effective sample size) for ``sequences_vs_naive``. The figures
shown while sampling are therefore marked ``≈``; every check's own ``detectable_tv`` in
the report is exact.

Every case gets at least :data:`~specexact.audit.run.sample_sizes.MIN_BATCHES` decoder calls (the
independence checks need call pairs), so a budget below
:func:`~specexact.audit.run.sample_sizes.minimum_time` overruns; the plan says so.
A case may also require a first-token detectable TV (``AuditCase.required_first_token_tv``:
the default tile-edge case asks for 0.02): its calls for that are reserved first, within
:data:`FLOOR_SHARE` of the sampling time (:func:`floor_batches`), and the case runs them
even when it proves slower than predicted (``min_batches`` of
:func:`~specexact.audit.cases.dispatch.run_case`); the later cases are re-planned from the time
left.

Sample sizes under a budget depend on the machine's speed, never on the data: rerunning a
case with the ``--batches`` count recorded in the report reproduces its samples exactly.

This module holds the plan (:class:`AuditPlan`, :class:`CasePlan`), the cases' floors
(:func:`floor_batches`) and the allocation of the time (:func:`plan_batches`,
:func:`cases_within_budget`); the power arithmetic it uses is in
:mod:`~specexact.audit.run.sample_sizes` and the pilot in :mod:`~specexact.audit.run.pilot`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Sequence

from specexact.audit.cases.decoder_case import AuditCase
from specexact.audit.cases.planning import PLAN_MAX_BINS, first_token_bins
from specexact.audit.core.levels import CHI2_TAIL_INFLATION
from specexact.audit.run.sample_sizes import (
    FALSE_PASS_RATE,
    MIN_BATCHES,
    approx_detectable_tv,
    even_batches,
    minimum_time,
    rows_per_class,
    tv_constant,
)
from specexact.exactness.power import min_num_samples_chisquare

__all__ = [
    "PLAN_MAX_BINS",
    "report_reserve_s",
    "CasePlan",
    "AuditPlan",
    "first_token_bins",
    "required_batches",
    "floor_batches",
    "FLOOR_SHARE",
    "plan_batches",
    "cases_within_budget",
]


@dataclass
class CasePlan:
    """The plan of one case."""

    name: str
    seconds_per_batch: float | None  # None with fixed --batches
    rows_per_class: int
    planned_batches: int
    planned_time_s: float | None
    planned_sequences_per_class: int
    planned_detectable_tv: float
    min_batches: int = MIN_BATCHES  # the case's floor (floor_batches): it runs at least these calls

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class AuditPlan:
    """What the audit intends to sample (see the module docstring)."""

    mode: str  # "budget" or "batches"
    budget_s: float | None
    pilot_s: float
    per_check_false_fail_rate: float
    target_detectable_tv: float | None
    feasible: bool
    cases: list[CasePlan] = field(default_factory=list)
    note: str = ""
    fuzz: dict | None = None  # the fuzz stage's share: {share, planned_time_s, time_s, profile, ...} (audit/fuzz_stage.py)
    skipped: list = field(default_factory=list)  # cases left out for the budget: {case, seconds_per_call, reason}

    def to_dict(self) -> dict:
        d = asdict(self)
        d["cases"] = [c.to_dict() for c in self.cases]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "AuditPlan":
        d = dict(d)
        d["cases"] = [CasePlan(**c) for c in d.get("cases", [])]
        return cls(**d)

    def case(self, name: str) -> CasePlan | None:
        for c in self.cases:
            if c.name == name:
                return c
        return None


#: Time kept for what follows the cases (the report's checks, diagnosis and files): this
#: share of the budget, at most :data:`_REPORT_MAX_S` (3.5 s at load 11 in a 60 s audit) on
#: an idle machine; on a busy one more (:func:`report_reserve_s`).
_REPORT_SHARE = 0.05
_REPORT_MAX_S = 3.0
#: CPU seconds of the report's files, its HTML page included (1.1 s of them), measured.
_REPORT_CPU_S = 1.5
#: The reserve never takes more than this share of the budget.
_REPORT_MAX_SHARE = 0.2


def report_reserve_s(budget_s: float, slowdown: float = 1.0) -> float:
    """Seconds of the budget kept for the report: :data:`_REPORT_SHARE` of it (at most
    :data:`_REPORT_MAX_S`), or, on a busy machine, what the report's :data:`_REPORT_CPU_S`
    CPU seconds take beyond them at ``slowdown`` (the process's wall seconds per CPU second
    so far: 6-7 at load 13, where a 1.1 s HTML page took 8.4 s), at most
    :data:`_REPORT_MAX_SHARE` of the budget."""
    return min(_REPORT_MAX_SHARE * budget_s,
               max(min(_REPORT_SHARE * budget_s, _REPORT_MAX_S), _REPORT_CPU_S * (max(slowdown, 1.0) - 1.0)))


def required_batches(case: AuditCase, alpha: float) -> int:
    """Decoder calls a budgeted audit reserves for ``case``:
    :data:`~specexact.audit.run.sample_sizes.MIN_BATCHES`, or, with
    ``case.required_first_token_tv``, the calls whose first-token checks (stand-in bins,
    :func:`first_token_bins`; at the chi-square checks' level ``alpha / CHI2_TAIL_INFLATION``,
    as the runner runs them) detect that TV (even, at least
    :data:`~specexact.audit.run.sample_sizes.MIN_BATCHES`)."""
    tv = getattr(case, "required_first_token_tv", None)
    if tv is None:
        return MIN_BATCHES
    n = min_num_samples_chisquare(tv, num_bins=first_token_bins(case), false_fail_rate=alpha / CHI2_TAIL_INFLATION,
                                  false_pass_rate=FALSE_PASS_RATE)
    return even_batches(n / rows_per_class(case))


#: Largest share of the sampling time the cases' required floors together take.
FLOOR_SHARE = 0.5


def floor_batches(cases: Sequence[AuditCase], costs: Sequence[float], available_s: float,
                  alpha: float, *, floor_time_s: float | None = None) -> list[int]:
    """Each case's fewest decoder calls under a budget.

    Parameters
    ----------
    cases, costs
        The cases and their seconds per decoder call.
    available_s : float
        Sampling time for all of them.
    alpha : float
        Per-check false-fail rate.
    floor_time_s : float, optional
        Most seconds the floored cases' calls may take together; default
        :data:`FLOOR_SHARE` of ``available_s``.

    Returns
    -------
    list of int
        :func:`required_batches` of each case, scaled down evenly (even counts, never
        below :data:`~specexact.audit.run.sample_sizes.MIN_BATCHES`) when they would take more than
        ``floor_time_s`` or leave too little of ``available_s`` for the other cases' minimum.

    Notes
    -----
    The audit fixes ``floor_time_s`` at its first plan (:data:`FLOOR_SHARE` of the
    sampling time) and re-evaluates the floors at every re-plan with the speed measured
    so far, so a case run late is not starved by the shrinking time left. (A resumed
    audit fixes it at its own first plan, from the time then left.)
    """
    want = [required_batches(c, alpha) for c in cases]
    extra = sum((w - MIN_BATCHES) * s for w, s in zip(want, costs))
    if extra <= 0:
        return want
    if floor_time_s is None:
        floor_time_s = FLOOR_SHARE * available_s
    room = min(floor_time_s - sum(w * s for w, s in zip(want, costs) if w > MIN_BATCHES),
               available_s - minimum_time(cases, costs) - extra)
    if room >= 0:
        return want
    scale = max(0.0, (extra + room) / extra)  # the floors' extra calls that fit
    return [MIN_BATCHES + int((w - MIN_BATCHES) * scale // 2) * 2 for w in want]


def cases_within_budget(costs: Sequence[float], available_s: float, overhead_s: float = 0.0, *,
                        keep_one: bool = True, extra_calls: Sequence[int] | None = None,
                        extra_s: Sequence[float] | None = None) -> list[bool]:
    """Which cases keep their place when the minimum of every case does not fit the budget.

    Each case costs at least :data:`~specexact.audit.run.sample_sizes.MIN_BATCHES` calls, its
    ``extra_calls`` (:func:`~specexact.audit.run.sample_sizes.fixed_calls`) and ``overhead_s``. When all of them fit ``available_s``, every case runs. Otherwise the
    cheapest cases run (the smallest vocabularies first: the most evidence per second), as many
    as fit, and the others are left out, so the audit ends within its budget instead of running
    every case at its minimum past it. With ``keep_one`` (no case of the audit has run yet) the
    cheapest case always runs (an audit that runs no case says nothing); alone it may still
    overrun a budget too small for it.

    Parameters
    ----------
    costs : sequence of float
        Seconds per decoder call of each case (at the measured speed).
    available_s : float
        Seconds left for these cases.
    overhead_s : float
        Seconds per case outside its calls.
    keep_one : bool
        Keep the cheapest case even when it does not fit.
    extra_calls : sequence of int, optional
        Calls each case makes beyond its planned ones (an end-to-end case's reproducibility
        pair), at its cost per call; default none.
    extra_s : sequence of float, optional
        Seconds each case spends beyond its calls and ``overhead_s`` (a fresh process's start
        where the case loads only there); default none.

    Returns
    -------
    list of bool
        ``keep[c]``: case ``c`` runs.
    """
    extra = [0] * len(costs) if extra_calls is None else [int(e) for e in extra_calls]
    if len(extra) != len(costs):
        raise ValueError(f"extra_calls has {len(extra)} entries for {len(costs)} costs")
    more = [0.0] * len(costs) if extra_s is None else [float(x) for x in extra_s]
    need = [(MIN_BATCHES + e) * c + overhead_s + m for c, e, m in zip(costs, extra, more)]
    if sum(need) <= available_s:
        return [True] * len(costs)
    keep = [False] * len(costs)
    used = 0.0
    for i in sorted(range(len(costs)), key=lambda j: (costs[j], j)):
        if (keep_one and not any(keep)) or used + need[i] <= available_s:
            keep[i] = True
            used += need[i]
    return keep


def plan_batches(
    cases: Sequence[AuditCase],
    costs: Sequence[float],
    available_s: float,
    alpha: float,
    floors: Sequence[int] | None = None,
) -> tuple[list[int], float | None, bool]:
    """Decoder calls per case that minimise the sum of the cases' squared detectable TVs.

    Parameters
    ----------
    cases, costs
        The cases to run and their seconds per decoder call.
    available_s
        Sampling time for all of them.
    alpha
        Per-check false-fail rate.
    floors
        Each case's fewest calls (even, at least
        :data:`~specexact.audit.run.sample_sizes.MIN_BATCHES`, fitting the budget with the
        others' minimum); default :func:`floor_batches` of the cases.

    Raises
    ------
    ValueError
        If ``costs`` and ``cases`` differ in length.

    Returns
    -------
    (batches, worst_tv, feasible)
        ``batches[c]`` is even and at least the case's floor (:func:`floor_batches`:
        :data:`~specexact.audit.run.sample_sizes.MIN_BATCHES`, or the calls its
        ``required_first_token_tv`` needs), and ``sum(batches[c] * costs[c]) <= available_s``.
        ``worst_tv`` is the largest planned detectable TV of a case (None if none is finite).
        ``feasible`` is False when even the minimum does not fit (every case then gets
        :data:`~specexact.audit.run.sample_sizes.MIN_BATCHES` and the audit overruns).

    Notes
    -----
    With ``TV_c**2 = K_c / n_c`` (:func:`~specexact.audit.run.sample_sizes.tv_constant`),
    ``n_c = b_c r_c`` sequences per class from ``b_c`` calls of ``r_c`` rows per class costing
    ``s_c`` seconds each, minimising ``sum_c K_c / (b_c r_c)`` subject to ``sum_c b_c s_c <= T`` gives
    (Lagrange) ``b_c = sqrt(K_c / (mu r_c s_c))``: a case's time grows with the square root of
    its cost, so cheap cases get many calls and expensive ones their fair part — unlike
    equalising the TVs, which would spend nearly all the time on the most expensive case, or
    equal time per case, which would starve it. The multiplier ``mu`` is found by bisection on
    the even-rounded-down counts; time left by the rounding goes, two calls at a time, to the
    case whose squared TV falls most per second. A case with a floor gets at least that many
    calls; the others share what the floors leave.
    """
    if len(costs) != len(cases):
        raise ValueError(f"costs has {len(costs)} entries but there are {len(cases)} cases")
    if not cases:
        return [], None, True
    minimum = floor_batches(cases, costs, available_s, alpha) if floors is None else [int(f) for f in floors]
    if sum(f * c for f, c in zip(minimum, costs)) > available_s:  # given floors that do not fit
        minimum = floor_batches(cases, costs, available_s, alpha)
    rows = [rows_per_class(c) for c in cases]
    K = [tv_constant(c, alpha) for c in cases]

    def worst(b: list[int]) -> float | None:
        tvs = [approx_detectable_tv(c, bi * r, alpha) for c, bi, r in zip(cases, b, rows)]
        finite = [t for t in tvs if math.isfinite(t)]
        return max(finite) if finite else None

    if minimum_time(cases, costs) > available_s:
        return [MIN_BATCHES] * len(cases), worst([MIN_BATCHES] * len(cases)), False

    def alloc(log_mu: float) -> list[int]:
        mu = math.exp(log_mu)
        out = []
        for k, s, r, f in zip(K, costs, rows, minimum):
            b = math.sqrt(k / (mu * r * s))
            b = int(min(b, 1e9) // 2) * 2
            out.append(max(f, b))
        return out

    def total(b: list[int]) -> float:
        return sum(bi * ci for bi, ci in zip(b, costs))

    lo, hi = -80.0, 80.0  # log mu: alloc(lo) is huge, alloc(hi) is the minimum
    best = minimum
    for _ in range(200):
        mid = (lo + hi) / 2
        b = alloc(mid)
        if total(b) <= available_s:
            best, hi = b, mid
        else:
            lo = mid
        if hi - lo < 1e-6:
            break
    best = list(best)
    spare = available_s - total(best)
    for _ in range(10_000):  # hand out what rounding left, two calls at a time
        gains = [(K[c] / (best[c] * rows[c]) - K[c] / ((best[c] + 2) * rows[c])) / (2 * costs[c])
                 if 2 * costs[c] <= spare else -1.0 for c in range(len(cases))]
        c = max(range(len(cases)), key=lambda i: gains[i])
        if gains[c] <= 0:
            break
        best[c] += 2
        spare -= 2 * costs[c]
    return best, worst(best), True

