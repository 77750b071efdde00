"""An engine that cannot start again in a process after a crash (vLLM after numba) goes on in
fresh processes (audit/run/cases_stage.py, audit/run/isolation.py: run_e2e_isolated), and the
audit checks the laws of the classes that do not crash."""

import json
import sys
import textwrap

import pytest
import torch

from specexact.audit.cases.dispatch import checks_per_case
from specexact.audit.cases.e2e.catalog import e2e_cases
from specexact.cli import main
from specexact.decoders.engines.builtin import BuiltinEngine

CASE = e2e_cases(BuiltinEngine(), "draft_model", requests_per_class=8)[0]
TOP_K = [CASE.class_id(c) for c, rc in enumerate(CASE.row_classes) if rc.params.top_k]
OTHERS = [CASE.class_id(c) for c, rc in enumerate(CASE.row_classes) if not rc.params.top_k]
CHECKS = checks_per_case(CASE)

LOADS_ONCE = '''
from specexact.decoders.engines.builtin import BuiltinEngine

CRASHED = False  # one crash, and no engine starts again in this process (vLLM after numba)


class TopKCrashesTheProcess(BuiltinEngine):
    name = "top_k_crashes_the_process"

    def crashes(self, params):
        return bool(params.top_k)

    def load(self, *args, **kwargs):
        if CRASHED:
            raise RuntimeError("cannot start a second engine in this process")
        return super().load(*args, **kwargs)

    def generate(self, requests, *, speculative):
        global CRASHED
        if any(self.crashes(r.params) for r in requests):
            CRASHED = True
            raise RuntimeError("top-k is not supported")
        return super().generate(requests, speculative=speculative)


class CoolTopKCrashesTheProcess(TopKCrashesTheProcess):
    name = "cool_top_k_crashes_the_process"  # one class of the case crashes (top-k below T = 1)

    def crashes(self, params):
        return bool(params.top_k) and params.temperature < 1.0
'''
COOL_TOP_K = [CASE.class_id(c) for c, rc in enumerate(CASE.row_classes) if rc.params.top_k and rc.params.temperature < 1]
NOT_COOL_TOP_K = sorted(c for c in TOP_K + OTHERS if c not in COOL_TOP_K)


