"""``specexact audit --ray [ADDRESS] --shards N``: the audit's shards as Ray tasks.

Each shard is one Ray task (``--ray-cpus``, ``--ray-gpus``) that runs ``specexact audit
--shard I/N`` with the audit's arguments on its node
(:func:`specexact.cli_ray_shard.run_shard`) and returns the JSON report. A task that fails,
or whose worker or node dies, is retried by Ray itself (``max_retries`` and
``retry_exceptions``, ``--ray-retries`` times); a shard still failing then is a failed
shard: exit status 2 with one line, never a report with fewer sequences than planned.
Every finished shard is journaled on the driver
(:class:`~specexact.cli_ray_shard.ShardJournal`), so the same command started again runs
only the shards not yet finished. Once all are in, ``specexact merge``'s own command
(:func:`specexact.cli_reports.merge_command`, :func:`specexact.reports.merge.merge_reports`)
writes the one report and the journal is removed.

Ray is an optional, heavy library (the ``ray`` extra: ``pip install -e '.[ray]'`` in a checkout): it is imported only
here, inside :func:`ray_audit_command`.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import time
from pathlib import Path

from specexact.cli_common import JOURNAL_SUBDIR, CliError, sigterm_as_interrupt
from specexact.cli_output import prepare_dir, prepare_file
from specexact.cli_ray_shard import ShardFailed, ShardJournal, failure_line, run_key, run_shard, shard_arguments

__all__ = ["ray_audit_command", "add_ray_options", "RAY_MISSING"]

#: The line of ``--ray`` without Ray installed.
RAY_MISSING = ("--ray needs the optional Ray library, which is not installed: install specexact with its ray extra "
               "(in a checkout: pip install -e '.[ray]'; its tests: tox -e ray)")


def add_ray_options(parser: argparse.ArgumentParser) -> None:
    """``--ray [ADDRESS]``, ``--shards``, ``--ray-retries``, ``--ray-cpus``, ``--ray-gpus``."""
    parser.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                        help="run the audit's --shards as Ray tasks on the cluster at ADDRESS (default: RAY_ADDRESS, "
                             "else the cluster last started on this machine, else a new one here) and merge them; "
                             "needs the ray extra: pip install -e '.[ray]'")
    parser.add_argument("--shards", type=int, default=None, metavar="N",
                        help="with --ray: the number of shards (Ray tasks), each 'specexact audit --shard I/N'")
    parser.add_argument("--ray-retries", type=int, default=2, metavar="K",
                        help="with --ray: a shard whose task fails or whose node dies is retried K times, then it "
                             "is a failed shard (exit 2) (default: 2)")
    parser.add_argument("--ray-cpus", type=float, default=1.0, metavar="C",
                        help="with --ray: CPUs each shard's task asks for (default: 1)")
    parser.add_argument("--ray-gpus", type=float, default=None, metavar="G",
                        help="with --ray: GPUs each shard's task asks for (default: 1 with --device cuda..., else 0)")


def _validate(args) -> None:
    if args.shards is None or args.shards < 1:
        raise CliError("--ray needs --shards N (N >= 1): the number of shards, each one Ray task"
                       + ("" if args.shards is None else f"; got {args.shards}"))
    if args.shard is not None:
        raise CliError("--ray runs every shard itself (--shards N); --shard I/N is for one shard without --ray")
    if args.baseline is not None:
        raise CliError("--baseline compares a whole audit; with --ray compare the merged report: run 'specexact "
                       "audit --baseline' locally, or merge first")
    if args.ray_retries < 0:
        raise CliError(f"--ray-retries must be >= 0, got {args.ray_retries}")
    if not args.ray_cpus >= 0 or (args.ray_gpus is not None and not args.ray_gpus >= 0):
        raise CliError(f"--ray-cpus and --ray-gpus must be >= 0, got {args.ray_cpus} and {args.ray_gpus}")
    if args.history < 0:
        raise CliError(f"--history must be >= 0, got {args.history}")


def _gpus(args) -> float:
    if args.ray_gpus is not None:
        return args.ray_gpus
    return 1.0 if (args.device or "").startswith("cuda") else 0.0


def _why(exc: BaseException) -> str:
    """One line for a task's last failure (Ray wraps the task's exception)."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, ShardFailed):
        return str(cause)
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}"


def _probe_address(address: str, timeout_s: float = 10.0) -> None:
    """A ``host:port`` (or ``ray://host:port``) address where nothing answers is refused at
    once: Ray's own connection retries it without end."""
    m = re.fullmatch(r"(?:ray://)?\[?([^\[\]/]+?)\]?:(\d+)", address or "")
    if m is None:  # "auto", "local", none: Ray finds or starts the cluster itself
        return
    try:
        socket.create_connection((m.group(1), int(m.group(2))), timeout=timeout_s).close()
    except OSError as exc:
        raise CliError(f"--ray {address}: no Ray cluster answers there ({type(exc).__name__}: "
                       f"{' '.join(str(exc).split())[:200]})") from None


def _check_resources(ray, cpus: float, gpus: float) -> None:
    """Refuse shards that no node can run (they would wait for ever)."""
    nodes = [n.get("Resources") or {} for n in ray.nodes() if n.get("Alive")]
    if any(r.get("CPU", 0.0) >= cpus and r.get("GPU", 0.0) >= gpus for r in nodes):
        return
    have = ", ".join(f"{r.get('CPU', 0.0):g} CPU(s) and {r.get('GPU', 0.0):g} GPU(s)" for r in nodes) or "none alive"
    raise CliError(f"no node of the Ray cluster can run a shard: each asks for {cpus:g} CPU(s) and {gpus:g} GPU(s) "
                   f"(--ray-cpus, --ray-gpus); its nodes have {have}")


