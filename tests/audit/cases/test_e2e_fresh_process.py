"""An end-to-end case whose engine cannot be loaded again after a crash goes on in fresh
processes (audit/cases/e2e/fresh_process.py). The processes are simulated here: each "fresh
process" is a new engine with the process-wide flag cleared (the run room's real child
processes: tests/audit/run/test_fresh_processes.py)."""

import types

import pytest

from specexact.audit.cases.dispatch import checks_per_case
from specexact.audit.cases.e2e import fresh_process
from specexact.audit.cases.e2e.catalog import e2e_cases
from specexact.audit.cases.e2e.engine_call import FreshProcessWork
from specexact.audit.cases.e2e.fresh_process import continue_in_fresh_processes, run_e2e_fresh
from specexact.audit.cases.e2e.sampling import run_e2e_case
from specexact.decoders.engines.builtin import BuiltinEngine


class OneEnginePerProcess(BuiltinEngine):
    """Raises on top-k requests; after a raise no engine loads again in its "process"."""

    name = "one_engine_per_process"
    crashed = False  # the process's state (a class attribute: every instance shares it)

    def load(self, *args, **kwargs):
        if OneEnginePerProcess.crashed:
            raise RuntimeError("cannot start a second engine in this process")
        return super().load(*args, **kwargs)

    def generate(self, requests, *, speculative):
        if any(r.params.top_k for r in requests):
            OneEnginePerProcess.crashed = True
            raise RuntimeError("top-k is not supported")
        return super().generate(requests, speculative=speculative)


CASES = e2e_cases(OneEnginePerProcess(), requests_per_class=8)  # draft_model, draft_model_greedy
TOP_K = [c for c, rc in enumerate(CASES[0].row_classes) if rc.params.top_k]
OTHERS = [c for c, rc in enumerate(CASES[0].row_classes) if not rc.params.top_k]


def fresh_start(case, alpha, started):
    def start(work, time_budget_s):
        started.append(work)
        audits = OneEnginePerProcess.crashed
        OneEnginePerProcess.crashed = False  # a new process
        try:
            return run_e2e_fresh(case, OneEnginePerProcess(), work, false_fail_rate=alpha, num_batches=2)
        finally:
            OneEnginePerProcess.crashed = audits  # back in the audit's process
    return start


@pytest.fixture(autouse=True)
def new_process():
    OneEnginePerProcess.crashed = False
    yield
    OneEnginePerProcess.crashed = False


@pytest.mark.statistical(checks=sum(checks_per_case(c) for c in CASES))
def test_the_classes_that_do_not_crash_are_checked_and_a_later_case_runs_whole_in_a_fresh_process(alpha):
    assert CASES[0].method == "draft_model" and len(CASES) == 2
    engine = OneEnginePerProcess()
    first = run_e2e_case(CASES[0], engine, false_fail_rate=alpha, num_batches=2)
    work = first.fresh_process
    assert isinstance(work, FreshProcessWork) and not work.whole_case
    assert work.pending == tuple(range(len(CASES[0].row_classes))) and first.num_sequences == 0
    started = []
    res, processes = continue_in_fresh_processes(first, fresh_start(CASES[0], alpha, started))
    assert res.fresh_process is None
    # one process per crash of a class alone, then the one that checks the others
    assert len(started) == len(TOP_K) + 1 and [p["process"] for p in processes] == ["audit"] + ["fresh"] * len(started)
    assert sorted(c for p in processes for c in p["crashing"]) == TOP_K  # each searched once, never run again
    assert sorted(c for p in processes for c in p["searched"]) == list(range(len(CASES[0].row_classes)))
    assert [p["checked"] for p in processes if p["checked"]] == [OTHERS]
    assert res.num_sequences == 2 * 8 * len(OTHERS)
    failed = [c.name for c in res.checks if not c.passed]
    assert failed == ["defect"], failed
    assert {f"sequence_law[class {c}]" for c in OTHERS} <= {c.name for c in res.checks}
    first_line = res.defect.splitlines()[0]
    assert first_line.startswith("crash in speculative generate call 0: RuntimeError: top-k is not supported")
    assert "in fresh processes, alone, these crash: " + "; ".join(
        f"class {c} ({CASES[0].row_classes[c].describe()})" for c in TOP_K) in first_line
    assert res.checks[0].details["message"] == first_line  # the finding's message says it too

    # the audit's engine is still unloadable: the next case's load fails, and the whole case
    # runs in a fresh process; its own crash is its finding, not the failed load
    second = run_e2e_case(CASES[1], engine, false_fail_rate=alpha, num_batches=2)
    assert second.defect.startswith("crash in engine load (loading it again after an earlier call raised")
    assert second.fresh_process.whole_case
    started = []
    res2, processes2 = continue_in_fresh_processes(second, fresh_start(CASES[1], alpha, started))
    assert started[0].whole_case and processes2[1]["whole_case"]
    assert res2.defect.startswith("crash in speculative generate call 0: RuntimeError: top-k is not supported")
    assert res2.num_sequences == 2 * 8 * len(OTHERS)
    assert [c.name for c in res2.checks if not c.passed] == ["defect"]
    assert [p["checked"] for p in processes2 if p["checked"]] == [OTHERS]


