"""Generated end-to-end scenarios as audit cases (audit/cases/e2e/scenarios.py): drawn from the
audit seed, reaching the issue's axes, checked token by token; the correct engine passes."""

from dataclasses import replace

import pytest

from specexact.audit import run_audit
from specexact.audit.cases.dispatch import checks_per_case
from specexact.audit.cases.e2e.case import within_context
from specexact.audit.cases.e2e.catalog import e2e_cases
from specexact.audit.cases.e2e.scenarios import (
    COST_CAP,
    KEY_AXES,
    OTHER_AXES,
    SCENARIO_BANDS,
    SCENARIO_REQUESTS_PER_SHAPE,
    SCHEDULER_KEY_AXES,
    SERIAL_REQUESTS_PER_SHAPE,
    ScenarioCase,
    axes_reached,
    cost,
    draw_scenarios,
    requests_per_shape,
    scenario_case,
    scenario_cases,
)
from specexact.decoders.engines.builtin import BuiltinEngine
from specexact.decoders.params import SamplingParams
from specexact.strategies import RequestShape, Scenario, SchedulerSettings

ENGINE = BuiltinEngine()
CASES = scenario_cases(ENGINE, seed=0)
CHECKS = sum(checks_per_case(c) for c in CASES)


def test_the_draw_is_a_function_of_the_seed():
    assert draw_scenarios(0) == draw_scenarios(0)
    assert draw_scenarios(0) != draw_scenarios(1)
    assert [c.name for c in CASES] == [f"e2e-llama-v64-draft_model-scenario-{k}" for k in range(1, len(CASES) + 1)]
    assert all(c.draw[0] == 0 for c in CASES)


def test_the_drawn_scenarios_reach_the_axes_within_the_cost_cap():
    # fails if an axis stops being generated, or stops being preferred by the draw: seeds 0-3
    # each reach every key axis under the cost cap, with the newest and the lowest Hypothesis
    # the project allows (CANDIDATES draws; at 100, seed 0 missed position 32 under 6.116)
    for seed in range(4):
        drawn = [s for _, s in draw_scenarios(seed)]
        assert sum(cost(s) for s in drawn) <= COST_CAP
        reached = set().union(*(axes_reached(s) for s in drawn))
        assert set(KEY_AXES) <= reached, (seed, reached)
        assert len(set(KEY_AXES + OTHER_AXES) - reached) <= 1, (seed, reached)


def test_a_scenario_case_has_the_shapes_bands_and_seeds():
    shapes = (RequestShape(prompt_len=3, prompt_seed=1, params=SamplingParams(top_k=5), max_tokens=20, min_tokens=4,
                           eos=True),
              RequestShape(prompt_len=41, prompt_seed=2, max_tokens=2))
    case = scenario_case(ENGINE, Scenario(gamma=5, shapes=shapes, seed=7), name="mine", requests_per_class=2)
    assert isinstance(case, ScenarioCase) and case.name == "e2e-llama-v64-draft_model-mine"
    assert case.num_speculative_tokens == 5 and [len(rc.prompt) for rc in case.row_classes] == [3, 41]
    assert case.position_bands == tuple(b for b in SCENARIO_BANDS if b[0] < 20) == ((0, 8), (8, 16), (16, 32))
    assert case.row_classes[0].min_tokens == 4 and case.row_classes[0].eos and not case.row_classes[1].eos
    reqs = case.requests(eos_token_id=1, call=3)
    # classes interleaved, seeds shifted; the second request of each class unseeded (the engine's promise)
    assert [r.seed for r in reqs] == [7 + 3 * 4 + 0, 7 + 3 * 4 + 1, None, None]
    assert [len(r.prompt_token_ids) for r in reqs] == [3, 41, 3, 41]
    d = case.to_dict()
    assert Scenario.from_dict(d["scenario"]) == case.scenario and d["scenario_axes"]["mixed_prompt_lengths"]
    assert checks_per_case(case) == 2 * 3 + 1 + 2  # and the two seed checks
    with pytest.raises(ValueError, match="does not run method 'ngram'"):
        scenario_case(ENGINE, case.scenario, "ngram")


