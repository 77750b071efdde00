"""``specexact fuzz`` and the fuzz options of ``specexact audit`` (hooked into ``cli/cli.py``).

``specexact fuzz --sampler NAME [--seed N] [--budget SECONDS | --examples N]
[--profile ci|nightly] [--exact-only] [--batches N] [--false-fail-rate R]
[--report-dir DIR] [--no-database] [--json PATH]`` runs the fuzz phase alone: the exact
families (generated inputs, exact rules, boundary-uniform probes, invalid inputs), then
its generated statistical cases (unless ``--exact-only``) at the given false-fail rate.
It writes ``fuzz-<sampler>-<UTC time>.json`` and one replay script per finding into the
report folder; the Hypothesis example database is ``<report-dir>/.fuzz-examples``.

Exit status: 0 nothing found, 1 a finding, 2 the fuzzer itself could not run (bad
arguments, a sampler that cannot be loaded, an error of the fuzz phase).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import sys
import tempfile
from pathlib import Path

from specexact.cli_common import DEFAULT_REPORT_DIR  # light: no torch

__all__ = ["add_fuzz_parser", "run_fuzz_command", "add_audit_fuzz_options", "audit_fuzz_settings",
           "fuzz_status", "print_fuzz", "fuzz_exit_status", "DATABASE_SUBDIR"]

EXIT_PASS, EXIT_FAIL, EXIT_ERROR = 0, 1, 2

DATABASE_SUBDIR = ".fuzz-examples"
"""The Hypothesis example database's folder inside ``--report-dir``."""


def add_fuzz_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``specexact fuzz`` on ``subparsers`` (an ``add_subparsers()`` result)."""
    f = subparsers.add_parser("fuzz", help="fuzz a sampler: generated inputs, exact rules, boundary uniforms "
                                           "(exit 0 nothing found, 1 a finding, 2 error)")
    f.add_argument("--sampler", default="builtin", help="as for 'specexact audit' (default: builtin)")
    f.add_argument("--seed", type=int, default=0, help="fuzz seed: every example and generated case derives from it")
    f.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="time for the exact families (default: a fixed number of examples per family)")
    f.add_argument("--examples", type=int, default=None, metavar="N", help="examples per exact family")
    f.add_argument("--profile", choices=("ci", "nightly"), default="ci",
                   help="ci: 25 examples per family, 1 generated case of each kind; nightly: 400 and 3")
    f.add_argument("--exact-only", action="store_true", help="skip the generated statistical cases")
    f.add_argument("--batches", type=int, default=4, metavar="N",
                   help="decoder calls of each generated statistical case (default: 4)")
    f.add_argument("--false-fail-rate", type=float, default=1e-6,
                   help="chance that a correct sampler fails the generated statistical cases (default: 1e-6)")
    f.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    f.add_argument("--report-dir", default=DEFAULT_REPORT_DIR, metavar="DIR",
                   help="where the JSON result, the replay scripts and the example database go "
                        f"(default: ./{DEFAULT_REPORT_DIR})")
    f.add_argument("--no-database", action="store_true", help="no Hypothesis example database")
    f.add_argument("--json", default=None, metavar="PATH", help="also write the JSON result here")
    f.add_argument("--quiet", action="store_true", help="no progress lines")
    return f


def add_audit_fuzz_options(parser: argparse.ArgumentParser) -> None:
    """The fuzz options of ``specexact audit``: ``--no-fuzz``, ``--fuzz-profile``, ``--fuzz-share``,
    ``--fuzz-examples``."""
    parser.add_argument("--no-fuzz", action="store_true",
                        help="skip the fuzz phase (generated inputs held to exact rules, boundary-uniform probes, "
                             "generated row classes and per-example laws)")
    parser.add_argument("--fuzz-profile", choices=("ci", "nightly"), default="ci",
                        help="how much the fuzz phase explores (default: ci; nightly: more examples and cases)")
    parser.add_argument("--fuzz-share", type=float, default=0.2, metavar="F",
                        help="share of --budget for the fuzz phase's exact families (default: 0.2); unused time goes "
                             "to the cases")
    parser.add_argument("--fuzz-examples", type=int, default=None, metavar="N",
                        help="a fixed number of examples per exact family, whatever the budget (the findings then do "
                             "not depend on the machine's speed: for comparisons with --baseline); default: as many "
                             "as --fuzz-share of the budget allows")


def audit_fuzz_settings(args) -> dict:
    """The :class:`~specexact.audit.AuditSettings` fields of the audit's fuzz options."""
    return {"fuzz": not args.no_fuzz, "fuzz_profile": args.fuzz_profile, "fuzz_share": args.fuzz_share,
            "fuzz_examples": args.fuzz_examples,
            "fuzz_database_dir": str(Path(args.report_dir) / DATABASE_SUBDIR)}


