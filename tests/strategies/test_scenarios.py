"""End-to-end scenarios (strategies/scenarios.py): every axis is reachable, every example is
valid, and the strategy shrinks toward the simplest scenario."""

import pytest
from hypothesis import HealthCheck, Phase, find, settings

from specexact.decoders.params import SamplingParams
from specexact.strategies import (
    KV_BLOCK,
    PARAM_RANGES,
    SCHEDULER_RANGES,
    InvalidArgument,
    RequestShape,
    Scenario,
    SchedulerSettings,
    e2e_scenarios,
    scenario_axes,
)

_FIND = settings(max_examples=2_000, derandomize=True, database=None, deadline=None,
                 phases=[Phase.generate], suppress_health_check=list(HealthCheck))


def _set(shape: RequestShape) -> set:
    return {k for k in PARAM_RANGES if getattr(shape.params, k) != getattr(SamplingParams(), k)}


#: axis -> a condition a scenario meets when it reaches it (the issue's axes)
AXES = {
    "gamma 8": lambda s: s.gamma >= 8,
    "gamma 3 with a whole verify window": lambda s: s.gamma >= 3 and max(x.max_tokens for x in s.shapes) > s.gamma,
    "mixed prompt lengths in one call": lambda s: scenario_axes(s)["mixed_prompt_lengths"],
    "a prompt past two KV blocks (>= 40)": lambda s: scenario_axes(s)["longest_prompt"] >= 40,
    "an output position past 32": lambda s: scenario_axes(s)["last_position"] > 2 * KV_BLOCK,
    "max_tokens 64": lambda s: scenario_axes(s)["last_position"] == 63,
    "min_tokens with EOS reachable": lambda s: scenario_axes(s)["min_tokens_with_eos"],
    "EOS off with a long output": lambda s: any(not x.eos and x.max_tokens > 16 for x in s.shapes),
    "four request shapes": lambda s: len(s.shapes) == 4,
    "all seven parameters in one request": lambda s: any(len(_set(x)) == 7 for x in s.shapes),
    "penalties with truncation": lambda s: any({"top_k", "presence_penalty"} <= _set(x) for x in s.shapes),
    "two shapes, different parameters, one call": lambda s: len({x.params for x in s.shapes}) > 1,
}


@pytest.mark.parametrize("axis", sorted(AXES))
def test_every_axis_is_reachable(axis):
    found = find(e2e_scenarios(), AXES[axis], settings=_FIND)
    assert AXES[axis](found)


def test_it_shrinks_to_the_simplest_scenario():
    simplest = find(e2e_scenarios(), lambda s: True, settings=settings(_FIND, phases=[Phase.generate, Phase.shrink]))
    assert simplest == Scenario(gamma=1, shapes=(RequestShape(prompt_len=1, prompt_seed=0, params=SamplingParams(),
                                                              max_tokens=1, min_tokens=0, eos=False),), seed=0)
    # a condition on one axis shrinks the others away
    long = find(e2e_scenarios(), lambda s: scenario_axes(s)["last_position"] >= 40,
                settings=settings(_FIND, phases=[Phase.generate, Phase.shrink]))
    assert len(long.shapes) == 1 and long.gamma == 1 and long.shapes[0].max_tokens == 41
    assert long.shapes[0].params == SamplingParams() and long.shapes[0].prompt_len == 1


def test_every_example_is_valid_and_round_trips(every_example):
    for s in every_example(e2e_scenarios(), n=200):
        assert 1 <= s.gamma <= 8 and 1 <= len(s.shapes) <= 4
        for x in s.shapes:
            assert 1 <= x.prompt_len <= 48 and 1 <= x.max_tokens <= 64 and 0 <= x.min_tokens <= x.max_tokens
            prompt = x.prompt(64)
            assert len(prompt) == x.prompt_len and all(2 <= t < 64 for t in prompt)
            assert prompt == x.prompt(64)  # seeded
            for k in _set(x):
                lo, hi = PARAM_RANGES[k]
                assert lo <= getattr(x.params, k) <= hi, (k, x.params)
        assert Scenario.from_dict(s.to_dict()) == s


def test_bad_arguments_name_the_argument():
    with pytest.raises(InvalidArgument, match="max_gamma must be an integer >= 1, got 0"):
        e2e_scenarios(max_gamma=0)
    with pytest.raises(InvalidArgument, match="max_tokens must be an integer >= 1"):
        e2e_scenarios(max_tokens=2.5)
    with pytest.raises(InvalidArgument, match=r"min_tokens must be in \[0, max_tokens=3\], got 4"):
        RequestShape(prompt_len=2, prompt_seed=0, max_tokens=3, min_tokens=4)
    with pytest.raises(InvalidArgument, match="gamma must be >= 1, got 0"):
        Scenario(gamma=0, shapes=(RequestShape(prompt_len=1, prompt_seed=0),))
    with pytest.raises(InvalidArgument, match="shapes must be a non-empty tuple"):
        Scenario(gamma=1, shapes=())


