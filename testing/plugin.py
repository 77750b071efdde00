"""The pytest plugin of specexact (entry point ``pytest11: specexact``), loaded whenever
specexact is installed.

What it gives a test suite:

- ``@pytest.mark.specexact(cases=..., batches=..., budget_s=..., seed=..., device=...,
  threads=..., fuzz=..., fuzz_examples=..., strict_inputs=..., call_timeout_s=...,
  audits=1)``: defaults for the audits of a test, and how many it runs;
- the fixture ``specexact_check``: ``specexact_check(verifier, **overrides)`` audits a
  probability-level verifier or a logits-level adapter (chosen by its type) at the
  test's share of the session's false-fail budget and raises :class:`AssertionError` with
  the findings (:func:`specexact.testing.assert_verifier_exact`); it returns the
  :class:`~specexact.testing.AuditResult`. It fails on findings of the tiers inexact,
  defect on valid input and under-accepting; *hardening* findings (invalid input accepted,
  or refused with the wrong exception; the fuzz phase finds them) are in the result and
  fail the test only with ``strict_inputs=True`` (marker, call, or the ini option
  ``specexact_strict_inputs = true``);
- the fuzz phase (exact rules on generated inputs: generator used and reproducible, inputs
  unmodified, invalid input refused) runs in every audit, as in ``specexact audit``: a
  verifier drawing from torch's global RNG fails. ``fuzz=False`` (marker or call) or the
  ini option ``specexact_fuzz = false`` leaves it out; it adds 3–4 s per audit on a
  2-core machine (docs/ci/pytest-plugin.md);
- a per-call time limit: one call of the verifier past ``call_timeout_s`` seconds (marker
  or call; ``--specexact-call-timeout SECONDS`` or the ini option
  ``specexact_call_timeout``; default
  :data:`~specexact.testing.DEFAULT_CALL_TIMEOUT_S`, 0 for none) fails the test
  with a *defect on valid input* of kind ``timeout`` instead of hanging the session;
- the fixture ``specexact_false_fail_rate``: that share, for tests that call
  :func:`specexact.testing.audit_verifier` themselves;
- ``--specexact-false-fail-rate RATE`` (or the ini option ``specexact_false_fail_rate``;
  default 1e-6): the chance that a correct sampler fails *any* audit of the session;
- the Hypothesis profiles ``ci`` and ``nightly`` (:mod:`specexact.testing.profiles`).

**The session's budget.** Every collected test that is marked ``specexact`` or uses one
of the two fixtures holds ``audits`` shares (default 1); the session rate is split
equally (Bonferroni) over all shares, and each audit gets one share. The split is made
from the collected items alone (after ``-k`` / ``-m`` deselection): every pytest-xdist
worker collects the same items, so all workers — and a run without xdist, ``-n 1`` or
``-n auto`` — compute the same split without talking to each other. Each test records
its rate as the user property ``specexact_false_fail_rate`` (shown in JUnit XML), and the
terminal summary states the split.

Audits run with one torch thread by default (``threads=1``): results are then the same
under ``-n 0``, ``-n 1`` and ``-n auto``, and parallel workers do not oversubscribe the
cores (with busy cores, torch's default thread count can make a call ten times slower).
"""

from __future__ import annotations

import math

import pytest

from specexact.testing.assertions import DEFAULT_CALL_TIMEOUT_S  # light: no torch at plugin load
from specexact.testing.profiles import register_profiles

__all__ = ["SessionBudget", "DEFAULT_SESSION_FALSE_FAIL_RATE", "MARKER", "FIXTURES", "audits_of"]

# At import, i.e. when pytest loads its plugins: before Hypothesis' own plugin reads
# --hypothesis-profile in pytest_configure.
register_profiles()

DEFAULT_SESSION_FALSE_FAIL_RATE = 1e-6
MARKER = "specexact"
#: Fixtures whose use makes a test hold a share of the budget (marked or not).
FIXTURES = ("specexact_check", "specexact_engine_check", "specexact_false_fail_rate")
_MARKER_KWARGS = ("cases", "batches", "budget_s", "seed", "device", "threads", "fuzz", "fuzz_examples",
                  "strict_inputs", "call_timeout_s", "audits")
_PROPERTY = "specexact_false_fail_rate"

_BUDGET = pytest.StashKey["SessionBudget"]()
_CALL_TIMEOUT = pytest.StashKey["float | None"]()


