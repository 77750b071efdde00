"""The audit's own failures are not the sampler's: every I/O or environment failure exits 2
with one line naming the path, and nothing computed is lost (issue 13)."""

import errno
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from specexact.audit.cases.catalog import find_case
from specexact.audit.cases.dispatch import checks_per_case
from specexact.cli import main

AUDIT_TESTS = Path(__file__).parents[1] / "audit"
ONE_CASE = ["--quick", "--case", "v8-plain", "--batches", "2", "--quiet", "--no-html", "--threads", "1"]
V8_CHECKS = checks_per_case(find_case("v8-plain", quick=True))


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def cli(*args, cwd=None, env_extra=None, timeout=300, script=False):
    """Run the command in a fresh process (``python -m specexact``, or the console script)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(AUDIT_TESTS), *sys.path]), "PYTHONUNBUFFERED": "1",
           **(env_extra or {})}
    head = [str(Path(sys.executable).parent / "specexact")] if script else [sys.executable, "-m", "specexact"]
    return subprocess.run([*head, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)


def one_line_error(stderr: str) -> str:
    """The error line; fails if there is a traceback."""
    assert "Traceback" not in stderr, stderr
    lines = [ln for ln in stderr.splitlines() if "error" in ln.lower()]
    assert len(lines) == 1, stderr
    return lines[0]


def test_report_dir_that_is_a_file_exits_2_before_sampling(tmp_path, capsys):
    blocker = tmp_path / "reports"
    blocker.write_text("not a folder")
    # End to end in a fresh process once (the command as a user runs it); the --no-journal
    # variant in this process (the same code path: main's status and its one stderr line;
    # each fresh process costs ~3 s of CPU importing torch and the audit).
    out = cli("audit", *ONE_CASE, "--report-dir", str(blocker))
    runs = [(out.returncode, out.stderr)]
    code = main(["audit", *ONE_CASE, "--report-dir", str(blocker), "--no-journal"])
    runs.append((code, capsys.readouterr().err))
    for code, stderr in runs:
        assert code == 2
        line = one_line_error(stderr)
        assert str(blocker) in line and "not a folder" in line
        assert "sequences" not in stderr  # stopped before the audit ran
    assert blocker.read_text() == "not a folder"


def test_report_dir_under_a_file_exits_2(tmp_path):
    (tmp_path / "f").write_text("x")
    code = main(["audit", *ONE_CASE, "--report-dir", str(tmp_path / "f" / "sub")])
    assert code == 2


@pytest.mark.parametrize("where", ["under_a_file", "a_folder"])
def test_json_path_that_cannot_be_written_exits_2_before_sampling(tmp_path, where, capsys):
    (tmp_path / "f").write_text("x")
    (tmp_path / "d").mkdir()
    target = tmp_path / "f" / "x.json" if where == "under_a_file" else tmp_path / "d"
    code = main(["audit", *ONE_CASE, "--report-dir", str(tmp_path / "r"), "--json", str(target)])
    assert code == 2
    err = capsys.readouterr().err
    assert str(target) in err and "Traceback" not in err
    assert not list((tmp_path / "r").glob("audit-*.json"))


def _disk_full(monkeypatch):
    """Every report file write fails as on a full disk (after the audit has run)."""
    import specexact.audit.core.json_io as jr

    real = jr.write_text

    def full(text, path):
        if Path(path).parent.name == "r":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(text, path)

    monkeypatch.setattr(jr, "write_text", full)


@pytest.mark.statistical(checks=2 * V8_CHECKS)
def test_reports_that_cannot_be_written_are_saved_elsewhere_and_the_journal_resumes(tmp_path, monkeypatch, capsys,
                                                                                  alpha):
    rate = str(alpha * V8_CHECKS)
    # --fuzz-examples 10: the fuzz phase runs and journals its cases (fuzz-rows-1 below) at a
    # fifth of its default examples' CPU (the three audits spent ~10 s of CPU fuzzing)
    args = ["audit", *ONE_CASE, "--fuzz-examples", "10", "--false-fail-rate", rate, "--report-dir", str(tmp_path / "r")]
    _disk_full(monkeypatch)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "No space left on device" in err and str(tmp_path / "r") in err and "Traceback" not in err
    saved = Path(re.search(r"saved to (\S+\.json)", err.replace("\n", "")).group(1))
    report = json.loads(saved.read_text())
    assert report["verdict"] == "pass" and report["num_sequences"] > 0
    journals = list((tmp_path / "r" / ".journal").glob("*.jsonl"))
    assert len(journals) == 1 and "journal" in err, "the journal is kept"
    monkeypatch.undo()
    # The same command once the disk has room: the cases come from the journal, not sampled again.
    assert main(args) == 0
    (written,) = (tmp_path / "r").glob("audit-*.json")
    again = json.loads(written.read_text())
    # Every case, the fuzz phase's generated ones included, comes back from the journal.
    assert again["resumed_cases"] == [c["name"] for c in report["cases"]] and "fuzz-rows-1" in again["resumed_cases"]
    assert [c["pvalue"] for c in again["checks"]] == [c["pvalue"] for c in report["checks"]]
    assert not list((tmp_path / "r").glob(".journal/*.jsonl"))
    # --no-journal: nothing to resume, but the report is still saved somewhere.
    _disk_full(monkeypatch)
    assert main([*args, "--no-journal"]) == 2
    err = capsys.readouterr().err
    assert json.loads(Path(re.search(r"saved to (\S+\.json)", err.replace("\n", "")).group(1)).read_text())


def test_journal_that_cannot_be_written_exits_2(tmp_path, capsys):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / ".journal").write_text("a file where the journal folder goes")
    assert main(["audit", *ONE_CASE, "--report-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert ".journal" in err and "Traceback" not in err


@pytest.mark.statistical(checks=V8_CHECKS)
def test_same_audit_running_twice_the_second_says_why_and_the_first_is_unharmed(tmp_path, alpha, monkeypatch,
                                                                                 capsys):
    """Two identical audits in one folder at once: one holds the journal, the other exits 2
    naming it; the first one's report is written and complete. The first runs in a fresh
    process; the second, refused before it samples, in this one through ``main`` (another
    process all the same, without the 2-3 s of CPU of a fresh interpreter)."""
    monkeypatch.syspath_prepend(str(AUDIT_TESTS))
    args = ["audit", "--quick", "--case", "v8-plain", "--case", "v12-eos-cut", "--batches", "2", "--quiet",
            "--no-html", "--threads", "1", "--no-fuzz", "--sampler", "faulty_samplers:slow_once_on_v12",
            "--false-fail-rate", str(alpha * V8_CHECKS), "--report-dir", str(tmp_path / "r")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(AUDIT_TESTS), *sys.path]),
           "SPECEXACT_TEST_STALL_SECONDS": "300", "SPECEXACT_TEST_STALL_UNTIL": str(tmp_path / "go")}
    first = subprocess.Popen([sys.executable, "-m", "specexact", *args], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not list((tmp_path / "r" / ".journal").glob("*.lock")):
            assert first.poll() is None, first.stderr.read()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        capsys.readouterr()
        assert main(args) == 2
        line = one_line_error(capsys.readouterr().err)
        assert f"pid {first.pid}" in line and "--no-journal" in line
        (tmp_path / "go").touch()  # the first audit may go on
        out, err = first.communicate(timeout=300)
    finally:
        first.kill()
    assert first.returncode == 0, err
    (report,) = (tmp_path / "r").glob("audit-*.json")
    data = json.loads(report.read_text())
    assert [c["name"] for c in data["cases"]] == ["v8-plain", "v12-eos-cut"]


def _write_same_stem(report: dict, out_dir: str, name: str, go, result: Path) -> None:
    """A forked writer: waits for ``go`` (all writers start together), writes the report under
    the shared stem, records the path it got."""
    from specexact.reports import write_reports

    report = {**report, "sampler": {**report["sampler"], "name": name}}
    go.wait(timeout=120)
    result.write_text(str(write_reports(report, out_dir, "audit-builtin-20260101T000000Z", html=False,
                                        unique=True)["json"]))


def test_concurrent_writers_never_share_a_report_name(tmp_path):
    """Audits finishing in the same second in one folder (the same stem): every report is
    kept under its own name, none overwritten.

    Six writer processes forked from this one (its imports already done: a fresh interpreter
    per writer cost ~3 s of CPU each importing torch), released together by one event."""
    import multiprocessing

    from specexact.audit import quick_cases, run_audit
    from specexact.decoders import verify
    from specexact.reports import write_reports

    # Not asserted to pass: only its files matter here.
    report = run_audit(verify, cases=[c for c in quick_cases() if c.name == "v8-plain"], num_batches=2, budget_s=None)
    report = json.loads(json.dumps(report))  # as the writers of separate audits would hold it
    write_reports(report, tmp_path / "warm", "audit-warm", html=False, unique=True)  # lazy imports done before fork
    ctx = multiprocessing.get_context("fork")
    go = ctx.Event()
    results = [tmp_path / f"w{i}.path" for i in range(6)]
    procs = [ctx.Process(target=_write_same_stem, args=(report, str(tmp_path / "out"), f"w{i}", go, results[i]))
             for i in range(6)]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(timeout=120)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    paths = [Path(r.read_text().strip()) for r in results]
    assert len(set(paths)) == 6
    names = sorted(json.loads(p.read_text())["sampler"]["name"] for p in paths)
    assert names == [f"w{i}" for i in range(6)]


def _wait_for_journal(run_dir: Path, proc, mark: Path | None = None) -> None:
    """Until the first case is in the journal (and, with ``mark``, the sampler has begun to
    stall in the second: the signal then reaches the audit inside the sampler, the state
    under test, not in the moment between the journal's write and the next call)."""
    deadline = time.monotonic() + 120
    while True:
        found = [ln for p in run_dir.glob(".journal/*.jsonl") for ln in p.read_text().splitlines() if '"case"' in ln]
        if found and (mark is None or mark.exists()):
            return
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "the first case never reached the journal"
        time.sleep(0.05)


def _as_from_a_terminal() -> None:
    """In the audit's process before exec: SIGINT and SIGTERM at their default disposition and
    unblocked, as a shell starts a command. A process inherits an ignored or blocked signal
    across exec, and the test worker's may differ (seen twice in the full suite under
    ``.ci/run``, never alone: the audit then never saw the SIGINT and the test timed out)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.statistical(checks=2 * V8_CHECKS)
def test_interrupt_says_what_was_kept_and_the_rerun_resumes(tmp_path, sig, alpha, monkeypatch):
    """The interrupted audit runs in a fresh process (it gets the signal as from a terminal);
    the rerun that resumes it runs in this one through ``main``."""
    run_dir = tmp_path / "r"
    args = ["audit", "--quick", "--case", "v8-plain", "--case", "v12-eos-cut", "--batches", "2", "--quiet",
            "--no-html", "--threads", "1", "--no-fuzz", "--sampler", "faulty_samplers:stall_on_v12_if_asked",
            "--false-fail-rate", str(alpha * V8_CHECKS), "--report-dir", str(run_dir)]
    mark = tmp_path / "stalled"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(AUDIT_TESTS), *sys.path]), "SPECEXACT_TEST_STALL": "1",
           "SPECEXACT_TEST_STALL_MARK": str(mark)}
    proc = subprocess.Popen([sys.executable, "-m", "specexact", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_as_from_a_terminal)
    try:
        _wait_for_journal(run_dir, proc, mark)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 2
    line = one_line_error(err)
    assert "interrupted after 1 of 2 case(s)" in line and "run the same command again to resume" in line
    assert str(run_dir / ".journal") in line
    monkeypatch.syspath_prepend(str(AUDIT_TESTS))
    monkeypatch.delenv("SPECEXACT_TEST_STALL", raising=False)  # the rerun does not stall
    assert main(args) == 0
    (report,) = run_dir.glob("audit-*.json")
    assert json.loads(report.read_text())["resumed_cases"] == ["v8-plain"]


_MODULE = """
from specexact.decoders import verify as _verify

def verify(ids, draft_probs, target_probs, generator=None):
    return _verify(ids, draft_probs, target_probs, generator)
"""


@pytest.mark.statistical(checks=V8_CHECKS)
def test_sampler_module_in_the_current_folder_is_found_by_the_console_script(tmp_path, alpha):
    (tmp_path / "mysampler_here.py").write_text(_MODULE)
    # --no-fuzz: the subject is finding the module, not the fuzz phase (its own tests: tests/cli/test_cli_fuzz.py)
    out = cli("audit", *ONE_CASE, "--no-fuzz", "--false-fail-rate", str(alpha * V8_CHECKS), "--sampler",
              "mysampler_here:verify", "--report-dir", "r", cwd=tmp_path, script=True)
    assert "cannot import" not in out.stderr
    assert out.returncode == 0, out.stderr
    assert json.loads(next((tmp_path / "r").glob("audit-*.json")).read_text())["sampler"]["name"] == \
        "mysampler_here:verify"


def test_version():
    from specexact import __version__

    out = cli("--version")
    assert out.returncode == 0 and out.stdout.startswith(f"specexact {__version__} (torch ")


def test_merge_and_render_outputs_that_cannot_be_written_exit_2(tmp_path, capsys):
    from specexact.audit import quick_cases, run_audit
    from specexact.decoders import verify
    from specexact.reports import write_json

    report = run_audit(verify, cases=[c for c in quick_cases() if c.name == "v8-plain"], num_batches=2,
                       budget_s=None, shard=(1, 1))  # not asserted to pass: only the files matter
    shard = write_json(report, tmp_path / "shard.json")
    (tmp_path / "file").write_text("x")
    assert main(["merge", str(shard), "--report-dir", str(tmp_path / "file"), "--quiet"]) == 2
    assert main(["merge", str(shard), "--report-dir", str(tmp_path / "m"), "--json", str(tmp_path / "file" / "x")]) == 2
    assert main(["render", str(shard), "--out-dir", str(tmp_path / "file")]) == 2
    err = capsys.readouterr().err
    assert err.count(str(tmp_path / "file")) >= 3 and "Traceback" not in err
    assert main(["merge", str(shard), "--report-dir", str(tmp_path / "m"), "--quiet", "--no-html"]) in (0, 1)


def test_a_failure_of_the_audits_own_observer_is_not_the_samplers_crash(monkeypatch, tmp_path, capsys):
    """The per-event observer runs inside the decoder, between the sampler's calls: when it
    fails, the audit must say that it failed itself (exit 2), not record a crash of the
    sampler (exit 1)."""
    from specexact.audit.checks import decisions

    def broken(self, rec):
        raise ZeroDivisionError("planted in the observer")

    monkeypatch.setattr(decisions.DecisionObserver, "__call__", broken)
    code = main(["audit", *ONE_CASE, "--no-fuzz", "--report-dir", str(tmp_path / "r"), "--no-journal"])
    err = capsys.readouterr().err
    assert code == 2
    assert "internal error of specexact" in err and "per-event observer failed" in err
    assert "planted in the observer" in err
    assert not list(tmp_path.glob("r/*.json"))  # no report claims a verdict on the sampler


@pytest.mark.parametrize("args, needle", [
    (["audit", "--quick", "--fuzz-examples", "x"], "argument --fuzz-examples: invalid int value"),
    (["audit", "--quick", "--fuzz-examples", "0"], "--fuzz-examples must be >= 1, got 0"),
    (["audit", "--quick", "--no-fuzz", "--fuzz-examples", "5"], "--no-fuzz skips the fuzz phase"),
    (["audit", "--bogus"], "unrecognized arguments: --bogus"),
    (["fuzz", "--sampler", "no_such_sampler_name"], "unknown sampler 'no_such_sampler_name'"),
    (["fuzz", "--examples", "0"], "--examples must be >= 1, got 0"),
])
def test_usage_errors_are_one_line_with_status_2(args, needle, capsys):
    """Every usage error is one ``specexact…: error:`` line on stderr (no usage block, no
    wrapped lines), exit status 2, nothing sampled.

    In this process (``main``: argparse's exit or the command's refusal); one of them, the
    unknown option, end to end in a fresh process below."""
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse exits from inside main (the console script's status)
        code = exc.code
    stderr = capsys.readouterr().err
    assert code == 2, stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    line = one_line_error(stderr)
    assert line.startswith("specexact") and needle in line, line


def test_a_usage_error_end_to_end_is_one_line_with_status_2():
    proc = cli("audit", "--bogus", timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    line = one_line_error(proc.stderr)
    assert line.startswith("specexact") and "unrecognized arguments: --bogus" in line, line


def test_fuzz_checks_where_its_result_goes_before_fuzzing(tmp_path, monkeypatch, capsys):
    (tmp_path / "file").write_text("a file where a folder goes")
    # End to end in a fresh process once: 2000 examples per family take many minutes, so it
    # ends within the timeout only if refused first.
    proc = cli("fuzz", "--examples", "2000", "--report-dir", str(tmp_path / "file" / "r"), timeout=120)
    assert proc.returncode == 2 and "cannot write --report-dir" in one_line_error(proc.stderr), proc.stderr
    # --json in this process (each fresh process costs ~3 s of CPU): fuzzing at all fails the test.
    import specexact.fuzz.run

    def fuzzed(*args, **kwargs):
        raise AssertionError("the fuzz phase ran before --json was checked")

    monkeypatch.setattr(specexact.fuzz.run, "run_fuzz", fuzzed)
    code = main(["fuzz", "--examples", "2000", "--report-dir", str(tmp_path / "r"), "--json",
                 str(tmp_path / "file" / "x.json")])
    assert code == 2 and "cannot write --json" in one_line_error(capsys.readouterr().err)


def test_a_journal_write_that_fails_names_the_journal(tmp_path, capsys, monkeypatch):
    """A full disk fails ``os.write`` on a descriptor, an error without a file name: the one
    line must still say which journal could not be written."""
    import errno

    import specexact.audit.run.journal as journal

    real = journal.os.write

    def full(fd, data):  # only the journal's case records: the lock file is still written
        if b'"type": "case"' in bytes(data):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr(journal.os, "write", full)
    assert main(["audit", *ONE_CASE, "--report-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    line = next(ln for ln in err.splitlines() if ln.startswith("specexact: error:"))
    assert "could not write its journal" in line and str(tmp_path / "r" / ".journal") in line, line
    assert "No space left on device" in line and "Traceback" not in err
