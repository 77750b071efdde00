"""Run one audit case in a child process, so a hanging or crashing sampler becomes a finding.

``specexact audit --isolate`` runs every case through :func:`run_case_isolated`: a fresh
Python process (``python -m specexact.audit.run.isolation SPEC RESULT``) resolves the sampler
by its name (as the parent did), runs :func:`~specexact.audit.cases.dispatch.run_case` with the
same seed, sample size and per-check false-fail rate, and writes the case's result as
JSON. The parent waits at most ``timeout_s`` seconds and then kills the child's whole
process group. What can go wrong becomes a failing ``defect`` check of the case:

- ``timeout``: no result within ``timeout_s`` (an infinite loop, a deadlock, or a sampler
  far too slow for the budget);
- ``crash``: the child died from a signal (``SIGSEGV``, ``SIGABRT`` from ``os.abort``, the
  OOM killer's ``SIGKILL``) or exited without a result; the tail of its stderr (with the
  Python stack that :mod:`faulthandler` prints on a fatal signal) is kept in the message.

A crash that the sampler raises as a Python exception is caught by ``run_case`` itself, in
or out of isolation. An end-to-end case whose engine could not be loaded again in the audit's
process after such a crash goes on in fresh processes (:func:`run_e2e_isolated`: the
engine is made there from its ``--engine`` name;
:mod:`~specexact.audit.cases.e2e.fresh_process`). Results of an isolated case are the same as in-process ones: the seed
and sample size are the same, and the child uses the parent's number of torch threads.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import torch

from specexact.audit.cases.decoder_case import AuditCase
from specexact.audit.cases.dispatch import run_case
from specexact.audit.cases.e2e.case import E2ECase
from specexact.audit.cases.e2e.engine_call import FreshProcessWork
from specexact.audit.cases.e2e.fresh_process import run_e2e_fresh
from specexact.audit.cases.result import CaseResult, case_seed
from specexact.audit.cases.sampling import RunSettings
from specexact.audit.core.allocator import ENV as ALLOCATOR_ENV
from specexact.audit.core.allocator import allocator_setting
from specexact.audit.run.child import start_child, write_child_result
from specexact.audit.sampler.call_timeout import with_call_timeout
from specexact.audit.sampler.samplers import resolve_sampler
from specexact.decoders.engines.registry import resolve_engine
from specexact.exactness.results import CheckResult

__all__ = ["run_case_isolated", "run_e2e_isolated", "case_result_from_dict", "defect_result", "PROGRESS_PREFIX"]

PROGRESS_PREFIX = "\x1especexact-progress "
_STDERR_TAIL = 2000


def case_result_from_dict(case: AuditCase, d: dict) -> CaseResult:
    """Rebuild a :class:`CaseResult` from :meth:`CaseResult.to_dict` output (journal, child)."""
    return CaseResult(
        case=case,
        checks=[CheckResult.from_dict(c) for c in d.get("checks", [])],
        num_sequences=int(d.get("num_sequences", 0)),
        num_batches=int(d.get("num_batches", 0)),
        wall_time_s=float(d.get("wall_time_s", 0.0)),
        defect=d.get("defect"),
        seed=int(d.get("seed", 0)),
        phase_times_s={k: float(v) for k, v in (d.get("phase_times_s") or {}).items()},
    )


def defect_result(case: AuditCase, seed: int, message: str, alpha: float, *, kind: str,
                  wall_time_s: float = 0.0, detail: str = "") -> CaseResult:
    """A case result holding one failing ``defect`` check (p-value 0) for ``message``."""
    check = CheckResult(
        name="defect", method="exact", statistic=float("inf"), pvalue=0.0, dof=None, n=0,
        false_fail_rate=alpha, detectable_tv=0.0, false_pass_rate=0.01, passed=False, worst=(),
        details={"message": message, "kind": kind},
        description="the sampler hung, crashed its process or broke the protocol",
    )
    return CaseResult(case=case, checks=[check], wall_time_s=wall_time_s,
                      defect=message + ("\n" + detail if detail else ""), seed=case_seed(seed, case))


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _tail(path: Path) -> str:
    """The informative end of the child's stderr: faulthandler's report of a fatal signal
    (without its list of extension modules) if there is one, else the last lines."""
    try:
        text = path.read_bytes().decode(errors="replace")
    except OSError:
        return ""
    start = text.rfind("Fatal Python error")
    if start >= 0:
        text = text[start:]
        cut = text.find("\nExtension modules:")
        if cut >= 0:
            text = text[:cut]
        return text[:_STDERR_TAIL].strip()
    return text[-_STDERR_TAIL:].strip()


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _child_env() -> dict:
    env = dict(os.environ)
    # The child must import what the parent imported: the sampler's module may live on a
    # path added at run time (tests, notebooks).
    paths = [p for p in sys.path if p]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.setdefault("PYTHONFAULTHANDLER", "1")
    if allocator_setting() == "kept":  # the child allocates as the parent does
        env[ALLOCATOR_ENV] = "keep"
    return env


def _spawn(spec: dict, progress, timeout_s: float) -> tuple[dict | None, str | None, str, float]:
    """Run the child on ``spec``: ``(payload, failure, stderr tail, wall seconds)``. ``failure``
    is ``"timeout"`` (no result within ``timeout_s``; the child's process group was killed),
    ``"crash"`` (no result: the child was killed by a signal or exited without one;
    ``payload`` is then ``{"code": status}``), or None with the child's JSON ``payload``."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="specexact-case-") as tmp:
        tmpdir = Path(tmp)
        spec_path, result_path, err_path = tmpdir / "spec.pkl", tmpdir / "result.json", tmpdir / "stderr.txt"
        spec_path.write_bytes(pickle.dumps(spec))
        with open(err_path, "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "specexact.audit.run.isolation", str(spec_path), str(result_path)],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, env=_child_env(),
                start_new_session=True,  # its own process group: a timeout kills everything it started
            )

            def reader() -> None:
                assert proc.stdout is not None
                for raw in proc.stdout:
                    line = raw.decode(errors="replace")
                    if line.startswith(PROGRESS_PREFIX):
                        try:
                            ns, nb, _ = line[len(PROGRESS_PREFIX):].split()
                            if progress is not None:
                                progress(int(ns), int(nb))
                        except ValueError:
                            pass

            thread = threading.Thread(target=reader, daemon=True)
            thread.start()
            try:
                code = proc.wait(timeout=timeout_s)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(proc)
                code = proc.wait()
            except BaseException:  # Ctrl-C / SIGTERM of the audit: the case process must not outlive it
                _kill_group(proc)
                proc.wait()
                raise
            thread.join(timeout=5)
        wall = time.perf_counter() - start
        if timed_out:
            return None, "timeout", _tail(err_path), wall
        if code == 0 and result_path.exists():
            return json.loads(result_path.read_text()), None, "", wall
        return {"code": code}, "crash", _tail(err_path), wall


def _died(code: int) -> str:
    return (f"killed by {_signal_name(-code)}" if code < 0 else f"exited with status {code}") + " without a result"


def run_case_isolated(case: AuditCase, sampler_name: str, *, timeout_s: float = 600.0,
                      **run) -> tuple[CaseResult, float | None]:
    """Run ``case`` in a child process; return ``(result, sampling_time_s)``.

    ``run`` holds the settings of :func:`~specexact.audit.cases.dispatch.run_case`
    (:class:`~specexact.audit.cases.sampling.RunSettings`), which the child runs the case
    with. ``sampler_name`` is resolved again in the child with
    :func:`~specexact.audit.sampler.samplers.resolve_sampler`. ``progress(num_sequences,
    num_batches)`` is called from a reader thread as the child reports. A timeout or a
    crash of the child gives a result with a failing ``defect`` check (see the module
    docstring); ``sampling_time_s`` is then None.
    """
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
    settings = RunSettings(**run)
    progress, seed, false_fail_rate = settings.progress, settings.seed, settings.false_fail_rate
    spec = {
        "case": case, "sampler": sampler_name,
        "run": replace(settings, device=str(settings.device), progress=None),  # the child reports progress
        "threads": torch.get_num_threads(),
    }
    payload, failure, tail, wall = _spawn(spec, progress, timeout_s)
    if failure == "timeout":
        msg = (f"timeout: case {case.name} gave no result within {timeout_s:g} s "
               "(the sampler hangs, deadlocks or is far too slow); the case process was killed")
        return defect_result(case, seed, msg, false_fail_rate, kind="timeout", wall_time_s=wall, detail=tail), None
    if failure is None:
        return case_result_from_dict(case, payload["result"]), payload.get("sampling_time_s")
    msg = f"crash: the process running case {case.name} was {_died(payload['code'])}"
    return defect_result(case, seed, msg, false_fail_rate, kind="crash", wall_time_s=wall, detail=tail), None


def run_e2e_isolated(case: E2ECase, engine: str, work: FreshProcessWork, *, call_timeout_s: float | None = None,
                     timeout_s: float = 600.0, **run) -> tuple[CaseResult, dict] | str:
    """Do an end-to-end case's ``work`` in a fresh process
    (:func:`~specexact.audit.cases.e2e.fresh_process.run_e2e_fresh`), on the engine named
    ``engine`` (the ``--engine`` value: :func:`~specexact.decoders.engines.registry.resolve_engine`
    makes it there, each of its calls limited to ``call_timeout_s`` seconds as in the audit's
    process). ``run`` holds :func:`~specexact.audit.cases.dispatch.run_case`'s settings.

    Returns
    -------
    tuple of (CaseResult, dict) or str
        What :func:`~specexact.audit.cases.e2e.fresh_process.run_e2e_fresh` returned, its work
        left in ``result.fresh_process``; or why the process gave no result (no result within
        ``timeout_s``: it was killed; it died).
    """
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
    settings = RunSettings(**run)
    spec = {"case": case, "engine": engine, "call_timeout_s": call_timeout_s, "work": work.to_dict(),
            "run": replace(settings, device=str(settings.device), progress=None),
            "threads": torch.get_num_threads()}
    payload, failure, tail, _ = _spawn(spec, settings.progress, timeout_s)
    if failure == "timeout":
        return (f"timeout: no result within {timeout_s:g} s (the engine hangs, deadlocks or is far too slow); "
                f"the process was killed" + (f"\n{tail}" if tail else ""))
    if failure is not None:
        return f"crash: the process was {_died(payload['code'])}" + (f"\n{tail}" if tail else "")
    res = case_result_from_dict(case, payload["result"])
    left = payload.get("work")
    res.fresh_process = None if left is None else FreshProcessWork.from_dict(left)
    return res, payload["record"]


def _child(spec_path: str, result_path: str) -> int:
    spec = start_child(spec_path)
    t0 = time.perf_counter()
    last = {"t": None}

    def progress(num_sequences: int, num_batches: int) -> None:
        last["t"] = time.perf_counter() - t0
        sys.stdout.write(f"{PROGRESS_PREFIX}{num_sequences} {num_batches} {last['t']:.6f}\n")
        sys.stdout.flush()

    if spec.get("engine") is not None:  # an end-to-end case's work after a crash (run_e2e_isolated)
        engine = with_call_timeout(resolve_engine(spec["engine"])[0], spec.get("call_timeout_s"))
        try:
            res, record = run_e2e_fresh(spec["case"], engine, FreshProcessWork.from_dict(spec["work"]),
                                        **replace(spec["run"], progress=progress).kwargs())
        finally:
            engine.close()
        left = res.fresh_process
        write_child_result(result_path, {"result": res.to_dict(), "record": record, "sampling_time_s": last["t"],
                                         "work": None if left is None else left.to_dict()})
        return 0
    verifier, _ = resolve_sampler(spec["sampler"])
    res = run_case(spec["case"], verifier, **replace(spec["run"], progress=progress).kwargs())
    write_child_result(result_path, {"result": res.to_dict(), "sampling_time_s": last["t"]})
    return 0


if __name__ == "__main__":  # pragma: no cover - exercised through subprocesses
    sys.exit(_child(sys.argv[1], sys.argv[2]))
