"""The fuzz phase's entry point: :func:`run_fuzz`."""

from __future__ import annotations

import importlib
import pkgutil
import time
import traceback
import warnings
from typing import Callable

import torch

from .engine import run_family
from .families import families_for
from .findings import FuzzResult, finding_of
from .settings import FuzzSettings
from .subject import Subject

__all__ = ["run_fuzz", "pin_hypothesis_constants"]

_PINNED = {"done": False}


def pin_hypothesis_constants() -> None:
    """Make Hypothesis' generation independent of which modules happen to be imported.

    Hypothesis mixes constants of the *local* modules in ``sys.modules`` into generation
    and rescans when new modules appear, so the same seed could give other examples after
    an unrelated import. As ``tests/conftest.py`` does for the suite, every specexact
    module is imported and the constant pool is pinned to that set (once per process;
    left alone when the suite's conftest already pinned it). Uses Hypothesis internals; if
    they move, the pool is not pinned and a warning says so.
    """
    if _PINNED["done"]:
        return
    _PINNED["done"] = True
    try:
        from hypothesis.internal.conjecture import providers
    except Exception as exc:  # pragma: no cover - depends on Hypothesis internals
        warnings.warn(f"could not pin Hypothesis' local-constant pool: {exc!r}", stacklevel=2)
        return
    if getattr(providers._get_local_constants, "__name__", "") == "<lambda>":
        return  # pinned by the test suite's conftest
    import specexact

    names = []
    for sub in ("audit", "decoders", "exactness", "strategies", "reports", "fuzz"):
        try:
            pkg = importlib.import_module(f"specexact.{sub}")
        except Exception:  # noqa: BLE001 - a package that cannot import is simply not pinned
            continue
        names += [info.name for info in pkgutil.walk_packages(pkg.__path__, f"specexact.{sub}.")]
    names += [info.name for info in pkgutil.walk_packages(specexact.__path__, "specexact.")]
    for name in sorted(set(names)):
        if name.endswith("__main__"):
            continue  # it would run a command
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - e.g. an adapter whose optional library is missing
            pass
    try:
        pool = providers._get_local_constants()
        providers._get_local_constants = lambda: pool
    except Exception as exc:  # pragma: no cover
        warnings.warn(f"could not pin Hypothesis' local-constant pool: {exc!r}", stacklevel=2)


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
        "declared": subject.capabilities is not None, "processing": subject.processing.to_dict()})
    start = time.perf_counter()
    threads = torch.get_num_threads()
    try:
        pin_hypothesis_constants()
        if settings.threads is not None:
            torch.set_num_threads(settings.threads)
        families = families_for(subject, max_vocab=settings.max_vocab)
        database = _database(settings)
        for k, family in enumerate(families):
            time_limit = None
            if settings.time_s is not None:
                left = settings.time_s - (time.perf_counter() - start)
                rest = sum(f.weight for f in families[k:])
                time_limit = max(left * family.weight / rest, 0.5)
            status({"event": "fuzz_family_start", "family": family.name, "index": k, "num_families": len(families),
                    "time_limit_s": time_limit, "examples": settings.examples_per_family})
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
