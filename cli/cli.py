"""The ``specexact`` command.

``specexact audit [--sampler NAME | MODULE:CALLABLE] [--budget SECONDS | --batches N]
[--seed N] [--isolate [--case-timeout SECONDS]] [--shard I/N] [--report-dir DIR]
[--json PATH]`` audits a sampler and writes JSON, Markdown and HTML reports;
``specexact merge SHARD.json ...`` merges the reports of ``--shard`` runs into one;
``specexact render REPORT.json`` re-renders a JSON report's Markdown and HTML.

Exit status: 0 no evidence of inexactness; 1 inexactness or a defect (crash, hang, out-of-range
id, NaN, protocol violation) found; 2 the audit itself could not run (bad arguments, import
failure, shards that do not form one audit).
"""

from __future__ import annotations

import argparse
import json
import datetime as _dt
import math
import sys
from pathlib import Path

__all__ = ["main", "build_parser"]

from specexact.fuzz.cli import (  # noqa: E402 - the fuzz hook
    add_audit_fuzz_options, add_fuzz_parser, audit_fuzz_settings, fuzz_exit_status, fuzz_status, print_fuzz,
    run_fuzz_command)

EXIT_PASS, EXIT_FAIL, EXIT_ERROR = 0, 1, 2

#: Journal sub-folder of the report folder (finished cases of running or killed audits).
JOURNAL_SUBDIR = ".journal"


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse exits 2 as well; keep its message style
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


def _report_args(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--report-dir", default="reports", metavar="DIR",
                   help=f"where {what} JSON, Markdown and HTML reports go; earlier reports there make the trend "
                        "(default: ./reports)")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the JSON report here")
    p.add_argument("--no-html", action="store_true", help="skip the HTML page (no matplotlib / jinja2 work)")
    p.add_argument("--history", type=int, default=30, metavar="N",
                   help="earlier reports of the same sampler in DIR shown in the trend (default: 30)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="specexact", description="Statistical exactness audits of speculative decoding.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    a = sub.add_parser("audit", help="audit a verifier for exactness (exit 0 pass, 1 fail, 2 error)")
    a.add_argument("--sampler", default="builtin",
                   help="'builtin', a name registered under the entry-point group specexact.samplers, "
                        "or MODULE:OBJECT: a callable with the verify protocol, or a logits-level adapter "
                        "with verify_logits (default: builtin)")
    a.add_argument("--budget", type=float, default=90.0, metavar="SECONDS",
                   help="time for the audit (of this shard): sample sizes are planned from the power functions "
                        "to fit it; they depend on the machine's speed, not on the data (default: 90)")
    a.add_argument("--batches", type=int, default=None, metavar="N",
                   help="fixed decoder calls per case instead of a time budget (reproducible sample sizes)")
    a.add_argument("--seed", type=int, default=0, help="audit seed (default: 0)")
    a.add_argument("--false-fail-rate", type=float, default=1e-6,
                   help="chance that a correct sampler fails the audit (default: 1e-6)")
    a.add_argument("--case", action="append", default=None, metavar="NAME",
                   help="run only this case (repeatable); see --list-cases")
    a.add_argument("--quick", action="store_true",
                   help="the quick cases (exact cases, 4x smaller batches): a smoke test, not an audit to rely on")
    a.add_argument("--list-cases", action="store_true", help="list the default cases (and the opt-in ones --case can name) and exit")
    a.add_argument("--baseline", default=None, metavar="PATH.json",
                   help="regression mode: compare with an earlier report; exit 1 only on a regression (a new "
                        "failure or defect, or a drop in acceptance beyond its confidence interval)")
    a.add_argument("--baseline-false-alarm-rate", type=float, default=1e-6, metavar="R",
                   help="false-alarm rate of the acceptance-drop comparisons with --baseline (default: 1e-6)")
    a.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    a.add_argument("--threads", type=int, default=None, metavar="N",
                   help="torch intra-op threads (default: torch's choice); 1 is often fastest on a shared or "
                        "busy CPU, where threads wait for each other")
    a.add_argument("--isolate", action="store_true",
                   help="run each case in a subprocess: a hang (timeout) or a crash of the sampler's process "
                        "(segfault, abort) becomes a finding and the audit goes on")
    a.add_argument("--case-timeout", type=float, default=None, metavar="SECONDS",
                   help="with --isolate (implies it): kill a case after this long (default: 4x its planned time "
                        "+ 300 s with --budget, 1800 s with --batches)")
    a.add_argument("--shard", default=None, metavar="I/N",
                   help="run only shard I of N (1-based) of the cases, at the whole audit's per-check false-fail "
                        "rate; combine the shards' JSON reports with 'specexact merge'")
    a.add_argument("--fresh", action="store_true",
                   help="ignore a journal of an interrupted run of the same audit and start over")
    a.add_argument("--no-journal", action="store_true",
                   help="do not journal finished cases (an interrupted audit then starts over)")
    _report_args(a, "the")
    add_audit_fuzz_options(a)  # --no-fuzz, --fuzz-profile, --fuzz-share (specexact.fuzz.cli)
    add_fuzz_parser(sub)  # specexact fuzz
    m = sub.add_parser("merge", help="merge the JSON reports of 'audit --shard' runs into one report")
    m.add_argument("reports", nargs="+", metavar="SHARD.json", help="the JSON reports of shards 1/N .. N/N")
    _report_args(m, "the merged")
    r = sub.add_parser("render", help="write the Markdown and HTML of a JSON report (e.g. after editing history)")
    r.add_argument("report", metavar="REPORT.json")
    r.add_argument("--out-dir", default=None, metavar="DIR", help="default: the report's folder")
    r.add_argument("--history", type=int, default=30, metavar="N",
                   help="earlier reports of the same sampler in the report's folder shown in the trend")
    r.add_argument("--no-html", action="store_true", help="Markdown only")
    return parser


def _device(name: str | None):
    import torch

    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
        torch.empty(1, device=dev)
        torch.Generator(device=dev)  # the audit's randomness lives there too
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"--device {name!r} is not usable: {exc}") from exc
    return dev


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)[:80] or "sampler"


