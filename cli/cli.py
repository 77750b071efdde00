"""The ``specexact`` command.

``specexact audit [--sampler NAME | MODULE:CALLABLE] [--budget SECONDS] [--seed N]
[--report-dir DIR] [--json PATH]``

Exit status: 0 no evidence of inexactness; 1 inexactness or a defect (crash, out-of-range
id, NaN, protocol violation) found; 2 the audit itself could not run (bad arguments,
import failure).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
from pathlib import Path

__all__ = ["main", "build_parser"]

EXIT_PASS, EXIT_FAIL, EXIT_ERROR = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse exits 2 as well; keep its message style
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="specexact", description="Statistical exactness audits of speculative decoding.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    a = sub.add_parser("audit", help="audit a verifier for exactness (exit 0 pass, 1 fail, 2 error)")
    a.add_argument("--sampler", default="builtin",
                   help="'builtin', a name registered under the entry-point group specexact.samplers, "
                        "or MODULE:CALLABLE with the verify protocol (default: builtin)")
    a.add_argument("--budget", type=float, default=90.0, metavar="SECONDS",
                   help="sampling time split over the cases (default: 90)")
    a.add_argument("--batches", type=int, default=None, metavar="N",
                   help="fixed decoder calls per case instead of a time budget (reproducible sample sizes)")
    a.add_argument("--seed", type=int, default=0, help="audit seed (default: 0)")
    a.add_argument("--false-fail-rate", type=float, default=1e-6,
                   help="chance that a correct sampler fails the audit (default: 1e-6)")
    a.add_argument("--case", action="append", default=None, metavar="NAME",
                   help="run only this case (repeatable); see --list-cases")
    a.add_argument("--list-cases", action="store_true", help="list the default cases and exit")
    a.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    a.add_argument("--report-dir", default="reports", metavar="DIR",
                   help="where JSON and Markdown reports go (default: ./reports)")
    a.add_argument("--json", default=None, metavar="PATH", help="also write the JSON report here")
    a.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def _device(name: str | None):
    import torch

    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
        torch.empty(1, device=dev)
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"--device {name!r} is not usable: {exc}") from exc
    return dev


def _audit(args) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from specexact.audit import SamplerError, default_cases, resolve_sampler, run_audit
    from specexact.reports import render_markdown, write_json

    console = Console(stderr=True)
    cases = default_cases()
    if args.list_cases:
        for c in cases:
            print(f"{c.name}: {c.description}")
        return EXIT_PASS
    if args.case:
        names = {c.name for c in cases}
        unknown = [n for n in args.case if n not in names]
        if unknown:
            console.print(f"[red]error:[/] unknown --case {unknown}; known: {sorted(names)}")
            return EXIT_ERROR
        cases = [c for c in cases if c.name in args.case]
    if args.budget <= 0:
        console.print(f"[red]error:[/] --budget must be > 0, got {args.budget}")
        return EXIT_ERROR
    if args.batches is not None and args.batches < 1:
        console.print(f"[red]error:[/] --batches must be >= 1, got {args.batches}")
        return EXIT_ERROR
    if not 0 < args.false_fail_rate < 1:
        console.print(f"[red]error:[/] --false-fail-rate must be in (0, 1), got {args.false_fail_rate}")
        return EXIT_ERROR
    try:
        device = _device(args.device)
        verifier, target = resolve_sampler(args.sampler)
    except (SamplerError, ValueError) as exc:
        console.print(f"[red]error:[/] {exc}")
        return EXIT_ERROR

    progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                        TimeElapsedColumn(), console=console, disable=args.quiet)
    task = progress.add_task("audit", total=len(cases), info="")
    state = {"name": ""}

    def on_start(case, i, n):
        state["name"] = case.name
        progress.update(task, description=f"[{i + 1}/{n}] {case.name}", info="")

    def on_progress(num_sequences, num_batches):
        progress.update(task, info=f"{num_sequences:,} sequences")

    def on_end(res):
        progress.advance(task)
        mark = "[green]pass[/]" if res.passed else "[red]FAIL[/]"
        progress.console.print(f"{res.case.name}: {mark} ({res.num_sequences:,} sequences, {res.wall_time_s:.1f} s)")

    with progress:
        report = run_audit(verifier, sampler_name=args.sampler, sampler_target=target, cases=cases,
                           false_fail_rate=args.false_fail_rate, budget_s=args.budget,
                           num_batches=args.batches, seed=args.seed, device=device,
                           on_case_start=on_start, progress=on_progress, on_case_end=on_end)

    table = Table(title=f"specexact audit of {args.sampler}: {report['verdict'].upper()}")
    for col in ("case / check", "method", "n", "p-value", "detectable TV", "verdict"):
        table.add_column(col, no_wrap=True)
    for chk in report["checks"]:
        tv = chk["detectable_tv"]
        table.add_row(f"{chk['case']} / {chk['name']}", chk["method"], f"{chk['n']:,}", f"{chk['pvalue']:.3g}",
                      tv if isinstance(tv, str) else f"{tv:.3g}",
                      "pass" if chk["passed"] else "[red]FAIL[/]")
    out = Console()
    out.width = max(out.width, 110)
    out.print(table)

    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out_dir = Path(args.report_dir)
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in args.sampler)
    base = out_dir / f"audit-{safe}-{stamp}"
    json_path = write_json(report, base.with_suffix(".json"))
    md_path = base.with_suffix(".md")
    md_path.write_text(render_markdown(report))
    if args.json:
        write_json(report, args.json)
    for f in report["findings"]:
        console.print(f"[red]finding[/] {f['case']} / {f['check']}: {f['message']}")
    console.print(f"verdict: {report['verdict']}; {report['num_sequences']:,} sequences in "
                  f"{report['wall_time_s']:.1f} s; reports: {json_path}, {md_path}")
    return EXIT_PASS if report["verdict"] == "pass" else EXIT_FAIL


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "audit":
            return _audit(args)
    except KeyboardInterrupt:
        return EXIT_ERROR
    parser.error(f"unknown command {args.command!r}")
    return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
