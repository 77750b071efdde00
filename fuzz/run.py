"""The fuzz phase's entry point: :func:`run_fuzz`."""

from __future__ import annotations

import time
import traceback
from typing import Callable

import torch

from specexact.fuzz.engine import run_family
from specexact.fuzz.families import families_for, not_applicable
from specexact.fuzz.findings import FuzzResult, finding_of
from specexact.fuzz.hypothesis_env import without_local_constants
from specexact.fuzz.settings import FuzzSettings
from specexact.fuzz.subject import Subject

__all__ = ["run_fuzz"]

def _database(settings: FuzzSettings):
    if settings.database_dir is None:
        return None
    from hypothesis.database import DirectoryBasedExampleDatabase

    return DirectoryBasedExampleDatabase(settings.database_dir)


def run_fuzz(sampler, settings: FuzzSettings | None = None, *, name: str = "sampler",
             device: torch.device | str = "cpu", on_status: Callable[[dict], None] | None = None) -> FuzzResult:
    """Fuzz ``sampler``: generated inputs, exact rules, boundary-uniform probes, shrunk findings.

    Runs every family of :func:`~specexact.fuzz.families.families_for` that applies to the
    sampler (probability or logits level; the probes where uniforms can be supplied), each
    with its share of ``settings.time_s`` or ``settings.examples_per_family`` examples.
    Every broken rule is shrunk by Hypothesis and becomes a
    :class:`~specexact.fuzz.findings.Finding` with a replay script.

    Parameters
    ----------
    sampler : callable or logits-level adapter
        What :func:`~specexact.audit.resolve_sampler` returns.
    settings : FuzzSettings, optional
        Default ``FuzzSettings()`` (the ``ci`` profile, 25 examples per family, seed 0).
    name : str
        The ``--sampler`` name (in the replays, the seeds and the database keys).
    device : torch.device or str
    on_status : callable, optional
        ``on_status(event)`` with ``{"event": "fuzz_family_start" | "fuzz_family_end", ...}``.

    Returns
    -------
    FuzzResult
        ``error`` is set (and ``passed`` False) when the phase itself could not run.

    Raises
    ------
    TypeError
        ``sampler`` has neither protocol.
    """
    settings = FuzzSettings() if settings is None else settings
    status = on_status or (lambda event: None)
    subject = Subject.of(sampler, name, device=device, call_timeout_s=settings.call_timeout_s)
    result = FuzzResult(sampler=name, level=subject.level, settings=settings, subject={
        "randomness": subject.randomness, "input_dtypes": list(subject.input_dtypes),
        "rounding_dtype": str(subject.rounding_dtype).removeprefix("torch."),
        "uniforms_dtype": None if subject.uniforms_dtype is None else str(subject.uniforms_dtype).removeprefix("torch."),
        "declared": subject.capabilities is not None, "processing": subject.processing.to_dict(),
        "scheme": subject.scheme, "protocol": subject.protocol}, not_applicable=not_applicable(subject))
    start = time.perf_counter()
    threads = torch.get_num_threads()
    try:
        if settings.threads is not None:
            torch.set_num_threads(settings.threads)
        families = families_for(subject, max_vocab=settings.max_vocab)
        database = _database(settings)
        for k, family in enumerate(families):
            time_limit = None
            if settings.time_s is not None:
                left = settings.time_s - (time.perf_counter() - start)
                rest = sum(f.weight for f in families[k:])
                # at least 0.5 s while that much is left; none once the phase's time is spent
                # (the family then checks no example, and says so: FamilyRun.stopped "time")
                time_limit = max(left * family.weight / rest, min(0.5, max(left, 0.0)))
            status({"event": "fuzz_family_start", "family": family.name, "index": k, "num_families": len(families),
                    "time_limit_s": time_limit, "examples": settings.examples_per_family})
            with without_local_constants():
                run = run_family(family, settings, sampler=name, max_examples=settings.examples_per_family,
                                 time_limit_s=time_limit, database=database, seed=settings.seed)
            result.families.append(run)
            for exc in run.failures:
                result.findings.append(finding_of(subject, run, exc, family.describe))
            if run.error is not None and result.error is None:
                result.error = f"family {run.name}: {run.error}"
            status({"event": "fuzz_family_end", "family": family.name, "index": k, "examples": run.examples,
                    "findings": len(run.failures), "time_s": run.time_s, "error": run.error})
    except Exception as exc:  # noqa: BLE001 - the fuzzer's own failure: reported, exit status 2
        result.error = f"{type(exc).__name__}: {exc}\n" + "".join(traceback.format_exception(exc)[-4:])
    finally:
        torch.set_num_threads(threads)
    result.time_s = time.perf_counter() - start
    return result
