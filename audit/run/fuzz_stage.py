"""The audit's *fuzz* stage: the fuzz phase's exact families, before the cases.

:func:`run_fuzz_stage` runs :func:`specexact.fuzz.run_fuzz` on the sampler under audit
(after the pilot, before the cases) and records its share of the budget in the plan
(:attr:`~specexact.audit.run.cases_stage.AuditRun.fuzz_plan`). Why before the cases: its rules
are exact, so a finding there is decisive at once; and the cases are planned from the
time actually left afterwards, so fuzz time left unused (a fixed number of examples, an
early finding) goes to the cases instead of being lost. The fuzz phase's statistical part
(generated row classes and per-example laws) is not here: those cases were added to the
audit's cases by :func:`~specexact.audit.run.resolve.resolve_audit`, so their checks share
the false-fail split.

With ``--shard i/n`` the stage runs in shard 1 only (its results do not depend on the
cases); ``specexact merge`` carries it into the merged report. With ``--isolate`` it runs
in a child process (:mod:`specexact.audit.run.fuzz_child`), killed after ``--case-timeout`` (or
4x its planned time + 300 s, 1800 s with ``--batches``): a hang or a death of that process
becomes a ``no_hang`` / ``no_crash`` finding with the tail of its stderr.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch

from specexact.audit.core.json_io import to_jsonable
from specexact.audit.run.cases_stage import AuditRun
from specexact.audit.run.fuzz_child import DictResult, crashed_result
from specexact.audit.run.isolation import _child_env, _signal_name, _tail
from specexact.audit.sampler.samplers import resolve_sampler
from specexact.fuzz.run import run_fuzz

__all__ = ["run_fuzz_stage", "fuzz_case_names"]


def fuzz_case_names(cases) -> list[str]:
    """Names of the generated (``fuzz``-tagged) cases among ``cases``."""
    return [c.name for c in cases if "fuzz" in (getattr(c, "tags", ()) or ())]


def run_fuzz_stage(run: AuditRun, on_status: Callable[[dict], None] | None = None):
    """Stage 3 (*fuzz*, module docstring): the exact fuzz families on the sampler.

    Returns
    -------
    specexact.fuzz.FuzzResult or None
        None when the audit runs without the fuzz phase, or in a shard other than 1.
    """
    resolved = run.resolved
    settings = resolved.settings
    if not settings.fuzz or (settings.shard is not None and settings.shard[0] != 1):
        return None

    status = on_status or (lambda event: None)
    fuzz_settings = settings.fuzz_settings()
    planned = fuzz_settings.time_s
    run.fuzz_plan = {"share": settings.fuzz_share if planned is not None else None, "planned_time_s": planned,
                     "time_s": None, "profile": fuzz_settings.profile,
                     "examples_per_family": fuzz_settings.examples_per_family,
                     "generated_cases": fuzz_case_names(resolved.cases)}
    status({"event": "fuzz_start", "planned_time_s": planned, "profile": fuzz_settings.profile,
            "examples_per_family": fuzz_settings.examples_per_family, "elapsed_s": run.elapsed()})
    t0 = time.perf_counter()
    if run.fuzz_record is not None:
        # A resumed audit: the earlier run finished the fuzz phase and journaled it; its
        # result stands (same key: same sampler, seed and settings) and its time was
        # counted in the elapsed time (open_audit), so the budget holds across the runs.

        result = DictResult(dict(run.fuzz_record))
        result.generated_cases = list(run.fuzz_plan["generated_cases"])
        run.fuzz_plan["time_s"] = 0.0
        status({"event": "fuzz_end", "findings": len(result.findings), "time_s": 0.0, "error": result.error,
                "result": result, "elapsed_s": run.elapsed(), "resumed": True})
        return result
    if settings.isolate:
        timeout = settings.case_timeout_s or (4 * planned + 300 if planned is not None else 1800.0)
        result = _isolated(settings, fuzz_settings, timeout)
    else:
        verifier = resolved.sampler.verifier
        if verifier is None:  # an audit that never resolved it in this process
            verifier, _ = resolve_sampler(settings.sampler_name)
        result = run_fuzz(verifier, fuzz_settings, name=settings.sampler_name, device=settings.device,
                          on_status=status)
    result.generated_cases = list(run.fuzz_plan["generated_cases"])
    run.fuzz_plan["time_s"] = time.perf_counter() - t0
    if run.journal is not None:
        try:
            run.journal.append_fuzz(to_jsonable(result.to_dict()))
        except ValueError:  # not JSON (a non-finite number left in it): a resume runs the phase again
            pass
    status({"event": "fuzz_end", "findings": len(result.findings), "time_s": run.fuzz_plan["time_s"],
            "error": result.error, "result": result, "elapsed_s": run.elapsed()})
    return result


def _isolated(settings, fuzz_settings, timeout_s: float):
    """The fuzz phase in a child process (module docstring)."""
    import json

    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="specexact-fuzz-") as tmp:
        spec_path, result_path, err_path = Path(tmp) / "spec.pkl", Path(tmp) / "result.json", Path(tmp) / "stderr.txt"
        spec_path.write_bytes(pickle.dumps({"sampler": settings.sampler_name, "settings": fuzz_settings,
                                            "device": settings.device, "threads": torch.get_num_threads()}))
        with open(err_path, "wb") as err:
            proc = subprocess.Popen([sys.executable, "-m", "specexact.audit.run.fuzz_child", str(spec_path), str(result_path)],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=_child_env(),
                                    start_new_session=True)
            try:
                code, timed_out = proc.wait(timeout=timeout_s), False
            except subprocess.TimeoutExpired:
                timed_out = True
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    proc.kill()
                code = proc.wait()
        took = time.perf_counter() - start
        if not timed_out and code == 0 and result_path.exists():
            return DictResult(json.loads(result_path.read_text()))
        tail = _tail(err_path)
    if timed_out:
        msg = f"the fuzz process gave no result within {timeout_s:g} s and was killed"
        rule = "no_hang"
    else:
        how = f"killed by {_signal_name(-code)}" if code < 0 else f"exited with status {code}"
        msg, rule = f"the fuzz process was {how} without a result", "no_crash"
    return crashed_result(sampler=settings.sampler_name, settings=fuzz_settings, rule=rule,
                          message=msg + (f"; stderr: {tail}" if tail else ""), seed=settings.seed, time_s=took)
