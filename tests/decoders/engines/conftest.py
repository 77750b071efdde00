"""Fixtures of the end-to-end engine tests: the ``llama-v64`` tiny pair, made once per session
in a temporary cache folder, and its float64 target for reference laws."""

from __future__ import annotations

import pytest

from specexact.decoders.tiny_models import CATALOG, load_model


@pytest.fixture(scope="session")
def llama_dirs(tmp_path_factory):
    """``(target_dir, draft_dir)`` of ``llama-v64`` (Hugging Face layout)."""
    return CATALOG["llama-v64"].make(tmp_path_factory.mktemp("engine-models"))


@pytest.fixture(scope="session")
def llama_target(llama_dirs):
    """The target as a float64 :class:`~specexact.decoders.tiny_models.TinyCausalLM`."""
    return load_model(llama_dirs[0])



SCENARIO_CALLS = 4
"""Generate calls of a scenario test (each: 16 requests per shape, speculative and plain):
1,024 slots per band of two 16-token shapes, enough for the chi-square's cells (fillers after
an EOS discounted from the detectable TV)."""


@pytest.fixture(scope="session")
def run_scenario():
    """``run(engine, scenario, alpha) -> (result, checks)``: ``scenario`` (a hand-built
    :class:`~specexact.strategies.Scenario`) as the audit's generated scenario case
    (:func:`~specexact.audit.cases.e2e.scenarios.scenario_case`, ``draft_model``, 16 requests
    per shape) on the real engine, :data:`SCENARIO_CALLS` calls, every check at ``alpha``;
    ``checks`` maps each check's name to its result, after asserting that every band of
    both paths ran on the engine's tokens (1,000 slots or more, some holding emitted tokens, a
    detectable TV below 1 stated)."""
    from specexact.audit import run_case
    from specexact.audit.cases.e2e.scenarios import scenario_case

    def run(engine, scenario, alpha):
        case = scenario_case(engine, scenario, "draft_model", name="scenario-test", requests_per_class=16)
        result = run_case(case, engine, false_fail_rate=alpha, seed=0, num_batches=SCENARIO_CALLS)
        checks = {c.name: c for c in result.checks}
        bands = [f"{p}[positions {a}-{b - 1}]" for p in ("token_law", "plain_token_law")
                 for a, b in case.position_bands]
        assert result.defect is None and set(bands) <= set(checks), (result.defect, sorted(checks))
        for name in bands:
            d = checks[name].details
            assert d["num_slots"] >= 1000 and d["num_events"] > 0 and checks[name].detectable_tv < 1, (name, d)
        return result, checks

    return run
