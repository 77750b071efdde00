"""The `specexact audit` command: exit statuses, reports, sampler resolution."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specexact.audit import SamplerError, resolve_sampler
from specexact.audit.checks.decisions_checks import DECISION_CHECKS
from specexact.cli import main

QUICK = ["--case", "v8-plain", "--batches", "2", "--quiet", "--no-fuzz"]


def run_cli(args, tmp_path):
    return main(["audit", *args, "--report-dir", str(tmp_path)])


@pytest.mark.statistical(checks=8)
def test_builtin_audit_passes_and_writes_reports(tmp_path, alpha, capsys):
    code = run_cli([*QUICK, "--false-fail-rate", str(alpha * 8), "--json", str(tmp_path / "x.json")], tmp_path)
    assert code == 0
    reports = sorted(tmp_path.glob("audit-builtin-*.json"))
    assert len(reports) == 1 and reports[0].with_suffix(".md").exists()
    data = json.loads(reports[0].read_text())
    assert data["verdict"] == "pass" and data["schema"] == "specexact.audit/1"
    # 2 classes x 4 checks and the 6 per-event checks, at alpha * 8 / 14 each (8 declared)
    assert len(data["checks"]) == 8 + DECISION_CHECKS and all(c["case"] == "v8-plain" for c in data["checks"])
    for chk in data["checks"]:
        assert {"pvalue", "n", "false_fail_rate", "detectable_tv", "method"} <= set(chk)
    assert json.loads((tmp_path / "x.json").read_text())["verdict"] == "pass"
    assert "sequence_law" in capsys.readouterr().out


@pytest.mark.statistical(checks=0)
def test_biased_verifier_exits_1_and_names_the_failing_check(tmp_path, alpha, capsys):
    # --no-fuzz: the statistical case's exit and finding are the subject (the fuzz phase's
    # exit 1: tests/cli/test_cli_fuzz.py, tests/audit/run/test_fuzz_stage.py)
    code = run_cli(["--case", "v12-eos-cut", "--batches", "4", "--quiet", "--no-fuzz", "--false-fail-rate",
                    str(alpha * 8), "--sampler", "specexact.audit.zoo:resample_from_target"], tmp_path)
    assert code == 1
    data = json.loads(next(tmp_path.glob("audit-*.json")).read_text())
    assert data["verdict"] == "fail"
    assert any(f["check"].startswith("sequence_law") for f in data["findings"])
    assert "sequence_law" in capsys.readouterr().err


def crashing_verifier(ids, draft_probs, target_probs, generator=None):
    raise RuntimeError("boom")


def out_of_range_verifier(ids, draft_probs, target_probs, generator=None):
    import torch

    return torch.full((ids.shape[0], ids.shape[1] + 1), draft_probs.shape[-1], dtype=torch.long)


@pytest.mark.parametrize("fn, text", [("crashing_verifier", "RuntimeError: boom"),
                                      ("out_of_range_verifier", "outside")])
def test_defects_exit_1(tmp_path, fn, text, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    code = run_cli([*QUICK, "--sampler", f"test_cli:{fn}"], tmp_path)
    assert code == 1
    data = json.loads(next(tmp_path.glob("audit-*.json")).read_text())
    assert text in data["cases"][0]["defect"]


@pytest.mark.parametrize("args", [
    ["--sampler", "no.such.module:verify"],
    ["--sampler", "specexact.decoders:no_such_function"],
    ["--sampler", "not-registered"],
    ["--case", "no-such-case"],
    ["--budget", "0"],
    ["--false-fail-rate", "2"],
    ["--device", "no-such-device"],
])
def test_cannot_run_exits_2(tmp_path, args):
    assert run_cli(["--quiet", *args], tmp_path) == 2


def test_bad_option_exits_2(tmp_path):
    with pytest.raises(SystemExit) as exc:
        run_cli(["--batches", "x"], tmp_path)
    assert exc.value.code == 2


def test_resolve_sampler_forms():
    from specexact.decoders import verify

    assert resolve_sampler("builtin")[0] is verify
    assert resolve_sampler("specexact.decoders:verify")[0] is verify
    with pytest.raises(SamplerError, match="unknown sampler"):
        resolve_sampler("nope")


def test_console_script_and_module_entry(tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    out = subprocess.run([sys.executable, "-m", "specexact", "audit", "--list-cases"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and "v8-plain" in out.stdout


@pytest.mark.parametrize("args", [
    ["--case-timeout", "0"],
    ["--call-timeout", "-1"],
    ["--threads", "0"],
    ["--history", "-1"],
    ["--shard", "2/1"],
    ["--budget", "nan"],
])
def test_new_options_that_cannot_run_exit_2(tmp_path, args):
    assert run_cli(["--quiet", *args], tmp_path) == 2


def test_merge_and_render_cannot_run_exit_2(tmp_path):
    (tmp_path / "bad.json").write_text("{}")
    assert main(["merge", str(tmp_path / "bad.json"), "--report-dir", str(tmp_path), "--quiet"]) == 2
    assert main(["render", str(tmp_path / "bad.json")]) == 2
    assert main(["render", str(tmp_path / "missing.json")]) == 2


def test_quick_list_cases(capsys):
    assert main(["audit", "--quick", "--list-cases"]) == 0
    assert "v8-plain" in capsys.readouterr().out


def test_render_rewrites_markdown_and_html(tmp_path):
    assert run_cli([*QUICK, "--no-html", "--no-journal"], tmp_path) in (0, 1)
    report = next(tmp_path.glob("audit-*.json"))
    assert not report.with_suffix(".html").exists()
    assert main(["render", str(report)]) == 0
    assert report.with_suffix(".html").exists() and "specexact audit" in report.with_suffix(".md").read_text()


@pytest.mark.statistical(checks=17)
def test_baseline_mode_exits_1_only_on_regression(tmp_path, alpha):
    """A pass against its own earlier pass is 0; a biased sampler against that baseline is 1.

    Ledger: two correct audits of 8 checks, plus the baseline comparison's whole
    false-alarm rate (one check's share). The comparison is of the case's checks: no fuzz
    phase and no thread choice (together 5 s of each 6 s audit)."""
    rate = str(alpha * 8)
    common = ["--case", "v12-eos-cut", "--batches", "4", "--no-fuzz", "--threads", "1", "--quiet", "--no-html",
              "--false-fail-rate", rate]
    assert run_cli([*common, "--json", str(tmp_path / "base.json")], tmp_path) == 0
    assert run_cli([*common, "--baseline", str(tmp_path / "base.json"), "--baseline-false-alarm-rate", str(alpha),
                    "--json", str(tmp_path / "again.json")], tmp_path) == 0
    again = json.loads((tmp_path / "again.json").read_text())
    assert again["baseline"]["regressed"] is False
    code = run_cli([*common, "--sampler", "specexact.audit.zoo:resample_from_target",
                    "--baseline", str(tmp_path / "base.json"), "--json", str(tmp_path / "bad.json")], tmp_path)
    assert code == 1
    assert json.loads((tmp_path / "bad.json").read_text())["baseline"]["regressed"] is True


def test_baseline_unreadable_exits_2(tmp_path):
    (tmp_path / "junk.json").write_text("{not json")
    assert run_cli(["--quiet", "--baseline", str(tmp_path / "junk.json")], tmp_path) == 2
    (tmp_path / "other.json").write_text('{"schema": "something-else"}')
    assert run_cli(["--quiet", "--baseline", str(tmp_path / "other.json")], tmp_path) == 2


def test_a_malformed_baseline_is_refused_before_sampling(tmp_path, capsys):
    """A report of the right schema name whose fields do not match the schema (here a
    check without its p-value) is refused with one line naming the mismatch, exit 2."""
    recorded = json.loads((Path(__file__).parents[2] / "reports/engines/lmdeploy/baseline-lmdeploy.json").read_text())
    del recorded["checks"][0]["pvalue"]
    (tmp_path / "bad.json").write_text(json.dumps(recorded))
    capsys.readouterr()
    assert run_cli(["--quiet", "--baseline", str(tmp_path / "bad.json")], tmp_path) == 2
    err = capsys.readouterr().err.strip()
    assert "does not match the specexact.audit/1 schema" in err and "pvalue" in err, err
    assert not list(tmp_path.glob("audit-*.json"))  # nothing sampled, nothing reported


def test_a_baseline_without_checks_is_refused_before_sampling(tmp_path, capsys):
    recorded = json.loads((Path(__file__).parents[2] / "reports/engines/lmdeploy/baseline-lmdeploy.json").read_text())
    recorded["checks"] = []
    (tmp_path / "empty.json").write_text(json.dumps(recorded))
    capsys.readouterr()
    assert run_cli(["--quiet", "--baseline", str(tmp_path / "empty.json")], tmp_path) == 2
    err = capsys.readouterr().err.strip()
    assert "holds no checks" in err and len(err.splitlines()) == 1, err
    assert not list(tmp_path.glob("audit-*.json"))


def test_a_device_without_generators_is_exit_2(tmp_path, capsys):
    assert run_cli([*QUICK, "--device", "meta"], tmp_path) == 2
    captured = capsys.readouterr()
    assert "--device 'meta' is not usable" in (captured.out + captured.err).replace("\n", " ")


def test_a_comparison_that_fails_keeps_the_reports_and_exits_2(tmp_path, capsys, monkeypatch):
    """The audit's result is not lost when the baseline comparison itself fails."""
    import specexact.audit.verdict.baseline as baseline_mod

    def broken(*a, **k):
        raise TypeError("planted\nin the comparison")

    monkeypatch.setattr(baseline_mod, "compare_to_baseline", broken)
    base = Path(__file__).parents[2] / "reports/engines/lmdeploy/baseline-lmdeploy.json"
    capsys.readouterr()
    assert run_cli([*QUICK, "--no-fuzz", "--baseline", str(base)], tmp_path) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("specexact: error:")]
    assert len(errors) == 1 and "comparison with --baseline" in errors[0], errors
    assert "planted in the comparison" in errors[0]  # one line
    (written,) = tmp_path.glob("audit-builtin-*.json")
    assert "baseline" not in json.loads(written.read_text())


