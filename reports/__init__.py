"""Audit reports: JSON for machines (schema ``specexact.audit/1``), Markdown and a
self-contained HTML page with plots for people."""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path

from specexact.audit.core.json_io import read_json, report_to_jsonable, to_jsonable, write_json, write_text
from specexact.reports.markdown import render_markdown
from specexact.reports.schema import REPORT_SCHEMA, SchemaError, validate_report
from specexact.reports.trend import load_history

__all__ = [
    "REPORT_SUFFIXES",
    "REPORT_SCHEMA",
    "claim_stem",
    "report_stem",
    "report_to_jsonable",
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
    from specexact.reports.html import render_html as _render

    return _render(report, history)


#: The files of one report: ``STEM.json``, ``STEM.md``, ``STEM.html``.
REPORT_SUFFIXES = (".json", ".md", ".html")


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)[:80] or "sampler"


def report_stem(sampler_name: str, when: _dt.datetime | None = None, shard: tuple[int, int] | None = None) -> str:
    """``audit-<sampler>-<UTC time>[-shard<i>of<n>]``: the base name of a report's files.

    ``sampler_name`` is reduced to letters, digits, ``-_.`` (others become ``_``, at most
    80 characters); ``when`` defaults to now. Two audits finishing in the same second get
    the same stem: :func:`claim_stem` makes it unique.
    """
    when = when or _dt.datetime.now(_dt.timezone.utc)
    stamp = when.astimezone(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"audit-{_safe(sampler_name)}-{stamp}" + (f"-shard{shard[0]}of{shard[1]}" if shard else "")


def claim_stem(directory: str | os.PathLike, stem: str, *, attempts: int = 1000) -> str:
    """Reserve a report name in ``directory``: ``stem``, else ``stem-2``, ``stem-3``, ...

    A name is taken by creating ``NAME.json`` exclusively (``O_CREAT | O_EXCL``, atomic
    on a local file system), and only when none of its files exist, so two audits writing
    into one folder at once never get the same name. The empty placeholder is then
    replaced atomically by the report (:func:`write_reports`); remove it if writing fails.

    Raises
    ------
    OSError
        The folder cannot be made or written.
    FileExistsError
        ``attempts`` names are all taken.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for k in range(1, attempts + 1):
        name = stem if k == 1 else f"{stem}-{k}"
        if any((directory / f"{name}{suffix}").exists() for suffix in REPORT_SUFFIXES[1:]):
            continue
        try:
            fd = os.open(directory / f"{name}.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            continue
        os.close(fd)
        return name
    raise FileExistsError(f"{attempts} report names starting with {stem} are taken in {directory}")


def write_reports(report: dict, directory: str | os.PathLike, stem: str, *, html: bool = True,
                  history: list | None = None, history_limit: int = 30, unique: bool = False) -> dict[str, Path]:
    """Write ``STEM.json``, ``STEM.md`` and (``html``) ``STEM.html`` into ``directory``.

    ``history`` defaults to the earlier reports of the same sampler in ``directory``
    (:func:`load_history`), for the trend sections. Every file is written atomically.
    With ``unique`` the name is first reserved with :func:`claim_stem` (``STEM-2`` ... when
    taken), so concurrent audits never overwrite each other's reports; without it existing
    files of that name are replaced.

    Returns
    -------
    dict
        ``{"json": path, "md": path[, "html": path]}``.

    Raises
    ------
    OSError
        A file cannot be written; a reserved, unwritten name is released again.
    """
    directory = Path(directory)
    claimed = None
    if unique:
        stem = claimed = claim_stem(directory, stem)
    try:
        paths = {"json": write_json(report, directory / f"{stem}.json")}
    except BaseException:
        if claimed is not None:
            (directory / f"{claimed}.json").unlink(missing_ok=True)
        raise
    if history is None:
        history = load_history(directory, sampler_name=report["sampler"]["name"], exclude=[paths["json"]],
                               limit=history_limit)
    paths["md"] = write_text(render_markdown(report, history), directory / f"{stem}.md")
    if html:
        paths["html"] = write_text(render_html(report, history), directory / f"{stem}.html")
    return paths
