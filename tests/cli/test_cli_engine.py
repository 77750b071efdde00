"""``specexact audit --engine``: an engine's generate loop under the per-call limit, from the CLI."""

import json
import textwrap

import pytest
import torch

from specexact.cli import main


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
                 "--batches", "2", "--call-timeout", "1", "--threads", "1", "--report-dir", str(out), "--no-html",
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


@pytest.mark.parametrize("flags", [["--method", "draft_model"], ["--pair", "llama-v64"], ["--requests-per-class", "8"]])
def test_engine_options_without_an_engine_are_refused(flags, capsys):
    assert main(["audit", "--quick", "--case", "v8-plain", "--no-journal", *flags]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{flags[0]} select an engine's end-to-end cases: give --engine too" in err