@pytest.fixture(autouse=True)
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.statistical(checks=CHECKS)  # the audit's rate: CHECKS * alpha, its checks and combined check within it
def test_an_engine_that_cannot_start_again_goes_on_in_fresh_processes_with_the_classes_that_do_not_crash(
        tmp_path, monkeypatch, alpha):
    assert TOP_K and OTHERS
    (tmp_path / "loads_once_mod.py").write_text(textwrap.dedent(LOADS_ONCE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "loads_once_mod", raising=False)  # its flag is per process
    out = tmp_path / "reports"
    code = main(["audit", "--engine", "loads_once_mod:TopKCrashesTheProcess", "--method", "draft_model",
                 "--case", "e2e-llama-v64-draft_model-g2", "--batches", "2", "--requests-per-class", "8", "--threads", "1", "--false-fail-rate",
                 repr(alpha * CHECKS), "--no-html", "--no-journal", "--quiet", "--report-dir", str(out)])
    sys.modules.pop("loads_once_mod", None)
    assert code == 1
    (path,) = out.glob("audit-*.json")
    report = json.loads(path.read_text())
    (case,) = report["cases"]
    assert case["num_sequences"] == 2 * 8 * len(OTHERS), case["num_sequences"]  # 0 when the audit stopped at the crash
    # the crash is the one finding, with its replay, and names every top-k class found crashing alone
    (finding,) = report["findings"]
    assert finding["tier"] == "defect", finding
    message = finding["message"]
    assert message.startswith("crash in speculative generate call 0: RuntimeError: top-k is not supported"), message
    assert "could not be loaded again after a crash (RuntimeError: cannot start a second engine" in message
    assert all(f"class {c} (" in message.split("in fresh processes")[1] for c in TOP_K), message
    assert f"the case went on with classes {', '.join(map(str, OTHERS))} in a fresh process" in message, message
    assert finding["reproduction"]["command"].startswith("specexact audit --engine loads_once_mod:TopKCrashesTheProcess")
    # the other classes' laws were checked, on sequences, and pass; no top-k class ran again
    checks = {c["name"]: c for c in case["checks"]}
    for c in OTHERS:
        for name in ("sequence_law", "plain_sequence_law", "sequences_vs_plain"):
            assert checks[f"{name}[class {c}]"]["passed"] and checks[f"{name}[class {c}]"]["n"] > 0
    assert checks["reproducible"]["passed"]
    assert not any(f"[class {c}]" in name for c in TOP_K for name in checks)
    assert [c["name"] for c in case["checks"] if not c["passed"]] == ["defect"]
    # what ran where: the crash in the audit's process, then fresh ones: each top-k class
    # crashed alone once, and one process checked the other classes
    processes = case["execution"]["processes"]
    assert processes[0]["process"] == "audit" and "cannot start a second engine" in processes[0]["note"]
    fresh = processes[1:]
    assert fresh and all(p["process"] == "fresh" for p in fresh)
    crashed = [c for p in fresh for c in p["crashing"]]
    assert sorted(crashed) == TOP_K  # each once: none searched or run again
    assert [p["checked"] for p in fresh if p["checked"]] == [OTHERS]
    assert not any(c in TOP_K for p in fresh for c in p["checked"])
    md = path.with_suffix(".md").read_text()
    assert "Where a case ran" in md and f"laws of classes {', '.join(map(str, OTHERS))} checked" in md, md


@pytest.mark.statistical(checks=CHECKS)
def test_a_crash_in_the_budgeted_pilot_still_leads_the_case_to_fresh_processes(tmp_path, monkeypatch, alpha):
    """vLLM's n-gram audit: the pilot's probe (the engine itself) crashed, the case's load
    (through --call-timeout's limit) then failed without knowing of the crash: 0 sequences.
    One class crashes (three fresh processes: the whole case, the search up to it, the laws of
    the rest), so that the case's share of a 50 s budget pays for them at a load where a
    fresh process takes 11 s (load 13); the fresh processes keep to the case's time."""
    assert len(COOL_TOP_K) == 1
    (tmp_path / "loads_once_pilot.py").write_text(textwrap.dedent(LOADS_ONCE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "loads_once_pilot", raising=False)
    out = tmp_path / "reports"
    code = main(["audit", "--engine", "loads_once_pilot:CoolTopKCrashesTheProcess", "--method", "draft_model",
                 "--case", "e2e-llama-v64-draft_model-g2", "--budget", "50", "--requests-per-class", "8", "--threads", "1", "--call-timeout", "60",
                 "--false-fail-rate", repr(alpha * CHECKS), "--no-html", "--no-journal", "--quiet",
                 "--report-dir", str(out)])
    sys.modules.pop("loads_once_pilot", None)
    assert code == 1
    (path,) = out.glob("audit-*.json")
    report = json.loads(path.read_text())
    (case,) = report["cases"]
    assert case["num_sequences"] > 0 and case["num_sequences"] % (8 * len(NOT_COOL_TOP_K)) == 0, case["num_sequences"]
    checks = {c["name"]: c for c in case["checks"]}
    for c in NOT_COOL_TOP_K:  # the laws of the classes that do not crash, checked in a fresh process
        assert checks[f"sequence_law[class {c}]"]["passed"] and checks[f"sequence_law[class {c}]"]["n"] > 0
    fresh = [p for p in case["execution"]["processes"] if p["process"] == "fresh"]
    assert len(fresh) == 3 and [c for p in fresh for c in p["crashing"]] == COOL_TOP_K, fresh
    (finding,) = report["findings"]
    assert finding["tier"] == "defect" and "top-k is not supported" in finding["message"], finding