@pytest.mark.statistical(checks=0)  # exact: crashes and failed loads, no class runs
def test_a_fresh_process_that_cannot_load_or_gives_no_result_ends_the_case_with_the_reason(alpha):
    case = CASES[0]
    first = run_e2e_case(case, OneEnginePerProcess(), false_fail_rate=alpha, num_batches=2)
    work = first.fresh_process

    def never_loads(w, time_budget_s):  # stays crashed: the fresh engine cannot load either
        return run_e2e_fresh(case, OneEnginePerProcess(), w, false_fail_rate=alpha, num_batches=2)

    res, processes = continue_in_fresh_processes(first, never_loads)
    assert len(processes) == 2 and res.num_sequences == 0
    assert "the engine could not be loaded in a fresh process either (RuntimeError: cannot start" in res.defect
    OneEnginePerProcess.crashed = False  # a new audit
    first = run_e2e_case(case, OneEnginePerProcess(), false_fail_rate=alpha, num_batches=2)
    assert first.fresh_process == work
    res, processes = continue_in_fresh_processes(first, lambda w, b: "crash: the process was killed by SIGSEGV")
    assert "a fresh process gave no result (crash: the process was killed by SIGSEGV)" in res.defect.splitlines()[0]
    assert processes[-1]["note"].startswith("crash:")


class OneConfigurationPerProcess(BuiltinEngine):
    """Loads one configuration per "process": a load of another one raises (vLLM once its
    n-gram proposer imported numba: scripts/replays/vllm_e2e_llvmlite_rebind.py), no call
    ever raises."""

    name = "one_configuration_per_process"
    loaded = None  # the process's state (a class attribute: every instance shares it)

    def load(self, target_dir, draft_dir, *, method, num_speculative_tokens, **kwargs):
        key = (method, num_speculative_tokens)
        if OneConfigurationPerProcess.loaded not in (None, key):
            raise AttributeError("'_lib_fn_wrapper' object has no attribute 'get'")
        OneConfigurationPerProcess.loaded = key
        return super().load(target_dir, draft_dir, method=method, num_speculative_tokens=num_speculative_tokens,
                            **kwargs)


CONFIG_CASES = e2e_cases(OneConfigurationPerProcess(), requests_per_class=8)  # two methods: two configurations


@pytest.mark.statistical(checks=sum(checks_per_case(c) for c in CONFIG_CASES[1:]))
def test_a_case_whose_configuration_cannot_load_after_another_runs_whole_in_a_fresh_process(alpha):
    # issue 35: the vLLM ngram audit's scenario cases had 0 sequences: each needs its own
    # configuration, and after the first none loads in the audit's process; on the old code
    # the failed load was the case's defect and nothing ran
    OneConfigurationPerProcess.loaded = None
    engine = OneConfigurationPerProcess()
    first = run_e2e_case(CONFIG_CASES[0], engine, false_fail_rate=alpha, num_batches=2)
    assert first.defect is None and first.fresh_process is None
    second = run_e2e_case(CONFIG_CASES[1], engine, false_fail_rate=alpha, num_batches=2)
    assert second.defect.startswith("crash in engine load (after another configuration was loaded in this process)")
    assert second.fresh_process is not None and second.fresh_process.whole_case and second.num_sequences == 0

    def fresh(work, time_budget_s):
        OneConfigurationPerProcess.loaded = None  # a new process
        try:
            return run_e2e_fresh(CONFIG_CASES[1], OneConfigurationPerProcess(), work, false_fail_rate=alpha,
                                 num_batches=2)
        finally:
            OneConfigurationPerProcess.loaded = CONFIG_CASES[0].method, CONFIG_CASES[0].num_draft_tokens

    res, processes = continue_in_fresh_processes(second, fresh)
    assert res.defect is None and res.fresh_process is None, res.defect
    assert res.num_sequences == 2 * CONFIG_CASES[1].batch_size and all(c.passed for c in res.checks)
    assert [p["process"] for p in processes] == ["audit", "fresh"] and processes[1]["whole_case"]
    OneConfigurationPerProcess.loaded = None


