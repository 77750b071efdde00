"""Plan an audit's sample sizes from the power functions so that it fits a time budget.

With ``--budget SECONDS`` the audit

1. times one decoder call of every case with the sampler under audit (the built-in
   verifier with ``--isolate``, so the pilot cannot hang; the *pilot*, after an untimed
   warm-up call; its samples are discarded) and, unless the number of torch threads is
   given, chooses it by timing the same calls at a few thread counts
   (:func:`pilot_with_thread_choice`: on a busy machine one thread is often many times
   faster than torch's default);
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

Every case gets at least :data:`MIN_BATCHES` decoder calls (the independence checks need
call pairs), so a budget below :func:`minimum_time` overruns; the plan says so.
A case may also require a first-token detectable TV (``AuditCase.required_first_token_tv``:
the default tile-edge case asks for 0.02): its calls for that are reserved first, within
:data:`FLOOR_SHARE` of the sampling time (:func:`floor_batches`), and the case runs them
even when it proves slower than predicted (``min_batches`` of
:func:`~specexact.audit.runner.run_case`); the later cases are re-planned from the time
left.

Sample sizes under a budget depend on the machine's speed, never on the data: rerunning a
case with the ``--batches`` count recorded in the report reproduces its samples exactly.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Sequence

import torch

from specexact.exactness.power import min_detectable_tv_chisquare, min_num_samples_chisquare

from .cases import AuditCase
from .levels import CHI2_TAIL_INFLATION

__all__ = [
    "PLAN_MAX_BINS",
    "MIN_BATCHES",
    "CasePlan",
    "AuditPlan",
    "planning_checks",
    "approx_detectable_tv",
    "batches_for_tv",
    "first_token_bins",
    "required_batches",
    "floor_batches",
    "FLOOR_SHARE",
    "plan_batches",
    "cases_within_budget",
    "tv_constant",
    "minimum_time",
    "pilot_costs",
    "pilot_with_thread_choice",
    "thread_candidates",
    "ThreadChoice",
    "THREAD_ADVANTAGE",
    "THREAD_ABANDON",
]

#: Bins assumed for a sequence / first-token check when planning (its binned law's size).
PLAN_MAX_BINS = 32
#: Fewest decoder calls a case makes (the independence checks compare pairs of calls).
MIN_BATCHES = 2
#: Allowed miss probability of the planned detectable TV (power 0.99, as the checks).
FALSE_PASS_RATE = 0.01


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


def support_size(vocab_size: int, length: int) -> int:
    """``V ** length``, capped at ``10**9`` without building a huge integer (the stand-in
    support of a sequence law)."""
    if length * math.log(max(vocab_size, 2)) > math.log(10**9):
        return 10**9
    return max(2, vocab_size**length)


def planning_checks(case: AuditCase) -> list[tuple[int, bool]]:
    """``(num_bins, two_sample)`` of the chi-square checks a class of ``case`` runs (stand-ins),
    as its kind says (:meth:`~specexact.audit.case_kind.CaseKind.planning_checks`).

    A verify-level case: ``first_token_law`` and ``accepted_length``. An exact
    decoder-level or tree-level case: the sequence law (``min(V ** length,
    PLAN_MAX_BINS)`` bins) and the accepted length. A two-sample decoder-level case:
    ``first_token_law`` with :func:`first_token_bins` bins (the target's ``top_k`` where
    every class sets one) and ``sequences_vs_naive``.
    """
    from .case_kind import kind_of

    return kind_of(case).planning_checks(case)


def first_token_bins(case: AuditCase) -> int:
    """Stand-in bins of a two-sample case's ``first_token_law`` checks: ``min(V,
    PLAN_MAX_BINS)``, or the target's ``top_k`` when every class truncates to at most that
    many tokens (its first-token law then has at most ``top_k`` outcomes)."""
    bins = min(case.model.vocab_size, PLAN_MAX_BINS)
    ks = [int(rc.target_params.top_k or 0) for rc in case.row_classes]
    if ks and all(k > 0 for k in ks):
        bins = min(bins, max(max(ks), 2))
    return bins


def required_batches(case: AuditCase, alpha: float) -> int:
    """Decoder calls a budgeted audit reserves for ``case``: :data:`MIN_BATCHES`, or, with
    ``case.required_first_token_tv``, the calls whose first-token checks (stand-in bins,
    :func:`first_token_bins`; at the chi-square checks' level ``alpha /
    CHI2_TAIL_INFLATION``, as the runner runs them) detect that TV (even, at least
    :data:`MIN_BATCHES`)."""
    tv = getattr(case, "required_first_token_tv", None)
    if tv is None:
        return MIN_BATCHES
    n = min_num_samples_chisquare(tv, num_bins=first_token_bins(case), false_fail_rate=alpha / CHI2_TAIL_INFLATION,
                                  false_pass_rate=FALSE_PASS_RATE)
    return _even_ceil(n / rows_per_class(case))


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
        below :data:`MIN_BATCHES`) when they would take more than ``floor_time_s`` or leave
        too little of ``available_s`` for the other cases' minimum.

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


def rows_per_class(case: AuditCase) -> int:
    return case.batch_size // len(case.row_classes)


def approx_detectable_tv(case: AuditCase, num_sequences_per_class: int, alpha: float) -> float:
    """Planned detectable TV of ``case`` with ``num_sequences_per_class`` sequences per class.

    The largest over the case's chi-square checks (stand-in bins); ``math.inf`` when some
    check cannot yet guarantee any TV up to 1.
    """
    if num_sequences_per_class < 1:
        return math.inf
    return max(
        min_detectable_tv_chisquare(int(num_sequences_per_class), num_bins=bins, false_fail_rate=alpha,
                                    false_pass_rate=FALSE_PASS_RATE, two_sample=two)
        for bins, two in planning_checks(case)
    )


def _even_ceil(x: float) -> int:
    k = max(MIN_BATCHES, math.ceil(x - 1e-9))
    return k + (k % 2)


def batches_for_tv(case: AuditCase, tv: float, alpha: float) -> int:
    """Decoder calls ``case`` needs so that every chi-square check detects TV ``tv``."""
    n = max(
        min_num_samples_chisquare(tv, num_bins=bins, false_fail_rate=alpha, false_pass_rate=FALSE_PASS_RATE,
                                  two_sample=two)
        for bins, two in planning_checks(case)
    )
    return _even_ceil(n / rows_per_class(case))


def minimum_time(cases: Sequence[AuditCase], costs: Sequence[float]) -> float:
    """Sampling time of :data:`MIN_BATCHES` calls per case."""
    return sum(MIN_BATCHES * c for c in costs)


def tv_constant(case: AuditCase, alpha: float) -> float:
    """``K`` with ``(planned detectable TV)**2 = K / n`` at ``n`` sequences per class.

    The noncentral chi-square bound gives ``TV = sqrt(lambda* / (4 n_eff))``; ``K`` is the
    largest ``lambda* / 4`` (over the case's checks, two-sample ones doubled).
    """
    big = 10**12
    return max(
        min_detectable_tv_chisquare(big, num_bins=bins, false_fail_rate=alpha, false_pass_rate=FALSE_PASS_RATE,
                                    two_sample=two) ** 2 * big
        for bins, two in planning_checks(case)
    )


def cases_within_budget(costs: Sequence[float], available_s: float, overhead_s: float = 0.0, *,
                        keep_one: bool = True) -> list[bool]:
    """Which cases keep their place when the minimum of every case does not fit the budget.

    Each case costs at least :data:`MIN_BATCHES` calls plus ``overhead_s``. When all of them
    fit ``available_s``, every case runs. Otherwise the cheapest cases run (the smallest
    vocabularies first: the most evidence per second), as many as fit, and the others are
    left out, so the audit ends within its budget instead of running every case at its
    minimum past it. With ``keep_one`` (no case of the audit has run yet) the cheapest case
    always runs (an audit that runs no case says nothing); alone it may still overrun a
    budget too small for it.

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

    Returns
    -------
    list of bool
        ``keep[c]``: case ``c`` runs.
    """
    need = [MIN_BATCHES * c + overhead_s for c in costs]
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
        Each case's fewest calls (even, at least :data:`MIN_BATCHES`, fitting the budget
        with the others' minimum); default :func:`floor_batches` of the cases.

    Raises
    ------
    ValueError
        If ``costs`` and ``cases`` differ in length.

    Returns
    -------
    (batches, worst_tv, feasible)
        ``batches[c]`` is even and at least the case's floor (:func:`floor_batches`:
        :data:`MIN_BATCHES`, or the calls its ``required_first_token_tv`` needs), and
        ``sum(batches[c] * costs[c]) <= available_s``. ``worst_tv`` is the largest planned detectable TV of a
        case (None if none is finite). ``feasible`` is False when even the minimum does not
        fit (every case then gets :data:`MIN_BATCHES` and the audit overruns).

    Notes
    -----
    With ``TV_c**2 = K_c / n_c`` (:func:`tv_constant`), ``n_c = b_c r_c`` sequences per class
    from ``b_c`` calls of ``r_c`` rows per class costing ``s_c`` seconds each, minimising
    ``sum_c K_c / (b_c r_c)`` subject to ``sum_c b_c s_c <= T`` gives (Lagrange)
    ``b_c = sqrt(K_c / (mu r_c s_c))``: a case's time grows with the square root of its cost,
    so cheap cases get many calls and expensive ones their fair part — unlike equalising the
    TVs, which would spend nearly all the time on the most expensive case, or equal time
    per case, which would starve it. The multiplier ``mu`` is found by bisection on the
    even-rounded-down counts; time left by the rounding goes, two calls at a time, to the
    case whose squared TV falls most per second. A case with a floor gets at least that
    many calls; the others share what the floors leave.
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


class _Pilot:
    """One decoder call of each case, timed; the inputs are built once, untimed."""

    def __init__(self, cases: Sequence[AuditCase], device: torch.device | str, verifier=None):
        from specexact.decoders import verify

        self.cases = list(cases)
        self.dev = torch.device(device)
        self.verifier = verifier
        self.chosen = verify if verifier is None else verifier
        self.prepared = [self._prepare(case) for case in self.cases]

    def _prepare(self, case):
        """What one call needs (its kind's :meth:`~specexact.audit.case_kind.CaseKind.prepare`:
        the laws of a verify-level case, the models and the batch of a decoder-level one)."""
        from .case_kind import kind_of

        return kind_of(case).prepare(case, self.dev, self.chosen)

    def _call(self, i: int, rows: int | None, v) -> None:
        """One call of case ``i`` as its kind makes it; a full call (``rows=None``) includes
        the case's observers and naive sampling."""
        from .case_kind import kind_of

        case = self.cases[i]
        kind_of(case).call(case, self.prepared[i], v, rows=rows, device=self.dev, full=rows is None)

    def warm_up(self) -> None:
        """An untimed small call: the first call of a process (or of a new thread count)
        pays one-time set-up costs."""
        from specexact.decoders import verify

        if not self.cases:
            return
        rows = 4 * len(getattr(self.cases[0], "row_classes", (1,)))
        try:
            self._call(0, rows, self.chosen)
        except Exception:  # noqa: BLE001 - a crash is the case's finding, not the pilot's
            self._call(0, rows, verify)

    def time(self, i: int) -> float:
        """Seconds of one call of case ``i`` (naive sampling included for a two-sample case)."""
        from specexact.decoders import verify

        t0 = time.perf_counter()
        crashed_s = 0.0
        try:
            self._call(i, None, self.chosen)
        except Exception:  # noqa: BLE001
            # The time until the crash counts too: an end-to-end case's fall-back call does
            # nothing, and a crashing engine timed at 1e-4 s was planned 160,000 calls.
            crashed_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            self._call(i, None, verify)
        if self.dev.type == "cuda":
            torch.cuda.synchronize(self.dev)
        return max(time.perf_counter() - t0, crashed_s, 1e-4)


def pilot_costs(cases: Sequence[AuditCase], device: torch.device | str = "cpu", verifier=None) -> list[float]:
    """Seconds of one decoder call of every case (naive sampling included for two-sample
    cases), at the current number of torch threads. The samples are discarded.

    ``verifier`` is the sampler under audit (default: the built-in verifier). Timing the
    audited sampler itself matters for third-party ones, whose cost can scale with rows,
    vocabulary and γ quite unlike the built-in's. A case on which it raises is timed with
    the built-in verifier instead (the audit records the crash when the case runs), and
    charged the longer of that call and the time the crashed call ran.
    A verify-level case is timed for one verifier call (its laws are computed untimed).
    """
    pilot = _Pilot(cases, device, verifier)
    pilot.warm_up()
    return [pilot.time(i) for i in range(len(pilot.cases))]


#: A thread count must beat one thread by this factor to be chosen: one thread is the
#: steadier choice on a shared machine, and a single timed call is noisy.
THREAD_ADVANTAGE = 0.9
#: A candidate's timing stops once it has taken this many times one thread's time on the
#: same cases: it is then clearly slower, and timing it further only wastes the budget.
THREAD_ABANDON = 2.0


@dataclass(frozen=True)
class ThreadChoice:
    """The number of torch threads an audit runs with, and why.

    Attributes
    ----------
    threads : int
    chosen_by : {"measured", "set", "default"}
        ``"measured"``: the pilot timed the candidates (:func:`choose_threads`);
        ``"set"``: given by the user (``--threads``); ``"default"``: torch's own count
        (fixed ``--batches``, where sample sizes do not depend on speed, or a
        non-CPU device).
    seconds : dict
        ``{str(threads): seconds}`` of the pilot calls timed at each candidate (the same
        cases for every candidate, so they compare); empty unless measured.
    cases_timed : int
        How many cases those seconds cover.
    """

    threads: int
    chosen_by: str
    seconds: dict = field(default_factory=dict)
    cases_timed: int = 0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ThreadChoice":
        return cls(int(d["threads"]), str(d["chosen_by"]), dict(d.get("seconds") or {}), int(d.get("cases_timed", 0)))


def thread_candidates(default: int) -> list[int]:
    """Thread counts the pilot tries: one, half of ``default`` and ``default`` (torch's
    count, normally the physical cores)."""
    if default < 1:
        raise ValueError(f"default must be >= 1, got {default!r}")
    return sorted({1, max(1, default // 2), default})


def pilot_with_thread_choice(cases: Sequence[AuditCase], device: torch.device | str = "cpu", verifier=None,
                             candidates: Sequence[int] | None = None) -> tuple[list[float], ThreadChoice]:
    """Choose the number of torch threads by timing, and return the pilot costs at it.

    One decoder call of every case is timed with one thread (the pilot); then each other
    candidate (:func:`thread_candidates` of torch's current count) times the same calls,
    cheapest case first, until it has covered every case or has taken :data:`THREAD_ABANDON`
    times one thread's time on the cases it covered (so a machine whose other processes
    keep the cores busy, where threads wait for each other and a call can take ten times
    longer, costs the pilot little). A candidate is chosen when its time over the cases it
    covered is below :data:`THREAD_ADVANTAGE` times one thread's; among several, the
    fastest. Costs are those measured at the chosen count (scaled from one thread's by
    their ratio when the candidate covered only part of the cases).

    Parameters
    ----------
    cases : sequence of AuditCase
    device : torch.device or str
        On a non-CPU device there is nothing to choose: torch's current count is kept
        (``chosen_by="default"``) and the pilot is :func:`pilot_costs`.
    verifier : callable or adapter, optional
        The sampler under audit (default: the built-in verifier).
    candidates : sequence of int, optional
        Thread counts to try (default :func:`thread_candidates` of
        ``torch.get_num_threads()``).

    Returns
    -------
    (costs, ThreadChoice)
        ``torch.set_num_threads`` is left at the chosen count.

    Raises
    ------
    ValueError
        A candidate below 1.
    """
    dev = torch.device(device)
    default = torch.get_num_threads()
    if dev.type != "cpu":
        return pilot_costs(cases, dev, verifier), ThreadChoice(default, "default")
    cands = sorted(set(thread_candidates(default) if candidates is None else (int(c) for c in candidates)))
    if not cands or cands[0] < 1:
        raise ValueError(f"thread candidates must be >= 1, got {candidates!r}")
    pilot = _Pilot(cases, dev, verifier)
    n = len(pilot.cases)
    base = cands[0]
    torch.set_num_threads(base)
    pilot.warm_up()
    base_costs = [pilot.time(i) for i in range(n)]
    # Cheapest case first: a candidate that is much slower is abandoned after as little
    # time as possible (its first call can take tens of times one thread's on a busy machine).
    order = sorted(range(n), key=lambda i: base_costs[i])
    base_sorted = [base_costs[i] for i in order]
    measured = {base: base_sorted}
    best, best_ratio = base, 1.0
    for k in cands[1:]:
        torch.set_num_threads(k)
        pilot.warm_up()
        costs_k: list[float] = []
        for j, i in enumerate(order):
            costs_k.append(pilot.time(i))
            if sum(costs_k) > THREAD_ABANDON * sum(base_sorted[: j + 1]):
                break
        m = len(costs_k)
        ratio = sum(costs_k) / sum(base_sorted[:m])
        measured[k] = costs_k
        if ratio < THREAD_ADVANTAGE * best_ratio:
            best, best_ratio = k, ratio
    torch.set_num_threads(best)
    if len(measured[best]) == n:
        costs = [0.0] * n
        for j, i in enumerate(order):
            costs[i] = measured[best][j]
    else:
        costs = [c * best_ratio for c in base_costs]
    # seconds of every candidate over the cases all of them covered, so they compare
    covered = min(len(v) for v in measured.values())
    seconds = {str(k): round(sum(v[:covered]), 6) for k, v in measured.items()}
    return costs, ThreadChoice(best, "measured", seconds, covered)
