"""``specexact audit``: arguments to :class:`~specexact.audit.AuditSettings`, the progress
display, and the exit status.

Everything that stops the audit without a verdict on the sampler raises
:class:`~specexact.cli_common.CliError` (exit 2, one line): bad arguments, a sampler that
cannot be imported, output paths that cannot be written (checked before any sampling),
another run holding the same journal, a journal that cannot be written, reports that
cannot be written (the JSON is then saved elsewhere and the journal kept). An engine none
of whose cases started here (each first load raised) exits 2 too, after the reports are
written (:func:`~specexact.audit.verdict.verdict.not_started`). Ctrl-C (or
SIGTERM) ends with a line saying what was kept and how to resume.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

from specexact.cli_fuzz import audit_fuzz_settings, fuzz_status, print_fuzz

from specexact.cli_common import (DEFAULT_BUDGET_S, EXIT_ERROR, EXIT_FAIL, EXIT_PASS, JOURNAL_SUBDIR, QUICK_BUDGET_S,
                         CliError, os_error_line, sigterm_as_interrupt)
from specexact.cli_output import fmt_tv, prepare_dir, prepare_file, print_table, write_outputs

__all__ = ["audit_command", "case_summary", "import_path_as_python_m", "print_findings"]


def import_path_as_python_m() -> None:
    """Put the current folder first on ``sys.path``, as ``python -m`` does, so that
    ``--sampler mymodule:fn`` finds ``mymodule.py`` in the folder the command runs from
    (a console script otherwise has only its own folder there). Isolated cases inherit it."""
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.insert(0, cwd)


def case_summary(case) -> str:
    """One line describing ``case`` by what it runs (for ``--list-cases``)."""
    from specexact.audit.cases.dispatch import checks_per_case

    vocab = case.model.vocab_size
    if getattr(case, "kind", None) == "verify":
        shape = f"verify level, V={vocab}, γ={case.num_draft_tokens}, {case.batch_size} rows per call"
    else:
        law = "exact sequence law" if case.exact else "first token exact, sequences two-sample against naive sampling"
        shape = (f"V={vocab}, γ={case.num_draft_tokens}, {case.length} tokens, {len(case.row_classes)} row "
                 f"class{'es' if len(case.row_classes) > 1 else ''}, {case.batch_size} rows per call, {law}")
    return f"[{shape}; {checks_per_case(case)} checks] {case.description}"


def _validate(args) -> None:
    if args.budget is not None and (not args.budget > 0 or not math.isfinite(args.budget)):
        raise CliError(f"--budget must be > 0, got {args.budget}")
    if args.batches is not None and args.batches < 1:
        raise CliError(f"--batches must be >= 1, got {args.batches}")
    if not 0 < args.false_fail_rate < 1:
        raise CliError(f"--false-fail-rate must be in (0, 1), got {args.false_fail_rate}")
    if getattr(args, "call_timeout", None) is not None and not (args.call_timeout >= 0
                                                                 and math.isfinite(args.call_timeout)):
        raise CliError(f"--call-timeout must be >= 0 seconds (0: no limit), got {args.call_timeout}")
    if args.case_timeout is not None:
        if not args.case_timeout > 0:
            raise CliError(f"--case-timeout must be > 0, got {args.case_timeout}")
        args.isolate = True
    if args.threads is not None and args.threads < 1:
        raise CliError(f"--threads must be >= 1, got {args.threads}")
    if args.history < 0:
        raise CliError(f"--history must be >= 0, got {args.history}")
    if getattr(args, "fuzz_examples", None) is not None and args.fuzz_examples < 1:
        raise CliError(f"--fuzz-examples must be >= 1, got {args.fuzz_examples}")
    if getattr(args, "no_fuzz", False) and getattr(args, "fuzz_examples", None) is not None:
        raise CliError(f"--fuzz-examples {args.fuzz_examples} asks for fuzz examples, but --no-fuzz skips the fuzz phase")
    if not 0 < args.baseline_false_alarm_rate < 1:
        raise CliError(f"--baseline-false-alarm-rate must be in (0, 1), got {args.baseline_false_alarm_rate}")


def _baseline(path: str | None) -> dict | None:
    if path is None:
        return None
    from specexact.audit.verdict.build import SCHEMA

    try:
        baseline = json.loads(Path(path).read_text())
    except OSError as exc:
        raise CliError(os_error_line(exc, "cannot read --baseline")) from exc
    except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep to be a report
        raise CliError(f"cannot read --baseline {path}: not JSON ({type(exc).__name__}: {exc})") from exc
    if not isinstance(baseline, dict) or baseline.get("schema") != SCHEMA:
        raise CliError(f"--baseline {path} is not a {SCHEMA} report")
    from specexact.reports.schema import SchemaError, validate_report

    try:
        validate_report(baseline, max_errors=1)
    except SchemaError as exc:  # one line: the first mismatch
        detail = str(exc).splitlines()[-1].strip()
        raise CliError(f"--baseline {path} does not match the {SCHEMA} schema: {detail}") from exc
    if not baseline.get("checks"):  # every result would be "new": regression mode would compare nothing
        raise CliError(f"--baseline {path} holds no checks: there is nothing to compare with")
    return baseline


def _device(name: str | None):
    import torch

    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
        torch.empty(1, device=dev)
        torch.Generator(device=dev)  # the audit's randomness lives there too
    except Exception as exc:  # noqa: BLE001
        raise CliError(f"--device {name!r} is not usable: {exc}") from exc
    return dev


def _cases(args):
    from specexact.audit import default_cases, quick_cases
    from specexact.audit.cases.catalog import opt_in_cases
    from specexact.audit.cases.tree_case import tree_cases

    cases = quick_cases() if args.quick else default_cases()
    # Tree-level cases: the defaults of tree-protocol samplers (and block-v3 of block ones);
    # opt-in cases run only when named with --case.
    extra = [*tree_cases(quick=args.quick), *opt_in_cases()]
    if args.case:
        names = {c.name for c in [*cases, *extra]}
        unknown = [n for n in args.case if n not in names]
        if unknown:
            raise CliError(f"unknown --case {unknown}; known: {sorted(names)}")
        cases = [c for c in [*cases, *extra] if c.name in args.case]
    return cases, extra


def _engine_and_cases(args):
    """``(engine, target, cases)`` of ``--engine`` / ``--method`` / ``--pair``: the engine,
    what it resolved to, and its end-to-end cases (:func:`~specexact.audit.cases.e2e.catalog.e2e_cases`,
    with the generated scenarios and the long case; ``--case`` picks some of them by name)."""
    from specexact.audit.cases.e2e.catalog import e2e_cases
    from specexact.decoders.engines.registry import EngineError, resolve_engine

    if args.isolate or args.case_timeout is not None:
        raise CliError("--engine runs the engine in this process (it is loaded once per configuration); "
                       "--isolate and --case-timeout are for verify functions")
    if args.requests_per_class is not None and args.requests_per_class < 2:
        raise CliError(f"--requests-per-class must be >= 2, got {args.requests_per_class}")
    given = {k: v for k, v in (("pair", args.pair), ("requests_per_class", args.requests_per_class)) if v is not None}
    try:
        engine, target = resolve_engine(args.engine)
        # e2e_cases' defaults otherwise; the generated scenarios of the audit seed and the
        # long case too (their own requests per class). A --case that names only cases of the
        # catalog does not draw the scenarios (a Hypothesis run: seconds of the budget).
        cases = e2e_cases(engine, args.method, **given, long_case_too=True)
        if not args.case or any(n not in {c.name for c in cases} for n in args.case):
            cases = e2e_cases(engine, args.method, **given, long_case_too=True, scenarios=True, scenario_seed=args.seed)
    except (EngineError, ValueError) as exc:
        raise CliError(str(exc)) from exc
    if args.case:  # with --engine, --case picks among the engine's end-to-end cases
        names = [c.name for c in cases]
        unknown = [n for n in args.case if n not in names]
        if unknown:
            raise CliError(f"unknown --case {unknown}; with --engine the cases are the engine's end-to-end cases: "
                           f"{names}")
        cases = [c for c in cases if c.name in args.case]
    return engine, target, cases


class _Display:
    """The progress bar and the lines printed while an audit runs (``on_status`` events)."""

    def __init__(self, console, *, quiet: bool, budget_mode: bool, budget_s: float):
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.budget_mode, self.budget_s = budget_mode, budget_s
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                                 TimeElapsedColumn(), console=console, disable=quiet)
        self.task = self.progress.add_task("audit", total=None, info="")
        self.resumed: set = set()
        self.done_batches = 0
        self.current = 0
        self.finished = 0
        self.num_cases = 0
        self.journal: str | None = None
        self.stage = "resolve"

    def print(self, text: str) -> None:
        self.progress.console.print(text)

    def __call__(self, ev: dict) -> None:
        from rich.markup import escape

        kind = ev["event"]
        if kind.startswith("fuzz"):
            if kind == "fuzz_start":
                self.stage = "fuzz phase"
            fuzz_status(ev, self.progress.console)
        elif kind == "pilot":
            self.stage = "pilot"
            how = " and choosing the number of torch threads" if ev.get("choose_threads") else ""
            self.progress.update(self.task, description=f"pilot: timing one decoder call of {ev['num_cases']} "
                                                        f"case(s){how}")
        elif kind == "plan":
            self._plan(ev)
        elif kind == "case_start":
            self.stage = "cases"
            self.current = 0
            planned, initial = ev["planned_batches"], ev.get("initial_planned_batches")
            approx = "≈" if self.budget_mode else ""
            if self.budget_mode and initial is not None and initial != planned:
                self.print(f"{escape(ev['case'])}: re-planned to ≈{planned} calls (first plan ≈{initial}) "
                           "from the time left and the speed measured so far")
            if ev.get("floor_note"):
                self.print(f"[yellow]{escape(ev['floor_note'])}[/]")
            time_s = f" in {ev['planned_time_s']:.1f} s" if ev.get("planned_time_s") else ""
            self.progress.update(self.task, description=f"[{ev['index'] + 1}/{ev['num_cases']}] {escape(ev['case'])}",
                                 info=f"planned {approx}{planned} calls{time_s}, ≈TV "
                                      f"{fmt_tv(ev['planned_detectable_tv'])}")
        elif kind == "case_skipped":
            self.finished += 1
            self.print(f"{escape(ev['case'])}: [yellow]not run[/] ({escape(ev['reason'])})")
        elif kind == "batch":
            self.current = ev["num_batches"]
            calls = (f"{ev['num_batches']} calls (≈{ev['planned_batches']} planned)" if self.budget_mode
                     else f"{ev['num_batches']}/{ev['planned_batches']} calls")
            info = (f"{ev['num_sequences']:,} seq · {calls} · ≈TV {fmt_tv(ev['detectable_tv'])} "
                    f"(plan {fmt_tv(ev['planned_detectable_tv'])})")
            if self.budget_mode:
                self.progress.update(self.task, completed=min(ev["elapsed_s"], self.budget_s), info=info)
            else:
                self.progress.update(self.task, completed=self.done_batches + ev["num_batches"], info=info)
        elif kind == "case_end":
            self.finished += 1
            self._case_end(ev["result"])
            if self.budget_mode and "elapsed_s" in ev:
                self.progress.update(self.task, completed=min(ev["elapsed_s"], self.budget_s))
            elif not self.budget_mode:
                self.done_batches += max(self.current, 0)
                self.progress.update(self.task, completed=self.done_batches)

    def _plan(self, ev: dict) -> None:
        from rich.markup import escape

        plan = ev["plan"]
        self.stage = "cases"
        self.num_cases = ev["num_cases"]
        self.journal = ev.get("journal")
        self.resumed = set(ev["resumed"])
        self.finished = len(self.resumed)
        if ev["resumed"]:
            self.print(f"resuming: {len(ev['resumed'])} case(s) finished by an interrupted run of this audit: "
                       f"{escape(', '.join(ev['resumed']))}")
        threads = ev.get("threads")
        if threads is not None:
            how = {"measured": "chosen by timing", "set": "--threads", "default": "torch's default"}[threads.chosen_by]
            timed = ", ".join(f"{k}: {v:.2f} s" for k, v in threads.seconds.items())
            self.print(f"torch threads: {threads.threads} ({how}" + (f"; pilot calls at {timed}" if timed else "")
                       + ")")
        if self.budget_mode:
            self.progress.update(self.task, total=self.budget_s, completed=0)
            parts = ", ".join(f"{escape(c.name)} ≈{c.planned_batches} (≈TV {fmt_tv(c.planned_detectable_tv)})"
                              for c in plan.cases)
            self.print(f"first plan for {self.budget_s:g} s (pilot {plan.pilot_s:.1f} s), decoder calls: {parts}; "
                       "each case is re-planned from the time left when it starts")
            if plan.note:
                self.print(f"[yellow]{escape(plan.note)}[/]")
        else:
            self.progress.update(self.task, total=sum(c.planned_batches for c in plan.cases) or 1, completed=0)

    def _case_end(self, res) -> None:
        from rich.markup import escape

        mark = "[green]pass[/]" if res.passed else "[red]FAIL[/]"
        extra = " (resumed)" if res.case.name in self.resumed else ""
        kind = " — " + escape(res.defect.splitlines()[0][:160]) if res.defect else ""
        self.print(f"{escape(res.case.name)}: {mark}{extra} ({res.num_sequences:,} sequences, "
                   f"{res.wall_time_s:.1f} s){kind}")

    def interrupted_message(self, no_journal: bool) -> str:
        """What the interruption kept, and how to go on."""
        if self.stage in ("resolve", "pilot", "fuzz phase"):
            return f"interrupted during the {self.stage}, before any case ran; nothing to resume"
        if no_journal or not self.journal:
            return (f"interrupted after {self.finished} of {self.num_cases} case(s); nothing was kept (--no-journal): "
                    "run the command again to start over")
        from specexact.audit.run.journal import read_journal

        kept = len(read_journal(self.journal).cases)  # what is on disk, whatever the display saw
        return (f"interrupted after {kept} of {self.num_cases} case(s); the finished cases are kept in "
                f"the journal {self.journal}: run the same command again to resume them (--fresh starts over)")


def audit_command(args) -> int:
    """Run ``specexact audit`` (module docstring); return the exit status."""
    from rich.console import Console
    from rich.markup import escape

    console = Console(stderr=True)
    if args.engine is not None and args.sampler is not None:
        raise CliError(f"give --sampler (a verify function) or --engine (an engine's own generate loop), not both: "
                       f"got --sampler {args.sampler} --engine {args.engine}")
    if args.sampler is None and args.engine is None:
        args.sampler = "builtin"
    if args.engine is not None and args.list_cases:  # the engine's end-to-end cases, not the verify cases
        _, _, cases = _engine_and_cases(args)
        for c in cases:
            print(f"{c.name}: {c.description}; {len(c.row_classes)} request classes of "
                  f"{c.requests_per_class} requests each:")
            for k, rc in enumerate(c.row_classes):
                print(f"  class {c.class_id(k)}: {rc.describe()}")
        return EXIT_PASS
    cases, extra = _cases(args) if args.engine is None else ([], [])  # an engine's cases: _engine_and_cases
    if args.list_cases:
        for c in cases:
            print(f"{c.name}: {case_summary(c)}")
        for c in extra:
            if c in cases:
                continue
            if getattr(c, "kind", None) == "tree":
                print(f"{c.name} ({c.protocol}-protocol samplers of schemes {', '.join(c.schemes)}): "
                      f"{case_summary(c)}")
            else:
                print(f"{c.name} (only with --case {c.name}): {case_summary(c)}")
        return EXIT_PASS
    _validate(args)
    budget = args.budget if args.budget is not None else (QUICK_BUDGET_S if args.quick else DEFAULT_BUDGET_S)
    shard = None
    if args.shard is not None:
        from specexact.audit.run.shard import ShardError, parse_shard

        try:
            shard = parse_shard(args.shard)
        except ShardError as exc:
            raise CliError(str(exc)) from exc
    baseline = _baseline(args.baseline)
    # The output folders are made (and checked) only once every argument is accepted, just
    # before the audit starts: a refused command leaves nothing behind.
    journal_dir = None if args.no_journal else Path(args.report_dir) / JOURNAL_SUBDIR

    from specexact.audit import AuditSettings, SamplerError, resolve_sampler, run_audit
    from specexact.audit.sampler.call_timeout import with_call_timeout
    from specexact.audit.sampler.samplers import ENGINE_SAMPLER_PREFIX
    from specexact.audit.run.journal import JournalBusy, held_journal
    from specexact.audit.cases.dispatch import restrict_to_sampler
    from specexact.audit.verdict.verdict import FAIL, PASS, command_verdict, not_started

    device = _device(args.device)
    import_path_as_python_m()
    sampler_name = args.sampler
    given = [flag for flag, value in (("--method", args.method), ("--pair", args.pair),
                                      ("--requests-per-class", args.requests_per_class)) if value is not None]
    if args.engine is None and given:
        flags = " and ".join([", ".join(given[:-1]), given[-1]] if len(given) > 1 else given)
        raise CliError(f"{flags} {'chooses' if len(given) == 1 else 'choose'} an engine's end-to-end cases: give "
                       "--engine too (a verify function's cases are chosen with --case)")
    if args.engine is not None:  # the engine's own generate loop: end-to-end cases only
        verifier, target, cases = _engine_and_cases(args)
        sampler_name = f"{ENGINE_SAMPLER_PREFIX}{args.engine}"
    else:
        try:
            verifier, target = resolve_sampler(args.sampler)
        except SamplerError as exc:
            raise CliError(str(exc)) from exc
    if not args.case and args.engine is None:  # the sampler's protocol decides the default cases (tree samplers: tree cases)
        from specexact.audit.cases.catalog import default_cases_for

        cases = default_cases_for(verifier, quick=args.quick)
    restricted = [(c, *restrict_to_sampler(c, verifier)) for c in cases]
    if all(rc is None for _, rc, _ in restricted):
        reasons = [f"{c.name}: {r}" for c, _, r in restricted if r is not None]
        raise CliError(f"no selected case can audit {args.sampler}: {'; '.join(reasons)}")
    try:
        fuzz = audit_fuzz_settings(args)
        if args.engine is not None:  # the fuzz phase calls verify functions; an engine has none
            fuzz["fuzz"] = False
        settings = AuditSettings(sampler_name=sampler_name, sampler_target=target, cases=tuple(cases),
                                 false_fail_rate=args.false_fail_rate, budget_s=budget,
                                 num_batches=args.batches, seed=args.seed, device=str(device), shard=shard,
                                 journal_dir=None if journal_dir is None else str(journal_dir), fresh=args.fresh,
                                 isolate=args.isolate, case_timeout_s=args.case_timeout,
                                 case_set=("quick" if args.quick else "default"), threads=args.threads,
                                 strict_inputs=bool(getattr(args, "strict_inputs", False)),
                                 **fuzz,
                                 elapsed_before_s=time.perf_counter() - getattr(args, "started", time.perf_counter()))
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    # Output paths before any sampling: a folder that is a file stops the audit here.
    prepare_dir(args.report_dir, "--report-dir")
    if args.json:
        prepare_file(args.json, "--json")
    if journal_dir is not None:
        prepare_dir(journal_dir, "the journal folder")

    display = _Display(console, quiet=args.quiet, budget_mode=args.batches is None, budget_s=budget)
    # every call limited (an engine: its load and generate calls, audit.call_timeout.TimedEngine)
    sampler = with_call_timeout(verifier, getattr(args, "call_timeout", None) or None)
    try:
        with sigterm_as_interrupt(), display.progress:
            try:
                report = run_audit(sampler, settings, on_status=display)
            finally:
                if args.engine is not None:
                    sampler.close()
    except KeyboardInterrupt:
        if display.journal and held_journal(display.journal) is not None:
            held_journal(display.journal).close()
        _error_line(display.interrupted_message(args.no_journal))
        return EXIT_ERROR
    except JournalBusy as exc:
        raise CliError(f"{exc}; wait for it to finish, or run with --no-journal or another --report-dir") from exc
    except OSError as exc:
        raise CliError(os_error_line(exc, "the audit could not write its journal")) from exc
    print_table(report)
    journal_path = report.pop("journal", None)
    journal = held_journal(journal_path) if journal_path else None
    diff = baseline_error = None
    if baseline is not None:
        from specexact.audit.verdict.baseline import compare_to_baseline

        try:
            diff = compare_to_baseline(report, baseline, false_alarm_rate=args.baseline_false_alarm_rate)
        except Exception as exc:  # noqa: BLE001 - the report is written first, then exit 2
            baseline_error = (f"the comparison with --baseline {args.baseline} failed ({type(exc).__name__}: "
                              f"{' '.join(str(exc).split())}); the reports are written without it")
        else:
            report["baseline"] = {"path": str(args.baseline), **diff.to_dict()}
            console.print(escape(diff.summary()))
    from specexact.reports import report_stem

    with sigterm_as_interrupt():
        try:
            paths = write_outputs(report, report_dir=args.report_dir, stem=report_stem(sampler_name, shard=shard),
                                  json_path=args.json, html=not args.no_html, history_limit=args.history,
                                  journal=journal)
        except KeyboardInterrupt:
            kept = f"; the journal {journal.path} is kept: run the same command again to write them" if journal else ""
            _error_line(f"interrupted while writing the reports{kept}")
            return EXIT_ERROR
    why_not_started = not_started(report["cases"])
    verdict = command_verdict(report["verdict"], regressed=None if diff is None else diff.regressed,
                              fuzz_error=bool((report.get("fuzz") or {}).get("error")),
                              comparison_failed=baseline_error is not None,
                              engine_not_started=why_not_started is not None)
    status = {PASS: EXIT_PASS, FAIL: EXIT_FAIL}.get(verdict, EXIT_ERROR)
    _summary(report, paths, console, verdict=verdict, regression=diff is not None)
    if baseline_error is not None:
        _error_line(baseline_error)
    if why_not_started is not None:  # not audited: not a defect of the engine (rule 11)
        _error_line(f"the engine {args.engine} did not start here, so nothing was audited (its first load "
                    f"raised: {why_not_started.removeprefix('crash in engine load: ')}); the reports are written")
    return status


def _error_line(message: str) -> None:
    """One line on stderr, never wrapped (paths stay whole for people and scripts)."""
    print(f"specexact: error: {message}", file=sys.stderr, flush=True)


def _final_verdict(report: dict, verdict: str, regression: bool) -> str:
    """The last line's words for the command's ``verdict``
    (:func:`~specexact.audit.verdict.verdict.command_verdict`, which the exit status follows):
    in regression mode the comparison with the baseline, with the audit's own verdict beside
    it; an error of an audit that passed says whether its fuzz phase could not run."""
    from specexact.audit.verdict.verdict import ERROR, FAIL, PASS, not_started

    if regression and verdict != ERROR:
        return (f"{verdict} ({'a regression' if verdict == FAIL else 'no regression'} against the baseline; "
                f"the audit alone: {report['verdict']})")
    if verdict == ERROR and not_started(report["cases"]) is not None:
        return "error (the engine did not start here)"
    if verdict == ERROR and report["verdict"] == PASS:
        return "error (the fuzz phase could not run)" if (report.get("fuzz") or {}).get("error") else "error"
    return verdict


def print_findings(report: dict, console) -> None:
    """The findings grouped by tier (:mod:`specexact.audit.verdict.tiers`), with the counts and which
    tiers fail the audit."""
    from rich.markup import escape

    from specexact.audit.verdict.build import report_findings
    from specexact.audit.verdict.tiers import TIER_LABELS, TIERS, failing_tiers, findings_by_tier, tier_counts

    findings = report_findings(report)
    if not findings:
        return
    strict = bool(report["settings"].get("strict_inputs"))
    bad = failing_tiers(strict)
    counts = tier_counts(findings)
    console.print("findings by tier: " + ", ".join(f"{TIER_LABELS[t]} {counts[t]}" for t in TIERS), soft_wrap=True)
    for tier, group in findings_by_tier(findings):
        if tier in bad:
            how = "[red]fails the audit[/]"
        else:
            how = "listed, not failing the audit (--strict-inputs makes it fail)"
        console.print(f"[bold]{escape(TIER_LABELS.get(tier, tier))}[/] ({len(group)}): {how}", soft_wrap=True)
        for f in group:
            mark = "[red]finding[/]" if tier in bad else "[yellow]finding[/]"
            console.print(f"  {mark} {escape(f['case'])} / {escape(f['check'])}: {escape(f['message'])}",
                          soft_wrap=True)
            if f.get("source") == "fuzz":
                console.print(f"    shrunk example: {escape(str(f.get('example')))}", soft_wrap=True)
            else:
                console.print(f"    reproduce: {escape(f['reproduction']['command'])}", soft_wrap=True)  # one line


def _summary(report: dict, paths: dict, console, *, verdict: str, regression: bool = False) -> None:
    from rich.markup import escape

    from specexact.audit.verdict.verdict import not_started

    proc = report["settings"].get("processing") or {}
    if proc.get("level") == "logits":
        console.print(f"logits-level sampler: reference laws use its declared order {' > '.join(proc['order'])} "
                      f"(repetition penalty over {proc['repetition_penalty_scope'].replace('_', ' ')})")
    for sk in report["settings"].get("skipped_cases") or []:
        classes = sk.get("classes") or []
        what = sk["case"] + (f" class{'es' if len(classes) > 1 else ''} {', '.join(map(str, classes))}"
                             if classes and sk.get("kind") != "budget" else "")
        console.print(f"[yellow]skipped[/] {escape(what)}: {escape(sk['reason'])}")
    if not_started(report["cases"]) is None:  # else the load's error is no finding: the last line says it
        print_findings(report, console)
    print_fuzz(report, console, findings=False)  # the fuzz findings are among the findings above
    threads = (report["settings"].get("threads") or {}).get("threads")
    console.print(f"verdict: {_final_verdict(report, verdict, regression)}; {report['num_sequences']:,} sequences in "
                  f"{report['wall_time_s']:.1f} s" + (f" ({threads} torch thread{'s' if threads != 1 else ''})"
                                                       if threads else "")
                  + "; reports: " + ", ".join(escape(str(p)) for p in paths.values()), soft_wrap=True)