def audits_of(item) -> int:
    """Shares of the session budget ``item`` holds: its marker's ``audits`` (default 1)
    when it is marked ``specexact`` or uses a specexact fixture, else 0.

    Raises
    ------
    pytest.UsageError
        ``audits`` is not an integer >= 1, or the marker has positional or unknown
        arguments.
    """
    marker = item.get_closest_marker(MARKER)
    uses = any(name in FIXTURES for name in getattr(item, "fixturenames", ()))
    if marker is None:
        return 1 if uses else 0
    if marker.args:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{MARKER} takes keyword arguments only "
                                f"({', '.join(_MARKER_KWARGS)}), got {marker.args!r}")
    unknown = sorted(set(marker.kwargs) - set(_MARKER_KWARGS))
    if unknown:
        raise pytest.UsageError(f"{item.nodeid}: unknown @pytest.mark.{MARKER} argument(s) {unknown}; "
                                f"known: {', '.join(_MARKER_KWARGS)}")
    audits = marker.kwargs.get("audits", 1)
    if isinstance(audits, bool) or not isinstance(audits, int) or audits < 1:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{MARKER}(audits=...) must be an integer >= 1, "
                                f"got {audits!r}")
    return audits


class SessionBudget:
    """The session's false-fail rate and its split over the collected audits.

    Parameters
    ----------
    rate : float
        The chance that a correct sampler fails any audit of the session, in (0, 1).
    """

    def __init__(self, rate: float):
        if not (isinstance(rate, (int, float)) and 0 < rate < 1 and math.isfinite(rate)):
            raise pytest.UsageError(f"--specexact-false-fail-rate must be in (0, 1), got {rate!r}")
        self.rate = float(rate)
        self.shares: dict[str, int] = {}

    @property
    def total(self) -> int:
        """Shares of all collected audits."""
        return sum(self.shares.values())

    def assign(self, items) -> None:
        """Count the shares of the collected ``items`` (:func:`audits_of`)."""
        self.shares = {item.nodeid: n for item in items if (n := audits_of(item))}

    def per_audit(self, nodeid: str) -> float:
        """The false-fail rate of one audit of the test ``nodeid``.

        Raises
        ------
        pytest.UsageError
            The test holds no share (it was not collected as an audit).
        """
        if nodeid not in self.shares:
            raise pytest.UsageError(f"{nodeid} holds no share of the specexact false-fail budget: mark it "
                                    f"@pytest.mark.{MARKER} or use the specexact_check fixture")
        return self.rate / self.total


def _session_rate(config) -> float:
    value = config.getoption("specexact_false_fail_rate")
    if value is None:
        ini = config.getini("specexact_false_fail_rate")
        if ini not in (None, ""):
            try:
                value = float(ini)
            except ValueError:
                raise pytest.UsageError(f"ini option specexact_false_fail_rate must be a number, got {ini!r}") from None
    return DEFAULT_SESSION_FALSE_FAIL_RATE if value is None else value


def _call_timeout(config) -> float | None:
    """The session's per-call limit (None: no limit) from the option or the ini value.

    Raises
    ------
    pytest.UsageError
        Not a number >= 0.
    """
    value = config.getoption("specexact_call_timeout")
    where = "--specexact-call-timeout"
    if value is None:
        ini = config.getini("specexact_call_timeout")
        if ini in (None, ""):
            return DEFAULT_CALL_TIMEOUT_S
        where = "ini option specexact_call_timeout"
        try:
            value = float(ini)
        except ValueError:
            raise pytest.UsageError(f"{where} must be a number of seconds, got {ini!r}") from None
    if not (value >= 0 and math.isfinite(value)):
        raise pytest.UsageError(f"{where} must be >= 0 seconds (0: no limit), got {value!r}")
    return float(value) or None


def pytest_addoption(parser):
    group = parser.getgroup("specexact", "specexact exactness audits")
    group.addoption("--specexact-false-fail-rate", dest="specexact_false_fail_rate", type=float, default=None,
                    metavar="RATE",
                    help="chance that a correct sampler fails any specexact audit of this session, split equally "
                         f"over the collected audits (default: {DEFAULT_SESSION_FALSE_FAIL_RATE:g})")
    parser.addini("specexact_false_fail_rate", "default of --specexact-false-fail-rate", default=None)
    group.addoption("--specexact-call-timeout", dest="specexact_call_timeout", type=float, default=None,
                    metavar="SECONDS",
                    help="one call of an audited verifier past this long is a hang: the test fails with a timeout "
                         f"defect instead of hanging (default: {DEFAULT_CALL_TIMEOUT_S:g}; 0: no limit)")
    parser.addini("specexact_call_timeout", "default of --specexact-call-timeout (seconds; 0: no limit)",
                  default=None)
    parser.addini("specexact_fuzz", "run the fuzz phase in every specexact_check audit (default: true; a "
                  "marker's or call's fuzz decides over it)", type="bool", default=True)
    parser.addini("specexact_strict_inputs", "hardening findings (invalid input accepted, or refused with the wrong "
                  "exception) fail specexact_check too (default: false; a marker's or call's strict_inputs decides "
                  "over it)", type="bool", default=False)


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        f"{MARKER}(cases=..., batches=..., budget_s=..., seed=..., device=..., threads=..., fuzz=..., "
        "fuzz_examples=..., strict_inputs=..., call_timeout_s=..., audits=1): the test "
        "audits a sampler (specexact_check fixture) with these defaults; it runs `audits` audits, each at one "
        "share of the session's false-fail budget (--specexact-false-fail-rate)",
    )
    config.stash[_BUDGET] = SessionBudget(_session_rate(config))
    config.stash[_CALL_TIMEOUT] = _call_timeout(config)
    config.pluginmanager.register(_Summary(config), "specexact-summary")


