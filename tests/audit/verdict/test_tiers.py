"""Severity tiers (issue 23): every check and fuzz rule has a tier; a correct sampler without
input validation passes with its hardening findings listed, ``--strict-inputs`` fails it, an
inexact one fails either way; the report's ``findings`` hold the fuzz findings too."""

import json
import re
from pathlib import Path

import pytest
import torch

from specexact.audit.verdict.tiers import (CHECK_TIERS, FAILING_TIERS, FUZZ_RULE_TIERS, KIND_TIERS, TIERS,
                                   tier_counts, tier_of)
from specexact.audit.verdict.verdict import fails
from specexact.cli import main

ROOT = Path(__file__).parents[3]

#: The small audit of the CLI tests: one case, 2 calls, 5 fuzz examples per family (~4 s).
SMALL = ["--case", "v4-greedy-mix", "--batches", "2", "--fuzz-examples", "5", "--threads", "1", "--no-html",
         "--quiet"]
#: Its checks: v4-greedy-mix and the fuzz phase's generated cases (checked in the tests).
SMALL_CHECKS = 45
UNHARDENED = "specexact.audit.zoo:no_input_validation"
WRONG = "specexact.audit.zoo:residual_absolute"


@pytest.fixture(autouse=True)
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


# --- the table -------------------------------------------------------------------------------

def _emitted_check_types() -> set:
    """Every check type the audit's code names: ``name="..."`` / ``name=f"...["`` literals of
    the modules that build case checks, and the per-event checks."""
    from specexact.audit.checks.decisions_checks import DECISION_CHECK_NAMES

    names = set(DECISION_CHECK_NAMES)
    for path in (ROOT / "audit").rglob("*.py"):
        # adapters' names; calibration of the levels
        if path.relative_to(ROOT / "audit").as_posix() in ("zoo/logits.py", "zoo/calibration.py"):
            continue
        for m in re.finditer(r"""name=f?["']([a-z_]+)(?:\[|["'])""", path.read_text()):
            names.add(m.group(1))
    names.discard("reference")  # tree_case.py: the name of a reference TreeCase, not a check
    return names


def test_every_check_the_audit_emits_has_a_tier():
    from specexact.audit.verdict.diagnosis import CHECK_PARTS

    emitted = _emitted_check_types()
    assert {"sequence_law", "accepted_length", "defect", "acceptance_exact", "lossy_tv"} <= emitted
    missing = sorted(emitted - set(CHECK_TIERS))
    assert not missing, f"checks without a tier (add them to specexact.audit.verdict.tiers.CHECK_TIERS): {missing}"
    assert set(CHECK_PARTS) <= set(CHECK_TIERS)
    assert set(CHECK_TIERS.values()) <= set(TIERS)


def test_every_fuzz_rule_and_finding_kind_has_a_tier():
    from specexact.fuzz.rules import RULES
    from specexact.reports.schema import REPORT_SCHEMA

    assert set(FUZZ_RULE_TIERS) == set(RULES), "a fuzz rule without a tier (specexact.audit.verdict.tiers.FUZZ_RULE_TIERS)"
    kinds = set(REPORT_SCHEMA["$defs"]["finding"]["properties"]["kind"]["enum"]) - {"fuzz"}
    assert kinds == set(KIND_TIERS)
    assert REPORT_SCHEMA["$defs"]["finding"]["properties"]["tier"]["enum"] == list(TIERS)


@pytest.mark.parametrize("finding, tier", [
    ({"check": "sequence_law[class 0]", "kind": "inexactness"}, "inexact"),
    ({"check": "acceptance_exact", "kind": "decision_rule"}, "inexact"),
    ({"check": "accepted_length[class 1]", "kind": "under_accepting"}, "under_accepting"),
    ({"check": "accepted_length[class 1]", "kind": "inexactness"}, "inexact"),
    ({"check": "defect", "kind": "crash"}, "defect"),
    ({"check": "defect", "kind": "timeout"}, "defect"),
    ({"check": "defect", "kind": "protocol_violation"}, "defect"),
    ({"check": "a_future_check[class 0]", "kind": "inexactness"}, "inexact"),  # unknown: fails, never passes
    ({"family": "invalid_inputs", "rule": "refuses_invalid_input"}, "hardening"),
    ({"family": "verify_calls", "rule": "zero_probability_token"}, "defect"),
    ({"family": "verify_calls", "rule": "output_protocol"}, "defect"),
    ({"family": "verify_calls", "rule": "uses_generator"}, "defect"),
    ({"family": "acceptance_probes", "rule": "acceptance_rule"}, "inexact"),
    ({"source": "fuzz", "case": "fuzz", "check": "invalid_inputs / refuses_invalid_input", "kind": "fuzz",
      "family": "invalid_inputs", "rule": "refuses_invalid_input"}, "hardening"),
])
def test_tier_of(finding, tier):
    assert tier_of(finding) == tier


