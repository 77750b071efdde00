"""The documentation site: the README's size and links, the API reference's coverage, the
code blocks of the README and of ``docs/``, and ``mkdocs build --strict``."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import tomllib
import unicodedata
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text()
PAGES = {path.relative_to(ROOT).as_posix(): path.read_text() for path in sorted((ROOT / "docs").rglob("*.md"))}
SOURCES = {"README.md": README, **PAGES}

#: The packages whose every public name must have a rendered reference entry, and their page.
REFERENCED = {
    "specexact.testing": "docs/reference/testing.md",
    "specexact.audit": "docs/reference/audit.md",
    "specexact.decoders.adapters": "docs/reference/adapters.md",
    "specexact.exactness": "docs/reference/exactness.md",
    "specexact.strategies": "docs/reference/strategies.md",
}

# The quick start's two commands, kept exactly as they were before the site existed.
SETUP_COMMANDS = """\
```bash
# 1. install and run the main job: an audit of the built-in decoder (~2 minutes on 2 cores)
pip install torch==2.13.0 -e . && specexact audit

# 2. install and run the tests
pip install torch==2.13.0 -e '.[test]' && pytest -n auto
```
"""


# -- the README ---------------------------------------------------------------------------

def test_the_readme_is_at_most_200_lines():
    assert len(README.splitlines()) <= 200


def test_the_readme_keeps_the_two_setup_commands():
    assert SETUP_COMMANDS in README
    assert SETUP_COMMANDS in PAGES["docs/getting-started.md"]


def test_the_readme_links_straight_to_auditing_a_logits_level_engine():
    assert "[Auditing a logits-level engine](docs/auditing/logits-level.md)" in README
    assert PAGES["docs/auditing/logits-level.md"].startswith("# Auditing a logits-level engine\n")


def test_the_readme_says_how_to_build_the_site():
    assert "mkdocs serve" in README and "mkdocs build --strict" in README


def table_after(text: str, heading: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index(heading)
    first = next(k for k in range(start, len(lines)) if lines[k].startswith("|"))
    end = next((k for k in range(first, len(lines)) if not lines[k].startswith("|")), len(lines))
    return lines[first:end]


def test_the_readme_engine_table_is_the_engines_page_table():
    readme = table_after(README, "## Engines")
    page = table_after(PAGES["docs/engines/index.md"], "# Engines")
    assert len(readme) >= 10
    assert [row.replace("](docs/engines/", "](") for row in readme] == page


def slugify(heading: str) -> str:
    """The anchor Python-Markdown's ``toc`` extension gives a heading (its default slugify)."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(markdown: str) -> set[str]:
    return {slugify(m.group(1)) for m in re.finditer(r"^#{1,6} (.+?)\s*$", strip_fences(markdown), re.M)}


def strip_fences(markdown: str) -> str:
    return re.sub(r"^( *)```.*?^\1```", "", markdown, flags=re.M | re.S)


def test_every_relative_link_of_the_readme_resolves():
    # docs/ pages are checked by `mkdocs build --strict`; the README is not part of the site
    links = re.findall(r"\]\(([^)\s]+)\)", strip_fences(README))
    assert links
    for link in links:
        if re.match(r"[a-z]+:", link):
            continue
        path, _, anchor = link.partition("#")
        target = ROOT / path
        assert target.exists(), link
        if anchor:
            assert anchor in anchors(target.read_text()), link


# -- the API reference --------------------------------------------------------------------

def package_folder(module: str) -> Path:
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return ROOT / mapping[module]