def fuzz_status(event: dict, console) -> None:
    """Print the fuzz stage's progress events of ``run_audit`` (``console``: rich)."""
    from rich.markup import escape

    kind = event.get("event", "")
    if kind == "fuzz_start":
        how = (f"{event['planned_time_s']:.0f} s" if event.get("planned_time_s") is not None
               else f"{event['examples_per_family']} examples per family")
        console.print(f"fuzz phase ({escape(event['profile'])} profile): exact families for {how}")
    elif kind == "fuzz_family_end":
        mark = "[red]FINDING[/]" if event["findings"] else ("[yellow]error[/]" if event.get("error") else "pass")
        console.print(f"  fuzz {escape(event['family'])}: {mark} ({event['examples']} examples, {event['time_s']:.1f} s)")
    elif kind == "fuzz_end" and event.get("error"):
        console.print(f"[yellow]fuzz phase error:[/] {escape(event['error'].splitlines()[0])}")


def print_fuzz(report: dict, console, *, findings: bool = True) -> None:
    """The fuzz phase of a report (or of a ``specexact fuzz`` result): what it tried and,
    with ``findings``, its findings, one block each (``specexact audit`` lists them among
    the report's findings by tier instead)."""
    from rich.markup import escape

    fuzz = report if str(report.get("schema", "")).startswith("specexact.fuzz") else report.get("fuzz")
    if not fuzz:
        return
    tried = ", ".join(f"{f['name']} {f['examples']}" for f in fuzz["families"])
    if fuzz["families"] and not findings and fuzz["findings"]:  # the findings are listed by tier elsewhere
        n = len(fuzz["findings"])
        console.print(f"fuzz: {n} finding{'s' if n != 1 else ''}, listed above by tier ({tried} examples; "
                      f"{fuzz['time_s']:.1f} s)")
    elif fuzz["families"]:
        console.print(f"fuzz: {fuzz['verdict']} ({tried} examples; {fuzz['time_s']:.1f} s)")
    else:
        console.print("fuzz: nothing run (no family applies to this sampler, below)")
    unchecked = sum(int(f.get("unchecked") or 0) for f in fuzz["families"])
    cut = sum(int(f.get("shrinks_cut") or 0) for f in fuzz["families"])
    if unchecked or cut:  # what its share of the time left undone
        console.print(f"fuzz: its time ran out: {unchecked} example(s) drawn and not checked, "
                      f"{cut} shrink(s) cut short (their smallest failing example so far reported)")
    for n in fuzz.get("not_applicable") or []:
        console.print(f"fuzz: not applicable: {escape(n['what'])}: {escape(n['reason'])}")
    for f in fuzz["findings"] if findings else ():
        known = f" = {f['known_as']}" if f.get("known_as") else ""
        console.print(f"[red]fuzz finding[/] {escape(f['family'])} / {escape(f['rule'])}{escape(known)}: "
                      f"{escape(f['message'])}")
        console.print(f"  shrunk example: {escape(f['example'])}")


def fuzz_exit_status(report: dict, status: int) -> int:
    """``status``, or 2 when the fuzz phase of the report could not run."""
    fuzz = report.get("fuzz")
    if fuzz and fuzz.get("error") and status == EXIT_PASS:
        return EXIT_ERROR
    return status


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)[:80] or "sampler"