class ContextLimitedEngine(BuiltinEngine):
    """The built-in engine declaring a context of 64 tokens (as the vLLM adapter does:
    vLLM ends an output at ``max_model_len`` without EOS)."""

    def capabilities(self):
        return replace(super().capabilities(), max_context=64)


def test_cases_keep_every_request_within_the_engines_declared_context():
    # fails on the old code: a 48-token prompt with 64 new tokens (the draw's largest shape)
    # and the long case's 41-token prompt with 48 went to an engine whose context is 64
    # (vLLM's max_model_len): it ends such outputs without EOS, a protocol break of ours
    engine = ContextLimitedEngine()
    shapes = (RequestShape(prompt_len=48, prompt_seed=1, max_tokens=64, min_tokens=30, eos=True),
              RequestShape(prompt_len=3, prompt_seed=2, max_tokens=20),
              RequestShape(prompt_len=64, prompt_seed=3, max_tokens=5))
    case = scenario_case(engine, Scenario(gamma=4, shapes=shapes, seed=0), requests_per_class=2)
    assert [(len(rc.prompt), rc.max_tokens, rc.min_tokens) for rc in case.row_classes] == [(48, 16, 16), (3, 20, 0)]
    assert case.position_bands == ((0, 8), (8, 16), (16, 32)) and "context of 64 tokens" in case.description
    assert scenario_case(ENGINE, case.scenario, requests_per_class=2).row_classes[0].max_tokens == 64  # no limit
    for c in e2e_cases(engine, "draft_model", scenarios=True, long_case_too=True, scenario_seed=0):
        assert all(len(rc.prompt) + rc.max_tokens <= 64 and rc.min_tokens <= rc.max_tokens for rc in c.row_classes), c.name
    long = e2e_cases(engine, "draft_model", long_case_too=True)[-1]
    assert [rc.max_tokens for rc in long.row_classes] == [48, 48, 45, 23] and "context of 64" in long.description
    with pytest.raises(ValueError, match="no prompt leaves room"):
        scenario_case(engine, Scenario(gamma=1, shapes=shapes[2:], seed=0))
    with pytest.raises(ValueError, match="max_context must be an integer >= 2 or None, got 1"):
        within_context(case.row_classes[0], 1)
    with pytest.raises(ValueError, match="max_context must be an integer >= 2 or None, got 0"):
        replace(engine.capabilities(), max_context=0)


class OneAtATimeEngine(BuiltinEngine):
    """The built-in engine declaring what transformers' and mlx-lm's adapters declare: one
    request per call (``max_batch_size=1``; the adapter loops over a call's requests)."""

    def capabilities(self):
        return replace(super().capabilities(), max_batch_size=1)


def test_engines_that_run_requests_one_at_a_time_get_smaller_scenario_calls():
    # fails on the old code (16 per shape for every engine): a one-at-a-time engine's call
    # costs the sum of its requests, so 16 per shape only raised the planner's floor
    assert [c.requests_per_class for c in scenario_cases(OneAtATimeEngine(), seed=0)] == \
        [SERIAL_REQUESTS_PER_SHAPE] * len(CASES) == [4] * len(CASES)
    assert [c.requests_per_class for c in CASES] == [SCENARIO_REQUESTS_PER_SHAPE] * len(CASES) == [16] * len(CASES)
    assert requests_per_shape(ENGINE.capabilities()) == 16  # batched, though seeded per call
    assert scenario_case(OneAtATimeEngine(), CASES[0].scenario, requests_per_class=9).requests_per_class == 9


def test_the_vllm_adapter_declares_its_context():
    from specexact.decoders.engines.vllm import VllmEngine

    assert VllmEngine().capabilities().max_context == 64
    assert VllmEngine(max_model_len=40).capabilities().max_context == 40


