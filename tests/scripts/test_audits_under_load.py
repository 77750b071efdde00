"""scripts/audits_under_load.py: an audit that does not pass, or that runs past its budget
plus 10 %, makes the script exit 1; the rows and the summary go to --out. The audits
themselves are simulated (``one_run``); the measured figures are in the closing notes."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("audits_under_load", ROOT / "scripts" / "audits_under_load.py")
script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(script)


def fake_runs(walls, verdicts=None):
    def one_run(i, engine, budget, call_timeout, work):
        wall = walls[i]
        return {"run": i, "call_timeout_s": call_timeout, "exit_status": 0 if (verdicts or {}).get(i, "pass") == "pass"
                else 1, "verdict": (verdicts or {}).get(i, "pass"), "wall_s": wall, "budget_s": budget,
                "within_budget": wall <= budget * script.ALLOWED_OVERRUN}
    return one_run


@pytest.mark.parametrize("walls, verdicts, status", [
    ([50.0, 66.0, 40.0], None, 0),       # 66 s is budget + 10 %: still within
    ([50.0, 66.1, 40.0], None, 1),       # past it
    ([50.0, 51.0, 40.0], {1: "fail"}, 1),  # a correct engine that fails
])
def test_exit_status_follows_the_budget_and_the_verdicts(monkeypatch, tmp_path, walls, verdicts, status):
    monkeypatch.setattr(script, "one_run", fake_runs(walls, verdicts))
    out = tmp_path / "rows.json"
    assert script.main(["--runs", "3", "--budget", "60", "--out", str(out)]) == status
    summary = json.loads(out.read_text())
    assert [r["call_timeout_s"] for r in summary["runs"]] == [60.0, 300.0, 60.0]  # taken in turn
    assert summary["all_pass_within_budget"] is (status == 0) and summary["max_wall_s"] == max(walls)


def test_the_audit_command_is_the_budgeted_engine_audit():
    cmd = script.audit_command("builtin", 60.0, 300.0, 3, Path("/tmp/r"))
    assert cmd[1:4] == ["-m", "specexact", "audit"]
    assert cmd[cmd.index("--budget") + 1] == "60" and cmd[cmd.index("--call-timeout") + 1] == "300"
    assert cmd[cmd.index("--engine") + 1] == "builtin" and cmd[cmd.index("--seed") + 1] == "3"
