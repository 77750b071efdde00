"""The README's and the documentation's stated figures, versions and names match the code.

The README keeps what a visitor needs in two minutes; the rest moved into the pages under
``docs/``. The checks read the README and every page together (``TEXT``, ``FLAT``), or the
page the content lives on.
"""

import inspect
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text()
DOCS = {path.relative_to(ROOT / "docs").as_posix(): path.read_text()
        for path in sorted((ROOT / "docs").rglob("*.md"))}
TEXT = "\n".join([README, *DOCS.values()])  # the README and every documentation page
FLAT = " ".join(TEXT.split())  # line breaks do not matter


def sci(x: float) -> str:
    """``1e-6`` as the README writes it."""
    return f"{x:g}".replace("e-0", "e-")


def test_schema_version_matches_the_code_and_schema_md():
    from specexact.audit.verdict.build import SCHEMA, SCHEMA_VERSION
    from specexact.reports.schema import REPORT_SCHEMA

    assert f"schema `{SCHEMA}`, version `{SCHEMA_VERSION}`" in FLAT
    assert f'`"{SCHEMA_VERSION}"` for this document' in (ROOT / "reports" / "schema.md").read_text()
    assert f"/audit/{SCHEMA_VERSION}/" in REPORT_SCHEMA["$id"]


def test_the_documentation_pages_exist():
    for page in ("getting-started.md", "auditing/logits-level.md", "ci/python-api.md", "ci/pytest-plugin.md",
                 "ci/exit-statuses.md", "long-audits.md", "statistics.md", "reports.md"):
        assert page in DOCS, page


def test_every_audit_option_is_documented():
    from specexact.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, command in sub.choices.items():
        for action in command._actions:
            for flag in action.option_strings:
                if flag.startswith("--") and flag != "--help" and name == "audit":
                    assert f"`{flag}" in TEXT, f"specexact audit {flag} is not in the README or docs/"
    assert "`specexact --version`" in TEXT
    # the options' list lives on one page: each option there
    options = DOCS["getting-started.md"]
    for action in sub.choices["audit"]._actions:
        for flag in action.option_strings:
            if flag.startswith("--") and flag != "--help":
                assert f"`{flag}" in options, f"specexact audit {flag} is not on docs/getting-started.md"


def test_defaults_stated_in_the_documentation():
    from specexact.cli import DEFAULT_BUDGET_S, DEFAULT_REPORT_DIR, QUICK_BUDGET_S, build_parser
    from specexact.testing import DEFAULT_BATCHES
    from specexact.testing.plugin import DEFAULT_SESSION_FALSE_FAIL_RATE

    audit = build_parser().parse_args(["audit"])
    assert f"(time for the whole command, default {DEFAULT_BUDGET_S:g})" in FLAT
    assert f"in an {QUICK_BUDGET_S:g} s budget" in FLAT
    assert f"`--false-fail-rate R` (whole audit, default {sci(audit.false_fail_rate)})" in FLAT
    assert f"at `--baseline-false-alarm-rate R`, default {sci(audit.baseline_false_alarm_rate)})" in FLAT
    assert f"(ini `specexact_false_fail_rate`, default {sci(DEFAULT_SESSION_FALSE_FAIL_RATE)})" in FLAT
    assert f"reproducible samples; default {DEFAULT_BATCHES})" in FLAT
    assert f"default `./{DEFAULT_REPORT_DIR}`" in FLAT and audit.report_dir == DEFAULT_REPORT_DIR
    assert build_parser().parse_args(["fuzz"]).report_dir == DEFAULT_REPORT_DIR
    assert build_parser().parse_args(["merge", "x.json"]).report_dir == DEFAULT_REPORT_DIR
    # the README says where the reports go, and that folder is not a source package
    assert f"into `./{DEFAULT_REPORT_DIR}`" in " ".join(README.split())
    assert not (ROOT / DEFAULT_REPORT_DIR).joinpath("__init__.py").exists()
    assert f"/{DEFAULT_REPORT_DIR}/" in (ROOT / ".gitignore").read_text().splitlines()


def test_statistical_figures():
    from specexact.audit.core.levels import CHI2_TAIL_INFLATION, MIN_EXPECTED
    from specexact.audit.run.pilot import THREAD_ADVANTAGE
    from specexact.audit.run.sample_sizes import FALSE_PASS_RATE
    from specexact.testing.profiles import PROFILE_SETTINGS

    assert f"bins of ≥ {MIN_EXPECTED:g} expected counts" in FLAT
    assert CHI2_TAIL_INFLATION == 3.0 and "χ² checks run at a third of their share" in FLAT
    assert f"power {1 - FALSE_PASS_RATE:g}" in FLAT
    assert f"at least {round((1 - THREAD_ADVANTAGE) * 100)} % faster" in FLAT
    assert f"no deadline, {PROFILE_SETTINGS['ci']['max_examples']} examples" in FLAT
    assert f"random, {PROFILE_SETTINGS['nightly']['max_examples']} examples" in FLAT


