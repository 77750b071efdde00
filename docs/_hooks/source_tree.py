"""MkDocs hook: lay the import tree ``specexact.*`` out of this checkout's folders for griffe.

pyproject.toml maps each import package onto a top-level folder (``specexact`` = ``cli/``,
``specexact.audit`` = ``audit/``, ...), so no folder of the checkout is called
``specexact``. Before the build this hook writes ``build/docs-src/specexact/``: links to the
files of ``cli/`` and to the other packages' folders, read from pyproject's ``package-dir``.
mkdocstrings' python handler reads that tree (``paths: [build/docs-src]`` in mkdocs.yml) by
static analysis, so the reference shows this checkout's docstrings whatever ``specexact``
is installed.
"""

from __future__ import annotations

import os
import shutil
import tomllib
from pathlib import Path

from mkdocs.plugins import event_priority

ROOT = Path(__file__).resolve().parents[2]
#: Where the tree is written: ``build/docs-src``, or ``$SPECEXACT_DOCS_SRC`` (mkdocs.yml reads
#: the same variable), so that a build in a test has a tree of its own.
TREE = Path(os.environ.get("SPECEXACT_DOCS_SRC") or ROOT / "build" / "docs-src")


def build_tree(root: Path = ROOT, tree: Path = TREE) -> Path:
    """Write the link tree under ``tree`` and return it."""
    mapping = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    if tree.exists():
        shutil.rmtree(tree)
    top = tree / "specexact"
    top.mkdir(parents=True)
    for source in sorted((root / mapping["specexact"]).iterdir()):
        if source.suffix == ".py":
            os.symlink(source, top / source.name)
    for name, folder in sorted(mapping.items()):
        parts = name.split(".")
        if len(parts) == 2:
            os.symlink(root / folder, top / parts[1], target_is_directory=True)
        elif len(parts) > 2:  # a nested package must sit in its parent's folder, as on disk
            parent = mapping[".".join(parts[:-1])]
            assert Path(folder) == Path(parent) / parts[-1], (name, folder)
    return tree


# First of every plugin's on_config: mkdocstrings' python handler keeps only the paths that
# exist when it is configured, so the tree must exist before (a fresh clone has no build/).
@event_priority(100)
def on_config(config, **_kwargs):
    build_tree()
    return config


def on_files(files, config, **_kwargs):
    """Publish the JSON Schema beside the schema page (``reports/schema.md`` links to it)."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, "reference/audit.schema.json",
                                abs_src_path=str(ROOT / "reports" / "audit.schema.json")))
    return files