def public_names(module: str) -> list[str]:
    """``__all__`` of the package's ``__init__.py`` in this checkout (read, not imported:
    the installed ``specexact`` may be another checkout), else its public top-level names."""
    tree = ast.parse((package_folder(module) / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.ImportFrom):
            names.extend(a.asname or a.name for a in node.names)
    return [n for n in names if not n.startswith("_")]


def directives(page: str) -> set[str]:
    return set(re.findall(r"^::: ([\w.]+)\s*$", PAGES[page], re.M))


@pytest.mark.parametrize("module", sorted(REFERENCED))
def test_every_public_name_has_a_reference_entry(module):
    names = public_names(module)
    assert names
    rendered = directives(REFERENCED[module])
    missing = [n for n in names if f"{module}.{n}" not in rendered]
    assert not missing, f"{REFERENCED[module]} has no '::: {module}.<name>' for {missing}"


def test_every_reference_entry_names_a_public_name_or_a_submodule():
    # (the build fails on a name griffe cannot find; this keeps each page to its package)
    for module, page in REFERENCED.items():
        names = set(public_names(module))
        for target in directives(page):
            rest = target.removeprefix(module + ".")
            assert target == module or rest in names or (
                target.startswith(module + ".") and (package_folder(module) / f"{rest.split('.')[0]}.py").exists()
            ), (page, target)


def test_every_reference_page_is_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in [*REFERENCED.values(), "docs/auditing/logits-level.md"]:
        assert page.removeprefix("docs/") in nav, page


# -- code blocks --------------------------------------------------------------------------

FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>\w*)[^\n]*\n(?P<body>.*?)^(?P=indent)```", re.M | re.S)


def code_blocks(lang: str) -> list[tuple[str, int, str, bool]]:
    """``(source, line, code, excerpt)`` of every fenced block of ``lang``; ``excerpt``: the
    block sits indented in a report excerpt (an admonition), not in the page's own text."""
    blocks = []
    for source, text in SOURCES.items():
        for m in FENCE.finditer(text):
            if m.group("lang") != lang:
                continue
            indent = len(m.group("indent"))
            body = "\n".join(line[indent:] for line in m.group("body").splitlines())
            if body.lstrip().startswith("--8<--"):
                continue  # a file included by pymdownx.snippets (checked by the build)
            blocks.append((source, text[:m.start()].count("\n") + 1, body, indent > 0))
    return blocks


def block_id(block):
    return f"{block[0]}:{block[1]}"


PYTHON = code_blocks("python")
BASH = code_blocks("bash")
TOML = code_blocks("toml")


def test_the_blocks_are_found():
    assert len(PYTHON) >= 4 and len(BASH) >= 8 and TOML


@pytest.mark.parametrize("block", PYTHON, ids=block_id)
def test_python_blocks_compile_and_their_imports_exist(block):
    source, line, code, _ = block
    tree = compile(code, f"{source}:{line}", "exec", ast.PyCF_ONLY_AST)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("specexact"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), f"{source}:{line}: {node.module} has no {alias.name}"


@pytest.mark.parametrize("block", [b for b in PYTHON if not b[3]], ids=block_id)
def test_python_blocks_of_the_text_run(block, tmp_path, monkeypatch):
    """The pages' own examples (not the report excerpts' replays) define what they show:
    running them checks the names and the keyword arguments (``Capabilities(...)``,
    ``pytest.mark.specexact(...)``, ``case_names("quick")``) against the code."""
    source, line, code, _ = block
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"{source}:{line}", "exec"), {"__name__": "docs_example"})


def is_test_file(block) -> bool:
    """A page's own example that defines ``test_…`` functions is a whole pytest file."""
    return not block[3] and re.search(r"^def test_\w*\(", block[2], re.M) is not None


TEST_FILES = [b for b in PYTHON if is_test_file(b)]


def test_the_test_file_examples_are_found():
    assert "docs/ci/pytest-plugin.md" in {source for source, *_ in TEST_FILES}


def run_test_file(block, pytester, alpha, one_of_each: bool):
    """Run a page's test file in-process as a reader would paste it (the plugin's session at
    rate ``alpha``, the fuzz phase left out by the ini option); with ``one_of_each``, only the
    first collected test of each test function (one parameter of a parametrized one)."""
    source, line, code, _ = block
    pytester.makepyfile(test_docs_example=code)
    args = ["-p", "no:xdist", "-p", "no:cacheprovider", "-o", "specexact_fuzz=false"]
    selected = []
    if one_of_each:
        collected = pytester.runpytest_inprocess("--collect-only", "-q", *args)
        first = {}
        for node in (ln.strip() for ln in collected.stdout.lines if "::" in ln):
            first.setdefault(node.split("[")[0], node)
        selected = list(first.values())
    result = pytester.runpytest_inprocess(*selected, *args, f"--specexact-false-fail-rate={alpha}")
    outcomes = result.parseoutcomes()
    defined = len(re.findall(r"^def test_", code, re.M))
    assert result.ret == 0 and outcomes.get("passed", 0) >= defined, f"{source}:{line}\n{result.stdout.str()}"
    return outcomes


@pytest.mark.statistical(checks=1)
@pytest.mark.parametrize("block", TEST_FILES, ids=block_id)
def test_one_test_of_each_function_of_a_block_that_is_a_test_file_passes_under_pytest(block, pytester, alpha):
    """Defining a test is not running it: a block that is a pytest file runs as one, and the
    first test of each of its test functions passes (the plugin page's block: one quick case of
    the parametrized test, and the plain call). The fuzz phase is left out by the ini option
    (``specexact_fuzz = false``): it checks the names, markers and arguments the page shows,
    not the fuzz phase, which ``tests/testing/test_plugin.py`` runs on the example file. The
    whole file runs in the nightly tier (the next test)."""
    outcomes = run_test_file(block, pytester, alpha, one_of_each=True)
    assert outcomes["passed"] == len(re.findall(r"^def test_", block[2], re.M))


@pytest.mark.nightly
@pytest.mark.statistical(checks=1)
@pytest.mark.parametrize("block", TEST_FILES, ids=block_id)
def test_python_blocks_that_are_test_files_pass_under_pytest(block, pytester, alpha):
    """Every test of a block that is a pytest file passes, the file run whole as pasted."""
    run_test_file(block, pytester, alpha, one_of_each=False)


@pytest.mark.parametrize("block", TOML, ids=block_id)
def test_toml_blocks_parse(block):
    tomllib.loads(block[2])


def specexact_commands(text: str) -> list[str]:
    """Every ``specexact …`` command of a shell snippet (``&&`` chains split, comments cut)."""
    commands = []
    for line in text.splitlines():
        for part in line.split("&&"):
            words = shlex.split(part, comments=True)
            while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
                words.pop(0)  # VAR=value prefixes
            if words and words[0] == "specexact":
                commands.append(words[1:])
    return commands


def inline_commands() -> list[tuple[str, str]]:
    """Inline ``specexact audit …`` / ``specexact fuzz …`` code spans with concrete
    arguments (no ``…`` placeholder)."""
    found = []
    for source, text in SOURCES.items():
        for span in re.findall(r"`(specexact (?:audit|fuzz|render)\b[^`]*)`", strip_fences(text)):
            if "…" not in span and "<" not in span:
                found.append((source, span))
    return found


def parse_command(words: list[str]):
    from specexact.cli import build_parser

    try:
        return build_parser().parse_args(words)
    except SystemExit as exit:  # argparse's error: exit status 2 (--help: 0)
        if exit.code == 0 and "--help" in words:
            return None
        pytest.fail(f"specexact {' '.join(words)}: the parser refuses it (exit {exit.code})")


@pytest.mark.parametrize("block", BASH, ids=block_id)
def test_bash_blocks_specexact_commands_parse(block):
    for words in specexact_commands(block[2]):
        parse_command(words)


def test_inline_specexact_commands_parse():
    spans = inline_commands()
    assert len(spans) > 20
    for source, span in spans:
        words = shlex.split(span)[1:]
        if words[-1] in ("NAME", "REPORT.json"):
            words[-1] = "x"
        parse_command(words)


# -- the build ------------------------------------------------------------------------------

def test_mkdocs_build_strict(tmp_path):
    def installed(module: str) -> bool:
        parent = module.rpartition(".")[0]
        return (not parent or installed(parent)) and importlib.util.find_spec(module) is not None

    missing = [m for m in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python") if not installed(m)]
    if missing:
        pytest.skip(f"the docs extra is not installed (pip install -e '.[docs]'): no {', '.join(missing)}")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "NO_MKDOCS_2_WARNING": "1",
                                 "SPECEXACT_DOCS_SRC": str(tmp_path / "docs-src")})
    assert result.returncode == 0, result.stdout + result.stderr
    for module, page in REFERENCED.items():
        html = (tmp_path / "site" / Path(page).relative_to("docs").with_suffix("") / "index.html").read_text()
        for name in public_names(module):
            assert f'id="{module}.{name}"' in html, f"{page}: {module}.{name} was not rendered"
