"""The CI script and tox envs run the suite at both ends of the Hypothesis range (issue 21)."""

import configparser
import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def hypothesis_lower_bound() -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (spec,) = [d for d in deps if re.match(r"hypothesis\b", d)]
    return re.fullmatch(r"hypothesis>=([\d.]+)", spec.replace(" ", "")).group(1)


def test_lowest_env_pins_the_pyprojects_lower_bound():
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    env = tox["testenv:hypothesis-lowest"]
    (pin,) = [Requirement(d) for d in env["deps"].split() if d.startswith("hypothesis")]
    (spec,) = pin.specifier
    assert spec.operator == "==" and Version(spec.version) == Version(hypothesis_lower_bound())
    assert "pytest -n auto" in env["commands"]


def test_ci_runs_the_suite_with_the_newest_and_the_lowest():
    lines = [ln.strip() for ln in (ROOT / ".ci/run").read_text().splitlines() if not ln.startswith("#")]
    upgrade = lines.index(f"python3 -m pip install -q -U 'hypothesis>={hypothesis_lower_bound()}'")
    suite = lines.index("python3 -m pytest -n auto")
    assert upgrade < suite
    assert any(re.match(r"python3 -m tox -e .*\bhypothesis-lowest\b", ln) for ln in lines)


def test_ci_runs_the_ray_env_with_the_cpu_torch_first():
    lines = [ln.strip() for ln in (ROOT / ".ci/run").read_text().splitlines() if not ln.startswith("#")]
    assert "python3 -m tox -e ray" in lines
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    env = tox["testenv:ray"]
    assert env["deps"].split() == ["torch==2.13.0"] and env["extras"].split() == ["test", "ray"]
    assert "tests/cli/test_cli_ray.py" in env["commands"]
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert [Requirement(r).name for r in extras["ray"]] == ["ray"]
    assert "ray" not in [Requirement(r).name for r in extras["test"]]  # the default suite runs without Ray
