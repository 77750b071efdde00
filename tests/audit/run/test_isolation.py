"""--isolate: a sampler that hangs or kills its own process becomes a finding; the audit goes on."""

import json
from pathlib import Path

import pytest
import torch

from specexact.audit import quick_cases, run_audit
from specexact.audit.checks.decisions_checks import DECISION_CHECKS
from specexact.audit.run.isolation import run_case_isolated
from specexact.cli import main
from specexact.reports import validate_report

HERE = Path(__file__).parents[1]  # tests/audit: the faulty samplers


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread here and in the processes the test starts (they copy this count):
    on a busy machine more threads wait for each other and a decoder call's time varies
    a hundredfold. Under pytest-xdist the workers already use one."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def faulty(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))


def cases(*names):
    return [c for c in quick_cases() if c.name in names]


def isolated_audit(tmp_path, case, timeout_s):
    code = main(["audit", "--quick", "--case", case, "--batches", "2", "--no-fuzz",
                 "--sampler", "faulty_samplers:hang_on_v8_segfault_on_v12", "--isolate", "--case-timeout",
                 str(timeout_s), "--report-dir", str(tmp_path), "--quiet", "--no-html"])
    report = json.loads(next(tmp_path.glob("audit-*.json")).read_text())
    validate_report(report)
    assert (tmp_path / next(tmp_path.glob("audit-*.json")).with_suffix(".md").name).exists()
    (finding,) = report["findings"]
    assert finding["case"] == case and finding["check"] == "defect" and finding["pvalue"] == 0
    assert "--isolate" in finding["reproduction"]["command"]
    assert [c["verdict"] for c in report["cases"]] == ["fail"]
    assert all(c["execution"]["isolated"] for c in report["cases"])
    return code, finding


# Two audits, not one with both cases: the case timeout counts the child's start-up, so on a
# loaded machine a short timeout could end the crashing case before it crashed (issue 21).
# The hang is timed out whatever the load; the crash gets a timeout it never needs.
def test_hang_is_recorded_as_a_timeout_finding(tmp_path, faulty):
    code, finding = isolated_audit(tmp_path, "v8-plain", 5)  # v8-plain hangs forever
    assert code == 1
    assert finding["kind"] == "timeout" and "5 s" in finding["message"]


def test_segfault_is_recorded_as_a_crash_finding(tmp_path, faulty):
    code, finding = isolated_audit(tmp_path, "v12-eos-cut", 600)  # v12-eos-cut: SIGSEGV
    assert code == 1
    assert finding["kind"] == "crash" and "SIGSEGV" in finding["message"]
    # faulthandler's Python stack of the crashing process is kept for the reader
    assert "Fatal Python error" in finding["defect"]


def test_abort_is_a_finding_and_the_next_case_still_runs(faulty):
    report = run_audit(None, sampler_name="faulty_samplers:abort_on_v8", sampler_target="faulty_samplers:abort_on_v8",
                       cases=cases("v8-plain", "v12-eos-cut"), num_batches=2, budget_s=None, isolate=True,
                       case_timeout_s=60)
    validate_report(report)
    v8, v12 = report["cases"]
    assert v8["verdict"] == "fail" and "SIGABRT" in v8["defect"]
    assert [f["kind"] for f in report["findings"] if f["case"] == "v8-plain"] == ["crash"]
    # the audit went on: v12-eos-cut ran its 8 + 6 checks on 2 calls in its own process
    assert v12["defect"] is None and len(v12["checks"]) == 8 + DECISION_CHECKS and v12["num_batches"] == 2


def test_isolated_case_gives_the_same_result_as_in_process(faulty):
    from specexact.audit import run_case
    from specexact.decoders import verify

    case = cases("v12-eos-cut")[0]
    res, sampling = run_case_isolated(case, "builtin", false_fail_rate=1e-7, seed=3, num_batches=2, timeout_s=60)
    ref = run_case(case, verify, false_fail_rate=1e-7, seed=3, num_batches=2)
    assert res.defect is None, res.defect
    assert sampling is not None and sampling > 0
    assert [(c.name, c.n, c.pvalue) for c in res.checks] == [(c.name, c.n, c.pvalue) for c in ref.checks]
    assert [c.to_dict() for c in res.checks] == [c.to_dict() for c in ref.checks]
    assert res.num_sequences == ref.num_sequences and res.seed == ref.seed


def test_timeout_must_be_positive():
    with pytest.raises(ValueError):
        run_case_isolated(quick_cases()[0], "builtin", false_fail_rate=1e-7, num_batches=2, timeout_s=0)
