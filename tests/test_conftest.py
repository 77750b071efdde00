"""The suite's own conftest: the process that runs the tests pins Hypothesis' local-constant
pool (the xdist controller, which runs none, skips that work)."""

import importlib.util

import pytest


def test_the_process_running_the_tests_pinned_hypothesis_local_constants():
    """Under ``-n 0`` and in every xdist worker the pool is pinned before collection, so the
    examples do not depend on which modules a worker happened to import."""
    if importlib.util.find_spec("hypothesis.internal.constants_ast") is None:
        pytest.skip("a Hypothesis older than its local-constant pool: nothing to pin")
    from hypothesis.internal.conjecture import providers

    assert providers._get_local_constants.__name__ == "<lambda>", providers._get_local_constants
    assert providers._get_local_constants() is providers._get_local_constants()
