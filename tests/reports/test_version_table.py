"""The version sweep's table (reports/version_table.py) on fixture reports: no install, no engine."""

import pytest

from specexact.reports.version_table import (
    TABLE_SCHEMA,
    audit_row,
    failure_row,
    finding_name,
    finding_ranges,
    replay_row,
    version_key,
    version_table,
    version_table_markdown,
)


def _report(verdict="pass", findings=(), tvs=(0.31, 0.35), sequences=896):
    """A minimal specexact.audit/1 report: the fields the table reads."""
    tiers = {"inexact": 0, "defect": 0, "under_accepting": 0, "hardening": 0}
    for f in findings:
        tiers[f["tier"]] += 1
    checks = [{"case": "e2e", "name": f"sequence_law[class {i}]", "detectable_tv": tv} for i, tv in enumerate(tvs)]
    checks.append({"case": "e2e", "name": "reproducible", "detectable_tv": 0.0})
    return {"verdict": verdict, "tiers": tiers, "num_sequences": sequences, "wall_time_s": 71.5,
            "settings": {"budget_s": 60.0, "skipped_cases": [{"case": "e2e-llama-v64-draft_model-long-g4"}]},
            "cases": [{"name": "e2e-llama-v64-draft_model-g2"}], "checks": checks, "sampler": {"metadata": None},
            "findings": [dict(f, source="check", case="e2e", message="...") for f in findings]}


UNDER = {"check": "accepted_length[class 1]", "tier": "under_accepting"}


def test_version_key_orders_releases_numerically():
    assert sorted(["5.14.1", "5.9.0", "5.0.0", "5.10.4", "5.14.0", "5.0.0rc1"], key=version_key) == [
        "5.0.0rc1", "5.0.0", "5.9.0", "5.10.4", "5.14.0", "5.14.1"]
    with pytest.raises(ValueError, match="'latest'"):
        version_key("latest")


def test_audit_row_reads_the_verdict_tiers_findings_and_power():
    row = audit_row("5.14.1", "draft_model", _report("fail", [UNDER]), path="reports/x.json", exit_status=1)
    assert row["status"] == "ran" and row["verdict"] == "fail"
    assert row["tiers"] == {"inexact": 0, "defect": 0, "under_accepting": 1, "hardening": 0}
    assert row["findings"] == [{"check": "accepted_length[class 1]", "tier": "under_accepting", "source": "check"}]
    assert row["detectable_tv"] == 0.35  # the worst class's sequence law, not the exact check's 0
    assert audit_row("5.0.0", "draft_model", _report(tvs=(None, None)))["detectable_tv"] is None
    assert (row["sequences"], row["budget_s"], row["exit_status"]) == (896, 60.0, 1)
    with pytest.raises(ValueError, match="verdict and tiers"):
        audit_row("5.0.0", "draft_model", {"schema": "x"})


def test_failure_rows_keep_one_line_and_a_known_status():
    row = failure_row("5.3.0", None, "env-failed", "Collecting x\nERROR: No matching distribution\n\n")
    assert row == {"version": "5.3.0", "method": None, "status": "env-failed", "error": "ERROR: No matching distribution"}
    with pytest.raises(ValueError, match="'crashed'"):
        failure_row("5.3.0", "draft_model", "crashed", "boom")


def test_a_defect_is_named_by_what_went_wrong():
    crash = {"check": "defect", "tier": "defect", "message": "m",
             "defect": "crash in speculative generate call 3: TypeError: isin() received an invalid combination\n"
                       " * (Tensor elements, ...); alone, these crash: class 0\nTraceback ..."}
    assert finding_name(crash) == "defect: TypeError: isin() received an invalid combination"
    assert finding_name(dict(crash, defect="crash in speculative generate call 0: TypeError: isin() received an "
                                           "invalid combination; alone, these crash: class 2")) == finding_name(crash)
    assert finding_name({"check": "sequence_law[class 2]", "tier": "inexact"}) == "sequence_law[class 2]"
    # vLLM: an index read from uninitialised memory, and what the audit did after the crash, are not the name.
    vllm = [{"check": "defect", "tier": "defect", "defect": f"crash in speculative generate call 0: RuntimeError: "
             f"index {i} is out of bounds for dimension 1 with size 64{rest}"}
            for i, rest in ((64, "; alone, these crash: class 1"),
                            (-1879048448, "; the engine could not be loaded again after a crash (AttributeError: x)"),
                            (1074849628, "; in fresh processes, alone, these crash: class 1"))]
    assert {finding_name(f) for f in vllm} == {"defect: RuntimeError: index <n> is out of bounds for dimension 1 with size 64"}