def test_a_baseline_nested_too_deep_is_not_json(tmp_path, capsys):
    (tmp_path / "deep.json").write_text("[" * 100000)
    capsys.readouterr()
    assert run_cli(["--quiet", "--baseline", str(tmp_path / "deep.json")], tmp_path) == 2
    assert "not JSON" in capsys.readouterr().err


@pytest.mark.statistical(checks=0)
def test_a_hang_without_isolate_ends_in_seconds_pilot_included(tmp_path, monkeypatch):
    # In process a hanging sampler hung the pilot and the audit; --call-timeout stops the
    # wait: the pilot times the built-in verify instead, the case records a timeout defect.
    import time

    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    start = time.perf_counter()
    code = main(["audit", "--quick", "--case", "v8-plain", "--budget", "6", "--sampler", "faulty_samplers:hangs_on_v8",
                 "--call-timeout", "0.5", "--no-fuzz", "--threads", "1", "--report-dir", str(tmp_path), "--quiet",
                 "--no-html"])
    assert code == 1 and time.perf_counter() - start < 60
    report = json.loads(next(tmp_path.glob("audit-*.json")).read_text())
    (case,) = report["cases"]
    assert "SamplerCallTimeout" in case["defect"] and "within 0.5 s" in case["defect"]
    assert any(f["kind"] == "timeout" and f["tier"] == "defect" for f in report["findings"])
