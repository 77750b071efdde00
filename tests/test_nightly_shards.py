"""The sharded nightly workflow's commands run as written (docs/long-audits.md includes the
workflow): its ``audit-shard`` job's command for each index of the matrix, then its ``merge``
job's command on the collected JSON reports, with a local loop standing in for the job
matrix and the artifact transfer, and a short budget.

The local loop (four fresh interpreters, three isolated audits: about 35 s of CPU) runs in
the nightly tier, beside the workflow it checks. The default run keeps the same property in
two faster parts: every command of the two jobs is one the CLI's parser accepts, with the
shard index, the JSON file each shard writes and the files the merge reads matching
(``test_the_workflows_shard_and_merge_commands_parse_and_name_the_same_files``), and shards
merged with ``specexact merge`` give the unsharded audit's report
(``tests/audit/run/test_shard.py``, in-process).
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = (ROOT / ".github" / "workflows" / "nightly.yml").read_text()


def job(name: str) -> str:
    """The text of job ``name`` of the workflow (to the next job at the same indent)."""
    m = re.search(rf"^  {name}:\n(.*?)(?=^  [\w-]+:\n|\Z)", WORKFLOW, re.M | re.S)
    assert m, name
    return m.group(1)


def run_blocks(text: str) -> list[str]:
    """Every ``run:`` of a job, a ``|`` block's lines joined (dedented)."""
    out = []
    for m in re.finditer(r"^(\s*)- run: (\|\n((?:\1  .*\n|\s*\n)+)|(.+)\n)", text, re.M):
        if m.group(4):
            out.append(m.group(4))
        else:
            lines = [ln.strip() for ln in m.group(3).splitlines() if ln.strip()]
            out.append("\n".join(lines))
    return out


def commands():
    """The shard job's command, the merge job's command and the matrix's shard indices."""
    (shard_cmd,) = [r for r in run_blocks(job("audit-shard")) if "specexact audit" in r]
    (merge_cmd,) = [r for r in run_blocks(job("merge")) if "specexact merge" in r]
    shards = [int(s) for s in re.search(r"shard: \[([\d, ]+)\]", job("audit-shard")).group(1).split(",")]
    assert shards == [1, 2, 3] and "${{ matrix.shard }}" in shard_cmd
    return shard_cmd, merge_cmd, shards


def specexact_words(command: str, env: dict) -> list[str]:
    """The words after ``specexact`` of a run block's one command: line continuations
    joined, the ``|| ...`` status guard cut, ``$VAR`` expanded from ``env``."""
    joined = command.replace("\\\n", " ").split("||")[0]
    words = shlex.split(joined)
    assert words[0] == "specexact", command
    return [re.sub(r"\$(\w+)", lambda m: env[m.group(1)], w) for w in words[1:]]


def test_the_workflows_shard_and_merge_commands_parse_and_name_the_same_files():
    """The default run's part of the local loop below (see the module docstring)."""
    from specexact.cli import build_parser

    shard_cmd, merge_cmd, shards = commands()
    env = {"SPECEXACT_AUDIT_BUDGET": "8", "SPECEXACT_AUDIT_SEED": "0"}
    assert "|| [ $? -eq 1 ]" in shard_cmd  # a finding (exit 1) must not stop the artifact upload
    written = []
    for i in shards:
        args = build_parser().parse_args(specexact_words(shard_cmd.replace("${{ matrix.shard }}", str(i)), env))
        assert (args.command, args.shard, args.budget, args.seed) == ("audit", f"{i}/{len(shards)}", 8.0, 0)
        assert args.isolate and args.json == f"shard-{i}.json"
        written.append(args.json)
    merge = build_parser().parse_args(specexact_words(merge_cmd, env))
    assert merge.command == "merge" and merge.report_dir == "reports/nightly"
    # download-artifact (merge-multiple) puts every shard's file into shards/: the glob reads them all
    (pattern,) = merge.reports
    assert sorted(fnmatch.filter([f"shards/{name}" for name in written], pattern)) == \
        sorted(f"shards/{name}" for name in written)


@pytest.mark.nightly
def test_the_workflows_shard_and_merge_commands_run_in_a_local_loop(tmp_path):
    shard_cmd, merge_cmd, shards = commands()
    bin_dir = str(Path(sys.executable).parent)  # the specexact executable of this environment
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), "SPECEXACT_AUDIT_BUDGET": "8",
           "SPECEXACT_AUDIT_SEED": "0", "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen(["bash", "-eo", "pipefail", "-c", shard_cmd.replace("${{ matrix.shard }}", str(i))],
                              cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for i in shards]  # the matrix's jobs side by side
    for i, proc in zip(shards, procs):
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, (i, err[-2000:])  # 0 or 1 (a finding) of the audit: the step passes
    (tmp_path / "shards").mkdir()  # download-artifact with merge-multiple: the files side by side
    for i in shards:
        (tmp_path / f"shard-{i}.json").rename(tmp_path / "shards" / f"shard-{i}.json")
    proc = subprocess.run(["bash", "-eo", "pipefail", "-c", merge_cmd], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    (merged,) = (tmp_path / "reports" / "nightly").glob("audit-*.json")
    report = json.loads(merged.read_text())
    assert [s["index"] for s in report["shards"]] == shards
    left_out = [s["case"] for s in report["settings"]["skipped_cases"] if s.get("kind") == "budget"]
    assert sorted([c["name"] for c in report["cases"]] + left_out) == sorted(report["settings"]["all_cases"])
    assert report["cases"] and proc.returncode == (0 if report["verdict"] == "pass" else 1)
