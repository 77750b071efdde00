"""``specexact audit``: --quick as a smoke test, --list-cases, what the progress lines say."""

import json

import pytest
import torch

from specexact.audit.cases.catalog import find_case
from specexact.audit.cases.dispatch import checks_per_case
from specexact.cli import QUICK_BUDGET_S, main


@pytest.fixture(autouse=True)
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


V8_CHECKS = checks_per_case(find_case("v8-plain", quick=True))


@pytest.mark.statistical(checks=V8_CHECKS)
def test_quick_runs_in_its_own_small_budget_and_says_how_it_plans(tmp_path, capsys, alpha):
    code = main(["audit", "--quick", "--case", "v8-plain", "--report-dir", str(tmp_path), "--no-html",
                 "--false-fail-rate", str(alpha * V8_CHECKS)])
    assert code == 0
    report = json.loads(next(tmp_path.glob("audit-*.json")).read_text())
    assert report["settings"]["budget_s"] == QUICK_BUDGET_S and report["settings"]["case_set"] == "quick"
    err = " ".join(capsys.readouterr().err.split())
    assert f"first plan for {QUICK_BUDGET_S:g} s" in err and "each case is re-planned from the time left" in err
    assert "torch threads: " in err and "(chosen by timing; pilot calls at 1: " in err
    threads = report["settings"]["threads"]["threads"]
    assert f"({threads} torch thread" in err


def test_list_cases_describes_each_case_by_what_it_runs(capsys):
    from specexact.audit import default_cases
    from specexact.audit.cases.catalog import opt_in_cases
    from specexact.audit.cases.tree_case import tree_cases

    assert main(["audit", "--list-cases"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split(":")[0].split(" ")[0] for ln in lines] == [c.name for c in [*default_cases(), *tree_cases(),
                                                                                 *opt_in_cases()]]
    tree = next(ln for ln in lines if ln.startswith("tree-rrs-v4"))
    assert "(tree-protocol samplers of schemes " in tree
    v8 = next(ln for ln in lines if ln.startswith("v8-plain:"))
    assert "[V=8, γ=" in v8 and f"exact sequence law; {V8_CHECKS} checks]" in v8
    zipf = next(ln for ln in lines if ln.startswith("v4096-zipf:"))
    assert "two-sample against naive sampling" in zipf
    verify_level = next(ln for ln in lines if ln.startswith("v32000-verify"))
    assert "(only with --case v32000-verify): [verify level, V=32000" in verify_level


def test_list_cases_names_no_internal_planning_items(capsys):
    assert main(["audit", "--list-cases"]) == 0
    assert "issue" not in capsys.readouterr().out.lower()


def test_a_check_without_a_guaranteed_tv_shows_a_dash(tmp_path, capsys):
    code = main(["audit", "--quick", "--case", "v4-greedy-mix", "--batches", "2", "--quiet", "--no-html",
                 "--threads", "1", "--report-dir", str(tmp_path)])
    assert code in (0, 1)  # not asserted to pass: only the table matters here
    table = capsys.readouterr().out
    row = next(ln for ln in table.splitlines() if "v4-greedy-mix / sequence_law[class 0]" in ln)
    assert "│ -" in row and "inf" not in row


def tree(folder) -> list[str]:
    """Every path under ``folder`` (hidden ones too), relative, sorted."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


@pytest.mark.parametrize("args", [
    ["audit", "--sampler", "no_such_module_xyz:verify"],  # unknown sampler
    ["audit", "--sampler", "no-such-registered-sampler"],
    ["audit", "--engine", "no-such-engine", "--batches", "2"],  # unknown engine
    ["audit", "--engine", "builtin", "--method", "no_such_method", "--batches", "2"],  # unknown method
    ["audit", "--method", "draft_model"],  # bad arguments
    ["audit", "--budget", "-1"],
    ["audit", "--engine", "builtin", "--requests-per-class", "1"],
    ["audit", "--case", "no-such-case"],
    ["audit", "--device", "no-such-device"],
    ["fuzz", "--sampler", "no_such_module_xyz:verify"],
    ["fuzz", "--examples", "0"],
], ids=lambda args: " ".join(args))
def test_a_refused_command_leaves_nothing_behind(args, tmp_path, monkeypatch, capsys):
    """Refused before the audit starts: no report folder, no journal, no lock, in the
    folder it runs from (the default ``--report-dir``) or anywhere under it."""
    (tmp_path / "kept.txt").write_text("x")
    before = tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", list(__import__("sys").path))  # --sampler puts the cwd first
    assert main(args) == 2
    assert "error" in capsys.readouterr().err
    assert tree(tmp_path) == before