def _cases(sampler, args, settings, console) -> tuple[list, bool]:
    """Run the generated statistical cases; return their result dicts and whether all passed."""
    from specexact.audit.cases.dispatch import checks_per_case, run_case
    from specexact.audit.cases.generated import generated_cases
    from specexact.audit.cases.tree_case import chain_case_reason

    cases = []
    for c in generated_cases(sampler, settings):
        reason = chain_case_reason(c, sampler)  # as the audit skips them (audit/resolve.py)
        if reason is None:
            cases.append(c)
        elif not args.quiet:
            console.print(f"skipped {c.name}: {reason}")
    if not cases:
        return [], True
    alpha = args.false_fail_rate / sum(checks_per_case(c) for c in cases)
    out, passed = [], True
    for c in cases:
        res = run_case(c, sampler, false_fail_rate=alpha, seed=args.seed, num_batches=args.batches, device=args.device)
        passed &= res.passed
        out.append(res.to_dict())
        if not args.quiet:
            mark = "pass" if res.passed else "[red]FAIL[/]"
            console.print(f"  {c.name}: {mark} ({res.num_sequences:,} sequences; per-check false-fail rate {alpha:.3g})")
    return out, passed


def run_fuzz_command(args) -> int:
    """Run ``specexact fuzz`` with parsed ``args``; return the exit status (module docstring)."""
    from rich.console import Console
    from rich.markup import escape

    from specexact.audit import SamplerError, resolve_sampler
    from specexact.audit.core.json_io import to_jsonable, write_json, write_text
    from specexact.cli_common import CliError, os_error_line
    from specexact.fuzz.run import run_fuzz
    from specexact.fuzz.settings import FuzzSettings

    console = Console(stderr=True)
    bad = None
    if args.budget is not None and not (args.budget > 0 and math.isfinite(args.budget)):
        bad = f"--budget must be > 0, got {args.budget}"
    elif args.examples is not None and args.examples < 1:
        bad = f"--examples must be >= 1, got {args.examples}"
    elif args.batches < 1:
        bad = f"--batches must be >= 1, got {args.batches}"
    elif not 0 < args.false_fail_rate < 1:
        bad = f"--false-fail-rate must be in (0, 1), got {args.false_fail_rate}"
    if bad:
        raise CliError(bad)
    try:
        sampler, target = resolve_sampler(args.sampler)
    except SamplerError as exc:
        raise CliError(str(exc)) from None
    out_dir = Path(args.report_dir)
    # Before fuzzing, as the audit does: the result must have somewhere to go.
    for option, folder in (("--report-dir", out_dir), ("--json", Path(args.json).parent if args.json else None)):
        if folder is None:
            continue
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".specexact-write-test-"):
                pass
        except OSError as exc:
            raise CliError(os_error_line(exc, f"cannot write {option}")) from None
    settings = FuzzSettings(profile=args.profile, seed=args.seed, time_s=args.budget, examples=args.examples,
                            database_dir=None if args.no_database else str(out_dir / DATABASE_SUBDIR))

    def status(event: dict) -> None:
        if not args.quiet:
            fuzz_status(event, console)

    status({"event": "fuzz_start", "planned_time_s": args.budget, "profile": args.profile,
            "examples_per_family": settings.examples_per_family})
    result = run_fuzz(sampler, settings, name=args.sampler, device=args.device, on_status=status)
    doc = {"schema": "specexact.fuzz/1", "sampler": {"name": args.sampler, "target": target},
           "finished_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), **result.to_dict()}
    cases_passed = True
    if not args.exact_only and result.error is None:
        doc["cases"], cases_passed = _cases(sampler, args, settings, console)
        doc["generated_cases"] = [c["name"] for c in doc["cases"]]
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    stem = f"fuzz-{_safe(args.sampler)}-{stamp}"
    for k, f in enumerate(doc["findings"], 1):
        f["replay_path"] = str(write_text(f["replay"], out_dir / f"{stem}-finding{k}.py"))
    path = write_json(to_jsonable(doc), out_dir / f"{stem}.json")
    if args.json:
        write_json(to_jsonable(doc), args.json)
    print_fuzz(doc, console)
    for f in doc["findings"]:
        console.print(f"  replay: {escape(sys.executable)} {escape(f['replay_path'])}")  # this env's interpreter
    if result.error:
        console.print(f"[red]error:[/] the fuzz phase could not run: {escape(result.error)}")
        return EXIT_ERROR
    console.print(f"result: {escape(str(path))}")
    return EXIT_PASS if (result.passed and cases_passed) else EXIT_FAIL
