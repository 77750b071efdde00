"""The fresh processes of an end-to-end case keep to the case's time (issue 35: vLLM's n-gram
audit ran 492 s on a 300 s budget, each crashing class's search one engine start of 20-150 s).
No further fresh process starts once what is left of the case's time is less than the
cheapest one so far took; the case's finding names the classes not searched. The processes are
simulated as in test_e2e_fresh_process.py, on a clock the test advances."""

import types

import pytest

from specexact.audit.cases.e2e import fresh_process
from specexact.audit.cases.e2e.catalog import e2e_cases
from specexact.audit.cases.e2e.fresh_process import continue_in_fresh_processes, run_e2e_fresh
from specexact.audit.cases.e2e.sampling import run_e2e_case
from specexact.decoders.engines.builtin import BuiltinEngine


class CrashesOnTopK(BuiltinEngine):
    """Raises on top-k requests; after a raise no engine loads again in its "process"."""

    name = "crashes_on_top_k"
    crashed = False

    def load(self, *args, **kwargs):
        if CrashesOnTopK.crashed:
            raise RuntimeError("cannot start a second engine in this process")
        return super().load(*args, **kwargs)

    def generate(self, requests, *, speculative):
        if any(r.params.top_k for r in requests):
            CrashesOnTopK.crashed = True
            raise RuntimeError("top-k is not supported")
        return super().generate(requests, speculative=speculative)


CASE = e2e_cases(CrashesOnTopK(), requests_per_class=8)[0]
TOP_K = [c for c, rc in enumerate(CASE.row_classes) if rc.params.top_k]
PROCESS_S = 10.0  # what each simulated fresh process takes on the test's clock


@pytest.fixture
def clock(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(fresh_process, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    CrashesOnTopK.crashed = False
    yield now
    CrashesOnTopK.crashed = False


def simulated_start(started, now, alpha):
    def start(work, time_budget_s):
        started.append(time_budget_s)
        now[0] += PROCESS_S  # the process's start and the engine's load
        audits, CrashesOnTopK.crashed = CrashesOnTopK.crashed, False
        try:
            return run_e2e_fresh(CASE, CrashesOnTopK(), work, false_fail_rate=alpha, num_batches=2)
        finally:
            CrashesOnTopK.crashed = audits
    return start


@pytest.mark.statistical(checks=0)  # exact: crashes and the search; no law is checked
def test_no_fresh_process_starts_that_the_cases_time_left_cannot_pay_for(clock, alpha):
    assert len(TOP_K) >= 3  # so that the search needs more processes than the time pays for
    first = run_e2e_case(CASE, CrashesOnTopK(), false_fail_rate=alpha, num_batches=2)
    assert first.fresh_process is not None
    first.wall_time_s = 1.0
    started = []
    res, processes = continue_in_fresh_processes(first, simulated_start(started, clock, alpha), time_budget_s=25.0)
    # 1 s spent, then 10 s and 10 s: 4 s left, less than a process took: no third one
    assert started == [24.0, 14.0]
    assert len(processes) == 3 and res.wall_time_s == pytest.approx(21.0)
    crashed = sorted(c for p in processes for c in p["crashing"])
    assert crashed == [CASE.class_id(c) for c in TOP_K[:2]]
    first_line = res.defect.splitlines()[0]
    assert "no further fresh process: what is left of the case's time (4.0 s of 25.0 s) is less than a fresh " \
           "process took (10.0 s at the least)" in first_line
    searched = {c for p in processes for c in p["searched"]}
    ran_alone = sorted(searched - set(crashed))
    assert ran_alone and len(searched) < len(CASE.row_classes)
    not_searched = sorted(CASE.class_id(c) for c in range(len(CASE.row_classes)))
    not_searched = [c for c in not_searched if c not in searched]
    assert "classes not searched: " + ", ".join(map(str, not_searched)) in first_line
    assert "classes that run alone, their laws not checked: " + ", ".join(map(str, ran_alone)) in first_line
    assert res.num_sequences == 0  # no law was checked: nothing is claimed for the classes not searched


@pytest.mark.statistical(checks=0)  # exact: the crash only
def test_before_any_fresh_process_the_engines_load_is_the_least_one_costs(clock, alpha):
    first = run_e2e_case(CASE, CrashesOnTopK(), false_fail_rate=alpha, num_batches=2)
    first.wall_time_s, first.phase_times_s["engine_load"] = 1.0, 5.0
    started = []
    res, processes = continue_in_fresh_processes(first, simulated_start(started, clock, alpha), time_budget_s=5.5)
    assert started == [] and [p["process"] for p in processes] == ["audit"]
    assert ("no further fresh process: what is left of the case's time (4.5 s of 5.5 s) is less than the "
            "engine's load took here (5.0 s)") in res.defect.splitlines()[0]
