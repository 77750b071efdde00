"""The exit status is 0, 1 or 2 in every path: a sampler call still hung in a thread at exit
included (the C++ runtime used to abort the process: 134, "terminate called without an
active exception")."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

HANGS_IN_TORCH = textwrap.dedent('''
    import time
    import torch
    from specexact.decoders.engines.builtin import BuiltinEngine

    class HangsInTorch(BuiltinEngine):
        """Correct until its third speculative call, which stays busy inside torch for 2 minutes
        (as an engine's forward that never returns)."""
        name = "hangs-in-torch"
        calls = 0

        def generate(self, requests, *, speculative):
            if speculative:
                type(self).calls += 1
                if type(self).calls >= 3:
                    x = torch.randn(256, 256)
                    t0 = time.time()
                    while time.time() - t0 < 120:
                        x = (x @ x).tanh()
            return super().generate(requests, speculative=speculative)
''')


@pytest.mark.statistical(checks=0)  # a hang is exact: the defect is asserted, not a law
def test_a_call_hung_inside_torch_at_exit_ends_with_status_1_and_the_reports_written(tmp_path):
    (tmp_path / "hangtorch.py").write_text(HANGS_IN_TORCH)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path]), "PYTHONUNBUFFERED": "1"}
    out = tmp_path / "reports"
    proc = subprocess.run([sys.executable, "-m", "specexact", "audit", "--engine", "hangtorch:HangsInTorch",
                           "--method", "draft_model", "--case", "e2e-llama-v64-draft_model-g2", "--requests-per-class", "8",
                           "--batches", "2",
                           "--threads", "1", "--call-timeout", "2", "--report-dir", str(out), "--no-html",
                           "--no-journal", "--quiet"], capture_output=True, text=True, env=env, timeout=240,
                          cwd=tmp_path)
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    assert "terminate called" not in proc.stderr
    (path,) = out.glob("audit-*.json")
    report = json.loads(path.read_text())
    assert report["verdict"] == "fail"
    assert [f["kind"] for f in report["findings"] if f["tier"] == "defect"] == ["timeout"]
    assert str(path) in proc.stdout + proc.stderr  # the last line names the reports
