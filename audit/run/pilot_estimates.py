"""The pilot's estimate of a case it cannot time in the audit's process.

An end-to-end case whose engine configuration does not load after another configuration ran
in the process (vLLM once its n-gram proposer imported numba) runs whole in a fresh process
(:class:`~specexact.audit.cases.e2e.engine_call.LoadsOnlyInFreshProcess`). The pilot does not
time it there: a fresh process costs an engine start (vLLM: 30-130 s on a loaded machine, more
than the pilot's share of a 300 s budget), and the case's own run then starts one more. It
estimates the case instead, from what it measured in its own process
(:func:`estimate_elsewhere`): the seconds per token slot of the cases it timed (the slowest of
them; the cases whose timed call crashed only when no other was timed), times the case's token
slots per call; and the fresh process's start, the engine's load as measured here plus
:data:`FRESH_START_PRIOR_S`. The planner counts that start beside the case's calls. Never the
call limit: a case charged the limit (300 s per call) was left out of vLLM's n-gram audit,
which then checked no law.
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["estimate_elsewhere", "FRESH_START_PRIOR_S"]

#: Seconds a fresh process takes before the engine loads (the interpreter, torch and the
#: audit's imports), beside the load itself; the same prior as an isolated case's start.
FRESH_START_PRIOR_S = 3.0


def estimate_elsewhere(names: Sequence[str], sizes: Sequence[int | None], costs: Sequence[float | None],
                       load_s: Sequence[float], elsewhere: Sequence[int], measured: Sequence[int],
                       crashed: Sequence[int], warm_up: tuple[float, float, str] | None = None) -> dict[int, dict]:
    """Estimates of the cases ``elsewhere`` (indices) from the cases the pilot timed.

    Parameters
    ----------
    names : sequence of str
        The cases' names (for the text).
    sizes : sequence of int or None
        Token slots of one call of each case (its kind's ``call_size``); None where the kind
        has none (such a case gives no rate and gets no estimate).
    costs : sequence of float or None
        Seconds of one timed call of each case (None: not timed).
    load_s : sequence of float
        Seconds the pilot's load of each case's configuration took (0 where none).
    elsewhere : sequence of int
        The cases to estimate.
    measured : sequence of int
        The cases whose call was timed in full (not cut off).
    crashed : sequence of int
        Those of ``measured`` whose timed call crashed (timed until the crash: a rate from
        them only when no other case was timed).
    warm_up : (float, float, str), optional
        ``(seconds, token slots, case name)`` of the pilot's warm-up call: the rate of last
        resort, when no case's call was timed (the warm-up crashed the engine and the first
        case could not load again).

    Returns
    -------
    dict
        ``{index: {"seconds_per_call", "start_s", "how"}}``; ``seconds_per_call`` is None
        (and ``how`` says why) when nothing measured gives a rate.
    """
    def rates(pool):
        return [(costs[j] / sizes[j], j) for j in pool if costs[j] is not None and sizes[j]]

    whole = [j for j in measured if j not in crashed]
    pool_rates = rates(whole) or rates(measured)
    from_crash = not rates(whole) and bool(pool_rates)
    what = "timed until its call crashed" if from_crash else ""
    if not pool_rates and warm_up is not None and warm_up[1] > 0:
        pool_rates, what = [(warm_up[0] / warm_up[1], warm_up[2])], "its warm-up call, the only call timed"
    load = max(load_s, default=0.0)  # the slowest load the pilot saw (the engine's start)
    start = FRESH_START_PRIOR_S + load
    out = {}
    for i in elsewhere:
        if not pool_rates or not sizes[i]:
            out[i] = {"seconds_per_call": None, "start_s": start,
                      "how": "not timed: it cannot be loaded in the pilot's process (another configuration ran "
                             "there) and no case timed there gives a cost per token slot to estimate it from"}
            continue
        rate, j = max(pool_rates)
        j = j if isinstance(j, str) else names[j]
        out[i] = {"seconds_per_call": rate * sizes[i], "start_s": start,
                  "how": (f"estimated, not timed: it cannot be loaded in the pilot's process after another "
                          f"configuration ran there (it runs in a fresh process); {rate:.3g} s per token slot, the "
                          f"slowest of {len(pool_rates)} case(s) timed here ({j}"
                          f"{', ' + what if what else ''}), times its {sizes[i]} token "
                          f"slots per call; its fresh process's start ≈{start:.1f} s (the engine's load measured "
                          f"here, {load:.1f} s, and {FRESH_START_PRIOR_S:g} s to start a process)")}
    return out
