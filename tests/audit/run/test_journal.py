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

from specexact.audit.run.journal import Journal, journal_path
from specexact.cli import main
from specexact.reports import report_to_jsonable

HERE = Path(__file__).parents[1]  # tests/audit: the faulty samplers
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
    # (the report writes a detectable TV that guarantees nothing as null, the journal as "inf")
    assert v8["execution"]["resumed"] and v8["checks"] == report_to_jsonable(finished["result"])["checks"]
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


# --- one writer per key: the journal's lock -------------------------------------------------

_HOLD = """
import sys, time
from specexact.audit.run.journal import Journal
j, _ = Journal.open(sys.argv[1], "k", {})
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
"""


def _holder(path, seconds):
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(path), str(seconds)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked", proc.stderr.read()
    return proc


def test_a_second_process_gets_journal_busy_naming_the_holder(tmp_path):
    from specexact.audit.run.journal import JournalBusy, lock_path

    path = journal_path(tmp_path, "k")
    proc = _holder(path, 60)
    try:
        with pytest.raises(JournalBusy) as exc:
            Journal.open(path, "k", {})
        assert exc.value.holder["pid"] == proc.pid
        assert f"pid {proc.pid}" in str(exc.value) and str(path) in str(exc.value)
        assert lock_path(path).exists()
    finally:
        proc.kill()
        proc.wait()
    # A killed holder leaves no stale lock: the kernel dropped it.
    j, state = Journal.open(path, "k", lambda: pytest.fail("the holder's journal must be resumed"))
    assert state.header["key"] == "k"
    j.finish()
    assert not path.exists() and not lock_path(path).exists()


def test_waiting_for_the_holder_then_resuming_its_journal(tmp_path):
    path = journal_path(tmp_path, "k")
    proc = _holder(path, 1.0)
    try:
        j, state = Journal.open(path, "k", lambda: pytest.fail("must resume the holder's journal"), wait_s=60)
    finally:
        proc.wait()
    assert state.header["key"] == "k" and j.locked
    j.close()
    assert path.exists() and not j.locked  # close keeps the journal


def test_other_keys_do_not_wait_and_this_process_may_reopen(tmp_path):
    a, _ = Journal.open(journal_path(tmp_path, "a"), "a", {})
    b, _ = Journal.open(journal_path(tmp_path, "b"), "b", {})  # another key: its own lock
    a.append_case("x", {})
    again, state = Journal.open(journal_path(tmp_path, "a"), "a", {})  # same process: the earlier run is over
    assert list(state.cases) == ["x"] and not a.locked and again.locked
    again.finish()
    b.finish()
    assert not (tmp_path).exists() or not any(tmp_path.iterdir())


def _race(path: str, name: str, results, release) -> None:
    """A forked racer: opens the journal, says what it got, holds the lock until ``release``."""
    from specexact.audit.run.journal import Journal, JournalBusy

    try:
        j, state = Journal.open(path, "k", {"by": name})
    except JournalBusy as exc:
        results.put({"busy": str(exc)})
        return
    results.put({"header": state.header["by"]})
    release.wait(timeout=120)  # hold the lock until the test has every racer's answer
    j.append_case(name, {})


def test_concurrent_processes_on_one_key_one_writer_and_no_tmp_crash(tmp_path):
    """The race of the issue: several processes open the same journal at once (it crashed one
    of them on the header's .tmp file). Now exactly one holds it, the others are told why.

    The racers are forked from this process (its imports done: a fresh interpreter each cost
    ~2.5 s of CPU importing torch and the audit), each opening its own lock file descriptor."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    path = journal_path(tmp_path, "k")
    results, release = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_race, args=(str(path), f"p{i}", results, release)) for i in range(4)]
    for p in procs:
        p.start()
    outs = [results.get(timeout=120) for _ in procs]
    release.set()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    winners = [o["header"] for o in outs if "header" in o]
    assert len(winners) == 1 and sum("busy" in o for o in outs) == 3
    state = Journal.open(path, "k", {})[1]
    assert state.header["by"] == winners[0] and list(state.cases) == winners
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))


@pytest.mark.statistical(checks=0)  # expects a fail (the fuzz phase's exact rules)
def test_the_journal_holds_the_fuzz_phase_and_a_resume_does_not_run_it_again(tmp_path):
    # A resume re-ran the fuzz phase (45 + 74 s for a 90 s budget): its result is journaled
    # after it finishes, and a resumed audit takes it from there, with the same findings.
    from specexact.audit import AuditSettings, run_audit
    from specexact.audit.cases.catalog import find_case
    from specexact.audit.run.journal import held_journal, read_journal
    from specexact.audit.zoo.floats import global_rng_draws

    calls = {"n": 0}

    def counted(ids, draft_probs, target_probs, generator=None):
        # Breaks the rule inputs_unmodified on every call, so the fuzz phase finds it on its
        # first example whatever Hypothesis version generates (with the global RNG fault alone,
        # Hypothesis 6.116's first five examples had no random decision: no finding).
        calls["n"] += 1
        out = global_rng_draws(ids, draft_probs, target_probs, generator)
        target_probs.mul_(0.5)
        return out

    settings = AuditSettings(sampler_name="counted", cases=(find_case("v8-plain", quick=True),), case_set="quick",
                             num_batches=2, budget_s=None, fuzz=True, fuzz_examples=5, journal_dir=str(tmp_path),
                             threads=1)
    first = run_audit(counted, settings)
    held_journal(first["journal"]).close()  # kept, as after a kill: the next run resumes it
    assert read_journal(first["journal"]).fuzz is not None
    assert calls["n"] > 0
    calls["n"] = 0
    again = run_audit(counted, settings)
    held_journal(again["journal"]).close()
    assert calls["n"] == 0  # every case resumed, and the fuzz phase too
    assert [f["rule"] for f in again["fuzz"]["findings"]] == [f["rule"] for f in first["fuzz"]["findings"]]
    assert "inputs_unmodified" in [f["rule"] for f in first["fuzz"]["findings"]]
    assert again["verdict"] == first["verdict"] == "fail"


def test_journal_errors_name_the_path(tmp_path):
    from specexact.audit.run.journal import Journal

    path = journal_path(tmp_path / "gone", "k")
    j, _ = Journal.open(journal_path(tmp_path, "k"), "k", {})
    j.path = path  # its folder does not exist: the append fails
    with pytest.raises(OSError) as exc:
        j.append_fuzz({"findings": []})
    assert str(path) in str(exc.value)
