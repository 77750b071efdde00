"""``--ray`` without a cluster: a shard's arguments, the journal of finished shards, the
failure line, one shard run as a Ray task runs it, and the refusals (no Ray installed
included). The cluster tests are ``tests/cli/test_cli_ray.py`` (``tox -e ray``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from specexact.cli import _sub_parser, build_parser, main
from specexact.cli_ray import RAY_MISSING
from specexact.cli_ray_shard import (SHARD_FOLDER_PREFIX, ShardFailed, ShardJournal, failure_line, run_key, run_shard,
                                     shard_arguments)

SMALL = ["--quick", "--case", "v8-plain", "--case", "v4-greedy-mix", "--batches", "2", "--no-fuzz", "--threads", "1"]


def arguments(argv: list[str]) -> list[str]:
    parser = build_parser()
    return shard_arguments(_sub_parser(parser, "audit"), parser.parse_args(["audit", *argv]))


def test_a_shard_repeats_the_audits_arguments_and_none_of_the_drivers():
    got = arguments(["--batch=2", "--seed", "7", "--case", "v8-plain", "--case", "v4-greedy-mix", "--no-fuzz",
                     "--ray", "127.0.0.1:1", "--shards", "3", "--ray-retries", "0", "--report-dir", "x", "--json",
                     "x.json", "--no-html", "--quiet", "--fresh", "--history", "3", "--threads", "1"])
    assert got == ["--batches", "2", "--seed", "7", "--case", "v8-plain", "--case", "v4-greedy-mix", "--threads", "1",
                   "--no-fuzz"]
    # the shard's own command line parses back to the same audit
    again = build_parser().parse_args(["audit", *got])
    assert (again.batches, again.seed, again.case, again.no_fuzz, again.threads) == (2, 7, ["v8-plain",
                                                                                           "v4-greedy-mix"], True, 1)
    assert arguments(["--ray", "--shards", "2"]) == []  # defaults are not repeated
    assert arguments(["--engine", "builtin", "--method", "draft_model", "--budget", "30", "--ray", "--shards", "2"]) \
        == ["--engine", "builtin", "--method", "draft_model", "--budget", "30.0"]


def test_the_run_key_names_the_arguments_the_count_and_the_version():
    key = run_key(["--batches", "2"], 2, "0.1.0")
    assert key == run_key(["--batches", "2"], 2, "0.1.0") and len(key) == 16
    assert len({key, run_key(["--batches", "3"], 2, "0.1.0"), run_key(["--batches", "2"], 3, "0.1.0"),
                run_key(["--batches", "2"], 2, "0.2.0")}) == 4


def shard_text(i: int, n: int) -> str:
    return json.dumps({"settings": {"shard": {"index": i, "count": n}}, "cases": []})


def test_the_journal_keeps_whole_reports_of_its_shards_only(tmp_path):
    journal = ShardJournal(tmp_path / ".journal", "k", 3)
    assert journal.finished() == {}
    journal.add(2, shard_text(2, 3))
    assert journal.finished() == {2: shard_text(2, 3)}
    assert [p.name for p in journal.path.iterdir()] == ["shard-2-of-3.json"]  # no temporary file left
    journal.file(1).write_text(shard_text(2, 3))  # another shard's report under shard 1's name
    journal.file(3).write_text(shard_text(3, 3)[:-7])  # cut short (a crash mid-write without the rename)
    assert sorted(journal.finished()) == [2]
    assert ShardJournal(tmp_path / ".journal", "k", 2).finished() == {}  # another run's count
    assert ShardJournal(tmp_path / ".journal", "other", 3).finished() == {}  # another run's key
    journal.remove()
    assert not journal.path.exists() and journal.finished() == {}


def test_the_failure_line_is_one_line_naming_the_shards_the_tries_and_the_journal(tmp_path):
    line = failure_line({3: "its audit ended\nwithout a report (killed by signal 9)", 1: "NodeDiedError: x"}, 4, 3, 2,
                        tmp_path / "ray-k")
    assert "\n" not in line
    assert line.startswith("shard 1/4; shard 3/4 failed after 3 tries each (shard 1/4: NodeDiedError: x); "
                           "no report was written; 2 finished shards kept in the journal ")
    assert str(tmp_path / "ray-k") in line and line.endswith("run the same command again to resume them "
                                                               "(--fresh starts over)")
    assert "after 1 try each" in failure_line({1: "x"}, 1, 1, 0, tmp_path)


def test_run_shard_returns_the_report_of_the_same_shard_run_here(tmp_path):
    """The Ray task's body, called directly: the JSON report of ``--shard 1/2``, the same
    counts and p-values as that shard run in this process; its folder is removed."""
    got = run_shard(arguments(SMALL), 1, 2, cwd=str(tmp_path))
    assert got["index"] == 1 and got["status"] in (0, 1) and got["node"]
    ray_shard = json.loads(got["report"])
    assert main(["audit", *SMALL, "--shard", "1/2", "--no-journal", "--quiet", "--no-html", "--report-dir",
                 str(tmp_path), "--json", str(tmp_path / "here.json")]) == got["status"]
    here = json.loads((tmp_path / "here.json").read_text())
    assert ray_shard["settings"]["audit_key"] == here["settings"]["audit_key"]
    assert ray_shard["settings"]["shard"] == here["settings"]["shard"]
    assert [(c["case"], c["name"], c["n"], c["pvalue"]) for c in ray_shard["checks"]] == \
        [(c["case"], c["name"], c["n"], c["pvalue"]) for c in here["checks"]]
    assert not list(Path(tempfile.gettempdir()).glob(f"{SHARD_FOLDER_PREFIX}{os.getpid()}-*"))


def test_run_shard_without_a_report_raises_shard_failed_with_its_last_line():
    with pytest.raises(ShardFailed, match=r"\(exit status 2\): specexact: error: unknown --case \['nope'\]"):
        run_shard(["--case", "nope", "--batches", "2"], 1, 2)
    assert not list(Path(tempfile.gettempdir()).glob(f"{SHARD_FOLDER_PREFIX}{os.getpid()}-*"))


def test_run_shard_removes_the_folders_of_dead_workers():
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    orphan = Path(tempfile.mkdtemp(prefix=f"{SHARD_FOLDER_PREFIX}{int(dead.stdout)}-1-of-2-"))
    alive = Path(tempfile.mkdtemp(prefix=f"{SHARD_FOLDER_PREFIX}{os.getppid()}-1-of-2-"))
    try:
        with pytest.raises(ShardFailed):
            run_shard(["--case", "nope"], 1, 2)
        assert not orphan.exists() and alive.exists()
    finally:
        for folder in (orphan, alive):
            if folder.exists():
                folder.rmdir()


def test_ray_not_installed_exits_2_with_one_line_naming_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed: `import ray` raises ImportError
    report_dir = tmp_path / "reports"
    assert main(["audit", *SMALL, "--ray", "--shards", "2", "--report-dir", str(report_dir)]) == 2
    err = capsys.readouterr().err
    assert err == f"specexact: error: {RAY_MISSING}\n"
    assert "pip install -e '.[ray]'" in err and "tox -e ray" in err
    assert not report_dir.exists()  # a refused command leaves nothing behind


@pytest.mark.parametrize("argv, words", [
    (["--ray"], "--ray needs --shards N"),
    (["--ray", "--shards", "0"], "got 0"),
    (["--shards", "2"], "without --ray run one shard with --shard I/N"),
    (["--ray", "--shards", "2", "--shard", "1/2"], "--shard I/N is for one shard without --ray"),
    (["--ray", "--shards", "2", "--baseline", "b.json"], "--baseline compares a whole audit"),
    (["--ray", "--shards", "2", "--ray-retries", "-1"], "--ray-retries must be >= 0"),
])
def test_ray_arguments_refused_exit_2_with_one_line(argv, words, tmp_path, capsys):
    assert main(["audit", *SMALL, *argv, "--report-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("specexact: error: ") and words in err
    assert not (tmp_path / "r").exists()


def test_an_address_where_no_cluster_answers_exits_2_at_once(tmp_path, capsys):
    """Ray's own connection retries such an address without end (a new user's trial: still
    waiting after 7.5 minutes); it is refused before Ray is imported."""
    assert main(["audit", *SMALL, "--ray", "127.0.0.1:1", "--shards", "2", "--report-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("specexact: error: --ray 127.0.0.1:1: no Ray cluster answers")