# -- the scheduler axes (issue 33) ------------------------------------------------------------

#: scheduler axis -> a condition a scenario meets when it reaches it
SCHEDULER_AXES = {
    "a shape arriving after step 0 beside one at step 0": lambda s: scenario_axes(s).get("staggered_arrivals"),
    "a KV cache smaller than one call's requests": lambda s: scenario_axes(s).get("kv_pressure"),
    "a prompt longer than the chunked prefill's budget": lambda s: scenario_axes(s).get("chunked_prefill"),
    "prefix caching with two shapes sharing a 16-token prefix": lambda s: scenario_axes(s).get("shared_prefix"),
    "a distinct prompt beside one with a repeat (rows without n-gram drafts)":
        lambda s: scenario_axes(s).get("rows_without_drafts"),
    "a batch limit": lambda s: s.scheduler.max_num_seqs is not None,
    "all scheduler axes in one scenario": lambda s: all(scenario_axes(s).get(k) for k in (
        "staggered_arrivals", "kv_pressure", "chunked_prefill", "rows_without_drafts")),
}


@pytest.mark.parametrize("axis", sorted(SCHEDULER_AXES))
def test_every_scheduler_axis_is_reachable(axis):
    found = find(e2e_scenarios(scheduler=True), SCHEDULER_AXES[axis], settings=_FIND)
    assert SCHEDULER_AXES[axis](found)


def test_without_the_scheduler_axes_nothing_of_them_is_drawn(every_example):
    for s in every_example(e2e_scenarios(), n=100):
        assert not s.has_scheduler_axes and "staggered_arrivals" not in scenario_axes(s)
        assert set(s.to_dict()) == {"gamma", "shapes", "seed"}  # the form of earlier reports


def test_scheduler_axes_shrink_toward_off():
    simplest = find(e2e_scenarios(scheduler=True), lambda s: True,
                    settings=settings(_FIND, phases=[Phase.generate, Phase.shrink]))
    assert not simplest.has_scheduler_axes and simplest.scheduler == SchedulerSettings()
    late = find(e2e_scenarios(scheduler=True), lambda s: any(x.arrival >= 5 for x in s.shapes),
                settings=settings(_FIND, phases=[Phase.generate, Phase.shrink]))
    assert len(late.shapes) == 1 and late.shapes[0].arrival == 5 and late.scheduler == SchedulerSettings()


def test_scheduler_examples_are_valid_and_round_trip(every_example):
    for s in every_example(e2e_scenarios(scheduler=True), n=200):
        assert Scenario.from_dict(s.to_dict()) == s
        for i, x in enumerate(s.shapes):
            lo, hi = SCHEDULER_RANGES["arrival"]
            assert x.arrival == 0 or lo <= x.arrival <= hi
            prompt = s.prompt(i, 64)
            assert len(prompt) == x.prompt_len and all(2 <= t < 64 for t in prompt)
            if x.distinct_prompt:
                assert len(set(prompt)) == len(prompt)
        shared = [s.prompt(i, 64)[:s.shared_prefix] for i, x in enumerate(s.shapes)
                  if not x.distinct_prompt and x.prompt_len >= s.shared_prefix]
        assert len(set(shared)) <= 1  # every such shape starts with the same prefix
        for k in ("kv_cache_tokens", "chunk_tokens", "max_num_seqs"):
            v = getattr(s.scheduler, k)
            assert v is None or SCHEDULER_RANGES[k][0] <= v <= SCHEDULER_RANGES[k][1]


def test_scheduler_arguments_name_the_argument():
    with pytest.raises(InvalidArgument, match="arrival must be an integer >= 0, got -1"):
        RequestShape(prompt_len=2, prompt_seed=0, arrival=-1)
    with pytest.raises(InvalidArgument, match="kv_cache_tokens must be an integer >= 1 or None, got 0"):
        SchedulerSettings(kv_cache_tokens=0)
    with pytest.raises(InvalidArgument, match="shared_prefix must be an integer >= 0"):
        Scenario(gamma=1, shapes=(RequestShape(prompt_len=1, prompt_seed=0),), shared_prefix=-2)
    with pytest.raises(InvalidArgument, match="distinct_prompt of prompt_len=63"):
        RequestShape(prompt_len=63, prompt_seed=0, distinct_prompt=True).prompt(64)
    with pytest.raises(InvalidArgument, match="scheduler must be a bool"):
        e2e_scenarios(scheduler="yes")