def test_exit_statuses_and_paths():
    from specexact.audit.run.journal import journal_path, lock_path
    from specexact.cli import EXIT_ERROR, EXIT_FAIL, EXIT_PASS, JOURNAL_SUBDIR

    assert (EXIT_PASS, EXIT_FAIL, EXIT_ERROR) == (0, 1, 2)
    assert "**0** no evidence of inexactness, **1** inexactness or a defect" in FLAT and "**2** the audit" in FLAT
    assert f"`<report-dir>/{JOURNAL_SUBDIR}/audit-<key>.jsonl`" in FLAT
    assert journal_path("d", "<key>").name == "audit-<key>.jsonl"
    assert f"(`{lock_path(journal_path('d', '<key>')).name}`" in FLAT


def test_versions_and_requirements():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    low = project["requires-python"].removeprefix(">=")
    assert f"Python ≥ {low}" in FLAT
    assert f"Python ≥ {low}" in " ".join(README.split())  # the quick start stays in the README
    assert "torch==2.13.0" in README
    tested = re.search(r"transformers versions\s+tested: ([0-9., ]+)\.",
                       (ROOT / "pyproject.toml").read_text().replace("\n#", ""))
    assert tested, "pyproject's comment on the tested transformers versions moved"
    for version in tested.group(1).replace(" ", "").split(","):
        assert version in README
    assert project["entry-points"]["pytest11"] == {"specexact": "specexact.testing.plugin"}


@pytest.mark.parametrize("name", ["assert_verifier_exact", "assert_logits_verifier_exact", "audit_verifier",
                                  "audit_logits_verifier", "case_names", "AuditResult"])
def test_the_python_api_table_names_real_functions_with_their_signatures(name):
    import specexact.testing as api

    assert name in api.__all__
    table = DOCS["ci/python-api.md"]
    row = next(line for line in table.splitlines() if line.startswith("| ") and f"`{name}`" in line.split("|")[1])
    obj = getattr(api, name)
    if name == "AuditResult":
        for attr in re.findall(r"`\.(\w+)", row):
            assert hasattr(obj, attr) or attr in obj.__dataclass_fields__, attr
        return
    params = inspect.signature(obj).parameters
    for param in re.findall(r"(\w+)=", row):
        assert param in params, f"{name} has no parameter {param}"
    if "(verify, *, " in row:
        documented = re.search(r"`\((verify, \*, [^`]*)\)`", row).group(1)
        for part in documented.split(", ")[2:]:
            key, _, default = part.partition("=")
            expected = params[key].default
            assert (float(default) == expected if isinstance(expected, float)
                    else repr(expected).replace("'", '"') == default), (key, default)


def test_the_example_file_exists_and_is_what_the_docs_say():
    example = ROOT / "examples" / "test_engine_exactness.py"
    page = DOCS["ci/pytest-plugin.md"]
    assert "`examples/test_engine_exactness.py`" in page and example.exists()
    assert example.read_text().count("  # <- your engine") == 2 and "replace the two lines marked" in " ".join(page.split())


def test_install_instructions_name_a_source_pip_can_reach():
    # specexact is on no package index: "pip install specexact" would find nothing (or
    # another project); an engine's CI installs it from the git URL or a path.
    example = (ROOT / "examples" / "test_engine_exactness.py").read_text()
    for name, text in {"README/docs": TEXT, "example": example}.items():
        flat = " ".join(text.split())
        assert not re.search(r"pip install ['\"]?specexact(\[[\w,]+\])?['\"]?(?![\w ]*@)", flat), name
        assert "specexact @ git+URL@REV" in flat, name
    page = DOCS["ci/pytest-plugin.md"]
    assert "## Installing specexact in an engine's CI" in page and "pip install ./third_party/specexact" in page
    assert "Installing specexact in an engine's CI" in " ".join(example.split())


def test_the_two_test_tiers_are_stated_and_every_nightly_test_is_named():
    """README and docs/contributing.md say what the default run and `tox -e nightly` cover;
    each test file with a nightly-only test is in the contributing page's table, which says
    what covers its property in the default run."""
    readme = " ".join(README.split())
    assert "`pytest -n auto`" in readme and "`tox -e nightly`" in readme and "[Tests](docs/contributing.md#tests)" in readme
    page = DOCS["contributing.md"]
    table = page.split("The two tiers.", 1)[1].split("\n\n")[1]  # the paragraph, then the table
    rows = [line for line in table.splitlines() if line.startswith("| ") and "`tests/" in line]
    files = sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "tests").rglob("test_*.py")
                   if re.search(r"^@pytest\.mark\.nightly$", path.read_text(), re.M))  # a decorator line
    assert files, "no nightly test left: update the tiers' table"
    for name in files:
        assert any(f"`{name}`" in row for row in rows), f"{name} has nightly tests the tiers' table does not name"
    for row in rows:
        default, nightly = [cell.strip() for cell in row.strip("|").split("|")][1:]
        assert default and nightly, row
