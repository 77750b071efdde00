"""Helpers for the strategy tests: every family a strategy claims is reachable.

What a strategy guarantees is that each of its families can be generated (each is an
alternative of its own ``st.sampled_from``), not how often Hypothesis picks it: the
frequencies of generated examples are not part of Hypothesis' contract and change between
versions (issue 21: a share floor that held under one version failed under another). So
the tests ask for reachability, with :func:`hypothesis.find`, and assert properties that
hold for every example.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis.errors import NoSuchExample

#: Most examples a reachability search draws. Each family is chosen by an
#: ``st.sampled_from`` over at most 20 alternatives, so a family missing from this many
#: derandomised draws means it was dropped from the strategy, not that it was unlucky.
REACH_EXAMPLES = 2_000

#: Fixed settings, independent of the active profile: the same search on every run.
_SEARCH = settings(max_examples=REACH_EXAMPLES, derandomize=True, database=None,
                   deadline=None, phases=[Phase.generate],
                   suppress_health_check=list(HealthCheck))


@pytest.fixture
def reach():
    """``reach(strategy, tag, labels) -> Counter``: draw until every label in ``labels``
    has been the ``tag`` of some example; fail naming the labels never reached within
    ``REACH_EXAMPLES`` examples. Returns the counts of the labels seen on the way."""
    return _reach


def _reach(strategy, tag, labels) -> Counter:
    wanted = set(labels)
    seen: Counter = Counter()

    def all_reached(example) -> bool:
        seen[tag(example)] += 1
        return wanted <= set(seen)

    try:
        find(strategy, all_reached, settings=_SEARCH)
    except NoSuchExample:
        pass
    missing = sorted(wanted - set(seen), key=str)
    print(f"labels seen before all were reached: {dict(seen)}")
    assert not missing, (f"never generated in {sum(seen.values())} examples: {missing}; "
                         f"seen: {dict(seen)}")
    return seen


@pytest.fixture
def every_example():
    """``every_example(strategy, n=100) -> list``: ``n`` derandomised examples (fixed
    settings), for properties asserted of each one (not of their frequencies)."""

    def run(strategy, n: int = 100) -> list:
        out: list = []

        @settings(_SEARCH, max_examples=n)
        @given(strategy)
        def collect(example):
            out.append(example)

        collect()
        return out

    return run
