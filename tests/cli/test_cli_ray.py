"""``specexact audit --ray`` on a real two-node Ray cluster of this machine (``tox -e ray``).

Skipped where Ray is not installed (the default suite). One cluster for the module
(:mod:`ray_cluster`: a head and a worker node, one CPU each). The built-in verifier and
``--engine builtin`` are audited as they are; the kill, retry and resume tests audit
``--sampler ray_gate:verify`` (:mod:`ray_gate`: the built-in verifier behind files the tests
use to hold, crash and count the shards' processes). Every comparison is with the local
``--shard 1/N .. N/N`` + ``specexact merge`` run of the same arguments (``--batches``: the
same samples), so no test depends on a statistical outcome.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

from specexact.cli import main  # noqa: E402 - after the skip
from specexact.cli_ray_shard import SHARD_FOLDER_PREFIX, ShardFailed  # noqa: E402

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("ray_cluster", HERE / "ray_cluster.py")
ray_cluster = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ray_cluster)
CASES = ["--quick", "--case", "v8-plain", "--case", "v12-eos-cut", "--case", "v4-greedy-mix"]
COMMON = ["--batches", "2", "--seed", "0", "--no-fuzz", "--threads", "1", "--no-html", "--quiet"]
BUILTIN = [*CASES, *COMMON]  # the built-in verifier (--sampler builtin, the default)
GATED = ["--sampler", "ray_gate:verify", *CASES, *COMMON]
ENGINE = ["--engine", "builtin", "--method", "draft_model", "--requests-per-class", "16", *COMMON]
WAIT_S = 240  # a safety limit only: every wait below ends on an event well before it


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """``(address, gate folder, the drivers' environment)`` of a two-node cluster; afterwards
    none of its processes is left."""
    gate = tmp_path_factory.mktemp("gate")
    env = {**os.environ, "SPECEXACT_TEST_GATE": str(gate), "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join([str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])])}
    token_file = Path.home() / ".ray" / "auth_token"
    had_token = token_file.exists()
    address, temp, env = ray_cluster.start_cluster(env)
    try:
        yield address, gate, env
    finally:
        left = ray_cluster.stop_cluster(temp)
        assert left == [], f"processes of the cluster still running: {left}"
        assert not temp.exists()
        assert had_token or not token_file.exists()  # nothing written in the real home


@pytest.fixture()
def gate(cluster, monkeypatch):
    """The gate folder, emptied before and after the test; ``ray_gate`` importable here too
    (the local runs compared with)."""
    monkeypatch.syspath_prepend(str(HERE))
    folder = cluster[1]

    def clear():
        for f in folder.iterdir():
            f.unlink()

    clear()
    yield folder
    clear()


def local_merged(tmp_path: Path, args: list[str], n: int) -> tuple[int, dict]:
    """``--shard 1/n .. n/n`` here, then ``specexact merge``: the exit status and the report."""
    shards = []
    for i in range(1, n + 1):
        out = tmp_path / f"local-{i}.json"
        assert main(["audit", *args, "--shard", f"{i}/{n}", "--no-journal", "--report-dir",
                     str(tmp_path / "local"), "--json", str(out)]) in (0, 1)
        shards.append(str(out))
    merged = tmp_path / "local-merged.json"
    code = main(["merge", *shards, "--report-dir", str(tmp_path / "local-merged"), "--json", str(merged),
                 "--no-html", "--quiet"])
    return code, json.loads(merged.read_text())


def ray_command(address: str, report_dir: Path, args: list[str], n: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "specexact", "audit", *args, "--ray", address, "--shards", str(n), *extra,
            "--report-dir", str(report_dir), "--json", str(report_dir / "merged.json")]


def run_ray(cluster, report_dir: Path, args: list[str], n: int, *extra: str) -> subprocess.CompletedProcess:
    """The driver as a user runs it (its own process, in the tests' folder)."""
    address, _, env = cluster
    return subprocess.run(ray_command(address, report_dir, args, n, *extra), capture_output=True, text=True,
                          timeout=WAIT_S, cwd=HERE, env=env)


def numbers(report: dict) -> dict:
    return {(c["case"], c["name"]): (c["n"], c["pvalue"], c["statistic"], c["passed"], c["false_fail_rate"],
                                     c["detectable_tv"]) for c in report["checks"]}


def assert_same_audit(ray_report: dict, local: dict) -> None:
    assert ray_report["verdict"] == local["verdict"]
    assert ray_report["num_sequences"] == local["num_sequences"] > 0
    assert [(c["name"], c["verdict"], c["num_sequences"]) for c in ray_report["cases"]] == \
        [(c["name"], c["verdict"], c["num_sequences"]) for c in local["cases"]]
    assert numbers(ray_report) == numbers(local)
    assert ray_report["findings"] == local["findings"]
    assert ray_report["settings"]["audit_key"] == local["settings"]["audit_key"]
    assert [s["index"] for s in ray_report["shards"]] == list(range(1, len(local["shards"]) + 1))


def calls(gate: Path) -> list[str]:
    log = gate / "calls.log"
    return sorted(line.split()[0] for line in log.read_text().splitlines()) if log.exists() else []


def wait_for(path: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        assert proc.poll() is None, f"the driver ended first: {proc.communicate()}"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[1])


def gone(pid: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while Path(f"/proc/{pid}").exists() and Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z":
        assert time.monotonic() < deadline, f"process {pid} still alive"
        time.sleep(0.05)


def test_a_shard_run_outside_ray_does_not_start_ray_where_ray_is_imported(tmp_path):
    """run_shard names the Ray node only inside a Ray worker: asking a process without Ray
    for its runtime context would start a local Ray instance (and write a token in ~/.ray)."""
    import ray

    from specexact.cli_ray_shard import run_shard

    assert not ray.is_initialized()
    with pytest.raises(ShardFailed):
        run_shard(["--case", "nope"], 1, 2)
    got = run_shard([*CASES[:3], "--batches", "2", "--no-fuzz", "--threads", "1"], 1, 1, cwd=str(tmp_path))
    assert got["status"] in (0, 1) and "Ray node" not in got["node"]
    assert not ray.is_initialized()


@pytest.mark.parametrize("args, n", [(BUILTIN, 3), (ENGINE, 2)], ids=["builtin", "engine-builtin"])
def test_the_ray_report_is_the_local_sharded_merge(cluster, gate, tmp_path, args, n):
    proc = run_ray(cluster, tmp_path / "ray", args, n)
    code, local = local_merged(tmp_path, args, n)
    assert proc.returncode == code, proc.stderr[-3000:]
    assert_same_audit(json.loads((tmp_path / "ray" / "merged.json").read_text()), local)
    reports = list((tmp_path / "ray").glob("audit-*.json"))
    assert len(reports) == 1  # the report written once
    assert not any((tmp_path / "ray" / ".journal").iterdir())  # the journal removed once it is written
    assert [s["index"] for s in json.loads(reports[0].read_text())["shards"]] == list(range(1, n + 1))


def test_a_killed_worker_and_a_killed_shard_are_retried_and_nothing_is_lost(cluster, gate, tmp_path):
    """Shard 1's Ray worker and shard 2's audit process are SIGKILLed mid-run (both hold at
    their first call until then): Ray runs both again, and the report is the local one."""
    address, _, env = cluster
    for s in ("1-of-2", "2-of-2"):
        (gate / f"hold-{s}").touch()
    proc = subprocess.Popen(ray_command(address, tmp_path / "ray", GATED, 2), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=HERE, env=env)
    try:
        held = {}
        for s in ("1-of-2", "2-of-2"):
            wait_for(gate / f"held-{s}", proc)
            held[s] = int((gate / f"held-{s}").read_text())
        worker = parent_of(held["1-of-2"])
        assert "ray::" in Path(f"/proc/{worker}/cmdline").read_text()  # the Ray worker running the task
        os.kill(worker, signal.SIGKILL)
        os.kill(held["2-of-2"], signal.SIGKILL)
        gone(worker), gone(held["1-of-2"]), gone(held["2-of-2"])  # the worker's shard dies with it
        for s in ("1-of-2", "2-of-2"):
            (gate / f"hold-{s}").unlink()
        out, err = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    code, local = local_merged(tmp_path, GATED, 2)
    assert proc.returncode == code, err[-3000:]
    assert calls(gate) == ["1-of-2", "1-of-2", "2-of-2", "2-of-2"]  # each killed shard ran once more
    # the killed worker's shard folder was removed by the next shard run on the machine
    assert not list(Path(tempfile.gettempdir()).glob(f"{SHARD_FOLDER_PREFIX}{worker}-*"))
    assert_same_audit(json.loads((tmp_path / "ray" / "merged.json").read_text()), local)


def test_retries_exhausted_is_exit_2_one_line_and_the_journal_kept_then_resumed(cluster, gate, tmp_path):
    """Shard 2 of 2 crashes on every try: after 1 + --ray-retries tries the command exits 2
    with one line and no report, shard 1 kept in the journal. Run again once shard 2 no
    longer crashes: shard 1 comes from the journal (not run again) and the report is the
    local one."""
    (gate / "crash-2-of-2").touch()
    proc = run_ray(cluster, tmp_path / "ray", GATED, 2, "--ray-retries", "1")
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [ln for ln in proc.stderr.splitlines() if "error" in ln]
    assert len(errors) == 1 and errors[0] == proc.stderr.splitlines()[-1], proc.stderr[-3000:]
    assert errors[0].startswith("specexact: error: shard 2/2 failed after 2 tries each")
    assert "exit status 3" in errors[0] and "1 finished shard kept in the journal" in errors[0]
    assert calls(gate) == ["1-of-2", "2-of-2", "2-of-2"]  # bounded: 1 try + 1 retry
    assert not list((tmp_path / "ray").glob("audit-*")) and not (tmp_path / "ray" / "merged.json").exists()
    (journal,) = (tmp_path / "ray" / ".journal").iterdir()
    assert sorted(f.name for f in journal.iterdir()) == ["shard-1-of-2.json"]

    (gate / "crash-2-of-2").unlink()
    (gate / "calls.log").unlink()
    proc = run_ray(cluster, tmp_path / "ray", GATED, 2, "--ray-retries", "1")
    code, local = local_merged(tmp_path, GATED, 2)
    assert proc.returncode == code, proc.stderr[-3000:]
    assert "resuming: shard 1/2 finished by an earlier run" in proc.stderr
    assert calls(gate) == ["2-of-2"]  # shard 1 was not run again
    assert_same_audit(json.loads((tmp_path / "ray" / "merged.json").read_text()), local)
    assert not journal.exists()


def test_a_terminated_driver_exits_2_with_one_line_and_keeps_the_finished_shard(cluster, gate, tmp_path):
    """SIGTERM (a cancelled CI job) while shard 2 is held and shard 1 is journaled: exit 2,
    one line saying what the journal kept (the same command resumes it: the test above)."""
    address, _, env = cluster
    (gate / "hold-2-of-2").touch()
    proc = subprocess.Popen(ray_command(address, tmp_path / "ray", GATED, 2), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=HERE, env=env)
    try:
        wait_for(gate / "held-2-of-2", proc)
        journal = tmp_path / "ray" / ".journal"
        deadline = time.monotonic() + WAIT_S
        while not list(journal.glob("ray-*/shard-1-of-2.json")):
            assert proc.poll() is None and time.monotonic() < deadline, "shard 1 was never journaled"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=WAIT_S)
    finally:
        (gate / "hold-2-of-2").unlink()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 2, err[-3000:]
    errors = [ln for ln in err.splitlines() if "error" in ln]
    assert len(errors) == 1 and errors[0] == err.splitlines()[-1], err[-3000:]
    assert errors[0].startswith("specexact: error: interrupted; 1 finished shard kept in the journal ")
    assert [f.name for f in journal.glob("ray-*/*")] == ["shard-1-of-2.json"]
    assert not list((tmp_path / "ray").glob("audit-*"))


def test_shards_no_node_can_run_are_refused_with_one_line(cluster, gate, tmp_path):
    """A shard asking for more CPUs than any node has would wait for ever (a new user's trial)."""
    proc = run_ray(cluster, tmp_path / "ray", GATED, 2, "--ray-cpus", "64")
    assert proc.returncode == 2, proc.stderr[-3000:]
    last = proc.stderr.splitlines()[-1]
    assert last.startswith("specexact: error: no node of the Ray cluster can run a shard: each asks for 64 CPU(s)")
    assert calls(gate) == []  # no shard ran
