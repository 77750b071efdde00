"""The pilot's calls are probes, bounded, and never a finding (audit/run/pilot.py)."""

import json
import textwrap
import time

import pytest
import torch

from specexact.audit import quick_cases
from specexact.audit.run.pilot import THREAD_ABANDON, pilot_with_thread_choice
from specexact.audit.sampler.call_timeout import with_call_timeout
from specexact.cli import main
from specexact.decoders import verify

CASES = [c for c in quick_cases() if c.name in ("v8-plain", "v12-eos-cut")]


pytestmark = pytest.mark.usefixtures("restore_threads")


def stalls_when_threaded(ids, draft_probs, target_probs, generator=None):
    """Correct, but a call at more than one thread stalls for 3 s (a loaded machine)."""
    if torch.get_num_threads() > 1:
        time.sleep(3.0)
    return verify(ids, draft_probs, target_probs, generator)


def test_a_slow_probe_is_cut_off_at_the_factor_and_the_sampler_is_not_marked_hung():
    timed = with_call_timeout(stalls_when_threaded, 1.0)
    t0 = time.perf_counter()
    costs, choice = pilot_with_thread_choice(CASES, verifier=timed, candidates=[1, 2])
    took = time.perf_counter() - t0
    assert choice.threads == 1 and torch.get_num_threads() == 1
    assert choice.cases_timed == 1 and choice.seconds["2"] >= THREAD_ABANDON * choice.seconds["1"] - 2e-6  # rounded to 1e-6
    # cut off at 2x one thread's time, then waited for at most the 1 s limit: never the 3 s stall
    assert took < 3.0, took
    # the audit's own wrapper was never the one that timed out: its calls still run
    out = timed(*_verify_inputs())
    assert out.shape[0] == 2


def test_the_candidates_probes_stop_when_their_share_of_the_budget_is_spent():
    calls = []

    def counts_threads(ids, draft_probs, target_probs, generator=None):
        calls.append(torch.get_num_threads())
        if torch.get_num_threads() > 1:
            time.sleep(0.2)
        return verify(ids, draft_probs, target_probs, generator)

    _, choice = pilot_with_thread_choice(CASES, verifier=counts_threads, candidates=[1, 2, 3], probe_budget_s=0.0)
    assert set(calls) == {1} and choice.threads == 1 and set(choice.seconds) == {"1"}


def test_a_candidate_that_cannot_reach_its_cut_off_within_the_probes_time_is_not_started():
    """A probe cut off by the probes' time rather than by its slowness would still be waited
    for (the engine's state belongs to it) and tell nothing: it is not started."""
    calls = []

    def slow(ids, draft_probs, target_probs, generator=None):
        calls.append(torch.get_num_threads())
        time.sleep(0.3)  # one thread's call: 0.3 s, so a candidate's probe may run to 0.6 s
        return verify(ids, draft_probs, target_probs, generator)

    _, choice = pilot_with_thread_choice(CASES[:1], verifier=slow, candidates=[1, 2], probe_budget_s=1.0)
    assert set(calls) == {1} and set(choice.seconds) == {"1"} and choice.threads == 1
    calls.clear()
    _, choice = pilot_with_thread_choice(CASES[:1], verifier=slow, candidates=[1, 2], probe_budget_s=600.0)
    # with the time for it (ample at any load: the probes take what they need, not the budget), it is tried
    assert 2 in calls and set(choice.seconds) == {"1", "2"}


def _verify_inputs():
    g = torch.Generator().manual_seed(0)
    q = torch.softmax(torch.randn(2, 1, 4, generator=g), -1)
    p = torch.softmax(torch.randn(2, 2, 4, generator=g), -1)
    return torch.zeros(2, 1, dtype=torch.int64), q, p, g