def _print_table(report: dict) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    title = f"specexact audit of {escape(report['sampler']['name'])}: {report['verdict'].upper()}"
    shard = report["settings"].get("shard")
    if shard:
        title += f" (shard {shard['index']}/{shard['count']})"
    table = Table(title=title)
    for col in ("case / check", "method", "n", "p-value", "detectable TV", "verdict"):
        table.add_column(col, no_wrap=True)
    for chk in report["checks"]:
        tv = chk["detectable_tv"]
        table.add_row(escape(f"{chk['case']} / {chk['name']}"), chk["method"], f"{chk['n']:,}", f"{chk['pvalue']:.3g}",
                      tv if isinstance(tv, str) else f"{tv:.3g}",
                      "pass" if chk["passed"] else "[red]FAIL[/]")
    out = Console()
    out.width = max(out.width, 110)
    out.print(table)


def _skipped_what(entry: dict) -> str:
    """``"v6-trunc-penalties classes 1, 2"`` for a skipped-classes entry of a report."""
    classes = entry.get("classes") or []
    return entry["case"] + (f" class{'es' if len(classes) > 1 else ''} {', '.join(map(str, classes))}"
                            if classes else "")


def _write(report: dict, args, console, stem: str) -> dict:
    from rich.markup import escape

    from specexact.reports import load_history, write_json, write_reports

    out_dir = Path(args.report_dir)
    exclude = [out_dir / f"{stem}.json"] + ([Path(args.json)] if args.json else [])
    history = load_history(out_dir, sampler_name=report["sampler"]["name"], exclude=exclude, limit=args.history)
    paths = write_reports(report, out_dir, stem, html=not args.no_html, history=history)
    if args.json:
        write_json(report, args.json)
    proc = report["settings"].get("processing") or {}
    if proc.get("level") == "logits":
        console.print(f"logits-level sampler: reference laws use its declared order {' > '.join(proc['order'])} "
                      f"(repetition penalty over {proc['repetition_penalty_scope'].replace('_', ' ')})")
    for sk in report["settings"].get("skipped_cases") or []:
        console.print(f"[yellow]skipped[/] {escape(_skipped_what(sk))}: {escape(sk['reason'])}")
    for f in report["findings"]:
        console.print(f"[red]finding[/] {escape(f['case'])} / {escape(f['check'])}: {escape(f['message'])}")
        console.print(f"  reproduce: {escape(f['reproduction']['command'])}")
    print_fuzz(report, console)
    console.print(f"verdict: {report['verdict']}; {report['num_sequences']:,} sequences in "
                  f"{report['wall_time_s']:.1f} s; reports: " + ", ".join(escape(str(p)) for p in paths.values()))
    return paths


