"""Griffe extension: what griffe's static analysis misses in specexact's docstrings.

- Sphinx roles (``:func:`run_audit```, ``:class:`~specexact.audit.AuditSettings```), which
  Markdown would show literally, become inline code of the name as Sphinx displays it
  (``~`` keeps the last component).
- Docstrings assigned after the definition, ``function.__doc__ = f'''...'''`` with
  module-level string constants in its fields (``testing/assertions.py`` shares its
  parameters' text this way), are evaluated from the source.
- ``#:`` comments above a module-level constant (Sphinx's attribute docstrings) become its
  docstring.

Only the rendering changes: the sources are read, never modified, and nothing is imported.
"""

from __future__ import annotations

import ast
import inspect
import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:attr|class|data|exc|func|meth|mod|obj|const):`(~?)([^`]+)`")


def display(match: re.Match) -> str:
    tilde, target = match.groups()
    target = target.strip()
    if "<" in target and target.endswith(">"):  # :func:`title <target>`
        return f"`{target.split('<', 1)[0].strip()}`"
    return f"`{target.rsplit('.', 1)[-1] if tilde else target}`"


def _string_constants(tree: ast.Module) -> dict[str, str]:
    constants = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            constants[node.targets[0].id] = node.value.value
    return constants


def _evaluate(value: ast.expr, constants: dict[str, str]) -> str | None:
    """A string literal or an f-string whose fields are module-level string constants."""
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return value.value
    if not isinstance(value, ast.JoinedStr):
        return None
    parts = []
    for part in value.values:
        if isinstance(part, ast.Constant):
            parts.append(part.value)
        elif (isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Name)
              and part.value.id in constants and part.format_spec is None and part.conversion == -1):
            parts.append(constants[part.value.id])
        else:
            return None
    return "".join(parts)


class SpecexactDocstrings(griffe.Extension):
    """Complete and rewrite the docstrings griffe loads (see the module's docstring)."""

    def on_module_members(self, *, mod: griffe.Module, **_kwargs) -> None:
        if mod.filepath is None or isinstance(mod.filepath, list):
            return
        source = mod.filepath.read_text()
        tree = ast.parse(source)
        lines = source.splitlines()
        parser = mod.docstring.parser if mod.docstring else None
        options = mod.docstring.parser_options if mod.docstring else {}
        constants = _string_constants(tree)
        for node in tree.body:
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
                continue
            target = node.targets[0]
            if (isinstance(target, ast.Attribute) and target.attr == "__doc__" and isinstance(target.value, ast.Name)
                    and target.value.id in mod.members and not mod.members[target.value.id].is_alias):
                member = mod.members[target.value.id]
                text = _evaluate(node.value, constants)
                if text is not None and member.docstring is None:
                    member.docstring = griffe.Docstring(inspect.cleandoc(text), lineno=node.lineno, parent=member,
                                                        parser=parser, parser_options=options)
            elif isinstance(target, ast.Name) and target.id in mod.members:
                member = mod.members[target.id]
                if member.is_alias or member.docstring is not None:
                    continue
                comment = []
                k = node.lineno - 2
                while k >= 0 and lines[k].lstrip().startswith("#:"):
                    comment.insert(0, lines[k].lstrip()[2:].strip())
                    k -= 1
                if comment:
                    member.docstring = griffe.Docstring(" ".join(comment), lineno=k + 2, parent=member,
                                                        parser=parser, parser_options=options)

    def on_package(self, *, pkg: griffe.Module, **_kwargs) -> None:
        for obj in _walk(pkg):
            if obj.docstring is not None:
                obj.docstring.value = ROLE.sub(display, obj.docstring.value)


def _walk(obj):
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _walk(member)
