"""Helpers for the strategy tests: measuring how often each family is generated."""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, Phase, event, given, settings

#: Examples drawn by every frequency measurement. The run is derandomised with fixed
#: settings (independent of the active profile), so the counts are the same on every run
#: of a given Hypothesis version; the bounds asserted sit below the measured counts.
MEASURE_EXAMPLES = 300


@pytest.fixture
def measure():
    """``measure(strategy, tag) -> Counter`` of ``tag(example)`` over a fixed derandomised
    run of ``MEASURE_EXAMPLES`` examples (each tag is also reported with ``event``)."""

    def run(strategy, tag, n: int = MEASURE_EXAMPLES) -> Counter:
        counts: Counter = Counter()

        @settings(max_examples=n, derandomize=True, database=None, deadline=None,
                  phases=[Phase.generate], suppress_health_check=list(HealthCheck))
        @given(strategy)
        def collect(example):
            label = tag(example)
            counts[label] += 1
            event(f"family={label}")

        with _no_local_constants():
            collect()
        return counts

    return run


@contextmanager
def _no_local_constants():
    """Draw without the constants Hypothesis mixes in from local modules (the package and
    the tests): the measured frequencies then depend on the strategy alone, not on which
    other modules happen to exist (a new module anywhere in the package changed them).
    Hypothesis internals, as in ``tests/conftest.py``; if they move, nothing is changed."""
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:  # pragma: no cover
        yield
        return
    before = providers._get_local_constants
    empty = providers.Constants()
    providers._get_local_constants = lambda: empty
    providers.CONSTANTS_CACHE.cache.clear()  # permitted constants computed from the old pool
    try:
        yield
    finally:
        providers._get_local_constants = before
        providers.CONSTANTS_CACHE.cache.clear()


@pytest.fixture
def assert_min_share():
    """``assert_min_share(counts, families)``: every one of the F families is at least
    ``1 / (4 F)`` of the examples counted (a quarter of a uniform share).

    One rule for every strategy: Hypothesis does not pick among alternatives uniformly
    (it favours early alternatives and mixes in constants of the code under test), so the
    floor asks for a real share, not equality. The counts themselves are printed.
    """
    return _assert_min_share


def _assert_min_share(counts: Counter, families) -> None:
    families = tuple(families)
    min_share = 1 / (4 * len(families))
    print(f"family counts: {dict(counts)}; floor {min_share:.3f}")
    total = sum(counts.values())
    low = {f: counts.get(f, 0) / total for f in families if counts.get(f, 0) / total < min_share}
    assert not low, (
        f"families below {min_share:.3f} of {total} examples: "
        + ", ".join(f"{f}={share:.3f}" for f, share in low.items())
        + f"; all counts: {dict(counts)}"
    )
