"""``specexact fuzz`` and the audit's fuzz options: exit statuses, files, the hook."""

import json

import pytest

from specexact.audit.cases.dispatch import checks_per_case
from specexact.cli import main
from specexact.decoders import verify
from specexact.fuzz import FuzzSettings
from specexact.audit.cases.generated import generated_cases

GENERATED_CHECKS = sum(checks_per_case(c) for c in generated_cases(verify, FuzzSettings(seed=0)))


def fuzz(tmp_path, *args):
    return main(["fuzz", "--examples", "3", "--quiet", "--report-dir", str(tmp_path), *args])


@pytest.mark.statistical(checks=GENERATED_CHECKS)
def test_nothing_found_exits_0_and_writes_the_result(tmp_path, alpha):
    code = fuzz(tmp_path, "--sampler", "builtin", "--batches", "2", "--false-fail-rate", str(alpha * GENERATED_CHECKS))
    assert code == 0
    (path,) = tmp_path.glob("fuzz-builtin-*.json")
    doc = json.loads(path.read_text())
    assert doc["schema"] == "specexact.fuzz/1" and doc["verdict"] == "pass"
    assert doc["generated_cases"] == ["fuzz-rows-1", "fuzz-laws-1"] and all(c["verdict"] == "pass" for c in doc["cases"])


def test_a_finding_exits_1_with_a_replay_that_reproduces(tmp_path, capsys):
    import contextlib
    import io

    # 5 examples per family (seed 0) already find the fault: the command's exit, files and
    # replays are the subject here; the fuzz phase's CI size (25) on the same fault is
    # tests/audit/zoo/test_floats.py::test_each_planted_fault_is_caught[accepts_at_equality].
    code = fuzz(tmp_path, "--sampler", "specexact.audit.zoo_float:accepts_at_equality", "--exact-only",
                "--examples", "5")
    assert code == 1
    (path,) = tmp_path.glob("fuzz-*.json")
    doc = json.loads(path.read_text())
    # every distinct (family, rule, input family) is a finding (the families check every example)
    assert doc["findings"] and all(f["rule"] == "zero_probability_token" for f in doc["findings"])
    for finding in doc["findings"]:
        script = open(finding["replay_path"]).read()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(script, finding["replay_path"], "exec"), {})
        assert "REPRODUCED" in out.getvalue(), finding["example"]
    assert (tmp_path / ".fuzz-examples").is_dir(), "the failure is saved beside the reports"
    assert "fuzz finding acceptance_probes / zero_probability_token" in capsys.readouterr().err


def test_the_fuzzer_that_cannot_run_exits_2(tmp_path):
    assert fuzz(tmp_path, "--sampler", "no.such.module:verify") == 2
    assert fuzz(tmp_path, "--examples", "0") == 2
    assert fuzz(tmp_path, "--false-fail-rate", "2") == 2


@pytest.mark.statistical(checks=2 * (8 + GENERATED_CHECKS))
def test_audit_fuzzes_unless_no_fuzz(tmp_path, alpha):
    args = ["audit", "--quick", "--case", "v8-plain", "--batches", "2", "--quiet", "--no-html", "--no-journal",
            "--false-fail-rate", str(alpha * (8 + GENERATED_CHECKS))]
    assert main([*args, "--report-dir", str(tmp_path / "on")]) == 0
    (on,) = (tmp_path / "on").glob("audit-*.json")
    report = json.loads(on.read_text())
    assert report["fuzz"]["verdict"] == "pass" and report["plan"]["fuzz"]["profile"] == "ci"
    assert [c["name"] for c in report["cases"]] == ["v8-plain", "fuzz-rows-1", "fuzz-laws-1"]
    assert "## Fuzz phase" in on.with_suffix(".md").read_text()
    assert main([*args, "--no-fuzz", "--report-dir", str(tmp_path / "off")]) == 0
    (off,) = (tmp_path / "off").glob("audit-*.json")
    report = json.loads(off.read_text())
    assert "fuzz" not in report and [c["name"] for c in report["cases"]] == ["v8-plain"]


ROWS_CHECKS = checks_per_case(generated_cases(verify, FuzzSettings(seed=0))[0])


@pytest.mark.statistical(checks=ROWS_CHECKS)
def test_generated_cases_that_cannot_audit_the_sampler_are_skipped_as_in_the_audit(tmp_path, alpha, capsys):
    """``specexact fuzz`` on a block verifier (token-wise verify-level laws do not apply) and a
    tree-protocol sampler (no chain case applies): the cases are skipped with the reason, as
    ``specexact audit`` skips them, not an internal error."""
    code = main(["fuzz", "--examples", "3", "--report-dir", str(tmp_path / "b"), "--sampler", "block", "--batches", "2",
                 "--false-fail-rate", str(alpha * ROWS_CHECKS)])
    cap = capsys.readouterr()
    out = (cap.out + cap.err).replace("\n", " ")
    assert code == 0, out
    (path,) = (tmp_path / "b").glob("fuzz-block-*.json")
    assert [c["case"]["name"] if isinstance(c.get("case"), dict) else c.get("name") for c in
            json.loads(path.read_text())["cases"]] == ["fuzz-rows-1"]
    assert "skipped fuzz-laws-1: the verify-level laws" in out
    assert main(["fuzz", "--examples", "3", "--report-dir", str(tmp_path / "t"), "--sampler", "tree-target-only"]) == 0
    cap = capsys.readouterr()
    out = (cap.out + cap.err).replace("\n", " ")
    assert "skipped fuzz-rows-1" in out and "tree_calls 3" in out and "not applicable: acceptance_probes" in out