def _fmt_tv(tv) -> str:
    return "-" if tv is None or (isinstance(tv, float) and not math.isfinite(tv)) else f"{tv:.3g}"


def _audit(args) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from specexact.audit import AuditSettings, SamplerError, default_cases, quick_cases, resolve_sampler, run_audit
    from specexact.audit.catalog import opt_in_cases
    from specexact.audit.shard import ShardError, parse_shard

    console = Console(stderr=True)
    cases = quick_cases() if args.quick else default_cases()
    extra = opt_in_cases()  # run only when named with --case
    if args.list_cases:
        for c in cases:
            print(f"{c.name}: {c.description}")
        for c in extra:
            print(f"{c.name} (only with --case {c.name}): {c.description}")
        return EXIT_PASS
    if args.case:
        names = {c.name for c in [*cases, *extra]}
        unknown = [n for n in args.case if n not in names]
        if unknown:
            console.print(f"[red]error:[/] unknown --case {escape(str(unknown))}; known: {sorted(names)}")
            return EXIT_ERROR
        cases = [c for c in [*cases, *extra] if c.name in args.case]
    if args.budget <= 0 or not math.isfinite(args.budget):
        console.print(f"[red]error:[/] --budget must be > 0, got {args.budget}")
        return EXIT_ERROR
    if args.batches is not None and args.batches < 1:
        console.print(f"[red]error:[/] --batches must be >= 1, got {args.batches}")
        return EXIT_ERROR
    if not 0 < args.false_fail_rate < 1:
        console.print(f"[red]error:[/] --false-fail-rate must be in (0, 1), got {args.false_fail_rate}")
        return EXIT_ERROR
    if args.case_timeout is not None:
        if not args.case_timeout > 0:
            console.print(f"[red]error:[/] --case-timeout must be > 0, got {args.case_timeout}")
            return EXIT_ERROR
        args.isolate = True
    if args.threads is not None:
        if args.threads < 1:
            console.print(f"[red]error:[/] --threads must be >= 1, got {args.threads}")
            return EXIT_ERROR
        import torch

        torch.set_num_threads(args.threads)
    if args.history < 0:
        console.print(f"[red]error:[/] --history must be >= 0, got {args.history}")
        return EXIT_ERROR
    shard = None
    if args.shard is not None:
        try:
            shard = parse_shard(args.shard)
        except ShardError as exc:
            console.print(f"[red]error:[/] {escape(str(exc))}")
            return EXIT_ERROR
    baseline = None
    if args.baseline is not None:
        from specexact.audit.report import SCHEMA

        try:
            baseline = json.loads(Path(args.baseline).read_text())
        except (OSError, ValueError) as exc:
            console.print(f"[red]error:[/] cannot read --baseline {escape(args.baseline)}: {escape(str(exc))}")
            return EXIT_ERROR
        if not isinstance(baseline, dict) or baseline.get("schema") != SCHEMA:
            console.print(f"[red]error:[/] --baseline {escape(args.baseline)} is not a {SCHEMA} report")
            return EXIT_ERROR
        if not 0 < args.baseline_false_alarm_rate < 1:
            console.print(f"[red]error:[/] --baseline-false-alarm-rate must be in (0, 1), got "
                          f"{args.baseline_false_alarm_rate}")
            return EXIT_ERROR
    try:
        device = _device(args.device)
        verifier, target = resolve_sampler(args.sampler)
    except (SamplerError, ValueError) as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")
        return EXIT_ERROR
    from specexact.audit.runner import restrict_to_sampler

    restricted = [(c, *restrict_to_sampler(c, verifier)) for c in cases]
    reasons = [f"{c.name}: {r}" for c, _, r in restricted if r is not None]
    if all(rc is None for _, rc, _ in restricted):
        console.print(f"[red]error:[/] no selected case can audit {escape(args.sampler)}: {escape('; '.join(reasons))}")
        return EXIT_ERROR

    budget_mode = args.batches is None
    progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                        TimeElapsedColumn(), console=console, disable=args.quiet)
    task = progress.add_task("audit", total=None, info="")
    state = {"resumed": set(), "done_batches": 0, "current": 0}

    def on_status(ev: dict) -> None:
        kind = ev["event"]
        if kind == "pilot":
            progress.update(task, description=f"pilot: timing one decoder call of {ev['num_cases']} case(s)")
        elif kind == "plan":
            plan = ev["plan"]
            state["resumed"] = set(ev["resumed"])
            if ev["resumed"]:
                progress.console.print(f"resuming: {len(ev['resumed'])} case(s) finished by an interrupted run "
                                       f"of this audit: {escape(', '.join(ev['resumed']))}")
            if budget_mode:
                progress.update(task, total=args.budget, completed=0)
                parts = ", ".join(f"{escape(c.name)} {c.planned_batches} (≈TV {_fmt_tv(c.planned_detectable_tv)})"
                                  for c in plan.cases)
                progress.console.print(f"plan for {args.budget:g} s (pilot {plan.pilot_s:.1f} s), decoder calls: "
                                       f"{parts}")
                if plan.note:
                    progress.console.print(f"[yellow]{escape(plan.note)}[/]")
            else:
                progress.update(task, total=sum(c.planned_batches for c in plan.cases) or 1, completed=0)
        elif kind == "case_start":
            state["current"] = 0
            progress.update(task, description=f"[{ev['index'] + 1}/{ev['num_cases']}] {escape(ev['case'])}",
                            info=f"planned {ev['planned_batches']} calls, ≈TV {_fmt_tv(ev['planned_detectable_tv'])}")
        elif kind == "batch":
            state["current"] = ev["num_batches"]
            info = (f"{ev['num_sequences']:,} seq · {ev['num_batches']}/{ev['planned_batches']} calls · "
                    f"≈TV {_fmt_tv(ev['detectable_tv'])} (plan {_fmt_tv(ev['planned_detectable_tv'])})")
            if budget_mode:
                progress.update(task, completed=min(ev["elapsed_s"], args.budget), info=info)
            else:
                progress.update(task, completed=state["done_batches"] + ev["num_batches"], info=info)
        elif kind.startswith("fuzz"):
            fuzz_status(ev, progress.console)
        elif kind == "case_end":
            on_end(ev["result"])
            if budget_mode and "elapsed_s" in ev:
                progress.update(task, completed=min(ev["elapsed_s"], args.budget))
            elif not budget_mode:
                state["done_batches"] += max(state["current"], 0)
                progress.update(task, completed=state["done_batches"])

    def on_end(res):
        mark = "[green]pass[/]" if res.passed else "[red]FAIL[/]"
        extra = " (resumed)" if res.case.name in state["resumed"] else ""
        kind = ""
        if res.defect:
            kind = " — " + escape(res.defect.splitlines()[0][:160])
        progress.console.print(f"{escape(res.case.name)}: {mark}{extra} ({res.num_sequences:,} sequences, "
                               f"{res.wall_time_s:.1f} s){kind}")

    journal_dir = None if args.no_journal else Path(args.report_dir) / JOURNAL_SUBDIR
    with progress:
        settings = AuditSettings(sampler_name=args.sampler, sampler_target=target, cases=tuple(cases),
                                 false_fail_rate=args.false_fail_rate, budget_s=args.budget,
                                 num_batches=args.batches, seed=args.seed, device=str(device), shard=shard,
                                 journal_dir=None if journal_dir is None else str(journal_dir), fresh=args.fresh,
                                 isolate=args.isolate, case_timeout_s=args.case_timeout,
                                 case_set=("quick" if args.quick else "default"), **audit_fuzz_settings(args))
        report = run_audit(verifier, settings, on_status=on_status)
    _print_table(report)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    stem = f"audit-{_safe(args.sampler)}-{stamp}" + (f"-shard{shard[0]}of{shard[1]}" if shard else "")
    journal = report.pop("journal", None)
    diff = None
    if baseline is not None:
        from specexact.audit.baseline import compare_to_baseline

        diff = compare_to_baseline(report, baseline, false_alarm_rate=args.baseline_false_alarm_rate)
        report["baseline"] = {"path": str(args.baseline), **diff.to_dict()}
        console.print(escape(diff.summary()))
    _write(report, args, console, stem)
    if journal:  # the reports are safely on disk: the journal has done its job
        Path(journal).unlink(missing_ok=True)
        try:
            Path(journal).parent.rmdir()  # only if no other audit's journal is there
        except OSError:
            pass
    if diff is not None:
        return EXIT_FAIL if diff.regressed else EXIT_PASS
    return fuzz_exit_status(report, EXIT_PASS if report["verdict"] == "pass" else EXIT_FAIL)


