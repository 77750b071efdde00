"""--shard i/n and `specexact merge`: the merged report equals an unsharded run."""

import json
from pathlib import Path

import pytest
import torch

from specexact.audit import default_cases
from specexact.audit.checks.decisions_checks import DECISION_CHECKS
from specexact.audit.run.shard import ShardError, parse_shard, shard_cases
from specexact.reports.merge import merge_reports
from specexact.cli import main
from specexact.reports import validate_report

ARGS = ["audit", "--quick", "--case", "v8-plain", "--case", "v12-eos-cut", "--case", "v4-greedy-mix",
        "--batches", "2", "--quiet", "--no-html", "--no-journal", "--no-fuzz"]


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread here and in the processes the test starts (they copy this count):
    on a busy machine more threads wait for each other and a decoder call's time varies
    a hundredfold. Under pytest-xdist the workers already use one."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def run(tmp_path: Path, name: str, *extra) -> tuple[int, dict, Path]:
    folder = tmp_path / name
    code = main([*ARGS, *extra, "--report-dir", str(folder)])
    path = next(folder.glob("audit-*.json"))
    return code, json.loads(path.read_text()), path


def numbers(report):
    return {(c["case"], c["name"]): (c["n"], c["pvalue"], c["statistic"], c["passed"], c["false_fail_rate"],
                                     c["detectable_tv"], c["bh_adjusted_pvalue"], tuple(map(tuple, c["worst"])))
            for c in report["checks"]}


def test_two_shards_merge_to_the_unsharded_run(tmp_path):
    code_all, whole, _ = run(tmp_path, "whole")
    code_1, s1, p1 = run(tmp_path, "s1", "--shard", "1/2")
    code_2, s2, p2 = run(tmp_path, "s2", "--shard", "2/2")
    # each shard ran part of the cases at the whole audit's per-check rate
    assert sorted(s1["settings"]["shard"]["cases"] + s2["settings"]["shard"]["cases"]) == \
        sorted(["v8-plain", "v12-eos-cut", "v4-greedy-mix"])
    for s in (s1, s2):
        assert s["settings"]["per_check_false_fail_rate"] == whole["settings"]["per_check_false_fail_rate"]
        # v8-plain 2 classes x 4, v12-eos-cut 2 x 4, v4-greedy-mix 3 x 4, and 6 per-event checks each
        assert s["settings"]["num_checks"] == whole["settings"]["num_checks"] == 28 + 3 * DECISION_CHECKS
    merged_dir = tmp_path / "merged"
    code = main(["merge", str(p2), str(p1), "--report-dir", str(merged_dir), "--quiet", "--no-html"])
    merged = json.loads(next(merged_dir.glob("audit-*.json")).read_text())
    validate_report(merged)
    assert merged["settings"]["shard"] is None and [s["index"] for s in merged["shards"]] == [1, 2]
    assert code == code_all and merged["verdict"] == whole["verdict"]
    assert [c["name"] for c in merged["cases"]] == [c["name"] for c in whole["cases"]]
    assert [(c["verdict"], c["num_sequences"]) for c in merged["cases"]] == \
        [(c["verdict"], c["num_sequences"]) for c in whole["cases"]]
    assert numbers(merged) == numbers(whole)
    assert merged["num_sequences"] == whole["num_sequences"]
    assert merged["findings"] == whole["findings"]
    assert merged["accepted_length"] == whole["accepted_length"]
    assert next(merged_dir.glob("audit-*.json")).with_suffix(".md").exists()


def test_merge_refuses_what_is_not_one_audit(tmp_path):
    _, s1, p1 = run(tmp_path, "a1", "--shard", "1/2")
    _, _, q2 = run(tmp_path, "b2", "--shard", "2/2", "--seed", "7")
    _, _, whole = run(tmp_path, "w")
    for args in ([p1], [p1, q2], [p1, p1], [whole], [str(tmp_path / "missing.json")]):
        assert main(["merge", *map(str, args), "--report-dir", str(tmp_path / "out"), "--quiet"]) == 2
    assert not list((tmp_path / "out").glob("*.json")) if (tmp_path / "out").exists() else True
    with pytest.raises(ShardError, match="shards 1..2"):
        merge_reports([s1])


@pytest.mark.parametrize("text", ["0/2", "3/2", "1", "a/b", "1/0", ""])
def test_bad_shard_values(text, tmp_path):
    with pytest.raises(ShardError):
        parse_shard(text)
    assert main(["audit", "--shard", text, "--report-dir", str(tmp_path), "--quiet"]) == 2


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7])
def test_shards_partition_the_cases(n):
    cases = default_cases()
    parts = [shard_cases(cases, i, n) for i in range(1, n + 1)]
    names = [c.name for part in parts for c in part]
    assert sorted(names) == sorted(c.name for c in cases)
    for part in parts:  # each shard keeps the audit's order
        order = [c.name for c in cases if c in part]
        assert [c.name for c in part] == order
    if n == 2:  # the heavy two-sample case (weight 2) sits alone with the lightest
        weights = [sum(c.weight for c in part) for part in parts]
        assert max(weights) - min(weights) <= 1


def test_a_case_a_shard_left_out_for_its_budget_is_listed_in_the_merge(tmp_path):
    _, s1, _ = run(tmp_path, "s1", "--shard", "1/2")
    _, s2, _ = run(tmp_path, "s2", "--shard", "2/2")
    dropped = s2["cases"].pop()  # as if shard 2's budget had left it out
    s2["settings"]["skipped_cases"] = [{"case": dropped["name"], "kind": "budget", "classes": [0],
                                        "reason": "budget: its minimum of 2 decoder calls did not fit"}]
    merged = merge_reports([s1, s2])
    validate_report(merged)
    assert dropped["name"] not in [c["name"] for c in merged["cases"]]
    assert [s["case"] for s in merged["settings"]["skipped_cases"] if s.get("kind") == "budget"] == [dropped["name"]]
    del s2["settings"]["skipped_cases"]  # without the record the case is missing
    with pytest.raises(ShardError, match="missing"):
        merge_reports([s1, s2])


def test_a_shards_plan_note_reaches_the_merged_reports_notes(tmp_path):
    # e.g. a floor its budget could not buy (audit/run/plan.py floor_batches): said in the
    # shard's plan.note, which the merged report (plan null) would otherwise hide
    _, s1, _ = run(tmp_path, "s1", "--shard", "1/2")
    _, s2, _ = run(tmp_path, "s2", "--shard", "2/2")
    s2["plan"]["note"] = "v12-eos-cut needs ≈34 decoder calls (≈9 s) for its required first-token TV 0.02"
    merged = merge_reports([s1, s2])
    validate_report(merged)
    assert merged["plan"] is None
    assert f"shard 2/2 plan: {s2['plan']['note']}" in merged["notes"]
    assert any(n.startswith("shard 1/2 plan:") for n in merged["notes"]) == bool(s1["plan"]["note"])
