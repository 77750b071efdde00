"""Resume: finished cases are journaled durably; a SIGKILLed audit resumes without losing one."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from specexact.audit.journal import Journal, journal_path
from specexact.cli import main

HERE = Path(__file__).parent
SAMPLER = "faulty_samplers:stall_on_v12_if_asked"
ARGS = ["audit", "--quick", "--case", "v8-plain", "--case", "v12-eos-cut", "--batches", "2",
        "--sampler", SAMPLER, "--quiet", "--no-html", "--no-fuzz"]


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread here and in the processes the test starts (they copy this count):
    on a busy machine more threads wait for each other and a decoder call's time varies
    a hundredfold. Under pytest-xdist the workers already use one."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def journal_cases(folder: Path) -> list[dict]:
    out = []
    for path in folder.glob(".journal/*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("type") == "case":
                out.append(rec)
    return out


def comparable(report: dict) -> list[tuple]:
    return [(c["case"], c["name"], c["n"], c["pvalue"], c["statistic"], c["passed"], c["false_fail_rate"])
            for c in report["checks"]]


def test_sigkill_mid_audit_then_resume_loses_no_finished_case(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    run_dir = tmp_path / "run"
    env = {**os.environ, "SPECEXACT_TEST_STALL": "1", "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path]),
           # same torch thread count as this process, so the floats (and samples) agree
           "OMP_NUM_THREADS": str(torch.get_num_threads())}
    proc = subprocess.Popen([sys.executable, "-m", "specexact", *ARGS, "--report-dir", str(run_dir)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not journal_cases(run_dir):  # v8-plain finished; the audit now stalls in v12-eos-cut
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "the first case never reached the journal"
            time.sleep(0.05)
        time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not list(run_dir.glob("audit-*.json")), "a killed audit wrote no report"
    (finished,) = journal_cases(run_dir)
    assert finished["name"] == "v8-plain"

    # Restart with the same arguments (the sampler no longer stalls): it resumes.
    code = main([*ARGS, "--report-dir", str(run_dir)])
    assert code in (0, 1)
    resumed = json.loads(next(run_dir.glob("audit-*.json")).read_text())
    assert resumed["resumed_cases"] == ["v8-plain"]
    v8 = resumed["cases"][0]
    assert v8["execution"]["resumed"] and v8["checks"] == finished["result"]["checks"]
    assert v8["wall_time_s"] == finished["result"]["wall_time_s"]  # taken from the journal, not rerun
    assert not list(run_dir.glob(".journal/*.jsonl")), "the journal is removed once the report is written"

    # An uninterrupted run of the same audit gives the same verdicts and the same numbers.
    code_ref = main([*ARGS, "--report-dir", str(tmp_path / "ref"), "--no-journal"])
    reference = json.loads(next((tmp_path / "ref").glob("audit-*.json")).read_text())
    assert code_ref == code
    assert resumed["verdict"] == reference["verdict"]
    assert [c["verdict"] for c in resumed["cases"]] == [c["verdict"] for c in reference["cases"]]
    assert comparable(resumed) == comparable(reference)
    assert resumed["settings"]["audit_key"] == reference["settings"]["audit_key"]


def test_torn_last_line_is_cut_and_appending_goes_on(tmp_path):
    path = journal_path(tmp_path, "k")
    j, state = Journal.open(path, "k", {"started_at": "2026-01-01T00:00:00+00:00"})
    assert state.cases == {} and state.header["key"] == "k"
    j.append_case("a", {"x": 1})
    with open(path, "a") as fh:
        fh.write('{"type": "case", "name": "b", "res')  # killed in the middle of a write
    j2, state2 = Journal.open(path, "k", lambda: pytest.fail("must not write a new header"))
    assert list(state2.cases) == ["a"] and state2.torn_bytes > 0
    j2.append_case("c", {"x": 3})
    j3, state3 = Journal.open(path, "k", {})
    assert list(state3.cases) == ["a", "c"] and state3.torn_bytes == 0
    assert state3.header["started_at"] == "2026-01-01T00:00:00+00:00"


def test_other_arguments_or_fresh_start_over(tmp_path):
    path = journal_path(tmp_path, "k1")
    j, _ = Journal.open(path, "k1", {})
    j.append_case("a", {})
    _, other = Journal.open(path, "k2", {})  # same file, other key: replaced
    assert other.cases == {}
    j, _ = Journal.open(path, "k2", {})
    j.append_case("a", {})
    _, fresh = Journal.open(path, "k2", {}, fresh=True)
    assert fresh.cases == {}


@pytest.mark.parametrize("change", [["--seed", "1"], ["--batches", "4"], ["--false-fail-rate", "1e-5"],
                                    ["--case", "v6-trunc-penalties"]])
def test_journal_key_depends_on_the_arguments(change):
    from specexact.audit import audit_key, quick_cases

    def key(args):
        seed = int(args[args.index("--seed") + 1]) if "--seed" in args else 0
        nb = int(args[args.index("--batches") + 1]) if "--batches" in args else 2
        rate = float(args[args.index("--false-fail-rate") + 1]) if "--false-fail-rate" in args else 1e-6
        names = ["v8-plain"] + (["v6-trunc-penalties"] if "v6-trunc-penalties" in args else [])
        cases = [c for c in quick_cases() if c.name in names]
        return audit_key(sampler_name="builtin", sampler_target="t", seed=seed, cases=cases, budget_s=None,
                         num_batches=nb, false_fail_rate=rate, device="cpu")

    assert key([]) == key([])
    assert key(change) != key([])