def _connect(ray, address: str):
    import logging

    try:  # address None: RAY_ADDRESS, else the latest cluster on this machine, else a new local one
        return ray.init(address=address or None, logging_level=logging.ERROR, log_to_driver=False)
    except Exception as exc:  # noqa: BLE001 - Ray's connection, authentication and start errors alike
        raise CliError(f"--ray {address or '(default)'}: cannot connect to a Ray cluster: "
                       f"{' '.join(str(exc).split())[:300]}") from exc


def ray_audit_command(args, audit_parser: argparse.ArgumentParser) -> int:
    """Run ``specexact audit --ray`` (module docstring); return the exit status.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed ``audit`` arguments.
    audit_parser : argparse.ArgumentParser
        The ``audit`` sub-parser (each shard's arguments are rebuilt from it).
    """
    from rich.console import Console
    from rich.markup import escape

    _validate(args)
    _probe_address(args.ray)
    try:
        import ray  # optional and heavy: only a --ray run imports it
    except ImportError:
        raise CliError(RAY_MISSING) from None
    from specexact import __version__
    from specexact.cli_reports import merge_command

    console = Console(stderr=True)
    arguments = shard_arguments(audit_parser, args)
    n = args.shards
    key = run_key(arguments, n, __version__)
    prepare_dir(args.report_dir, "--report-dir")
    if args.json:
        prepare_file(args.json, "--json")
    journal = ShardJournal(prepare_dir(Path(args.report_dir) / JOURNAL_SUBDIR, "the journal folder"), key, n)
    if args.fresh:
        journal.remove()
    done = journal.finished()
    if done:
        console.print(f"resuming: shard{'s' if len(done) > 1 else ''} {', '.join(f'{i}/{n}' for i in sorted(done))} "
                      f"finished by an earlier run of this command (journal {escape(str(journal.path))})")
    failed: dict[int, str] = {}
    if len(done) < n:
        failed = _run_on_ray(ray, args, arguments, n, journal, done, console)
    if failed:
        raise CliError(failure_line(failed, n, args.ray_retries + 1, len(journal.finished()), journal.path))
    files = [str(journal.file(i)) for i in range(1, n + 1)]
    merge_args = argparse.Namespace(reports=files, report_dir=args.report_dir, json=args.json,
                                    no_html=args.no_html, history=args.history, quiet=args.quiet)
    try:
        status = merge_command(merge_args)
    except CliError as exc:
        raise CliError(f"{exc}; the shards' reports are kept in the journal {journal.path} (--fresh runs them "
                       "again)") from exc
    journal.remove()
    return status


def _run_on_ray(ray, args, arguments: list[str], n: int, journal: ShardJournal, done: dict, console) -> dict:
    """Submit the shards not in ``done``, journal each as it finishes; return the failed ones
    (index -> why)."""
    started = time.perf_counter()
    failed: dict[int, str] = {}
    try:
        _connect(ray, args.ray)
        _check_resources(ray, args.ray_cpus, _gpus(args))
        with sigterm_as_interrupt():  # after ray.init, which installs a SIGTERM handler of its own (an abort)
            _wait_for_shards(ray, args, arguments, n, journal, done, console, failed)
    except KeyboardInterrupt:
        kept = len(journal.finished())
        raise CliError(f"interrupted; {kept} finished shard{'' if kept == 1 else 's'} kept in the journal "
                       f"{journal.path}: run the same command again to resume them") from None
    finally:
        ray.shutdown()
    console.print(f"Ray: {n - len(done) - len(failed)} shard(s) in {time.perf_counter() - started:.1f} s")
    return failed


def _wait_for_shards(ray, args, arguments: list[str], n: int, journal: ShardJournal, done: dict, console,
                     failed: dict) -> None:
    """Submit the shards not in ``done``, and journal each as it finishes; a shard that
    failed after Ray's retries goes into ``failed`` (index -> why)."""
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    task = ray.remote(run_shard).options(num_cpus=args.ray_cpus, num_gpus=_gpus(args),
                                         max_retries=args.ray_retries, retry_exceptions=[ShardFailed])
    pending = {task.remote(arguments, i, n, os.getcwd()): i for i in range(1, n + 1) if i not in done}
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=console, disable=args.quiet)
    bar = progress.add_task(f"shards on Ray ({len(pending)} to run)", total=n, completed=len(done))
    with progress:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)  # signals are seen each second
            if not ready:
                continue
            index = pending.pop(ready[0])
            try:
                result = ray.get(ready[0])
            except Exception as exc:  # noqa: BLE001 - Ray's task, worker and node errors, after its retries
                failed[index] = _why(exc)
                progress.console.print(f"shard {index}/{n}: [red]failed[/] after {args.ray_retries + 1} "
                                       f"tr{'y' if args.ray_retries == 0 else 'ies'}: {escape(failed[index])}")
                continue
            journal.add(index, result["report"])
            progress.update(bar, advance=1)
            verdict = "[green]pass[/]" if result["status"] == 0 else "[red]FAIL[/]"
            progress.console.print(f"shard {index}/{n}: {verdict} ({result['seconds']:.1f} s on "
                                   f"{escape(result['node'])})")