@pytest.hookimpl(tryfirst=True)  # before the terminal reporter asks pytest_report_collectionfinish
def pytest_collection_finish(session):
    session.config.stash[_BUDGET].assign(session.items)


def pytest_report_collectionfinish(config, start_path, items):
    budget = config.stash[_BUDGET]
    if budget.total:
        return [f"specexact: session false-fail rate {budget.rate:g} split over {budget.total} audit(s): "
                f"{budget.rate / budget.total:.3g} each"]
    return []


class _Summary:
    """Collects the rates the tests recorded (also from xdist workers, whose reports reach
    the controller with their user properties) for the terminal summary."""

    def __init__(self, config):
        self.config = config
        self.seen: dict[str, tuple] = {}

    def pytest_runtest_logreport(self, report):
        if report.when != "call":
            return
        props = dict(report.user_properties)
        if _PROPERTY in props:
            self.seen[report.nodeid] = (props[_PROPERTY], props.get("specexact_audits_in_session"))

    def pytest_terminal_summary(self, terminalreporter):
        if not self.seen:
            return
        rates = sorted({r for r, _ in self.seen.values()})
        totals = sorted({t for _, t in self.seen.values() if t is not None})
        split = f" split over {totals[0]} audit(s)" if len(totals) == 1 else ""
        each = f"{rates[0]:.3g} each" if len(rates) == 1 else f"{rates[0]:.3g} to {rates[-1]:.3g}"
        terminalreporter.write_line(f"specexact: {len(self.seen)} test(s) audited at session false-fail rate "
                                    f"{self.config.stash[_BUDGET].rate:g}{split}: {each}")


@pytest.fixture
def specexact_false_fail_rate(request) -> float:
    """The false-fail rate of one audit of this test: the session's rate over all
    collected audits (module docstring). Recorded as the user property
    ``specexact_false_fail_rate``."""
    budget = request.config.stash[_BUDGET]
    rate = budget.per_audit(request.node.nodeid)
    request.node.user_properties.append((_PROPERTY, rate))
    request.node.user_properties.append(("specexact_audits_in_session", budget.total))
    return rate


class _Checker:
    """``specexact_check(verifier, **overrides)``: see the module docstring."""

    def __init__(self, node, rate: float):
        marker = node.get_closest_marker(MARKER)
        self.defaults = {k: v for k, v in (marker.kwargs if marker else {}).items() if k != "audits"}
        self.allowed = audits_of(node)
        self.rate = rate
        self.node = node
        self.calls = 0
        self.results: list = []

    def __call__(self, verifier, **overrides):
        __tracebackhide__ = True
        from specexact.decoders.adapters.protocol import is_logits_level

        from specexact.testing.assertions import assert_logits_verifier_exact, assert_verifier_exact

        if "false_fail_rate" in overrides:
            raise TypeError("specexact_check takes its false-fail rate from the session budget; set "
                            "--specexact-false-fail-rate, or call specexact.testing.assert_verifier_exact")
        unknown = sorted(set(overrides) - set(_MARKER_KWARGS) - {"sampler_name"})
        if unknown or "audits" in overrides:
            raise TypeError(f"specexact_check got unexpected argument(s) {unknown or ['audits']}")
        self.calls += 1
        if self.calls > self.allowed:
            raise pytest.UsageError(f"{self.node.nodeid} runs more audits than it declared ({self.allowed}): "
                                    f"mark it @pytest.mark.{MARKER}(audits={self.calls})")
        config = self.node.config
        kwargs = {"threads": 1, "strict_inputs": bool(config.getini("specexact_strict_inputs")),
                  "fuzz": bool(config.getini("specexact_fuzz")), "call_timeout_s": config.stash[_CALL_TIMEOUT],
                  **self.defaults, **overrides, "false_fail_rate": self.rate}
        check = assert_logits_verifier_exact if is_logits_level(verifier) else assert_verifier_exact
        result = check(verifier, **kwargs)
        self.results.append(result)
        return result


@pytest.fixture
def specexact_check(request, specexact_false_fail_rate):
    """Audit a verifier at this test's share of the session budget; raise
    :class:`AssertionError` with the findings (module docstring)."""
    return _Checker(request.node, specexact_false_fail_rate)


from specexact.testing.engine import specexact_engine_check  # noqa: E402,F401 - the end-to-end fixture, registered with the plugin
