"""End-to-end exactness assertions for an engine's own generate loop, and their pytest fixture.

``from specexact.testing import assert_engine_exact`` — run the end-to-end audit
(:mod:`specexact.audit.cases.e2e`) of an :class:`~specexact.decoders.engines.EndToEndEngine`
on specexact's tiny models and raise :class:`AssertionError` listing every finding;
:func:`audit_engine` returns the :class:`~specexact.testing.AuditResult` instead. The fixture
``specexact_engine_check(engine, **overrides)`` does the same at the test's share of the
session's false-fail budget (the plugin's ``specexact_false_fail_rate``), so an engine team
runs it in its own CI::

    def test_my_engine_is_exact(specexact_engine_check):
        specexact_engine_check(MyEngine(), method="draft_model")
"""

from __future__ import annotations

import pytest

from specexact.testing.assertions import AuditResult

__all__ = ["audit_engine", "assert_engine_exact", "specexact_engine_check", "EngineDidNotStart",
           "DEFAULT_ENGINE_BATCHES", "DEFAULT_ENGINE_CALL_TIMEOUT_S"]

DEFAULT_ENGINE_BATCHES = 2
"""Generate calls per case (each a speculative and a plain call) when neither ``batches`` nor
``budget_s`` is given."""

DEFAULT_ENGINE_CALL_TIMEOUT_S = 300.0
"""Seconds one ``load`` or ``generate`` call may take (``call_timeout_s``) before it counts as
a hang: a ``load`` imports and starts the engine (vLLM: 40-90 s on two busy cores), a
``generate`` call runs a few thousand requests."""


class EngineDidNotStart(RuntimeError):
    """The engine's first load raised in every case: nothing was audited (not a finding; the
    command line's exit status 2, :func:`~specexact.audit.verdict.verdict.not_started`).
    ``report`` is the audit's report, with the load's error as each case's defect."""

    def __init__(self, message: str, report: dict):
        super().__init__(message)
        self.report = report


def audit_engine(engine, *, method: str | None = None, pair: str = "llama-v64", requests_per_class: int = 128,
                 num_speculative_tokens: int = 2, batches: int | None = None, budget_s: float | None = None,
                 false_fail_rate: float = 1e-6, seed: int = 0, threads: int | None = 1,
                 sampler_name: str | None = None,
                 call_timeout_s: float | None = DEFAULT_ENGINE_CALL_TIMEOUT_S) -> AuditResult:
    """Audit an engine's own speculative generation end to end; return the result.

    Parameters
    ----------
    engine : EndToEndEngine
        The engine (not loaded: the audit loads it once per configuration and closes it).
    method : str, optional
        A drafting method it declares (default: every one).
    pair : str
        The tiny target / draft pair (:data:`~specexact.decoders.tiny_models.CATALOG`).
    requests_per_class : int
        Requests of each row class per generate call.
    num_speculative_tokens : int
        γ.
    batches : int, optional
        Generate calls per case (even); default :data:`DEFAULT_ENGINE_BATCHES` unless
        ``budget_s`` is given.
    budget_s : float, optional
        A time budget instead (sample sizes then depend on the machine's speed).
    false_fail_rate : float
        Chance that a correct engine fails, split over every check.
    seed : int
    threads : int or None
        Torch threads (default 1: the engine's own threads are its business).
    sampler_name : str, optional
        The engine's name in the report (default ``engine-<engine.name>``).
    call_timeout_s : float or None
        Seconds one ``load`` or ``generate`` call may take before it counts as a hang (a
        defect of kind ``timeout``; the engine is not called again:
        :class:`specexact.audit.sampler.call_timeout.TimedEngine`); None: no limit.

    Returns
    -------
    AuditResult

    Raises
    ------
    TypeError
        ``engine`` is not an end-to-end engine.
    ValueError
        Both ``batches`` and ``budget_s``, a method the engine does not declare, or a
        ``call_timeout_s`` that is not a positive number.
    EngineDidNotStart
        The engine's first load raised (a platform it does not run on, a missing package):
        nothing was audited, so there is no verdict on the engine (the CLI exits 2 there).
    """
    from specexact.audit import AuditSettings, run_audit
    from specexact.audit.sampler.call_timeout import with_call_timeout
    from specexact.audit.sampler.samplers import ENGINE_SAMPLER_PREFIX
    from specexact.audit.verdict.verdict import not_started
    from specexact.audit.cases.e2e.catalog import e2e_cases
    from specexact.decoders.engines import is_engine

    if not is_engine(engine):
        raise TypeError(f"engine must implement specexact.decoders.engines.EndToEndEngine, got {type(engine).__name__}")
    if batches is not None and budget_s is not None:
        raise ValueError(f"give batches or budget_s, not both (got batches={batches!r}, budget_s={budget_s!r})")
    if batches is None and budget_s is None:
        batches = DEFAULT_ENGINE_BATCHES
    cases = e2e_cases(engine, method, pair=pair, num_speculative_tokens=num_speculative_tokens,
                      requests_per_class=requests_per_class, seed=seed)
    name = sampler_name or f"{ENGINE_SAMPLER_PREFIX}{engine.name}"
    target = f"{type(engine).__module__}:{type(engine).__qualname__}"  # what --engine resolves again
    settings = AuditSettings(sampler_name=name, sampler_target=target, cases=tuple(cases), false_fail_rate=false_fail_rate,
                             budget_s=budget_s if batches is None else None, num_batches=batches, seed=seed,
                             threads=threads, fuzz=False)
    timed = with_call_timeout(engine, call_timeout_s)
    try:
        report = run_audit(timed, settings)
    finally:
        timed.close()
    why = not_started(report["cases"])
    if why is not None:
        raise EngineDidNotStart(f"the engine {engine.name} did not start here, so nothing was audited (its first "
                                f"load raised: {why.removeprefix('crash in engine load: ')})", report)
    return AuditResult(report)


def assert_engine_exact(engine, **kwargs) -> AuditResult:
    """:func:`audit_engine`, raising :class:`AssertionError` with every finding (by tier, with
    the diagnosis) when the engine fails; the same keywords."""
    __tracebackhide__ = True
    result = audit_engine(engine, **kwargs)
    if not result.passed:
        raise AssertionError(result.message)
    return result


@pytest.fixture
def specexact_engine_check(specexact_false_fail_rate):
    """``specexact_engine_check(engine, **kwargs)``: :func:`assert_engine_exact` at this
    test's share of the session's false-fail budget (``false_fail_rate`` cannot be given)."""

    def check(engine, **kwargs):
        __tracebackhide__ = True
        if "false_fail_rate" in kwargs:
            raise TypeError("specexact_engine_check takes its false-fail rate from the session budget; set "
                            "--specexact-false-fail-rate, or call specexact.testing.assert_engine_exact")
        return assert_engine_exact(engine, false_fail_rate=specexact_false_fail_rate, **kwargs)

    return check