def test_replay_rows_read_the_exit_status():
    assert replay_row("5.0.0", "f", "s.py", 1, "a\nfinding reproduced\n")["status"] == "reproduced"
    # A Python exception exits 1 too: without the script's own last line it is an error.
    assert replay_row("5.0.0", "f", "s.py", 1, "a\nTypeError: isin()")["status"] == "error"
    assert replay_row("5.0.0", "f", "s.py", 0, "not reproduced")["status"] == "not reproduced"
    err = replay_row("5.0.0", "f", "s.py", None, "TimeoutExpired: ...")
    assert err["status"] == "error" and err["printed"] == ["TimeoutExpired: ..."]
    assert replay_row("5.0.0", "f", "s.py", 2, "\n".join(map(str, range(9))))["printed"] == ["4", "5", "6", "7", "8"]


def _sweep():
    rows = [
        audit_row("5.14.1", "draft_model", _report("fail", [UNDER]), path="reports/versions/transformers/5.14.1/a.json"),
        audit_row("5.0.0", "draft_model", _report("fail", [UNDER])),
        audit_row("5.9.0", "draft_model", _report(tvs=(None,))),  # ran, not seen (and no power): no fix claimed
        audit_row("5.25.0", "draft_model", _report("fail", [UNDER])),
        failure_row("5.3.0", None, "env-failed", "ERROR: Could not build wheels for tokenizers"),
        failure_row("5.9.0", "prompt_lookup", "audit-failed", "exit 2: engine transformers: ImportError"),
        failure_row("5.24.0", "draft_model", "audit-failed", "TimeoutExpired: ..."),  # not a version "without" it
    ]
    replays = [
        replay_row("5.0.0", "other", "o.py", 1, "finding reproduced", method="draft_model", matches="isin()"),
        replay_row("5.0.0", "warpers", "r.py", 1, "finding reproduced", method="draft_model", matches="accepted_length["),
        replay_row("5.9.0", "warpers", "r.py", 1, "finding reproduced", method="draft_model"),
        replay_row("5.14.1", "warpers", "r.py", 0, "not reproduced", method="draft_model"),
        replay_row("5.25.0", "warpers", "r.py", 0, "not reproduced", method="draft_model", matches="accepted_length["),
        replay_row("5.24.0", "warpers", "r.py", 2, "Traceback\nAttributeError: x", method="draft_model"),
    ]
    return rows, replays


def test_finding_ranges_first_last_and_fixed_in():
    rows, replays = _sweep()
    audit, other, replay = finding_ranges(rows, replays)
    assert other["finding"] == "other" and other["affects"] == ["5.0.0", "5.0.0"]
    assert audit["kind"] == "audit" and audit["finding"] == "accepted_length[class 1]"
    assert audit["versions"] == ["5.0.0", "5.14.1", "5.25.0"] and audit["affects"] == ["5.0.0", "5.25.0"]
    assert audit["fixed_in"] is None  # a statistical finding's absence is not a fix
    assert audit["not_seen_in"] == ["5.9.0"] and audit["tier"] == ["under_accepting"]
    assert audit["replays_at_ends"] == {"5.0.0": {"warpers": "reproduced"}, "5.25.0": {"warpers": "not reproduced"}}
    assert replay["versions"] == ["5.0.0", "5.9.0"] and replay["affects"] == ["5.0.0", "5.9.0"]
    assert replay["fixed_in"] == "5.14.1"  # the first swept version after 5.9.0 where the replay ran clean
    assert replay["not_seen_in"] == ["5.14.1", "5.25.0"] and replay["errors"] == ["5.24.0"]


