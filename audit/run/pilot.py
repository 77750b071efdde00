"""The pilot of a budgeted audit: one decoder call of every case, timed, and the choice of torch threads.

:func:`pilot_costs` times one call of every case (after an untimed warm-up call; its
samples are discarded) with the sampler under audit; :func:`pilot_with_thread_choice`
also times the same calls at a few thread counts (:func:`thread_candidates`) and keeps
the fastest (:class:`ThreadChoice`, :data:`THREAD_ADVANTAGE`, :data:`THREAD_ABANDON`). The
planner (:mod:`~specexact.audit.run.plan`) turns the seconds per call into sample sizes.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Sequence

import torch

from specexact.audit.cases.decoder_case import AuditCase
from specexact.audit.cases.e2e.engine_call import LoadsOnlyInFreshProcess
from specexact.audit.cases.kinds import kind_of
from specexact.audit.run.pilot_estimates import estimate_elsewhere
from specexact.audit.run.thread_choice import (PILOT_SHARE, PROBE_SHARE, THREAD_ABANDON, THREAD_ADVANTAGE,
                                               ThreadChoice, thread_candidates)
from specexact.audit.sampler.call_timeout import start_worker, untimed
from specexact.decoders import verify

__all__ = [
    "pilot_costs",
    "pilot_with_thread_choice",
    "thread_candidates",
    "ThreadChoice",
    "THREAD_ADVANTAGE",
    "THREAD_ABANDON",
    "PROBE_SHARE",
    "PILOT_SHARE",
    "ProbeCutOff",
]


class ProbeCutOff(Exception):
    """A probe ran past its cut-off (:class:`_Pilot`): its timing is abandoned, never a finding."""


_UNPREPARED = object()
_NOT_PREPARED = object()
_ELSEWHERE = object()  # loads only in a fresh process (LoadsOnlyInFreshProcess): estimated, not timed
_LOAD_RAISED = object()  # its first load in this process raised: costs that load's time (its run meets it)


class _NotHere(Exception):
    """A case that loads only in a fresh process: the pilot estimates it (:mod:`.pilot_estimates`)."""


class _Pilot:
    """One decoder call of each case, timed; the inputs are built once, untimed, right before
    the case's first call (:meth:`_ensure_prepared`).

    Every call the pilot makes is a *probe*: it calls the sampler itself, not the audit's
    time-limited wrapper (:func:`~specexact.audit.sampler.call_timeout.untimed`), in a worker
    thread, and waits at most its cut-off (:meth:`time`). A probe past its cut-off is
    abandoned (:class:`ProbeCutOff`): it never marks the sampler as hung and never becomes a
    finding; only the audit's own calls can. The sampler is not called again until the
    abandoned probe has ended (an engine's state belongs to the call that runs), waiting at
    most the audit's per-call limit from the probe's start; a probe still running after that
    is recorded (:attr:`stragglers`) and left to end in its daemon thread.
    """

    def __init__(self, cases: Sequence[AuditCase], device: torch.device | str, verifier=None):
        self.cases = list(cases)
        self.dev = torch.device(device)
        self.verifier = verifier
        chosen = verify if verifier is None else verifier
        self.chosen, self.limit_s = untimed(chosen)
        self.abandoned: tuple[threading.Thread, float] | None = None
        self.stragglers: list[str] = []
        self.started = time.perf_counter()
        self.prepared = [_NOT_PREPARED] * len(self.cases)
        self.load_s = [0.0] * len(self.cases)  # seconds of each case's first load (preparation)
        self.elsewhere: set[int] = set()  # cases that load only in a fresh process
        self.measured: set[int] = set()  # cases whose call was timed in full
        self.crashed: set[int] = set()  # of those, the ones whose timed call crashed
        self.estimates: dict[int, dict] = {}  # index -> estimate_elsewhere's record
        self.warm: tuple[float, float, str] | None = None  # the first warm-up: seconds, token slots, case
        self.inferred: set[int] = set()  # of elsewhere: not loaded (the share was spent), inferred

    def _ensure_prepared(self, i: int) -> None:
        """Prepare case ``i`` (untimed) right before its first call, or before every call
        where its kind's preparation is the sampler's state (``prepares_sampler``: an
        end-to-end case loads the engine in its own configuration, method and γ, and a case
        timed on the configuration another case loaded was timed on the wrong one). Cases
        the pilot never reaches are never prepared."""
        case = self.cases[i]
        stateful = getattr(kind_of(case), "prepares_sampler", False)
        if i in self.elsewhere:
            return
        if self.prepared[i] is _NOT_PREPARED or stateful:
            first = self.prepared[i] is _NOT_PREPARED
            t0 = time.perf_counter()
            try:
                self.prepared[i] = self._prepare_within_limit(case)
                if first:
                    self.load_s[i] = time.perf_counter() - t0
            except LoadsOnlyInFreshProcess:
                # it loads only in a fresh process (another configuration ran here): its
                # run goes there; the pilot estimates it (base_costs), never the call limit
                self.prepared[i] = _ELSEWHERE
                self.elsewhere.add(i)
            except Exception:  # noqa: BLE001 - only a sampler's own load: the case's run meets it
                if not stateful:
                    raise
                if any(p is not _NOT_PREPARED and p is not _LOAD_RAISED and p is not _UNPREPARED
                       and p is not _ELSEWHERE for p in self.prepared):
                    # An engine that cannot load this configuration after another one loaded
                    # here (vLLM after its n-gram proposer imported numba): the case's run
                    # goes to a fresh process, estimated as such a case is (base_costs).
                    self.prepared[i] = _ELSEWHERE
                    self.elsewhere.add(i)
                else:
                    # Its first load raised: the case's own run loads again and meets it (a
                    # defect, or an engine that does not start here), at about this cost; it
                    # is never priced at the call limit and left out for the budget unseen.
                    self.prepared[i] = _LOAD_RAISED
                    self.load_s[i] = time.perf_counter() - t0

    def _prepare(self, case):
        """What one call needs (its kind's :meth:`~specexact.audit.cases.protocol.CaseKind.prepare`:
        the laws of a verify-level case, the models and the batch of a decoder-level one)."""
        return kind_of(case).prepare(case, self.dev, self.chosen)

    def _prepare_within_limit(self, case):
        """:meth:`_prepare` as a probe (an engine loads its models here): ``_UNPREPARED``
        when it ran past the per-call limit (the case's own load then meets the limit)."""
        box = {}
        try:
            self._probe(lambda: box.setdefault("prepared", self._prepare(case)), self.limit_s)
        except ProbeCutOff:
            return _UNPREPARED
        return box["prepared"]

    def _call(self, i: int, rows: int | None, v) -> None:
        """One call of case ``i`` as its kind makes it; a full call (``rows=None``) includes
        the case's observers and naive sampling."""
        case = self.cases[i]
        if self.prepared[i] is _ELSEWHERE:
            raise _NotHere(case.name)
        if self.prepared[i] is _UNPREPARED:
            raise ProbeCutOff(f"case {case.name}: its preparation ran past the per-call limit")
        if self.prepared[i] is _LOAD_RAISED:
            raise ProbeCutOff(f"case {case.name}: its load raised")
        kind_of(case).call(case, self.prepared[i], v, rows=rows, device=self.dev, full=rows is None)

    def _settle(self) -> None:
        """Wait for an abandoned probe to end (at most the per-call limit from its start)."""
        if self.abandoned is None:
            return
        worker, started = self.abandoned
        self.abandoned = None
        worker.join(None if self.limit_s is None else max(0.0, self.limit_s - (time.perf_counter() - started)))
        if worker.is_alive():
            self.stragglers.append(worker.name)

    def _probe(self, fn, cutoff_s: float | None) -> None:
        """``fn()`` in a worker thread, waited for at most ``cutoff_s`` (module docstring)."""
        self._settle()
        started = time.perf_counter()
        worker, box = start_worker(fn, f"specexact-probe:{len(self.stragglers)}")
        worker.join(cutoff_s)
        if worker.is_alive():
            self.abandoned = (worker, started)
            raise ProbeCutOff(f"probe past its cut-off of {cutoff_s:.3g} s")
        if "error" in box:
            raise box["error"]

    def warm_up(self, cutoff_s: float | None = None) -> float:
        """An untimed small call (its seconds returned): the first call of a process (or of a
        new thread count) pays one-time set-up costs. Past ``cutoff_s`` (default: the
        per-call limit) it is abandoned and raises :class:`ProbeCutOff`."""
        if not self.cases:
            return 0.0
        rows = 4 * len(getattr(self.cases[0], "row_classes", (1,)))
        cutoff_s = self.limit_s if cutoff_s is None else cutoff_s
        self._ensure_prepared(0)
        if self.prepared[0] is _LOAD_RAISED:  # nothing loaded to warm up
            return 0.0
        t0 = time.perf_counter()
        try:
            self._probe(lambda: self._call(0, rows, self.chosen), cutoff_s)
        except ProbeCutOff:
            raise
        except Exception:  # noqa: BLE001 - a crash is the case's finding, not the pilot's
            self._probe(lambda: self._call(0, rows, verify), cutoff_s)
        took = time.perf_counter() - t0
        size = getattr(kind_of(self.cases[0]), "call_size", lambda _c: None)(self.cases[0])
        batch = int(getattr(self.cases[0], "batch_size", 0) or 0)
        if self.warm is None and size and batch:  # its token slots: the case's, for its first rows
            self.warm = (took, size * min(rows, batch) / batch, self.cases[0].name)
        return took

    def base_cost(self, i: int) -> float | None:
        """:meth:`time` of case ``i`` at the audit's per-call limit; a call past it costs the
        limit (the case's own calls then meet the limit themselves: a hang there is a defect)."""
        try:
            return self.time(i)
        except _NotHere:
            return None  # estimated once every case was timed (base_costs)
        except ProbeCutOff:
            return None if self.limit_s is None else float(self.limit_s)

    def base_costs(self, time_s: float | None = None) -> list[float | None]:
        """:meth:`base_cost` of every case in order, until the pilot has run ``time_s``
        (its preparation and warm-up included; the first case is always timed): the cases
        not timed then are ``None``."""
        costs: list[float | None] = []
        for i in range(len(self.cases)):
            if i and time_s is not None and time.perf_counter() - self.started >= time_s:
                if self.elsewhere and getattr(kind_of(self.cases[i]), "prepares_sampler", False):
                    # the engine already could not load another configuration in this process:
                    # this case's load would fail too, and its run go to a fresh process
                    self.elsewhere.add(i)
                    self.inferred.add(i)
                costs.append(None)
            else:
                costs.append(self.base_cost(i))
        # the cases that load only in a fresh process: estimated from the ones timed here
        # (pilot_estimates' docstring says why not timed there), at no cost to the pilot's share
        sizes = [getattr(kind_of(c), "call_size", lambda _c: None)(c) for c in self.cases]
        self.estimates = estimate_elsewhere([c.name for c in self.cases], sizes, costs, self.load_s,
                                            sorted(self.elsewhere), sorted(self.measured), sorted(self.crashed),
                                            warm_up=self.warm)
        for i in self.inferred:
            self.estimates[i]["how"] += ("; not loaded here (the pilot's share was spent): the engine had "
                                         "already failed to load another configuration in this process")
        for i, est in self.estimates.items():
            # nothing measured to estimate it from: the call limit, as a case cut off (none: not timed)
            costs[i] = est["seconds_per_call"] if est["seconds_per_call"] is not None else (
                None if self.limit_s is None else float(self.limit_s))
        return costs

    def details(self) -> dict:
        """``{"fresh_process": {case name: {"seconds_per_call", "start_s", "how"}}}``: the
        cases estimated because they load only in a fresh process (:mod:`.pilot_estimates`)."""
        return {"fresh_process": {self.cases[i].name: dict(est) for i, est in sorted(self.estimates.items())}}

    def finish(self) -> None:
        """Let an abandoned probe end before the audit's own calls begin (:meth:`_settle`)."""
        self._settle()

    def time(self, i: int, cutoff_s: float | None = None) -> float:
        """Seconds of one call of case ``i`` (naive sampling included for a two-sample case).

        ``cutoff_s`` (default: the audit's per-call limit, or none) bounds the wait: past it
        the call is abandoned (:class:`ProbeCutOff`)."""
        cutoff_s = self.limit_s if cutoff_s is None else cutoff_s
        self._ensure_prepared(i)
        if self.prepared[i] is _LOAD_RAISED:  # a call of it is its load raising again
            self.crashed.add(i)
            self.measured.add(i)
            return max(self.load_s[i], 1e-4)
        t0 = time.perf_counter()
        crashed_s = 0.0
        try:
            self._probe(lambda: self._call(i, None, self.chosen), cutoff_s)
        except ProbeCutOff:
            raise
        except _NotHere:
            raise
        except Exception:  # noqa: BLE001
            # The time until the crash counts too: an end-to-end case's fall-back call does
            # nothing, and a crashing engine timed at 1e-4 s was planned 160,000 calls.
            crashed_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            self._probe(lambda: self._call(i, None, verify), cutoff_s)
            self.crashed.add(i)
        if self.dev.type == "cuda":
            torch.cuda.synchronize(self.dev)
        self.measured.add(i)
        return max(time.perf_counter() - t0, crashed_s, 1e-4)


def pilot_costs(cases: Sequence[AuditCase], device: torch.device | str = "cpu", verifier=None,
                time_s: float | None = None, details: dict | None = None) -> list[float | None]:
    """Seconds of one decoder call of every case (naive sampling included for two-sample
    cases), at the current number of torch threads. The samples are discarded.

    ``verifier`` is the sampler under audit (default: the built-in verifier). Timing the
    audited sampler itself matters for third-party ones, whose cost can scale with rows,
    vocabulary and γ quite unlike the built-in's. A case on which it raises is timed with
    the built-in verifier instead (the audit records the crash when the case runs), and
    charged the longer of that call and the time the crashed call ran.
    A verify-level case is timed for one verifier call (its laws are computed untimed).
    Once the pilot has run ``time_s`` (a budgeted audit gives :data:`PILOT_SHARE` of its
    budget), the cases not yet timed are not timed: their cost is ``None`` (the plan
    leaves them out, saying why). The first case is always timed.
    An end-to-end case that loads only in a fresh process is estimated, not timed
    (:mod:`~specexact.audit.run.pilot_estimates`); ``details``, when given, is updated with
    :meth:`_Pilot.details` (what was estimated and how).
    """
    pilot = _Pilot(cases, device, verifier)
    with contextlib.suppress(ProbeCutOff):  # a warm-up past the limit: the timed calls say the rest
        pilot.warm_up()
    costs = pilot.base_costs(time_s)
    pilot.finish()
    if details is not None:
        details.update(pilot.details())
    return costs


def pilot_with_thread_choice(cases: Sequence[AuditCase], device: torch.device | str = "cpu", verifier=None,
                             candidates: Sequence[int] | None = None, probe_budget_s: float | None = None,
                             time_s: float | None = None, details: dict | None = None
                             ) -> tuple[list[float | None], ThreadChoice]:
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

    The candidates' calls are probes, bounded (:class:`_Pilot`): each is cut off once it has
    taken :data:`THREAD_ABANDON` times one thread's time on the same case, or the time left
    of ``probe_budget_s``; the candidate is then abandoned, and the probe is never a finding.
    A probe starts only if its cut-off fits in what is left of ``probe_budget_s`` (one cut
    off by that time instead would be waited for all the same, and tell nothing); a
    candidate whose first probe does not fit is not tried.

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
    probe_budget_s : float, optional
        Seconds the candidates' probes may take in all (their warm-up calls and the waits
        for an abandoned probe included); default no limit. A budgeted audit gives
        :data:`PROBE_SHARE` of its budget.
    time_s : float, optional
        Seconds the timing at one thread may take (:func:`pilot_costs`): the cases not
        timed by then have cost ``None`` and the candidates are timed on the others.
    details : dict, optional
        Updated as :func:`pilot_costs`' (the cases estimated, not timed: they are not timed
        at the candidates either, and their estimate is scaled as the others' costs).

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
        return pilot_costs(cases, dev, verifier, time_s, details), ThreadChoice(default, "default")
    cands = sorted(set(thread_candidates(default) if candidates is None else (int(c) for c in candidates)))
    if not cands or cands[0] < 1:
        raise ValueError(f"thread candidates must be >= 1, got {candidates!r}")
    pilot = _Pilot(cases, dev, verifier)
    base = cands[0]
    torch.set_num_threads(base)
    try:
        base_warm = pilot.warm_up() or 0.0
    except ProbeCutOff:  # past the per-call limit: the timed calls say the rest
        base_warm = float(pilot.limit_s)
    base_costs = pilot.base_costs(time_s)
    # Cheapest case first: a candidate that is much slower is abandoned after as little
    # time as possible (its first call can take tens of times one thread's on a busy machine).
    order = sorted((i for i, c in enumerate(base_costs) if c is not None and i not in pilot.elsewhere),
                   key=lambda i: base_costs[i])
    n = len(order)
    base_sorted = [base_costs[i] for i in order]
    measured = {base: base_sorted}
    best, best_ratio = base, 1.0
    probes_end = None if probe_budget_s is None else time.perf_counter() + max(0.0, probe_budget_s)

    def left() -> float | None:
        return None if probes_end is None else probes_end - time.perf_counter()

    def fits(cutoff: float) -> bool:
        # A probe starts only if it can run to its cut-off within the probes' time: one cut
        # off by that time rather than by its slowness would be waited for all the same
        # (_Pilot._settle), up to the per-call limit, and tell nothing.
        return left() is None or cutoff <= left()

    for k in cands[1:]:
        warm_cutoff = THREAD_ABANDON * max(base_warm, base_sorted[0] if n else 0.0)
        if not fits(warm_cutoff + THREAD_ABANDON * (base_sorted[0] if n else 0.0)):
            break
        torch.set_num_threads(k)
        costs_k: list[float] = []
        try:
            pilot.warm_up(warm_cutoff)
        except ProbeCutOff:  # its set-up alone is slower than the factor allows: abandoned
            measured[k] = [THREAD_ABANDON * base_sorted[0]] if n else []
            continue
        for j, i in enumerate(order):
            cutoff = THREAD_ABANDON * base_sorted[j]
            if j and not fits(cutoff):
                break
            t0 = time.perf_counter()
            try:
                costs_k.append(pilot.time(i, cutoff))
            except ProbeCutOff:  # slower than the factor allows (or out of time): abandoned
                costs_k.append(max(time.perf_counter() - t0, THREAD_ABANDON * base_sorted[j]))
                break
            if sum(costs_k) > THREAD_ABANDON * sum(base_sorted[: j + 1]):
                break
        m = len(costs_k)
        ratio = sum(costs_k) / sum(base_sorted[:m])
        measured[k] = costs_k
        if ratio < THREAD_ADVANTAGE * best_ratio:
            best, best_ratio = k, ratio
    pilot.finish()
    torch.set_num_threads(best)
    if len(measured[best]) == n:
        costs: list[float | None] = [None] * len(base_costs)
        for j, i in enumerate(order):
            costs[i] = measured[best][j]
        for i in pilot.elsewhere:  # estimated from one thread's costs: scaled as those were
            costs[i] = None if base_costs[i] is None else base_costs[i] * best_ratio
    else:
        costs = [None if c is None else c * best_ratio for c in base_costs]
    if details is not None:
        details.update(pilot.details())
    # seconds of every candidate over the cases all of them covered, so they compare
    covered = min(len(v) for v in measured.values())
    seconds = {str(k): round(sum(v[:covered]), 6) for k, v in measured.items()}
    return costs, ThreadChoice(best, "measured", seconds, covered)