# The fresh processes keep to the case's time (issue 35: vLLM's n-gram audit ran 492 s on a
# 300 s budget, each crashing class's search one engine start of 20-150 s). No further fresh
# process starts once what is left of the case's time is less than the cheapest one so far
# took; the case's finding names the classes not searched. Simulated on a clock the test advances.

PROCESS_S = 10.0  # what each simulated fresh process takes on the test's clock


@pytest.fixture
def clock(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(fresh_process, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    return now


def simulated_start(started, now, alpha):
    def start(work, time_budget_s):
        started.append(time_budget_s)
        now[0] += PROCESS_S  # the process's start and the engine's load
        audits, OneEnginePerProcess.crashed = OneEnginePerProcess.crashed, False
        try:
            return run_e2e_fresh(CASES[0], OneEnginePerProcess(), work, false_fail_rate=alpha, num_batches=2)
        finally:
            OneEnginePerProcess.crashed = audits
    return start


@pytest.mark.statistical(checks=0)  # exact: crashes and the search; no law is checked
def test_no_fresh_process_starts_that_the_cases_time_left_cannot_pay_for(clock, alpha):
    assert len(TOP_K) >= 3  # so that the search needs more processes than the time pays for
    first = run_e2e_case(CASES[0], OneEnginePerProcess(), false_fail_rate=alpha, num_batches=2)
    assert first.fresh_process is not None
    first.wall_time_s = 1.0
    started = []
    res, processes = continue_in_fresh_processes(first, simulated_start(started, clock, alpha), time_budget_s=25.0)
    # 1 s spent, then 10 s and 10 s: 4 s left, less than a process took: no third one
    assert started == [24.0, 14.0]
    assert len(processes) == 3 and res.wall_time_s == pytest.approx(21.0)
    crashed = sorted(c for p in processes for c in p["crashing"])
    assert crashed == [CASES[0].class_id(c) for c in TOP_K[:2]]
    first_line = res.defect.splitlines()[0]
    assert "no further fresh process: what is left of the case's time (4.0 s of 25.0 s) is less than a fresh " \
           "process took (10.0 s at the least)" in first_line
    searched = {c for p in processes for c in p["searched"]}
    ran_alone = sorted(searched - set(crashed))
    assert ran_alone and len(searched) < len(CASES[0].row_classes)
    not_searched = sorted(CASES[0].class_id(c) for c in range(len(CASES[0].row_classes)))
    not_searched = [c for c in not_searched if c not in searched]
    assert "classes not searched: " + ", ".join(map(str, not_searched)) in first_line
    assert "classes that run alone, their laws not checked: " + ", ".join(map(str, ran_alone)) in first_line
    assert res.num_sequences == 0  # no law was checked: nothing is claimed for the classes not searched


@pytest.mark.statistical(checks=0)  # exact: the crash only
def test_before_any_fresh_process_the_engines_load_is_the_least_one_costs(clock, alpha):
    first = run_e2e_case(CASES[0], OneEnginePerProcess(), false_fail_rate=alpha, num_batches=2)
    first.wall_time_s, first.phase_times_s["engine_load"] = 1.0, 5.0
    started = []
    res, processes = continue_in_fresh_processes(first, simulated_start(started, clock, alpha), time_budget_s=5.5)
    assert started == [] and [p["process"] for p in processes] == ["audit"]
    assert ("no further fresh process: what is left of the case's time (4.5 s of 5.5 s) is less than the "
            "engine's load took here (5.0 s)") in res.defect.splitlines()[0]
