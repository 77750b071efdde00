"""The architecture holds: rooms import only the rooms below them, and nothing imports in a circle.

The rooms, bottom to top, are :data:`ROOMS` (the picture and what each holds:
``docs/contributing.md#the-structure``). Every ``import`` of a project module, at the top of
a module or inside a function, is an edge; an edge from a room to a room above it fails, and
so does any circle of modules. In ``audit/`` no project module is imported inside a function
(such an import exists only to dodge a loop: put the code in the right room instead).

The files a user's old import path keeps working through (:data:`COMPAT`) only re-export; they
are the one exception to the order and nothing of the project imports them.
"""

from __future__ import annotations

import ast
import functools
import graphlib
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: The rooms, bottom to top: a module of a room imports from its own room and those before it.
ROOMS = (
    "specexact.decoders",
    "specexact.exactness",
    "specexact.strategies",
    "specexact.decoders.tiny_models",
    "specexact.decoders.engines",
    "specexact.fuzz",
    "specexact.audit.core",
    "specexact.audit.sampler",
    "specexact.audit.checks",
    "specexact.audit.cases",
    "specexact.audit.verdict",
    "specexact.audit.run",
    "specexact.audit.zoo",
    "specexact.audit",
    "specexact.reports",
    "specexact.testing",
    "specexact",
)

#: Old public paths kept as re-exports (reports' replay snippets, ``--sampler`` strings, the API
#: reference name them); each may import the module it re-exports, wherever that lives.
COMPAT = {
    "specexact.audit.tiers", "specexact.audit.catalog", "specexact.audit.e2e_case",
    "specexact.audit.decisions_replay", "specexact.audit.zoo_e2e", "specexact.audit.zoo_float",
    "specexact.audit.zoo_logits", "specexact.audit.zoo_tree", "specexact.fuzz.generated_cases",
    "specexact.reports.json_report",
}


def project_modules(root: Path = ROOT) -> dict[str, str]:
    """Every module of the project: dotted name -> source text (pyproject's package-dir map)."""
    dirs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    out = {}
    for pkg, folder in dirs.items():
        for f in sorted((root / folder).glob("*.py")):
            out[pkg if f.stem == "__init__" else f"{pkg}.{f.stem}"] = f.read_text()
    return out


def room_of(module: str) -> str:
    """The room of ``module``: the longest room name it lies in."""
    return max((r for r in ROOMS if module == r or module.startswith(r + ".")), key=len)


def _is_package(name: str, sources: dict[str, str]) -> bool:
    return any(m.startswith(name + ".") for m in sources)


@functools.lru_cache(maxsize=None)
def _import_statements(text: str, pkg: str) -> tuple[tuple[tuple[str, ...], bool], ...]:
    """Each import statement of a module's ``text`` (in package ``pkg``): the dotted names it
    may import and whether it lies inside a function. Parsed once per text: the tests build
    several graphs of the same sources (and of the sources with a planted module)."""
    tree = ast.parse(text)
    inner = {id(n) for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
             for n in ast.walk(fn)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        out.append((tuple(targets), id(node) in inner))
    return tuple(out)


def imports(sources: dict[str, str]) -> dict[str, dict[str, bool]]:
    """``{module: {imported project module: whether imported inside a function}}``."""
    graph = {}
    for name, text in sources.items():
        pkg = name if _is_package(name, sources) else name.rpartition(".")[0]
        edges: dict[str, bool] = {}
        for targets, inside in _import_statements(text, pkg):
            for t in targets:
                while t and t not in sources:
                    t = t.rpartition(".")[0]
                if t and t != name:
                    edges[t] = edges.get(t, False) or inside
        graph[name] = edges
    return graph


def upward_imports(graph: dict[str, dict[str, bool]]) -> list[str]:
    """Each import from a room into a room above it (``"a -> b (room A below room B)"``)."""
    rank = {r: k for k, r in enumerate(ROOMS)}
    bad = []
    for a, edges in graph.items():
        for b in edges:
            ra, rb = room_of(a), room_of(b)
            if rank[rb] > rank[ra] and a not in COMPAT:
                bad.append(f"{a} -> {b} (room {ra} imports room {rb}, above it)")
    return sorted(bad)


def circles(graph: dict[str, dict[str, bool]]) -> list[str]:
    """The modules of an import circle, if any (``graphlib`` finds one). A module's import of a
    package it lies in (its re-exports, as ``../shared/tools/import_circles.py`` reads it) is
    not an edge of a circle."""
    order = {a: {b for b in e if not a.startswith(b + ".")} for a, e in graph.items()}
    try:
        tuple(graphlib.TopologicalSorter(order).static_order())
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return []


def imports_inside_functions(graph: dict[str, dict[str, bool]], room: str = "specexact.audit") -> list[str]:
    """Project modules imported inside a function by a module of ``room``."""
    return sorted(f"{a} -> {b}" for a, edges in graph.items() if a == room or a.startswith(room + ".")
                  for b, inner in edges.items() if inner)


@pytest.fixture(scope="module")
def sources():
    return project_modules()


def test_every_module_lies_in_a_room_and_every_audit_room_is_a_package(sources):
    assert all(room_of(m) for m in sources)
    for room in ROOMS:
        if room.startswith("specexact.audit."):
            assert room in sources, f"{room} has no __init__.py"


def test_no_import_runs_upward(sources):
    assert upward_imports(imports(sources)) == []


def test_no_import_circle(sources):
    assert circles(imports(sources)) == []


def test_audit_imports_no_project_module_inside_a_function(sources):
    assert imports_inside_functions(imports(sources)) == []


def test_nothing_of_the_project_imports_a_compat_path(sources):
    graph = imports(sources)
    assert sorted(f"{a} -> {b}" for a, e in graph.items() for b in e if b in COMPAT and a not in COMPAT) == []


def test_a_planted_upward_import_fails(sources):
    planted = {**sources, "specexact.audit.core.planted": "from specexact.audit.run.plan import AuditPlan\n"}
    assert upward_imports(imports(planted)) == [
        "specexact.audit.core.planted -> specexact.audit.run.plan "
        "(room specexact.audit.core imports room specexact.audit.run, above it)"]
    planted = {**sources, "specexact.fuzz.planted": "from specexact.reports.merge import merge_reports\n"}
    assert [v.split(" ->")[0] for v in upward_imports(imports(planted))] == ["specexact.fuzz.planted"]


def test_a_planted_circle_and_a_planted_inner_import_fail(sources):
    planted = {**sources,
               "specexact.audit.checks.planted_a": "from specexact.audit.checks.planted_b import x\n",
               "specexact.audit.checks.planted_b": "def x():\n    from specexact.audit.checks.planted_a import y\n"}
    graph = imports(planted)
    assert set(circles(graph)) >= {"specexact.audit.checks.planted_a", "specexact.audit.checks.planted_b"}
    assert imports_inside_functions(graph) == ["specexact.audit.checks.planted_b -> specexact.audit.checks.planted_a"]
    assert upward_imports(graph) == []  # one room: lateral imports are allowed, the circle is not
