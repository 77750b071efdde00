"""The audit's shares of the budget for its pilot and probes, and the choice of torch threads.

The constants the pilot (:mod:`~specexact.audit.run.pilot`) keeps to, the
:class:`ThreadChoice` it records, and the thread counts it tries (:func:`thread_candidates`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

__all__ = ["ThreadChoice", "thread_candidates", "THREAD_ADVANTAGE", "THREAD_ABANDON", "PROBE_SHARE", "PILOT_SHARE"]

#: A thread count must beat one thread by this factor to be chosen: one thread is the
#: steadier choice on a shared machine, and a single timed call is noisy.
THREAD_ADVANTAGE = 0.9
#: A candidate's timing stops once it has taken this many times one thread's time on the
#: same cases: it is then clearly slower, and timing it further only wastes the budget.
THREAD_ABANDON = 2.0
#: The share of the audit's budget the thread candidates' probes may take beside the pilot
#: at the first count (:func:`~specexact.audit.run.pilot.pilot_with_thread_choice`).
PROBE_SHARE = 0.1
#: The share of the audit's budget the pilot's timed calls at the first count may take:
#: past it, the cases not yet timed are left out (on a busy machine one call of an
#: engine's case took 15 s, and timing every case spent half of a 60 s budget).
PILOT_SHARE = 0.25


@dataclass(frozen=True)
class ThreadChoice:
    """The number of torch threads an audit runs with, and why.

    Attributes
    ----------
    threads : int
    chosen_by : {"measured", "set", "default"}
        ``"measured"``: the pilot timed the candidates (:func:`~specexact.audit.run.pilot.pilot_with_thread_choice`);
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
