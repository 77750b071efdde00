"""The ``specexact`` command.

``specexact audit [--sampler NAME | MODULE:CALLABLE] [--budget SECONDS | --batches N]
[--seed N] [--isolate [--case-timeout SECONDS]] [--shard I/N] [--report-dir DIR]
[--json PATH] [--ray [ADDRESS] --shards N]`` audits a sampler (with ``--ray``, its shards as
Ray tasks on a cluster, merged: :mod:`specexact.cli_ray`) and writes JSON, Markdown and HTML reports;
``specexact merge SHARD.json ...`` merges the reports of ``--shard`` runs into one;
``specexact render REPORT.json`` re-renders a JSON report's Markdown and HTML;
``specexact --version`` prints the version.

Exit status: 0 no evidence of inexactness; 1 inexactness or a defect (crash, hang, out-of-range
id, NaN, protocol violation) found; 2 the audit itself could not run or keep its results
(bad arguments, import failure, a path that cannot be written, another run holding the same
journal, an interruption, shards that do not form one audit), always with a one-line
message naming the path or argument (:mod:`specexact.cli_common`).

The parser is :func:`build_parser`; each sub-command's function is in :data:`COMMANDS`
(``args -> exit status``), so another command plugs in with one parser and one entry.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import traceback
from typing import NoReturn

from specexact.cli_fuzz import add_audit_fuzz_options, add_fuzz_parser  # the fuzz hook (light: no torch)
from specexact.cli_ray import add_ray_options  # light: Ray itself is imported only by a --ray run

from specexact.cli_common import (DEFAULT_BUDGET_S, DEFAULT_CLI_CALL_TIMEOUT_S, DEFAULT_REPORT_DIR, EXIT_ERROR, EXIT_FAIL,
                         EXIT_PASS, JOURNAL_SUBDIR, QUICK_BUDGET_S, CliError, os_error_line)

__all__ = ["main", "build_parser", "COMMANDS", "EXIT_PASS", "EXIT_FAIL", "EXIT_ERROR", "DEFAULT_BUDGET_S",
           "QUICK_BUDGET_S", "JOURNAL_SUBDIR", "DEFAULT_REPORT_DIR"]


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # exit 2 with one line, as every other error (argparse prints the usage too)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    from specexact import __version__

    try:
        torch = version("torch")
    except PackageNotFoundError:  # pragma: no cover - torch is a dependency
        torch = "not installed"
    return f"specexact {__version__} (torch {torch}, python {sys.version.split()[0]})"


def _report_args(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--report-dir", default=DEFAULT_REPORT_DIR, metavar="DIR",
                   help=f"where {what} JSON, Markdown and HTML reports go; earlier reports there make the trend "
                        f"(default: ./{DEFAULT_REPORT_DIR})")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the JSON report here")
    p.add_argument("--no-html", action="store_true", help="skip the HTML page (no matplotlib / jinja2 work)")
    p.add_argument("--history", type=int, default=30, metavar="N",
                   help="earlier reports of the same sampler in DIR shown in the trend (default: 30)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def build_parser() -> argparse.ArgumentParser:
    """The ``specexact`` argument parser (sub-commands ``audit``, ``merge``, ``render``)."""
    parser = _Parser(prog="specexact", description="Statistical exactness audits of speculative decoding.")
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    a = sub.add_parser("audit", help="audit a verifier for exactness (exit 0 pass, 1 fail, 2 error)")
    a.add_argument("--sampler", default=None,
                   help="'builtin', a name registered under the entry-point group specexact.samplers, "
                        "or MODULE:OBJECT: a callable with the verify protocol, or a logits-level adapter "
                        "with verify_logits; MODULE is imported as by 'python -m' (the current folder first) "
                        "(default: builtin; not with --engine)")
    a.add_argument("--engine", default=None, metavar="NAME",
                   help="audit an engine's own speculative generate loop end to end instead of a verify function: "
                        "'builtin', a name registered under the entry-point group specexact.engines (vllm, "
                        "transformers, mlx: each in its own environment, tox -e <engine>-e2e), or MODULE:CLASS")
    a.add_argument("--method", default=None, metavar="METHOD",
                   help="with --engine: the drafting method (draft_model, draft_model_greedy, ngram, prompt_lookup, eagle, "
                        "eagle3, medusa, mtp, suffix, early_exit, uag; default: every method the engine declares)")
    a.add_argument("--pair", default=None, metavar="NAME",
                   help="with --engine: the tiny target/draft pair (specexact.decoders.tiny_models.CATALOG; "
                        "default: llama-v64)")
    a.add_argument("--requests-per-class", type=int, default=None, metavar="N",
                   help="with --engine: requests of each row class per generate call (default: 256; the long "
                        "case keeps its 8)")
    a.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="time for the audit (of this shard): sample sizes are planned from the power functions "
                        "to fit it; they depend on the machine's speed, not on the data "
                        f"(default: {DEFAULT_BUDGET_S:g}; {QUICK_BUDGET_S:g} with --quick)")
    a.add_argument("--batches", type=int, default=None, metavar="N",
                   help="fixed decoder calls per case instead of a time budget (reproducible sample sizes)")
    a.add_argument("--seed", type=int, default=0, help="audit seed (default: 0)")
    a.add_argument("--false-fail-rate", type=float, default=1e-6,
                   help="chance that a correct sampler fails the audit (default: 1e-6)")
    a.add_argument("--case", action="append", default=None, metavar="NAME",
                   help="run only this case (repeatable); see --list-cases")
    a.add_argument("--quick", action="store_true",
                   help=f"the quick cases (exact cases, 4x smaller batches) in a {QUICK_BUDGET_S:g} s budget: "
                        "a smoke test, not an audit to rely on")
    a.add_argument("--list-cases", action="store_true",
                   help="list the default cases (and the opt-in ones --case can name) and exit")
    a.add_argument("--baseline", default=None, metavar="PATH.json",
                   help="regression mode: compare with an earlier report; exit 1 only on a regression (a new "
                        "failure or defect, or a drop in acceptance beyond its confidence interval)")
    a.add_argument("--baseline-false-alarm-rate", type=float, default=1e-6, metavar="R",
                   help="false-alarm rate of the acceptance-drop comparisons with --baseline (default: 1e-6)")
    a.add_argument("--strict-inputs", action="store_true",
                   help="hardening findings (invalid input accepted, or refused with the wrong exception) fail the "
                        "audit too (exit 1); by default they are listed and counted, and exit 0")
    a.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    a.add_argument("--threads", type=int, default=None, metavar="N",
                   help="torch intra-op threads (default: with --budget on the CPU, chosen by timing the pilot "
                        "at 1, half and all of torch's threads — on a busy machine 1 is often many times "
                        "faster; with --batches, torch's choice); the report and its reproduction commands "
                        "record the count")
    a.add_argument("--isolate", action="store_true",
                   help="run each case in a subprocess: a hang (timeout) or a crash of the sampler's process "
                        "(segfault, abort) becomes a finding and the audit goes on")
    a.add_argument("--case-timeout", type=float, default=None, metavar="SECONDS",
                   help="with --isolate (implies it): kill a case after this long (default: 4x its planned time "
                        "+ 300 s with --budget, 1800 s with --batches)")
    a.add_argument("--call-timeout", type=float, default=DEFAULT_CLI_CALL_TIMEOUT_S, metavar="SECONDS",
                   help="in the audit's own process (the pilot, the fuzz phase, cases without --isolate): one call "
                        "of the sampler past this long is a hang, a defect of kind timeout, and the sampler is not "
                        f"called again (default: {DEFAULT_CLI_CALL_TIMEOUT_S:g}; 0: no limit)")
    a.add_argument("--shard", default=None, metavar="I/N",
                   help="run only shard I of N (1-based) of the cases, at the whole audit's per-check false-fail "
                        "rate; combine the shards' JSON reports with 'specexact merge'")
    a.add_argument("--fresh", action="store_true",
                   help="ignore a journal of an interrupted run of the same audit and start over")
    a.add_argument("--no-journal", action="store_true",
                   help="do not journal finished cases (an interrupted audit then starts over)")
    _report_args(a, "the")
    add_audit_fuzz_options(a)  # --no-fuzz, --fuzz-profile, --fuzz-share (specexact.fuzz.cli)
    add_ray_options(a)  # --ray, --shards, --ray-retries, --ray-cpus, --ray-gpus (specexact.cli_ray)
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


def _audit(args) -> int:
    if args.ray is not None and not args.list_cases:  # the shards as Ray tasks, merged (specexact.cli_ray)
        from specexact.cli_ray import ray_audit_command

        return ray_audit_command(args, _sub_parser(build_parser(), "audit"))
    if args.shards is not None:
        raise CliError("--shards N is the number of Ray tasks of --ray; without --ray run one shard with --shard I/N")
    from specexact.cli_audit import audit_command

    return audit_command(args)


def _sub_parser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The parser of sub-command ``name`` of ``parser``."""
    for action in parser._actions:  # noqa: SLF001 - argparse has no public list of its sub-parsers
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            return action.choices[name]
    raise KeyError(name)  # pragma: no cover


