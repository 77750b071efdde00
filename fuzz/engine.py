"""Run one fuzz family with Hypothesis: generate, check, shrink, remember.

:func:`run_family` runs a :class:`~specexact.fuzz.families.Family`'s property under the
fuzz settings (:class:`~specexact.fuzz.settings.FuzzSettings`): a fixed number of
examples, or as many as fit a time limit (in chunks of Hypothesis runs, each seeded
from the audit seed, the family and the chunk number), stopping at the first failure.
Hypothesis shrinks every failing rule on its own (:func:`~specexact.fuzz.rules.rule_error`
gives each rule its own exception type) and raises the shrunk examples; with an example
database (beside the reports) failures are saved under a key of the sampler and the
family, and the next run replays them first.
"""

from __future__ import annotations

import time
import traceback
import zlib
from collections import Counter
from dataclasses import dataclass, field

from hypothesis import HealthCheck, Phase, Verbosity, given, seed as hypothesis_seed, settings as hypothesis_settings

from .rules import RuleBroken

__all__ = ["FamilyRun", "run_family", "family_seed"]


def family_seed(seed: int, sampler: str, family: str, chunk: int = 0) -> int:
    """Hypothesis seed of a family's chunk: a stable function of the audit seed, the
    sampler's name, the family and the chunk number."""
    return (int(seed) * 1_000_003 + zlib.crc32(f"{sampler}/{family}/{chunk}".encode())) % (2**63)


@dataclass
class FamilyRun:
    """What one family did.

    Attributes
    ----------
    name, description : str
    rules : tuple of str
    examples : int
        Examples checked before the first failure (all of them without one): what was tried.
    calls : int
        Calls of the property in all (shrinking included).
    examples_to_failure : int or None
        The number of the example that first failed (1-based), if one did.
    time_s : float
    stopped : str
        ``"examples"`` (the fixed count was reached), ``"time"`` (the time limit),
        ``"failure"`` or ``"error"``.
    failures : list of RuleBroken
        Shrunk failures (``.example`` is the shrunk example), one per rule / origin.
    flaky : bool
        Hypothesis found a failure that did not reproduce when replayed.
    error : str or None
        The family could not run (the fuzzer's own problem), with a traceback tail.
    tried : Counter
        Examples per input family (``describe(example)["family"]``) before the first failure.
    vocab : tuple of (int, int)
        Smallest and largest V tried.
    """

    name: str
    description: str
    rules: tuple
    examples: int = 0
    calls: int = 0
    examples_to_failure: int | None = None
    time_s: float = 0.0
    stopped: str = "examples"
    failures: list = field(default_factory=list)
    flaky: bool = False
    error: str | None = None
    tried: Counter = field(default_factory=Counter)
    vocab: tuple = (0, 0)


def _flatten(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        out = []
        for e in exc.exceptions:
            out.extend(_flatten(e))
        return out
    return [exc]


def run_family(family, fuzz_settings, *, sampler: str, max_examples: int | None, time_limit_s: float | None,
               database=None, seed: int = 0) -> FamilyRun:
    """Run ``family`` (module docstring).

    Parameters
    ----------
    family : Family
    fuzz_settings : FuzzSettings
        Phases and chunk sizes.
    sampler : str
        The sampler's name (the seeds and the database key depend on it).
    max_examples : int or None
        Examples to generate (None: until ``time_limit_s``).
    time_limit_s : float or None
        Stop generating after this long (None: no limit; then ``max_examples`` is needed).
    database : hypothesis.database.ExampleDatabase or None
    seed : int
        The audit seed.

    Returns
    -------
    FamilyRun
    """
    if max_examples is None and time_limit_s is None:
        raise ValueError("give max_examples or time_limit_s")
    run = FamilyRun(family.name, family.description, family.rules)
    state = {"failed_at": None, "skipped": 0, "deadline": None}
    low, high = None, None

    def prop(example) -> None:
        nonlocal low, high
        if (state["failed_at"] is None and state["deadline"] is not None
                and time.perf_counter() > state["deadline"]):
            state["skipped"] += 1  # past the time limit: the rest of this Hypothesis run is drawn, not checked
            return
        run.calls += 1
        if state["failed_at"] is None:
            d = family.describe(example)
            run.tried[d.get("family", "?")] += 1
            v = int(d.get("vocab_size", 0))
            low, high = (v if low is None else min(low, v)), (v if high is None else max(high, v))
        try:
            family.check(example)
        except RuleBroken as exc:
            if state["failed_at"] is None:
                state["failed_at"] = run.calls
            exc.example = example
            raise

    start = time.perf_counter()
    deadline = None if time_limit_s is None else start + time_limit_s
    state["deadline"] = deadline
    done, chunk = 0, 0
    per_example = None
    while True:
        left = None if max_examples is None else max_examples - done
        if left is not None and left <= 0:
            run.stopped = "examples"
            break
        now = time.perf_counter()
        if deadline is not None and now >= deadline:
            run.stopped = "time"
            break
        if deadline is None:
            size = left
        else:
            # Examples differ in cost by orders of magnitude (V from 1 to 262145): a run that
            # overshoots draws the rest of its examples without checking them (prop above).
            guess = fuzz_settings.first_chunk if per_example is None else int((deadline - now) / max(per_example, 1e-3))
            size = max(1, min(guess, fuzz_settings.max_chunk, left if left is not None else guess))
        test = given(family.strategy)(prop)
        # The seed first: hypothesis.seed() turns the database off, and these settings
        # (applied after it) turn it back on, so a seeded run still replays saved failures.
        test = hypothesis_seed(family_seed(seed, sampler, family.name, chunk))(test)
        test = hypothesis_settings(
            max_examples=size, database=database, deadline=None, derandomize=False,
            phases=fuzz_settings.phases, suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet,
            report_multiple_bugs=True, print_blob=False)(test)
        test._hypothesis_internal_database_key = f"specexact.fuzz/{sampler}/{family.name}".encode()
        checked_before, skipped_before = run.calls, state["skipped"]
        t0 = time.perf_counter()
        try:
            test()
        except BaseException as exc:  # noqa: BLE001 - sorted below; KeyboardInterrupt goes on up
            if isinstance(exc, KeyboardInterrupt):
                raise
            found = _flatten(exc)
            broken = [e for e in found if isinstance(e, RuleBroken)]
            others = [e for e in found if not isinstance(e, RuleBroken)]
            run.flaky = any(type(e).__name__.startswith("Flaky") for e in [exc, *found])
            if broken:
                run.failures.extend(broken)
                run.stopped = "failure"
            if others and not broken:
                tail = "".join(traceback.format_exception(others[0])[-6:])
                run.error = f"{type(others[0]).__name__}: {others[0]}\n{tail}"
                run.stopped = "error"
            break
        finally:
            took = time.perf_counter() - t0
            checked = run.calls - checked_before
            if checked > 0:
                per_example = took / checked
            done += max(checked + state["skipped"] - skipped_before, 1)
            chunk += 1
    run.time_s = time.perf_counter() - start
    run.examples_to_failure = state["failed_at"]
    run.examples = (state["failed_at"] - 1) if state["failed_at"] is not None else run.calls
    run.vocab = (low or 0, high or 0)
    return run
