"""Escaping of text written into a Markdown report (one rule for every section).

Markdown reports are read raw (a terminal, a diff, a CI log) as often as rendered, so the
escaping uses CommonMark's backslash escapes, never HTML entities: ``<script>`` is written
``\\<script>`` (rendered as the text ``<script>``, read raw as almost that), where an entity
rule would write ``&lt;script&gt;``. Source: the CommonMark specification, section
"Backslash escapes" (any ASCII punctuation character may be backslash-escaped; an escaped
``<`` cannot open a tag, an escaped ``&`` cannot start an entity).
"""

from __future__ import annotations

import re

__all__ = ["markdown_cell"]

_ENTITY = re.compile(r"&(?=#?\w+;)")
_PUNCT_AFTER_BACKSLASH = re.compile(r"\\(?=[!-/:-@\[-`{-~])")


def markdown_cell(text: object) -> str:
    """``text`` as literal Markdown on one line (a table cell, a list item).

    A backslash before punctuation is doubled (it stays a backslash), ``<`` becomes ``\\<``
    (no HTML tag can open), an ``&`` that would start an entity becomes ``\\&`` (no entity
    is read), ``|`` becomes ``\\|`` and line breaks spaces (the table cannot break); ``>``
    stays as written (``>= 200`` reads as it is). No HTML entity is ever written.
    """
    t = _PUNCT_AFTER_BACKSLASH.sub(r"\\\\", str(text))
    t = _ENTITY.sub(r"\\&", t).replace("<", "\\<")
    return t.replace("|", "\\|").replace("\r", " ").replace("\n", " ")
