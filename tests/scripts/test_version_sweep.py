"""scripts/version_sweep.py without installs: failure rows, the table it writes, its exit statuses.

The environments are stubbed (``env_maker``): one that cannot be built, one whose Python does
not exist (so each audit and replay cannot start); the real installs and audits are what
``reports/versions/transformers.md`` records.
"""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("version_sweep", ROOT / "scripts" / "version_sweep.py")
version_sweep = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(version_sweep)


def _env_maker(tmp_path):
    def make(version, envs, log):
        if version == "5.3.0":
            raise RuntimeError("pip said\nERROR: No matching distribution found for transformers==5.3.0")
        return tmp_path / "no-such-env" / "bin" / "python"
    return make


def test_failures_are_rows_and_the_table_is_written(tmp_path):
    out = tmp_path / "versions"
    logged = []
    status = version_sweep.main(["--versions", "5.3.0", "5.14.1", "--out", str(out), "--envs", str(tmp_path / "envs"),
                                 "--budget", "5", "--note", "a stub sweep"],
                                env_maker=_env_maker(tmp_path), log=logged.append)
    assert status == 1  # some row is a failure row; the sweep itself ran
    table = json.loads((out / "transformers.json").read_text())
    assert table["versions"] == ["5.3.0", "5.14.1"] and table["notes"] == ["a stub sweep"]
    env_row, *audit_rows = table["rows"]
    assert env_row == {"version": "5.3.0", "method": None, "status": "env-failed",
                       "error": "ERROR: No matching distribution found for transformers==5.3.0"}
    assert [(r["method"], r["status"]) for r in audit_rows] == [("draft_model", "audit-failed"),
                                                                ("prompt_lookup", "audit-failed")]
    assert all(r["error"].startswith("FileNotFoundError") for r in audit_rows)
    assert sorted((r["version"], r["finding"], r["status"]) for r in table["replays"]) == sorted(
        ("5.14.1", finding, "error") for finding, _, _, _ in version_sweep.REPLAYS)
    assert all(r["printed"][-1].startswith("FileNotFoundError") for r in table["replays"])
    assert table["settings"]["budget_s"] == 5.0
    md = (out / "transformers.md").read_text()
    assert "**env-failed**: ERROR: No matching distribution found for transformers==5.3.0" in md
    # Each version keeps its own rows; --table-only rebuilds the same table from them.
    assert sorted(p.parent.name for p in out.glob("transformers/*/sweep.json")) == ["5.14.1", "5.3.0"]
    assert version_sweep.main(["--table-only", "--out", str(out), "--note", "a stub sweep"], log=logged.append) == 1
    assert json.loads((out / "transformers.json").read_text()) == table
    # --replays-only keeps the audit rows of each version's sweep.json and runs only the replays.
    status = version_sweep.main(["--versions", "5.14.1", "--replays-only", "--out", str(out), "--envs",
                                 str(tmp_path / "envs"), "--note", "a stub sweep"],
                                env_maker=_env_maker(tmp_path), log=logged.append)
    assert status == 1 and json.loads((out / "transformers.json").read_text())["rows"] == table["rows"]
    assert not any("specexact audit" in m for m in logged[logged.index("transformers 5.14.1", 5):])
    # A version with no audits (a bisection by replay): its replays only, no audit row.
    logged.clear()
    version_sweep.main(["--versions", "5.7.0", "--replays-only", "--replays", "transformers-prompt-lookup-no-eos-crash",
                        "--out", str(out), "--envs", str(tmp_path / "envs")], env_maker=_env_maker(tmp_path),
                       log=logged.append)
    bisect = json.loads((out / "transformers.json").read_text())
    assert [r for r in bisect["rows"] if r["version"] == "5.7.0"] == []
    assert [r["finding"] for r in bisect["replays"] if r["version"] == "5.7.0"] == ["transformers-prompt-lookup-no-eos-crash"]
    assert version_sweep.main(["--replays", "no-such-replay", "--out", str(out)], log=logged.append) == 2
    # Replays not named in --replays keep their rows.
    version_sweep.main(["--versions", "5.14.1", "--replays-only", "--replays", "transformers-prompt-lookup-no-eos-crash",
                        "--out", str(out), "--envs", str(tmp_path / "envs")], env_maker=_env_maker(tmp_path),
                       log=logged.append)
    kept = json.loads((out / "transformers" / "5.14.1" / "sweep.json").read_text())["replays"]
    assert sorted(r["finding"] for r in kept) == sorted(f for f, _, _, _ in version_sweep.REPLAYS)


def test_a_failing_sweep_exits_2_with_one_line(tmp_path, capsys):
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert version_sweep.main(["--versions", "5.0.0", "--out", str(blocked)], env_maker=_env_maker(tmp_path),
                              log=lambda m: None) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("version_sweep: ") and str(blocked) in err
    assert version_sweep.main(["--versions", "latest", "--out", str(tmp_path)], log=lambda m: None) == 2
    assert "'latest'" in capsys.readouterr().err


def test_runtime_requirements_pin_the_cpu_torch():
    reqs = version_sweep.runtime_requirements()
    assert reqs[0] == "torch==2.13.0" and sum(r.startswith("torch") for r in reqs) == 1
    assert any(r.startswith("scipy") for r in reqs)


def test_every_replay_of_the_sweep_exists_and_says_how_it_reports():
    for finding, script, method, _ in version_sweep.REPLAYS:
        text = (ROOT / script).read_text()
        assert method in version_sweep.DEFAULT_METHODS, finding
        # The sweep reads the exit status and the script's own last line (replay_row).
        assert '"finding reproduced" if reproduced else "not reproduced"' in text, script
        assert "sys.exit(1 if reproduced else 0)" in text, script
