"""Done-when of issue 13, as a new user meets it: a fresh virtualenv with only specexact
(from this checkout) and pytest runs the documented example with ``pytest -n auto``.

About a minute of pip plus four pytest runs: marked ``venv``, run with ``pytest -m venv``.
The in-process twins of these checks (``test_plugin.py``) run in every session.
"""

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from specexact.testing import case_names

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "test_engine_exactness.py"
ENGINE_LINE = "from specexact.decoders import verify as engine_verify  # <- your engine"
PLANTED_LINE = "from specexact.audit.zoo import resample_from_target as engine_verify"
EXAMPLE_AUDITS = len(case_names("quick")) + 2  # one per quick case, the logits-level one, the numbers one


def example_text(planted: bool = False) -> str:
    """The example, or (``planted``) the example with a planted bug as the engine's verifier
    (the same substitution as ``test_plugin.py``)."""
    text = EXAMPLE.read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith(ENGINE_LINE))
    return text.replace(line, PLANTED_LINE) if planted else text


def rates(xml: Path) -> dict:
    out = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        out[case.get("name")] = props.get("specexact_false_fail_rate")
    return out


@pytest.mark.venv
@pytest.mark.statistical(checks=3)
def test_fresh_virtualenv_runs_the_example_under_xdist(tmp_path, alpha):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    src = tmp_path / "checkout"  # a copy: the build must not write into the working tree
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".venv", ".git", "*.egg-info", "build", "__pycache__",
                                                             ".hypothesis", ".tox", "audit-*", ".journal", "results"))
    # torch==2.13.0 named first: the local CPU build, never a CUDA one from an index.
    pip = subprocess.run([python, "-m", "pip", "install", "-q", "torch==2.13.0", str(src), "pytest", "pytest-xdist"],
                         capture_output=True, text=True, timeout=1800)
    assert pip.returncode == 0, pip.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "PYTHONPATH", "COV"))}
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "test_engine_exactness.py").write_text(example_text())
    (tmp_path / "planted").mkdir()
    (tmp_path / "planted" / "test_engine_exactness.py").write_text(example_text(planted=True))

    def pytest_run(folder: str, *args):
        return subprocess.run([python, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=tmp_path / folder,
                              capture_output=True, text=True, env=env, timeout=1200)

    ok = pytest_run("engine", "-n", "auto", f"--specexact-false-fail-rate={alpha}")
    assert ok.returncode == 0, ok.stdout[-5000:]
    assert f"{EXAMPLE_AUDITS} passed" in ok.stdout
    bad = pytest_run("planted", "-n", "auto")
    assert bad.returncode == 1, bad.stdout[-5000:]
    assert "AssertionError: sampler specexact.audit.zoo:resample_from_target is not exact" in bad.stdout
    assert "replay: specexact audit --sampler specexact.audit.zoo:resample_from_target" in bad.stdout
    split = {}
    for n in ("1", "2"):
        xml = tmp_path / f"n{n}.xml"
        run = pytest_run("engine", "-n", n, f"--junitxml={xml}", f"--specexact-false-fail-rate={alpha}")
        assert run.returncode == 0, run.stdout[-5000:]
        split[n] = rates(xml)
    assert split["1"] == split["2"]
    assert {float(r) for r in split["1"].values()} == {alpha / EXAMPLE_AUDITS}