def test_hardening_fails_only_when_strict():
    hardening = [{"family": "invalid_inputs", "rule": "refuses_invalid_input"}]
    assert not fails(hardening) and fails(hardening, strict_inputs=True)
    assert fails([{"check": "defect", "kind": "crash"}])
    assert FAILING_TIERS == ("inexact", "defect", "under_accepting")
    assert tier_counts(hardening) == {"inexact": 0, "defect": 0, "under_accepting": 0, "hardening": 1}


# --- the audit -------------------------------------------------------------------------------

def _report(folder: Path) -> dict:
    (path,) = folder.glob("audit-*.json")
    return json.loads(path.read_text())


@pytest.mark.statistical(checks=SMALL_CHECKS)
def test_a_correct_sampler_without_input_validation_exits_0_with_its_hardening_findings_and_1_with_strict_inputs(
        tmp_path, capsys, alpha):
    from specexact.reports import validate_report

    rate = str(alpha * SMALL_CHECKS)
    lenient, strict = tmp_path / "lenient", tmp_path / "strict"
    assert main(["audit", "--sampler", UNHARDENED, *SMALL, "--false-fail-rate", rate,
                 "--report-dir", str(lenient)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    report = _report(lenient)
    validate_report(report)
    assert report["settings"]["num_checks"] == SMALL_CHECKS, "update SMALL_CHECKS"
    assert report["verdict"] == "pass" and report["settings"]["strict_inputs"] is False
    assert report["tiers"]["hardening"] >= 1 and sum(report["tiers"].values()) == report["tiers"]["hardening"]
    # One list holds every finding: here the fuzz phase's, each with its tier.
    assert report["findings"] and all(f["source"] == "fuzz" and f["tier"] == "hardening" for f in report["findings"])
    assert len(report["findings"]) == len(report["fuzz"]["findings"])
    assert all(f["tier"] == "hardening" for f in report["fuzz"]["findings"])
    assert all(f["reproduction"]["command"].startswith(f"specexact fuzz --sampler {UNHARDENED} --seed 0 ")
               for f in report["findings"])
    assert f"hardening {report['tiers']['hardening']}" in err and "listed, not failing the audit" in err
    assert "fuzz / invalid_inputs / refuses_invalid_input" in err
    assert "verdict: pass;" in err
    diag = report["diagnosis"]
    parts = {p["part"]: p for p in diag["parts"]}
    assert parts["input_validation"]["status"] == "fail" and parts["input_validation"]["tier"] == "hardening"
    assert parts["protocol"]["status"] == "pass" and diag["culprits"] == [] and diag["hardening"] == ["input_validation"]
    assert diag["summary"].startswith("no part found faulty; hardening")
    md = next(lenient.glob("audit-*.md")).read_text()
    assert "**PASS**" in md and "### hardening (" in md and "does not fail the audit" in md
    assert "By tier: inexact 0, defect on valid input 0, under-accepting 0, hardening **" in md

    # The same samples with --strict-inputs: the hardening findings fail it.
    assert main(["audit", "--sampler", UNHARDENED, *SMALL, "--false-fail-rate", rate, "--strict-inputs",
                 "--report-dir", str(strict)]) == 1
    err = " ".join(capsys.readouterr().err.split())
    report = _report(strict)
    validate_report(report)
    assert report["verdict"] == "fail" and report["settings"]["strict_inputs"] is True
    assert report["diagnosis"]["culprits"] == ["input_validation"]
    assert "hardening" in err and "fails the audit" in err and "verdict: fail;" in err


@pytest.mark.statistical(checks=0)
@pytest.mark.parametrize("strict", [False, True])
def test_an_inexact_sampler_exits_1_whatever_strict_inputs(tmp_path, capsys, strict):
    args = ["audit", "--sampler", WRONG, *SMALL, "--report-dir", str(tmp_path)] + (["--strict-inputs"] if strict else [])
    assert main(args) == 1
    report = _report(tmp_path)
    assert report["verdict"] == "fail" and report["tiers"]["inexact"] >= 1
    # the law checks' findings are inexact; the fuzz phase may find the same fault too (as a
    # zero-probability token, a defect: which examples it draws depends on Hypothesis' version)
    assert all(f["tier"] == "inexact" for f in report["findings"] if f["source"] == "check")
    assert any(f["source"] == "check" for f in report["findings"])
    assert "inexact (" in capsys.readouterr().err


@pytest.mark.statistical(checks=0)
def test_a_defect_fuzz_finding_fails_the_audit_and_is_in_the_findings():
    """Before the tiers, ``findings`` could be empty while ``fuzz.findings`` failed the audit."""
    from specexact.audit.verdict.build import build_report

    case = {"name": "v4", "checks": [], "verdict": "pass", "num_sequences": 0, "defect": None, "config": {}}
    fuzz = {"findings": [{"family": "verify_calls", "rule": "zero_probability_token", "message": "emitted token 0",
                          "example": "ProbExample(...)", "replay": "print('REPRODUCED')", "known_as": None}],
            "settings": {"seed": 0, "profile": "ci", "examples_per_family": 25}}
    settings = {"per_check_false_fail_rate": 1e-8, "seed": 0, "false_fail_rate": 1e-6}
    kw = dict(sampler={"name": "s", "target": "m:s"}, environment={}, started_at="2026-12-02T00:00:00+00:00",
              wall_time_s=0.0)
    report = build_report([case], settings=settings, fuzz=fuzz, **kw)
    assert report["verdict"] == "fail" and report["tiers"]["defect"] == 1
    (f,) = report["findings"]
    assert (f["source"], f["tier"], f["case"], f["check"]) == ("fuzz", "defect", "fuzz",
                                                                "verify_calls / zero_probability_token")
    assert f["reproduction"]["python"] == "print('REPRODUCED')"
    hardening = {**fuzz, "findings": [{**fuzz["findings"][0], "family": "invalid_inputs",
                                       "rule": "refuses_invalid_input"}]}
    assert build_report([case], settings=settings, fuzz=hardening, **kw)["verdict"] == "pass"
    assert build_report([case], settings={**settings, "strict_inputs": True}, fuzz=hardening,
                        **kw)["verdict"] == "fail"


@pytest.mark.statistical(checks=0)
def test_in_regression_mode_the_last_line_states_the_verdict_the_exit_status_follows(tmp_path, capsys):
    """A failing audit compared with a baseline of the same failures exits 0: its last line
    must not say ``verdict: fail``."""
    base_dir, run_dir = tmp_path / "base", tmp_path / "run"
    assert main(["audit", "--sampler", WRONG, *SMALL, "--report-dir", str(base_dir)]) == 1
    capsys.readouterr()
    (baseline,) = base_dir.glob("audit-*.json")
    assert main(["audit", "--sampler", WRONG, *SMALL, "--report-dir", str(run_dir), "--baseline",
                 str(baseline)]) == 0
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("verdict: pass (no regression against the baseline; the audit alone: fail);"), last


def test_a_findings_threshold_is_its_checks_own_level_not_the_audits_share():
    # A chi-square check runs at a third of the per-check share (audit/levels.py): its
    # finding said "<= 6.67e-09" (the share) while the check, the terminal and the baseline
    # comparison said 2.22e-09 (its level). The message states the level it was decided at.
    from specexact.audit.verdict.build import build_report

    chk = {"name": "accepted_length[class 0]", "pvalue": 1e-12, "passed": False, "false_fail_rate": 2.22e-9,
           "n": 100, "detectable_tv": 0.1, "details": {}, "description": "d"}
    case = {"name": "v8-plain", "checks": [chk], "config": {}, "num_batches": 2, "seed": 1, "num_sequences": 100}
    settings = {"per_check_false_fail_rate": 6.67e-9, "seed": 0, "false_fail_rate": 1e-6, "device": "cpu"}
    report = build_report([case], sampler={"name": "m:f"}, settings=settings, environment={}, started_at="x",
                          wall_time_s=1.0)
    (finding,) = report["findings"]
    assert "p=1e-12 <= 2.22e-09" in finding["message"] and "6.67e-09" not in finding["message"]