def _merge(args) -> int:
    from specexact.cli_reports import merge_command

    return merge_command(args)


def _render(args) -> int:
    from specexact.cli_reports import render_command

    return render_command(args)


def _fuzz(args) -> int:
    from specexact.cli_fuzz import run_fuzz_command

    return run_fuzz_command(args)


#: Sub-command name -> function of the parsed arguments returning the exit status.
COMMANDS = {"audit": _audit, "merge": _merge, "render": _render, "fuzz": _fuzz}


def _error(message: str) -> int:
    print(f"specexact: error: {message}", file=sys.stderr)
    return EXIT_ERROR


def main(argv: list[str] | None = None) -> int:
    """Run the ``specexact`` command; return its exit status (module docstring)."""
    started = time.perf_counter()  # a time budget holds for the whole command, its imports included
    parser = build_parser()
    args = parser.parse_args(argv)
    args.started = started
    if args.command in ("audit", "fuzz"):  # the sampling commands: no page fault per large tensor
        from specexact.audit.core.allocator import keep_freed_memory

        keep_freed_memory()
    command = COMMANDS.get(args.command)
    if command is None:  # pragma: no cover - argparse only accepts known commands
        parser.error(f"unknown command {args.command!r}")
    try:
        return command(args)
    except CliError as exc:
        return _error(str(exc))
    except KeyboardInterrupt:
        return _error(f"interrupted ({args.command}); nothing was written")
    except OSError as exc:  # an I/O or environment failure a command did not expect
        return _error(os_error_line(exc))
    except Exception as exc:  # noqa: BLE001 - the tool's own failure: never exit 1, the sampler's status
        if os.environ.get("SPECEXACT_DEBUG"):
            traceback.print_exc()
        return _error(f"internal error of specexact ({args.command}), not a finding: {type(exc).__name__}: "
                      f"{str(exc).splitlines()[0] if str(exc) else ''} (SPECEXACT_DEBUG=1 prints the traceback)")


def console_main(argv: list[str] | None = None) -> NoReturn:
    """The ``specexact`` executable: :func:`main`, then exit with its status.

    A sampler call that ran past ``--call-timeout`` is left running in a daemon thread
    (:mod:`specexact.audit.sampler.call_timeout`): the interpreter's normal shutdown would then
    abort in the C++ runtime while that thread is inside torch (``terminate called without
    an active exception``, exit status 134, outside 0 / 1 / 2). With such a call still
    running, the reports are already written: the process flushes its output and ends with
    ``os._exit(status)``; so does every other run, after the atexit handlers (the
    interpreter's teardown is skipped: the budget holds for the command's wall time).
    """
    status = main(argv)
    # the threads of call_timeout.CALL_THREAD_PREFIX (not imported: this module stays light, no torch)
    if any(t.name.startswith("specexact-call:") and t.is_alive() for t in threading.enumerate()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    # The reports are written: the interpreter's teardown (freeing torch's and the engines'
    # modules and memory) is skipped, as it took 5 s of a 60 s audit's wall time at load 11.
    # The atexit handlers (the libraries' own clean-up) still run.
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":  # pragma: no cover
    console_main()