def _merge(args) -> int:
    from rich.console import Console
    from rich.markup import escape

    from specexact.audit.shard import ShardError, merge_reports
    from specexact.reports import read_json

    console = Console(stderr=True)
    reports = []
    for path in args.reports:
        try:
            reports.append(read_json(path))
        except (OSError, ValueError) as exc:
            console.print(f"[red]error:[/] cannot read {escape(path)}: {escape(str(exc))}")
            return EXIT_ERROR
    try:
        report = merge_reports(reports)
    except ShardError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")
        return EXIT_ERROR
    _print_table(report)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    _write(report, args, console, f"audit-{_safe(report['sampler']['name'])}-{stamp}")
    return EXIT_PASS if report["verdict"] == "pass" else EXIT_FAIL


def _render(args) -> int:
    from rich.console import Console
    from rich.markup import escape

    from specexact.reports import SchemaError, load_history, read_json, render_html, render_markdown, validate_report
    from specexact.reports.json_report import write_text

    console = Console(stderr=True)
    path = Path(args.report)
    try:
        report = read_json(path)
        validate_report(report)
    except (OSError, ValueError, SchemaError) as exc:
        console.print(f"[red]error:[/] {escape(str(path))}: {escape(str(exc))}")
        return EXIT_ERROR
    out = Path(args.out_dir) if args.out_dir else path.parent
    history = load_history(path.parent, sampler_name=report["sampler"]["name"], exclude=[path],
                           before=report["started_at"], limit=args.history)
    written = [write_text(render_markdown(report, history), out / (path.stem + ".md"))]
    if not args.no_html:
        written.append(write_text(render_html(report, history), out / (path.stem + ".html")))
    console.print("wrote " + ", ".join(escape(str(p)) for p in written))
    return EXIT_PASS


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "audit":
            return _audit(args)
        if args.command == "merge":
            return _merge(args)
        if args.command == "render":
            return _render(args)
        if args.command == "fuzz":
            return run_fuzz_command(args)
    except KeyboardInterrupt:
        return EXIT_ERROR
    parser.error(f"unknown command {args.command!r}")
    return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
