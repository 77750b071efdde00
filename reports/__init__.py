"""Audit reports: JSON for machines (schema ``specexact.audit/1``), Markdown and a
self-contained HTML page with plots for people."""

from __future__ import annotations

import os
from pathlib import Path

from .json_report import read_json, to_jsonable, write_json, write_text
from .markdown import render_markdown
from .schema import REPORT_SCHEMA, SchemaError, validate_report
from .trend import load_history

__all__ = [
    "REPORT_SCHEMA",
    "SchemaError",
    "load_history",
    "read_json",
    "render_html",
    "render_markdown",
    "to_jsonable",
    "validate_report",
    "write_json",
    "write_reports",
    "write_text",
]


def render_html(report: dict, history=()) -> str:
    """See :func:`specexact.reports.html.render_html` (imports matplotlib and jinja2 lazily)."""
    from .html import render_html as _render

    return _render(report, history)


def write_reports(report: dict, directory: str | os.PathLike, stem: str, *, html: bool = True,
                  history: list | None = None, history_limit: int = 30) -> dict[str, Path]:
    """Write ``STEM.json``, ``STEM.md`` and (``html``) ``STEM.html`` into ``directory``.

    ``history`` defaults to the earlier reports of the same sampler in ``directory``
    (:func:`load_history`), for the trend sections. Every file is written atomically.
    Returns ``{"json": path, "md": path[, "html": path]}``.
    """
    directory = Path(directory)
    paths = {"json": write_json(report, directory / f"{stem}.json")}
    if history is None:
        history = load_history(directory, sampler_name=report["sampler"]["name"], exclude=[paths["json"]],
                               limit=history_limit)
    paths["md"] = write_text(render_markdown(report, history), directory / f"{stem}.md")
    if html:
        paths["html"] = write_text(render_html(report, history), directory / f"{stem}.html")
    return paths
