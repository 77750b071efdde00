"""The pilot's choice of the number of torch threads (audit/run/pilot.py)."""

import time

import pytest
import torch

from specexact.audit import quick_cases
from specexact.audit.run.pilot import (THREAD_ABANDON, pilot_with_thread_choice, thread_candidates)
from specexact.decoders import verify

CASES = [c for c in quick_cases() if c.name in ("v8-plain", "v12-eos-cut")]


pytestmark = pytest.mark.usefixtures("restore_threads")


def slow_when_threaded(ids, draft_probs, target_probs, generator=None):
    """As on a busy machine: with more threads every call waits far longer."""
    time.sleep(0.01 * torch.get_num_threads() ** 4)
    return verify(ids, draft_probs, target_probs, generator)


def test_candidates():
    assert thread_candidates(1) == [1] and thread_candidates(2) == [1, 2] and thread_candidates(16) == [1, 8, 16]
    with pytest.raises(ValueError, match="default"):
        thread_candidates(0)
    with pytest.raises(ValueError, match="candidates"):
        pilot_with_thread_choice(CASES, verifier=verify, candidates=[0, 1])


def test_one_thread_is_chosen_when_threads_wait_and_the_slow_count_is_abandoned_early():
    costs, choice = pilot_with_thread_choice(CASES, verifier=slow_when_threaded, candidates=[1, 2])
    assert choice.threads == 1 and choice.chosen_by == "measured" and torch.get_num_threads() == 1
    assert choice.cases_timed == 1, "two threads are abandoned after the cheapest case"
    assert choice.seconds["2"] >= THREAD_ABANDON * choice.seconds["1"] - 2e-6  # cut off at the factor (seconds rounded to 1e-6)
    assert len(costs) == len(CASES) and all(c > 0 for c in costs)


@pytest.fixture
def timed(monkeypatch):
    """The pilot's timings as a function of (case, threads), recording every timed call."""
    import specexact.audit.run.pilot as pilot

    calls = []

    def install(seconds):
        def fake_time(self, i, cutoff_s=None):
            k = torch.get_num_threads()
            calls.append((i, k))
            return seconds(i, k)

        monkeypatch.setattr(pilot._Pilot, "time", fake_time)
        monkeypatch.setattr(pilot._Pilot, "warm_up", lambda self, cutoff_s=None: 0.0)
        return calls

    return install


def test_the_fastest_count_is_chosen_with_its_own_costs(timed):
    base = [0.4, 0.1, 0.2]  # seconds per call at one thread
    calls = timed(lambda i, k: base[i] / {1: 1.0, 2: 1.8, 4: 2.5}[k])
    cases = [quick_cases()[i] for i in range(3)]
    costs, choice = pilot_with_thread_choice(cases, verifier=verify, candidates=[1, 2, 4])
    assert choice.threads == 4 and torch.get_num_threads() == 4
    assert costs == pytest.approx([b / 2.5 for b in base])
    assert [i for i, k in calls if k == 2] == [1, 2, 0], "cheapest case first"
    assert choice.seconds == pytest.approx({"1": 0.7, "2": 0.7 / 1.8, "4": 0.7 / 2.5})


def test_a_small_advantage_keeps_one_thread(timed):
    timed(lambda i, k: 0.1 * (1.0 if k == 1 else 0.95))  # 5 % faster: within the noise of one call
    _, choice = pilot_with_thread_choice(quick_cases()[:2], verifier=verify, candidates=[1, 2])
    assert choice.threads == 1


def test_a_count_much_slower_on_the_cheapest_case_is_abandoned_there(timed):
    calls = timed(lambda i, k: [0.3, 0.05, 0.2][i] * (1.0 if k == 1 else 40.0))
    costs, choice = pilot_with_thread_choice(quick_cases()[:3], verifier=verify, candidates=[1, 2])
    assert choice.threads == 1 and choice.cases_timed == 1
    assert [c for c in calls if c[1] == 2] == [(1, 2)]
    assert costs == pytest.approx([0.3, 0.05, 0.2])


def test_a_single_candidate_is_timed_on_every_case():
    costs, choice = pilot_with_thread_choice(CASES, verifier=verify, candidates=[1])
    assert choice.threads == 1 and choice.cases_timed == len(CASES) and list(choice.seconds) == ["1"]
    assert choice.seconds["1"] == pytest.approx(sum(costs), rel=1e-3)


def test_a_crashing_sampler_is_charged_the_time_it_ran_before_the_crash():
    # An end-to-end engine that crashed in the pilot was timed by the fall-back's empty call
    # (1e-4 s), and the audit planned 160,000 calls of it.
    from specexact.audit.run.pilot import pilot_costs

    def slow_crash(ids, draft_probs, target_probs, generator=None):
        time.sleep(1.0)
        raise RuntimeError("planted crash")

    # the fall-back (the built-in verifier on a quick case) takes well under a second (0.45 s
    # measured under load): before the fix the cost was that
    (cost,) = pilot_costs([quick_cases()[0]], "cpu", slow_crash)
    assert cost >= 1.0
