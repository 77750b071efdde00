"""``specexact audit --engine``: an engine's generate loop under the per-call limit, from the CLI."""

import json
import textwrap

import pytest
import torch

from specexact.cli import main
from specexact.reports.html import render_html


@pytest.fixture(autouse=True)
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.statistical(checks=0)  # a hang is exact
def test_a_hanging_engine_ends_the_audit_with_a_timeout_defect_and_its_replay(tmp_path, monkeypatch, capsys):
    (tmp_path / "hangmod.py").write_text(textwrap.dedent('''
        import time
        from specexact.decoders.engines.builtin import BuiltinEngine

        class Hangs(BuiltinEngine):
            name = "hangs"

            def generate(self, requests, *, speculative):
                if speculative:
                    time.sleep(30)
                return super().generate(requests, speculative=speculative)
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "reports"
    code = main(["audit", "--engine", "hangmod:Hangs", "--method", "draft_model", "--requests-per-class", "8",
                 "--case", "e2e-llama-v64-draft_model-g2", "--batches", "2", "--call-timeout", "1", "--threads", "1", "--report-dir", str(out), "--no-html",
                 "--no-journal", "--quiet"])
    assert code == 1
    (path,) = out.glob("audit-*.json")  # the report is kept
    report = json.loads(path.read_text())
    (finding,) = report["findings"]
    assert finding["tier"] == "defect" and finding["kind"] == "timeout", finding
    assert "no result within 1 s" in finding["message"]
    command = finding["reproduction"]["command"]
    assert command.startswith("specexact audit --engine hangmod:Hangs --method draft_model --pair llama-v64 "
                              "--requests-per-class 8"), command


@pytest.mark.statistical(checks=0)  # a hang is exact
def test_a_hang_in_the_planning_pilot_is_no_finding_the_cases_own_call_finds_it(tmp_path, monkeypatch):
    """The pilot's calls are probes (audit/run/pilot.py): one past the limit is abandoned,
    never a finding; the hang is the defect of the case's own first call."""
    (tmp_path / "hangmod2.py").write_text(textwrap.dedent('''
        import time
        from specexact.decoders.engines.builtin import BuiltinEngine

        class Hangs(BuiltinEngine):
            name = "hangs"

            def generate(self, requests, *, speculative):
                if speculative:
                    time.sleep(30)
                return super().generate(requests, speculative=speculative)
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "reports"
    code = main(["audit", "--engine", "hangmod2:Hangs", "--method", "draft_model", "--requests-per-class", "8",
                 "--case", "e2e-llama-v64-draft_model-g2", "--budget", "30", "--call-timeout", "1", "--threads", "1", "--report-dir", str(out), "--no-html",
                 "--no-journal", "--quiet"])
    assert code == 1
    (path,) = out.glob("audit-*.json")
    (finding,) = json.loads(path.read_text())["findings"]
    assert finding["tier"] == "defect" and finding["kind"] == "timeout", finding
    assert finding["message"].startswith("timeout in speculative generate call 0: "), finding["message"]
    assert "hangs.generate: no result within 1 s" in finding["message"] and "not called" not in finding["message"]


@pytest.mark.parametrize("flags", [["--method", "draft_model"], ["--pair", "llama-v64"], ["--requests-per-class", "8"]])
def test_engine_options_without_an_engine_are_refused(flags, capsys):
    assert main(["audit", "--quick", "--case", "v8-plain", "--no-journal", *flags]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{flags[0]} chooses an engine's end-to-end cases: give --engine too" in err


def test_several_engine_options_without_an_engine_are_named_together(capsys):
    assert main(["audit", "--quick", "--case", "v8-plain", "--no-journal", "--method", "draft_model", "--pair",
                 "llama-v64", "--requests-per-class", "8"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--method, --pair and --requests-per-class choose an engine's end-to-end cases: give --engine too" in err


def test_sampler_and_engine_together_are_refused(capsys):
    assert main(["audit", "--sampler", "builtin", "--engine", "builtin", "--batches", "2", "--no-journal"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "give --sampler (a verify function) or --engine (an engine's own generate loop), not both" in err


def test_list_cases_with_an_engine_lists_its_end_to_end_cases(capsys):
    from specexact.audit.cases.e2e.catalog import e2e_cases
    from specexact.decoders.engines.builtin import BuiltinEngine

    assert main(["audit", "--engine", "builtin", "--method", "draft_model", "--list-cases"]) == 0
    out = capsys.readouterr().out
    (case,) = e2e_cases(BuiltinEngine(), "draft_model")
    # the generated scenarios of the audit seed first (cheap: a budgeted audit's pilot times them first)
    drawn = [c.name for c in e2e_cases(BuiltinEngine(), "draft_model", scenarios=True) if "scenario" in c.name]
    assert drawn and out.startswith(f"{drawn[0]}: ") and all(f"{n}: " in out for n in drawn)
    assert f"\n{case.name}: " in out and "v8-plain" not in out
    assert all(f"  class {case.class_id(k)}: {rc.describe()}" in out for k, rc in enumerate(case.row_classes))
    # and the long case (48 tokens, every token checked), which --case picks alone
    (long,) = [c for c in e2e_cases(BuiltinEngine(), "draft_model", long_case_too=True) if c.position_bands]
    assert f"\n{long.name}: " in out and long.name == "e2e-llama-v64-draft_model-long-g4"


def test_case_picks_among_an_engines_end_to_end_cases(capsys):
    assert main(["audit", "--engine", "builtin", "--case", "e2e-llama-v64-draft_model-long-g4", "--list-cases"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("e2e-llama-v64-draft_model-long-g4: ") and "-g2:" not in out
    assert main(["audit", "--engine", "builtin", "--case", "v8-plain", "--batches", "2", "--no-journal"]) == 2
    err = capsys.readouterr().err
    assert "unknown --case ['v8-plain']; with --engine the cases are the engine's end-to-end cases" in err


def test_a_case_of_the_catalog_is_picked_without_drawing_the_scenarios(monkeypatch, capsys):
    """Drawing the scenarios is a Hypothesis run (seconds of a budget); ``--case`` naming only
    catalog cases (the enumerable and long cases) does not draw them; naming a scenario does."""
    from specexact.audit.cases.e2e import catalog

    drawn = []
    real = catalog.scenario_cases
    monkeypatch.setattr(catalog, "scenario_cases", lambda *a, **k: drawn.append(1) or real(*a, **k))
    assert main(["audit", "--engine", "builtin", "--case", "e2e-llama-v64-draft_model-long-g4",
                 "--case", "e2e-llama-v64-draft_model-g2", "--list-cases"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("e2e-llama-v64-draft_model-g2: ") and "\ne2e-llama-v64-draft_model-long-g4: " in out
    assert drawn == []
    assert main(["audit", "--engine", "builtin", "--case", "e2e-llama-v64-draft_model-scenario-1", "--list-cases"]) == 0
    assert capsys.readouterr().out.startswith("e2e-llama-v64-draft_model-scenario-1: ") and drawn == [1]


def test_an_engine_not_installed_here_exits_2_naming_its_environment(monkeypatch, tmp_path, capsys):
    from specexact.decoders.engines.vllm import VllmEngine

    monkeypatch.setattr(VllmEngine, "requires", ("no_such_module_xyz",))
    assert main(["audit", "--engine", "vllm", "--batches", "2", "--no-journal", "--report-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "needs no_such_module_xyz, not installed here; run it in its own environment: tox -e vllm-e2e" in err
    assert "internal error" not in err and not list(tmp_path.glob("*.json"))


NOT_STARTING = '''
from specexact.decoders.engines.builtin import BuiltinEngine


class NeverStarts(BuiltinEngine):
    name = "never_starts"

    def load(self, *args, **kwargs):
        raise AssertionError("Torch not compiled with CUDA enabled")


class GenerateRaises(BuiltinEngine):
    name = "generate_raises"

    def generate(self, requests, *, speculative):
        raise RuntimeError("no kernel for this")
'''


BATCHES = ["--case", "e2e-llama-v64-draft_model-g2", "--batches", "2"]


def _audit_fake(tmp_path, monkeypatch, engine, run=BATCHES):
    (tmp_path / "notstarting_mod.py").write_text(NOT_STARTING)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "reports"
    code = main(["audit", "--engine", f"notstarting_mod:{engine}", "--method", "draft_model", "--requests-per-class",
                 "8", *run, "--threads", "1", "--report-dir", str(out), "--no-html", "--no-journal", "--quiet"])
    (path,) = out.glob("audit-*.json")  # the report is kept
    report = json.loads(path.read_text())
    report["_markdown"] = path.with_suffix(".md").read_text()
    return code, report


@pytest.mark.statistical(checks=0)  # nothing is sampled
@pytest.mark.parametrize("run", [BATCHES, ["--budget", "20"]], ids=["batches", "budget-with-pilot"])
def test_an_engine_that_does_not_start_here_exits_2_with_one_line_and_keeps_its_report(tmp_path, monkeypatch,
                                                                                          capsys, run):
    """Issue 35: LMDeploy on a machine without CUDA was a defect (exit 1); nothing was audited.
    With a budget the planning pilot's probe load raises first: the case's own load is still
    the engine's first (a failed load leaves no mark)."""
    code, report = _audit_fake(tmp_path, monkeypatch, "NeverStarts", run)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1] == ("specexact: error: the engine notstarting_mod:NeverStarts did not start here, so nothing was "
                       "audited (its first load raised: AssertionError: Torch not compiled with CUDA enabled); the "
                       "reports are written"), err[-1]
    assert not any(line.startswith("specexact: error:") for line in err[:-1]) and "Traceback" not in "\n".join(err)
    assert not any("defect on valid input" in line for line in err), err  # no finding: nothing was audited
    assert report["cases"] and report["num_sequences"] == 0
    for case in report["cases"]:
        assert case["engine_not_started"] is True, case
        assert case["defect"].startswith("crash in engine load: AssertionError: Torch not compiled with CUDA enabled")
    # the reports say so where they would say FAIL (the JSON's verdict stays pass / fail: the schema)
    said = ("Not audited: the engine did not start here (its first load raised in every case: AssertionError: "
            "Torch not compiled with CUDA enabled")
    md = report.pop("_markdown")
    assert md.splitlines()[0].endswith("— **NOT AUDITED**") and said in md, md[:600]
    html = render_html(report)
    assert "NOT AUDITED</span></h1>" in html and said in html


@pytest.mark.statistical(checks=0)  # every call crashes: only the defect
def test_an_engine_that_started_and_crashes_in_generate_is_still_a_defect(tmp_path, monkeypatch, capsys):
    code, report = _audit_fake(tmp_path, monkeypatch, "GenerateRaises")
    assert code == 1
    (case,) = report["cases"]
    assert "engine_not_started" not in case
    assert "NOT AUDITED" not in report["_markdown"] and report["_markdown"].splitlines()[0].endswith("**FAIL**")
    assert case["defect"].startswith("crash in speculative generate call 0: RuntimeError: no kernel for this")
    assert "specexact: error:" not in capsys.readouterr().err