@pytest.mark.statistical(checks=0)  # the audit's checks are not asserted on, only its verdict and defects
def test_an_engine_slow_at_two_threads_passes_a_budgeted_audit_with_a_short_call_timeout(tmp_path, monkeypatch):
    """The case of the issue: a correct engine whose two-thread calls take far longer under
    load had its pilot probe judged a hang (verdict fail, 0 sequences)."""
    (tmp_path / "slowmod.py").write_text(textwrap.dedent('''
        import time
        import torch
        from specexact.decoders.engines.builtin import BuiltinEngine

        class SlowWhenThreaded(BuiltinEngine):
            name = "slow-when-threaded"

            def generate(self, requests, *, speculative):
                if torch.get_num_threads() > 1:
                    time.sleep(120.0)  # a call at two threads never ends within the test
                return super().generate(requests, speculative=speculative)
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    torch.set_num_threads(2)
    out = tmp_path / "reports"
    code = main(["audit", "--engine", "slowmod:SlowWhenThreaded", "--method", "draft_model", "--requests-per-class",
                 "8", "--case", "e2e-llama-v64-draft_model-g2", "--budget", "12", "--call-timeout", "6", "--report-dir", str(out), "--no-html", "--no-journal",
                 "--quiet"])
    (path,) = out.glob("audit-*.json")
    report = json.loads(path.read_text())
    assert [f for f in report["findings"] if f["tier"] == "defect"] == []
    assert report["settings"]["threads"]["threads"] == 1
    assert code == 0 and report["verdict"] == "pass" and report["num_sequences"] > 0


def test_a_limited_call_runs_at_the_callers_thread_count_whatever_a_straggler_wrote():
    """A probe abandoned at two threads that ends later writes its count back process-wide
    (decoders.models.one_cpu_thread restores the count it read); the audit's calls keep the
    caller's count (call_timeout.carry_threads)."""
    import threading

    torch.set_num_threads(1)
    seen = []

    def records_threads(ids, draft_probs, target_probs, generator=None):
        seen.append(torch.get_num_threads())
        return verify(ids, draft_probs, target_probs, generator)

    def straggler():
        torch.set_num_threads(2)  # what a call that read two threads writes back when it ends

    th = threading.Thread(target=straggler)
    th.start()
    th.join()
    with_call_timeout(records_threads, 5.0)(*_verify_inputs())
    assert seen == [1] and torch.get_num_threads() == 1


def test_the_pilot_stops_timing_cases_once_its_share_is_spent_and_says_so():
    """On a busy machine one call of an engine's case took 15 s: timing every case spent half
    of a 60 s budget before any sampling. Past its share the pilot times no further case."""
    from specexact.audit.run.pilot import pilot_costs

    def slow(ids, draft_probs, target_probs, generator=None):
        time.sleep(0.15)  # the first case's calls alone pass the 0.1 s share
        return verify(ids, draft_probs, target_probs, generator)

    costs = pilot_costs(CASES, verifier=slow, time_s=0.1)
    assert costs[0] is not None and costs[1:] == [None] * (len(CASES) - 1)
    costs, choice = pilot_with_thread_choice(CASES, verifier=slow, candidates=[1], time_s=0.1)
    assert costs[0] is not None and costs[1:] == [None] * (len(CASES) - 1) and choice.cases_timed == 1
    assert all(c is not None for c in pilot_costs(CASES, verifier=slow))  # no share: every case


@pytest.mark.statistical(checks=16)
def test_a_case_the_pilot_did_not_time_is_left_out_with_the_reason(alpha):
    from specexact.audit import run_audit

    def slow(ids, draft_probs, target_probs, generator=None):
        time.sleep(0.3)
        return verify(ids, draft_probs, target_probs, generator)

    # a 2 s budget: the pilot's share (0.5 s) is spent on the first case
    report = run_audit(slow, cases=CASES, budget_s=2.0, false_fail_rate=alpha * 16, threads=1)
    (left_out,) = [s for s in report["settings"]["skipped_cases"] if s["case"] == CASES[1].name]
    assert left_out["kind"] == "budget" and "not timed" in left_out["reason"] and "pilot" in left_out["reason"]
    assert [c["name"] for c in report["cases"]] == [CASES[0].name]


def test_the_pilot_times_each_end_to_end_case_on_its_own_engine_configuration():
    """Fails on the old pilot: it prepared (loaded the engine for) every case first and then
    timed every case's call on the last one's configuration (the long case's γ = 4 for a
    γ = 1 scenario), and the loads of cases it never timed spent its share (vLLM, 300 s
    audit, 2026-12-07: only the first scenario was timed)."""
    from specexact.audit.cases.e2e.catalog import e2e_cases
    from specexact.audit.cases.e2e.scenarios import scenario_case
    from specexact.audit.run.pilot import pilot_costs
    from specexact.decoders.engines.builtin import BuiltinEngine
    from specexact.strategies import RequestShape, Scenario

    class RecordingEngine(BuiltinEngine):
        def __init__(self):
            super().__init__()
            self.log = []

        def load(self, target_dir, draft_dir, *, method, num_speculative_tokens):
            self.log.append(("load", num_speculative_tokens))
            super().load(target_dir, draft_dir, method=method, num_speculative_tokens=num_speculative_tokens)

        def generate(self, requests, *, speculative):
            self.log.append(("generate", self.num_speculative_tokens, len(requests)))
            return super().generate(requests, speculative=speculative)

    engine = RecordingEngine()
    small = Scenario(gamma=4, seed=0, shapes=(RequestShape(prompt_len=3, prompt_seed=1, max_tokens=2),))
    cases = [e2e_cases(engine, "draft_model", requests_per_class=2)[0],  # γ = 2, 16 requests
             scenario_case(engine, small, requests_per_class=3)]  # γ = 4, 3 requests
    costs = pilot_costs(cases, verifier=engine)
    assert all(c is not None for c in costs)
    gens = [e for e in engine.log if e[0] == "generate"]
    sizes = {len(c.requests(1, 0)): c.num_speculative_tokens for c in cases}
    assert sizes and all(g[1] == sizes[g[2]] for g in gens if g[2] in sizes), engine.log
    assert [e for e in engine.log if e[0] == "load"][:2] == [("load", 2), ("load", 4)], engine.log
    # the old pilot's loads: both configurations first, then every call at γ = 4

    # a share spent on the first case: the second is neither timed nor loaded
    engine.log.clear()
    assert pilot_costs(cases, verifier=engine, time_s=1e-9)[1] is None
    assert ("load", 4) not in engine.log, engine.log


def test_an_engine_that_cannot_load_a_cases_configuration_is_not_an_error_of_the_pilot():
    """vLLM cannot start another engine once its n-gram proposer imported numba: the pilot,
    which now loads each case's configuration before timing it, stopped the audit with an
    internal error (tox -e vllm-e2e's ngram audit, 2026-12-07). The case is estimated from the
    case timed (it loads only in a fresh process: tests/audit/run/test_pilot_estimates.py) and
    its own run meets the load."""
    from specexact.audit.cases.e2e.catalog import e2e_cases
    from specexact.audit.cases.e2e.scenarios import scenario_case
    from specexact.audit.run.pilot import pilot_costs
    from specexact.decoders.engines.builtin import BuiltinEngine
    from specexact.strategies import RequestShape, Scenario

    class OneConfigurationEngine(BuiltinEngine):
        def load(self, target_dir, draft_dir, *, method, num_speculative_tokens):
            if num_speculative_tokens != 2:
                raise AttributeError("'_lib_fn_wrapper' object has no attribute 'get'")
            super().load(target_dir, draft_dir, method=method, num_speculative_tokens=num_speculative_tokens)

    engine = OneConfigurationEngine()
    small = Scenario(gamma=4, seed=0, shapes=(RequestShape(prompt_len=3, prompt_seed=1, max_tokens=2),))
    cases = [e2e_cases(engine, "draft_model", requests_per_class=2)[0], scenario_case(engine, small, requests_per_class=3)]
    costs = pilot_costs(cases, verifier=engine)
    assert costs[0] is not None and costs[1] is not None
    # the failed load closed the engine: the first case's run loads it again (it did not, and
    # reported "generate called before load()" as the engine's defect)
    from specexact.audit import run_case

    result = run_case(cases[0], engine, false_fail_rate=1e-3, seed=0, num_batches=2)
    assert result.defect is None, result.defect


LOAD_RAISES_AT_K2 = '''
from specexact.decoders.engines.builtin import BuiltinEngine


class K2Raises(BuiltinEngine):
    name = "k2_raises"  # cannot load the gamma = 2 configuration; the long case's gamma = 4 loads

    def load(self, *args, num_speculative_tokens, **kwargs):
        if num_speculative_tokens == 2:
            raise RuntimeError("cannot load gamma = 2")
        return super().load(*args, num_speculative_tokens=num_speculative_tokens, **kwargs)
'''


@pytest.mark.statistical(checks=0)  # the verdict asserted is the load's defect
def test_a_case_whose_load_raised_in_the_pilot_is_run_and_found_not_left_out_for_the_budget(tmp_path, monkeypatch):
    """The pilot priced a case whose probe load raised at the call limit (300 s), the plan left
    it out "for the budget", and the audit passed with the load's error nowhere (a new user's
    review, 2026-12-08): it costs its load's time and its run meets the raise."""
    (tmp_path / "k2mod.py").write_text(textwrap.dedent(LOAD_RAISES_AT_K2))
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "reports"
    code = main(["audit", "--engine", "k2mod:K2Raises", "--method", "draft_model", "--requests-per-class", "8",
                 "--case", "e2e-llama-v64-draft_model-g2", "--case", "e2e-llama-v64-draft_model-long-g4",
                 "--budget", "20", "--threads", "1", "--no-html", "--no-journal", "--quiet", "--report-dir", str(out)])
    assert code == 1
    report = json.loads(next(out.glob("audit-*.json")).read_text())
    cases = {c["case"] if "case" in c else c["name"]: c for c in report["cases"]}
    g2 = cases["e2e-llama-v64-draft_model-g2"]
    assert "cannot load gamma = 2" in (g2.get("defect") or ""), g2
    assert any("cannot load gamma = 2" in f["message"] for f in report["findings"])
