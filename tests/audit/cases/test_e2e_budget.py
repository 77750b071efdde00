"""An end-to-end case ends within its time: its calls stop before the next ones, the
reproducibility calls and the checks would pass it (audit/cases/e2e/sampling.py)."""

import time
from types import SimpleNamespace

import pytest
import torch

import specexact.audit.cases.e2e.sampling as sampling
from specexact.audit.cases.e2e.catalog import e2e_cases
from specexact.audit.cases.e2e.engine_call import ensure_loaded
from specexact.audit.cases.e2e.laws import class_laws
from specexact.audit.cases.e2e.sampling import run_e2e_case
from specexact.decoders.engines.builtin import BuiltinEngine

DELAY_S = 0.6  # each generate call's simulated seconds (16 requests at one thread besides)


class Clock:
    """The case's clock, independent of the machine's load (the wall clock failed this test at
    load 12-20: 8.83 s against 8.8 s): this thread's CPU seconds plus the seconds the engine
    simulates. The case times its calls and its checks on it, as it does on the wall clock."""

    def __init__(self):
        self.simulated = 0.0

    def perf_counter(self) -> float:
        return time.thread_time() + self.simulated


class Slow(BuiltinEngine):
    """The built-in engine (correct), each generate call 0.6 s slower on ``clock``, as a large
    engine's is."""

    name = "slow"

    def __init__(self, clock: Clock):
        super().__init__()
        self.clock = clock

    def generate(self, requests, *, speculative):
        self.clock.simulated += DELAY_S
        return super().generate(requests, speculative=speculative)


@pytest.mark.statistical(checks=3 * 8 + 1 + 6 + 1)  # and independent_requests (the other seed and logprob checks are exact)
def test_a_budgeted_case_ends_within_its_time_reproducibility_calls_and_checks_included(alpha, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(sampling, "time", SimpleNamespace(perf_counter=clock.perf_counter))
    engine = Slow(clock)
    case = e2e_cases(engine, "draft_model", requests_per_class=2)[0]
    ensure_loaded(engine, case)
    for c in range(len(case.row_classes)):  # the laws (cached per process) as an earlier case left them
        class_laws(case, c, engine.capabilities())
    budget = 8.0
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        t0 = clock.perf_counter()
        result = run_e2e_case(case, engine, false_fail_rate=alpha, time_budget_s=budget)
        took = clock.perf_counter() - t0
    finally:
        torch.set_num_threads(threads)
    assert result.defect is None and result.num_batches >= 2 and result.num_batches % 2 == 0
    # within the case's time plus the 10 % an audit's budget allows: each call pair takes
    # >= 1.2 s, so a case that stops only once its time is spent (then makes the
    # reproducibility pair and runs its checks) ends at least 1.2 s late
    assert took <= 1.1 * budget, (took, result.num_batches, result.phase_times_s)
    assert result.phase_times_s["laws"] < 0.5 * DELAY_S  # cached: the checks' remaining cost was predicted

