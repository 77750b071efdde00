"""Suite-wide settings: Hypothesis profiles and the false-fail budget.

False-fail budget
-----------------
The whole test session has one false-fail rate, ``SUITE_FALSE_FAIL_RATE`` (1e-6): the
chance that a correct implementation fails any statistical check of the session. It is
split by Bonferroni into ``capacity`` equal per-check rates, where ``capacity`` is the
ledger size of the active profile. Every statistical test is marked
``@pytest.mark.statistical(checks=k)`` with the number of checks it runs (for a Hypothesis
test: checks per example times the profile's ``max_examples``) and takes its per-check
rate from the ``alpha`` fixture. At collection, the declared checks of all collected tests
must fit the ledger, or the session errors out before running anything: the suite as a
whole, not each test, has the stated rate.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from specexact.testing.profiles import register_profiles

SUITE_FALSE_FAIL_RATE = 1e-6

# ci and nightly: the profiles the pytest plugin registers for engines' suites too
# (specexact.testing.profiles), registered here as well so the suite runs the same with the
# plugin disabled (-p no:specexact). dev: ours only.
register_profiles()
settings.register_profile(
    "dev",
    deadline=None,
    max_examples=30,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# The default is the CI profile (deterministic under -n 1 and -n auto); pass
# --hypothesis-profile=dev or =nightly to change it.
settings.load_profile(os.environ.get("SPECEXACT_HYPOTHESIS_PROFILE", "ci"))



def _freeze_hypothesis_local_constants() -> None:
    """Make generated examples independent of which modules a worker happens to import.

    Hypothesis mixes constants found in the *local* modules present in ``sys.modules``
    (our editable package, the test files) into generation, and re-scans whenever a new
    module is imported. Which modules are loaded when a test runs depends on test order and
    on how pytest-xdist distributes tests, so the same test could see different examples
    under ``-n 1`` and ``-n auto``. We import every specexact module, then pin the constant
    pool to that fixed set. (This uses Hypothesis internals; if they move, the pool is
    simply not pinned and a warning says so.)
    """
    import importlib
    import importlib.util
    import pkgutil
    import warnings

    import specexact

    names = [info.name for info in pkgutil.walk_packages(specexact.__path__, "specexact.")]
    for sub in ("audit", "decoders", "exactness", "strategies", "reports", "testing"):
        pkg = importlib.import_module(f"specexact.{sub}")
        names += [info.name for info in pkgutil.walk_packages(pkg.__path__, f"specexact.{sub}.")]
    for name in sorted(set(names)):
        if not name.endswith("__main__"):  # importing it would run the command
            importlib.import_module(name)
    if importlib.util.find_spec("hypothesis.internal.constants_ast") is None:
        return  # a Hypothesis older than its local-constant pool (e.g. 6.116): nothing to pin
    try:
        from hypothesis.internal.conjecture import providers

        pool = providers._get_local_constants()
        providers._get_local_constants = lambda: pool
    except Exception as exc:  # pragma: no cover - depends on Hypothesis internals
        warnings.warn(f"could not pin Hypothesis' local-constant pool: {exc!r}", stacklevel=1)


def _is_xdist_controller(config) -> bool:
    """True in the pytest-xdist process that hands tests to workers and runs none itself.

    It needs no pinned constant pool: it generates no examples. Importing every specexact
    module there (torch, scipy, transformers: about 5 s of CPU) was wasted; each worker, and a
    run without xdist (``-n 0``, ``-p no:xdist``), still pins its pool before collecting."""
    if hasattr(config, "workerinput"):
        return False
    try:
        workers = config.getoption("numprocesses")
    except ValueError:  # xdist not loaded
        return False
    return bool(workers) and workers != 0

# Per profile: how many equal shares the suite's false-fail rate is split into.
LEDGER_CAPACITY = {"ci": 3_000, "dev": 3_000, "nightly": 200_000}


def _capacity() -> int:
    return LEDGER_CAPACITY.get(settings._current_profile, LEDGER_CAPACITY["ci"])


def per_check_false_fail_rate() -> float:
    """The false-fail rate of one statistical check under the active profile."""
    return SUITE_FALSE_FAIL_RATE / _capacity()


def pytest_configure(config):
    if not _is_xdist_controller(config):
        _freeze_hypothesis_local_constants()
    config.addinivalue_line(
        "markers",
        "statistical(checks): the test runs `checks` statistical checks, each at the "
        "per-check false-fail rate from the `alpha` fixture",
    )


def _venv_selected(config) -> bool:
    return "venv" in (config.getoption("markexpr") or "")


def _nightly() -> bool:
    return settings._current_profile == "nightly"


def pytest_collection_modifyitems(session, config, items):
    skipped = set()
    if not _venv_selected(config):  # ~1 min of pip: only when asked for (-m venv)
        skip = pytest.mark.skip(reason="builds a fresh virtualenv; select with -m venv")
        for item in items:
            if item.get_closest_marker("venv") is not None:
                item.add_marker(skip)
    if not _nightly():  # the long versions of CI tests: under the nightly profile only
        skip = pytest.mark.skip(reason="nightly: runs under the nightly profile (tox -e nightly, or "
                                       "SPECEXACT_HYPOTHESIS_PROFILE=nightly)")
        for item in items:
            if item.get_closest_marker("nightly") is not None:
                item.add_marker(skip)
                skipped.add(item.nodeid)
    declared = 0
    for item in items:  # a test skipped here spends nothing of this session's ledger
        marker = item.get_closest_marker("statistical")
        if marker is not None and item.nodeid not in skipped:
            declared += int(marker.kwargs.get("checks", 1))
    capacity = _capacity()
    config._specexact_declared_checks = declared
    if declared > capacity:
        message = (f"statistical tests declare {declared} checks but the false-fail ledger of profile "
                   f"{settings._current_profile!r} holds {capacity} (LEDGER_CAPACITY): raise it (which lowers "
                   f"every check's rate) rather than overspend SUITE_FALSE_FAIL_RATE={SUITE_FALSE_FAIL_RATE}")
        if hasattr(config, "workerinput") and items:
            # An xdist worker: a UsageError here ends it, and the controller then says only
            # "Unexpectedly no active workers available". Every worker runs one failing item
            # instead (the same in each), whose one line is the message.
            items[:] = [_ledger_overflow_item(items[0].parent, message)]
            return
        raise pytest.UsageError(message)


def _ledger_overflow_item(parent, message: str):
    """A test item that fails with ``message`` (the ledger's overflow under xdist)."""

    def ledger_overflow():
        pytest.fail(message, pytrace=False)

    return pytest.Function.from_parent(parent, name="ledger_overflow", callobj=ledger_overflow)


def pytest_report_header(config):
    return (
        f"specexact: hypothesis profile {settings._current_profile!r}, suite false-fail rate "
        f"{SUITE_FALSE_FAIL_RATE:g} split over {_capacity()} checks "
        f"({per_check_false_fail_rate():.3g} each)"
    )


@pytest.fixture
def alpha(request) -> float:
    """Per-check false-fail rate for a test marked ``@pytest.mark.statistical``."""
    if request.node.get_closest_marker("statistical") is None:
        raise pytest.UsageError(f"{request.node.nodeid} uses `alpha` but is not marked statistical")
    return per_check_false_fail_rate()


def pytest_sessionstart(session):
    # One torch thread per test process: pytest-xdist already runs one worker per core, and
    # oversubscribed intra-op threads slow the suite several-fold on small machines.
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)