def test_a_replay_may_confirm_any_of_several_names():
    rows = [audit_row("0.31.0", "draft_model", _report("fail", [{"check": "defect", "tier": "defect", "defect":
                                                                 "crash in speculative generate call 0: RuntimeError: "
                                                                 "selected index k out of range"}]))]
    pieces = ("out of bounds for dimension 1", "selected index k out of range")
    replays = [replay_row("0.31.0", "topk", "t.py", 1, "finding reproduced", method="draft_model", matches=pieces),
               replay_row("0.31.0", "law", "l.py", 1, "finding reproduced", method="draft_model", matches=pieces[:1])]
    (audit, *_) = finding_ranges(rows, replays)
    assert audit["replays_at_ends"] == {"0.31.0": {"topk": "reproduced"}}
    assert replays[0]["matches"] == list(pieces)  # as the JSON table keeps it


def test_a_replay_never_reproduced_has_no_range():
    (only,) = finding_ranges([], [replay_row("5.0.0", "f", "r.py", 0, "not reproduced")])
    assert only["affects"] is None and only["fixed_in"] is None and only["versions"] == []


def test_the_table_sorts_versions_and_renders_every_row():
    rows, replays = _sweep()
    table = version_table(rows, replays, engine="transformers", settings={"budget_s": 60}, notes=["short budgets"])
    assert table["schema"] == TABLE_SCHEMA
    assert table["versions"] == ["5.0.0", "5.3.0", "5.9.0", "5.14.1", "5.24.0", "5.25.0"]
    assert [(r["version"], r["method"]) for r in table["rows"]][:3] == [
        ("5.0.0", "draft_model"), ("5.3.0", None), ("5.9.0", "draft_model")]
    md = version_table_markdown(table, links_from="reports/versions")
    assert "| 5.3.0 | (all) | **env-failed**: ERROR: Could not build wheels for tokenizers | – |" in md
    assert "| 5.9.0 | prompt_lookup | **audit-failed**: exit 2: engine transformers: ImportError |" in md
    assert ("| 5.14.1 | draft_model | **fail** (inexact 0, defect 0, under-accepting 1, hardening 0) | g2 (left out: long-g4) | 896 | 72 s | "
            "0.35 | `accepted_length[class 1]`: under_accepting | [json](transformers/5.14.1/a.json) |") in md
    assert ("| 5.9.0 | draft_model | **pass** (inexact 0, defect 0, under-accepting 0, hardening 0) | g2 (left out: long-g4) | "
            "896 | 72 s | none: exact checks only |") in md
    assert "| `warpers` | replay | draft_model | 5.0.0 – 5.9.0 | 5.0.0, 5.9.0 | 5.14.1 | 5.14.1, 5.25.0 |" in md
    assert "errors in 5.24.0" in md and "- short budgets" in md


def test_an_empty_sweep_says_so():
    md = version_table_markdown(version_table([], [], engine="transformers"))
    assert "No finding in any swept version." in md


def test_a_quoted_exception_keeps_its_code_span():
    crash = {"check": "defect", "tier": "defect", "source": "check",
             "defect": "crash in speculative generate call 0: ValueError: Passing `MinLengthLogitsProcessor` is disabled"}
    report = dict(_report(), verdict="fail", findings=[crash], tiers={"inexact": 0, "defect": 1, "under_accepting": 0,
                                                                     "hardening": 0})
    md = version_table_markdown(version_table([audit_row("5.0.0", "draft_model", report)], engine="transformers"))
    assert "`defect: ValueError: Passing 'MinLengthLogitsProcessor' is disabled`: defect" in md
    rep = replay_row("5.0.0", "f", "r.py", 1, "ValueError: Passing `MinLengthLogitsProcessor`\nfinding reproduced")
    md = version_table_markdown(version_table([], [rep], engine="transformers"))
    assert "ValueError: Passing 'MinLengthLogitsProcessor'<br>finding reproduced |" in md
