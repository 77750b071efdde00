"""``specexact merge`` and ``specexact render``: commands on JSON reports already written."""

from __future__ import annotations

from pathlib import Path

from specexact.cli_common import EXIT_FAIL, EXIT_PASS, CliError, os_error_line
from specexact.cli_output import prepare_dir, prepare_file, print_table, write_outputs

__all__ = ["merge_command", "render_command"]


def merge_command(args) -> int:
    """``specexact merge SHARD.json ...``: one report from the shards of one audit."""
    from rich.console import Console
    from rich.markup import escape

    from specexact.audit.run.shard import ShardError
    from specexact.reports.merge import merge_reports
    from specexact.reports import read_json, report_stem

    console = Console(stderr=True)
    if args.history < 0:
        raise CliError(f"--history must be >= 0, got {args.history}")
    reports = []
    for path in args.reports:
        try:
            reports.append(read_json(path))
        except OSError as exc:
            raise CliError(os_error_line(exc, "cannot read")) from exc
        except ValueError as exc:
            raise CliError(f"cannot read {path}: not JSON ({exc})") from exc
    try:
        report = merge_reports(reports)
    except ShardError as exc:
        raise CliError(str(exc)) from exc
    prepare_dir(args.report_dir, "--report-dir")
    if args.json:
        prepare_file(args.json, "--json")
    print_table(report)
    paths = write_outputs(report, report_dir=args.report_dir, stem=report_stem(report["sampler"]["name"]),
                          json_path=args.json, html=not args.no_html, history_limit=args.history)
    console.print(f"verdict: {report['verdict']}; reports: " + ", ".join(escape(str(p)) for p in paths.values()))
    return EXIT_PASS if report["verdict"] == "pass" else EXIT_FAIL


def render_command(args) -> int:
    """``specexact render REPORT.json``: its Markdown (and HTML) again."""
    from rich.console import Console
    from rich.markup import escape

    from specexact.reports import SchemaError, load_history, read_json, render_html, render_markdown, validate_report
    from specexact.audit.core.json_io import write_text

    console = Console(stderr=True)
    path = Path(args.report)
    try:
        report = read_json(path)
        validate_report(report)
    except OSError as exc:
        raise CliError(os_error_line(exc, "cannot read")) from exc
    except (ValueError, SchemaError) as exc:
        raise CliError(f"{path}: {exc}") from exc
    out = prepare_dir(args.out_dir, "--out-dir") if args.out_dir else path.parent
    history = load_history(path.parent, sampler_name=report["sampler"]["name"], exclude=[path],
                           before=report["started_at"], limit=args.history)
    try:
        written = [write_text(render_markdown(report, history), out / (path.stem + ".md"))]
        if not args.no_html:
            written.append(write_text(render_html(report, history), out / (path.stem + ".html")))
    except OSError as exc:
        raise CliError(os_error_line(exc, "cannot write")) from exc
    console.print("wrote " + ", ".join(escape(str(p)) for p in written))
    return EXIT_PASS