def test_an_engine_audit_draws_the_scenarios_of_its_seed_first():
    names = [c.name for c in e2e_cases(ENGINE, scenarios=True, scenario_seed=0, long_case_too=True)]
    k = len(CASES)
    assert names[:k] == [c.name for c in CASES] and names[k].endswith("draft_model-g2")
    assert names[-1].endswith("-long-g4")
    assert not any("scenario" in n for n in (c.name for c in e2e_cases(ENGINE)))


@pytest.mark.statistical(checks=CHECKS)
def test_the_builtin_engine_passes_its_scenarios_with_every_band_reported(alpha):
    report = run_audit(ENGINE, cases=CASES, num_batches=2, budget_s=None, false_fail_rate=alpha * CHECKS,
                       sampler_name="engine:builtin", fuzz=False, threads=1)
    assert report["verdict"] == "pass", report["findings"]
    for case, rep in zip(CASES, report["cases"]):
        names = {c["name"] for c in rep["checks"]}
        bands = {f"{p}[positions {a}-{b - 1}]" for p in ("token_law", "plain_token_law") for a, b in case.position_bands}
        assert names == bands | {"reproducible", "reproducible_in_mix", "independent_requests"}, names
        assert rep["config"]["scenario"] == case.scenario.to_dict() and "shrunk" not in rep
        assert all(c["false_fail_rate"] < alpha for c in rep["checks"])


# -- the scheduler axes (issue 33) ------------------------------------------------------------

class SchedulingBuiltin(BuiltinEngine):
    """The built-in engine declaring every scheduler axis: it records what ``load`` was given
    and the arrivals of each generate call, and runs the requests as the built-in does (its
    law does not depend on them), so the audit's path for an engine with a scheduler runs
    here without vLLM."""

    def __init__(self):
        super().__init__()
        self.loads, self.arrivals = [], []

    def capabilities(self):
        from dataclasses import replace as _replace

        from specexact.decoders.engines import SCHEDULER_AXES

        return _replace(super().capabilities(), scheduler=SCHEDULER_AXES)

    def load(self, target_dir, draft_dir, *, method, num_speculative_tokens, scheduler=None):
        self.loads.append(scheduler)
        super().load(target_dir, draft_dir, method=method, num_speculative_tokens=num_speculative_tokens)

    def generate(self, requests, *, speculative):
        self.arrivals.append(sorted({r.arrival for r in requests}))
        return super().generate(requests, speculative=speculative)


SCHED_SCENARIO = Scenario(gamma=3, seed=2, shared_prefix=20, shapes=(
    RequestShape(prompt_len=24, prompt_seed=1, params=SamplingParams(temperature=0.8), max_tokens=12),
    RequestShape(prompt_len=22, prompt_seed=2, max_tokens=10, arrival=4),
    RequestShape(prompt_len=4, prompt_seed=3, max_tokens=9, arrival=7, distinct_prompt=True)),
    scheduler=SchedulerSettings(kv_cache_tokens=96, chunk_tokens=12, prefix_caching=True, max_num_seqs=5))


def test_scheduler_draws_reach_the_scheduler_axes_and_leave_other_engines_draws_alone():
    # fails if a scheduler axis stops being generated, or preferred by the draw of an engine
    # that declares a scheduler; an engine without one draws what it drew before issue 33
    for seed in range(4):
        drawn = [s for _, s in draw_scenarios(seed, scheduler=True)]
        assert sum(cost(s) for s in drawn) <= COST_CAP
        reached = set().union(*(axes_reached(s) for s in drawn))
        # (with the newest and the lowest Hypothesis allowed; the other axes compete for the cost
        # cap there: which of them a seed misses depends on the version, docs/engines/end-to-end.md)
        assert set(SCHEDULER_KEY_AXES) <= reached, (seed, reached)
        assert not any(s.has_scheduler_axes for _, s in draw_scenarios(seed))
    engine = SchedulingBuiltin()
    assert [c.scenario for c in scenario_cases(engine, seed=0)] == [s for _, s in draw_scenarios(0, scheduler=True)]


