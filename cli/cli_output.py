"""What the ``specexact`` command writes: checked output paths, the reports (never lost),
and the table of checks.

:func:`prepare_dir` / :func:`prepare_file` check an output path before any work, so a
folder that is a file or cannot be written stops the command at once (exit 2, one line
naming the path). :func:`write_outputs` writes the reports under a name no concurrent
audit takes (:func:`specexact.reports.claim_stem`); if they cannot be written it saves the
JSON report in a fresh temporary folder, keeps the audit's journal, and raises
:class:`~specexact.cli_common.CliError` saying where the results are.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

from specexact.cli_common import CliError, os_error_line

__all__ = ["prepare_dir", "prepare_file", "write_outputs", "print_table", "fmt_tv"]


def prepare_dir(path: str | os.PathLike, option: str) -> Path:
    """Make the folder ``path`` (with its parents) and check that files can be made in it.

    Raises
    ------
    CliError
        ``path`` or one of its parents is a file, or the folder cannot be made or written;
        the message names ``option`` and the path.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise CliError(f"{option} {path}: not a folder (a file is there)")
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".specexact-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise CliError(os_error_line(exc, f"{option} {path} cannot be written:")) from exc
    return path


def prepare_file(path: str | os.PathLike, option: str) -> Path:
    """Check that the file ``path`` can be written (its folder is made).

    Raises
    ------
    CliError
        ``path`` is a folder, a parent is a file, or the folder cannot be written.
    """
    path = Path(path)
    if path.is_dir():
        raise CliError(f"{option} {path}: is a folder, not a file")
    prepare_dir(path.parent, f"{option} {path}: its folder")
    return path


def _save_elsewhere(report: dict, stem: str) -> Path | None:
    from specexact.reports import write_json

    try:
        folder = Path(tempfile.mkdtemp(prefix="specexact-unsaved-"))
        return write_json(report, folder / f"{stem}.json")
    except OSError:
        return None


def write_outputs(report: dict, *, report_dir: str | os.PathLike, stem: str, json_path: str | None, html: bool,
                  history_limit: int, journal=None) -> dict:
    """Write the report's JSON, Markdown and HTML (``STEM[-k].*`` in ``report_dir``) and
    ``json_path``; then finish ``journal`` (a :class:`~specexact.audit.run.journal.Journal`).

    Returns
    -------
    dict
        ``{"json": path, "md": path[, "html": path][, "extra_json": path]}``.

    Raises
    ------
    CliError
        Something could not be written. The JSON report is then saved elsewhere (a new
        temporary folder, named in the message) unless it was already written, and the
        journal is kept (closed, not removed), so nothing computed is lost.
    """
    from specexact.reports import load_history, write_json, write_reports

    out_dir = Path(report_dir)
    kept = ""
    if journal is not None:
        kept = (f"; the journal {journal.path} is kept: rerun the same command once that is fixed and it writes "
                "the reports without sampling again")
    exclude = [Path(json_path)] if json_path else []
    try:
        history = load_history(out_dir, sampler_name=report["sampler"]["name"], exclude=exclude, limit=history_limit)
    except OSError:
        history = []
    try:
        paths = write_reports(report, out_dir, stem, html=html, history=history, unique=True)
    except OSError as exc:
        if journal is not None:
            journal.close()
        saved = _save_elsewhere(report, stem)
        where = f"; the JSON report was saved to {saved}" if saved else "; the JSON report could not be saved anywhere"
        raise CliError(os_error_line(exc, f"cannot write the reports to {out_dir}:") + where + kept) from exc
    if json_path:
        try:
            paths["extra_json"] = write_json(report, json_path)
        except OSError as exc:
            if journal is not None:
                journal.close()
            raise CliError(os_error_line(exc, "cannot write --json:") + f"; the report is in {paths['json']}"
                           + kept) from exc
    if journal is not None:
        journal.finish()
    return paths


def fmt_tv(tv) -> str:
    """A detectable TV for a table: ``-`` where none is guaranteed (None, inf)."""
    if tv is None or isinstance(tv, str) or (isinstance(tv, float) and not math.isfinite(tv)):
        return "-"
    return f"{tv:.3g}"


def print_table(report: dict) -> None:
    """The table of checks (stdout)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    title = f"specexact audit of {escape(report['sampler']['name'])}: {report['verdict'].upper()}"
    shard = report["settings"].get("shard")
    if shard:
        title += f" (shard {shard['index']}/{shard['count']})"
    from specexact.reports.certified import certified_tv_text, lossy_interval_text

    table = Table(title=title)
    for col in ("case / check", "method", "n", "p-value", "detectable TV", "certified TV ≤", "verdict"):
        table.add_column(col, no_wrap=True)
    for chk in report["checks"]:
        measured = (chk.get("details") or {}).get("measured")
        table.add_row(escape(f"{chk['case']} / {chk['name']}"), chk["method"], f"{chk['n']:,}", f"{chk['pvalue']:.3g}",
                      fmt_tv(chk["detectable_tv"]), certified_tv_text(chk),
                      "measured" if measured else ("pass" if chk["passed"] else "[red]FAIL[/]"))
    out = Console()
    out.width = max(out.width, 150)
    out.print(table)
    from specexact.reports.combined_text import combined_text, split_text

    out.print(escape(split_text(report["settings"])))
    line = combined_text(report)
    if line:
        out.print(escape(line) if report["combined"]["passed"] else f"[red]{escape(line)}[/]")
    for row in report.get("lossy_measurements") or []:
        out.print(f"lossy: {escape(row['case'])} / {escape(row['check'])}: TV from the target "
                  f"{lossy_interval_text(row)} ({row['law']} law, {row['num_cells']} cells, n={row['n']:,})")
    for note in report.get("notes") or []:
        out.print(f"note: {escape(note)}")
