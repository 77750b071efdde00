"""Escaping of text written into a Markdown report (one rule for every section)."""

from __future__ import annotations

import re

__all__ = ["markdown_cell"]

_ENTITY = re.compile(r"&(?=#?\w+;)")
_TAG = re.compile(r"<(/?[A-Za-z!?][^<>]*)>")


def markdown_cell(text: object) -> str:
    """``text`` as literal Markdown on one line (a table cell, a list item): ``<`` and an
    ``&`` that would start an entity become entities (no HTML, no entity read); ``>`` only
    where it closes a tag-like ``<x ...>``, so ``>= 200`` stays readable in the file;
    ``|`` and line breaks cannot break a table."""
    t = _ENTITY.sub("&amp;", str(text))
    t = _TAG.sub(lambda m: f"&lt;{m.group(1)}&gt;", t).replace("<", "&lt;")
    return t.replace("|", "\\|").replace("\r", " ").replace("\n", " ")