def test_an_engine_without_a_scheduler_ignores_arrivals_and_settings():
    assert ENGINE.capabilities().scheduler == ()
    case = scenario_case(ENGINE, SCHED_SCENARIO, requests_per_class=2)
    assert [rc.arrival for rc in case.row_classes] == [0, 0, 0]
    prompts = [rc.prompt for rc in case.row_classes]
    assert prompts[0][:20] == prompts[1][:20] and len(set(prompts[2])) == 4  # the prompts are the scenario's
    from specexact.audit.cases.e2e.engine_call import scheduler_for

    assert scheduler_for(ENGINE, case) is None


@pytest.mark.statistical(checks=2 * 2 + 3)
def test_an_engine_with_a_scheduler_gets_arrivals_and_settings_and_the_same_laws(alpha):
    engine = SchedulingBuiltin()
    case = scenario_case(engine, SCHED_SCENARIO, requests_per_class=16)
    assert [rc.arrival for rc in case.row_classes] == [0, 4, 7]
    report = run_audit(engine, cases=[case], num_batches=2, budget_s=None, false_fail_rate=alpha * 7,
                       sampler_name="engine:scheduling-builtin", fuzz=False, threads=1)
    assert engine.loads == [SCHED_SCENARIO.scheduler]
    assert all(a == [0, 4, 7] for a in engine.arrivals)
    assert report["verdict"] == "pass", report["findings"]
    (rep,) = report["cases"]
    assert {c["name"] for c in rep["checks"]} == {f"{p}[positions {a}-{b - 1}]" for p in ("token_law", "plain_token_law")
                                                  for a, b in ((0, 8), (8, 16))} | {
        "reproducible", "reproducible_in_mix", "independent_requests"}
    assert rep["config"]["scenario"]["scheduler"]["chunk_tokens"] == 12
    assert rep["config"]["scenario_axes"]["staggered_arrivals"] and rep["config"]["scenario_axes"]["kv_pressure"]


def test_an_engine_that_takes_any_stop_token_gets_a_likely_one_and_others_keep_the_models_eos():
    # the tiny models' EOS has probability < 0.01 at most positions: a stop inside a verify
    # window would almost never happen. The built-in engine takes any stop token: each EOS shape
    # stops at its law's most likely first token, and its requests and laws use that id.
    from specexact.audit.cases.e2e.laws import case_models, likely_stop_token
    from specexact.decoders.tiny_models import exact_sequence_law

    assert ENGINE.capabilities().stop_tokens
    eos_classes = [(case, rc) for case in CASES for rc in case.row_classes if rc.eos]
    assert eos_classes, "the default seed's scenarios have no EOS shape"
    for case, rc in eos_classes:
        target, _ = case_models(case)
        first = exact_sequence_law(target, rc.prompt, rc.params, ENGINE.capabilities().processing, max_tokens=1)
        best = max(first.probs)
        assert rc.stop_token == likely_stop_token(case.pair, rc.prompt, rc.params, ENGINE.capabilities().processing)
        assert dict(zip((int(s[0]) for s in first.sequences.tolist()), first.probs))[rc.stop_token] == best
        assert best > 0.2  # far above the model's EOS (< 0.01): stops happen inside windows
        req = rc.request(target.eos_token_id, seed=0)
        assert req.eos_token_id == rc.stop_token
    assert {rc.stop_token for _, rc in eos_classes} != {case_models(CASES[0])[0].eos_token_id}

    class ModelEosOnly(BuiltinEngine):  # an engine that stops at the model's EOS only
        def capabilities(self):
            return replace(super().capabilities(), stop_tokens=False)

    for case in scenario_cases(ModelEosOnly(), seed=0):
        for rc in case.row_classes:
            assert rc.stop_token is None
            assert rc.eos_id(7) == (7 if rc.eos else None)


def test_a_stop_token_needs_eos_on():
    from specexact.audit.cases.e2e.case import E2ERowClass

    with pytest.raises(ValueError, match="stop_token"):
        E2ERowClass((1, 2), SamplingParams(), max_tokens=3, eos=False, stop_token=5)
    rc = E2ERowClass((1, 2), SamplingParams(), max_tokens=3, eos=True, stop_token=5)
    assert rc.eos_id(1) == 5 and "stop token 5" in rc.describe()
