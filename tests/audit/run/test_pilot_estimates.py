"""A case the pilot cannot load in the audit's process (another configuration ran there) is
estimated, planned and run in a fresh process, its laws checked (audit/run/pilot_estimates.py;
vLLM's n-gram audit, 2026-12-07 15:51: such cases were charged the call limit, left out, and
the audit checked no law)."""

import json
import sys
import textwrap

import pytest
import torch

from specexact.audit.cases.e2e.scenarios import draw_scenarios
from specexact.audit.run.pilot_estimates import FRESH_START_PRIOR_S, estimate_elsewhere
from specexact.cli import main

ONE_CONFIGURATION = '''
from specexact.decoders.engines.builtin import BuiltinEngine

LOADED = None  # the first configuration loaded in this process: no other loads here


class OneConfigurationPerProcess(BuiltinEngine):
    name = "one_configuration_per_process"

    def load(self, *args, **kwargs):
        global LOADED
        key = repr((args, sorted(kwargs.items())))
        if LOADED is not None and LOADED != key:
            raise RuntimeError("cannot start a second engine in this process")
        LOADED = key
        return super().load(*args, **kwargs)
'''

FIRST, SECOND = "e2e-llama-v64-draft_model-scenario-1", "e2e-llama-v64-draft_model-g2"


@pytest.fixture(autouse=True)
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_the_estimate_scales_the_slowest_timed_rate_and_counts_the_fresh_start():
    names = ["a", "b", "c", "d"]
    sizes = [100, 50, 400, 200]
    costs = [1.0, 2.0, 0.001, None]  # a: 0.01 s per slot, b: 0.04 (slowest), c crashed fast
    out = estimate_elsewhere(names, sizes, costs, [2.0, 5.0, 0.0, 0.0], elsewhere=[3], measured=[0, 1, 2],
                             crashed=[2])
    assert out[3]["seconds_per_call"] == pytest.approx(0.04 * 200)
    assert out[3]["start_s"] == pytest.approx(FRESH_START_PRIOR_S + 5.0)
    assert "estimated" in out[3]["how"] and "(b)" in out[3]["how"]
    # only a crashed call timed: its rate, and the text says so
    only = estimate_elsewhere(names, sizes, costs, [0.0] * 4, elsewhere=[3], measured=[2], crashed=[2])
    assert only[3]["seconds_per_call"] == pytest.approx(0.001 / 400 * 200) and "crashed" in only[3]["how"]
    # nothing timed: no estimate, and why
    none = estimate_elsewhere(names, sizes, costs, [0.0] * 4, elsewhere=[3], measured=[], crashed=[])
    assert none[3]["seconds_per_call"] is None and "not timed" in none[3]["how"]


def test_the_pilot_estimates_a_case_that_loads_only_in_a_fresh_process_never_the_call_limit():
    from specexact.audit.cases.e2e.catalog import e2e_cases
    from specexact.audit.cases.e2e.scenarios import scenario_case
    from specexact.audit.run.pilot import pilot_costs
    from specexact.audit.sampler.call_timeout import with_call_timeout
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
    details = {}
    limit = 300.0
    costs = pilot_costs(cases, verifier=with_call_timeout(engine, limit), details=details)
    assert costs[0] is not None and costs[1] is not None and costs[1] < limit  # the old pilot: the limit
    est = details["fresh_process"][cases[1].name]
    assert est["seconds_per_call"] == costs[1] and est["start_s"] >= FRESH_START_PRIOR_S
    # the first case's rate, scaled by the token slots per call
    slots = [c.requests_per_class * sum(len(rc.prompt) + rc.max_tokens for rc in c.row_classes) for c in cases]
    assert costs[1] == pytest.approx(costs[0] / slots[0] * slots[1])


@pytest.mark.statistical(checks=4)  # the audit's whole rate: alpha * 4, split over its checks and combined check
def test_a_case_that_loads_only_in_a_fresh_process_is_planned_run_and_its_laws_checked(tmp_path, monkeypatch,
                                                                                      alpha):
    (tmp_path / "one_config_mod.py").write_text(textwrap.dedent(ONE_CONFIGURATION))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "one_config_mod", raising=False)  # its flag is per process
    # The scenarios drawn before the audit's clock starts (cached per process; 2 s quiet, 11-15 s
    # at load 14): whether an earlier test of this worker drew them no longer decides what the
    # 25 s budget leaves for the cases. At 25 s the old pilot, which charged SECOND the 60 s
    # call limit, still leaves it out.
    draw_scenarios(0)
    out = tmp_path / "reports"
    code = main(["audit", "--engine", "one_config_mod:OneConfigurationPerProcess", "--method", "draft_model",
                 "--case", FIRST, "--case", SECOND, "--budget", "25", "--requests-per-class", "8",
                 "--threads", "1", "--call-timeout", "60", "--false-fail-rate", repr(alpha * 4), "--no-html",
                 "--no-journal", "--quiet", "--report-dir", str(out)])
    sys.modules.pop("one_config_mod", None)
    (path,) = out.glob("audit-*.json")
    report = json.loads(path.read_text())
    assert code == 0, (report["verdict"], report["findings"], report["plan"])
    assert not report["settings"].get("skipped_cases"), report["settings"].get("skipped_cases")
    cases = {c["name"]: c for c in report["cases"]}
    assert set(cases) == {FIRST, SECOND}, report["plan"]  # the old pilot charged SECOND 60 s a call: left out
    second = cases[SECOND]
    assert second["num_sequences"] > 0
    checks = {c["name"]: c for c in second["checks"]}
    assert checks["sequence_law[class 0]"]["passed"] and checks["sequence_law[class 0]"]["n"] > 0
    assert all(c["passed"] for c in second["checks"])
    # it ran whole in a fresh process
    assert any(p["process"] == "fresh" and p["whole_case"] for p in second["execution"]["processes"])
