"""The vLLM adapter's scheduler layer (decoders/engines/vllm_scheduler.py) without vLLM: the
settings' mapping to vLLM's options, and the step loop on a stand-in ``LLMEngine`` whose
requests take a fixed number of steps (the real engine: tests/decoders/engines/test_vllm.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from specexact.decoders.engines import SCHEDULER_AXES, EngineCapabilities, GenerationRequest
from specexact.decoders.engines.vllm_scheduler import BLOCK_SIZE, run_steps, scheduler_kwargs
from specexact.strategies import SchedulerSettings


def test_settings_map_to_vllms_options():
    assert scheduler_kwargs(None) == {}
    assert scheduler_kwargs(SchedulerSettings()) == {"block_size": BLOCK_SIZE, "enable_prefix_caching": False}
    kw = scheduler_kwargs(SchedulerSettings(kv_cache_tokens=65, chunk_tokens=16, prefix_caching=True, max_num_seqs=3))
    assert kw == {"block_size": 32, "enable_prefix_caching": True, "num_gpu_blocks_override": 3,
                  "enable_chunked_prefill": True, "max_num_batched_tokens": 16, "max_num_seqs": 3}
    with pytest.raises(TypeError, match="scheduler must be a SchedulerSettings or None, got 7"):
        scheduler_kwargs(7)


class FakeEngine:
    """A stand-in for vLLM's ``LLMEngine``: each request emits one token per step and
    finishes after ``max_tokens`` steps; it records the step at which each request was added."""

    def __init__(self):
        self.running, self.added, self.steps = {}, {}, 0

    def has_unfinished_requests(self):
        return bool(self.running)

    def add_request(self, request_id, prompt, params):
        assert isinstance(prompt["prompt_token_ids"], list)
        self.added[request_id] = self.steps
        self.running[request_id] = [params.max_tokens, []]

    def step(self):
        self.steps += 1
        outs = []
        for rid, state in list(self.running.items()):
            state[1].append(len(state[1]))
            finished = len(state[1]) == state[0]
            comp = SimpleNamespace(token_ids=list(state[1]), spec_decode_metrics=None)
            outs.append(SimpleNamespace(request_id=rid, outputs=[comp], finished=finished,
                                        metrics=SimpleNamespace(num_preemptions=1 if rid.endswith("0") else 0),
                                        num_cached_tokens=4))
            if finished:
                del self.running[rid]
        return outs


def test_requests_arrive_at_their_step_and_come_back_in_order():
    eng = FakeEngine()
    params = [SimpleNamespace(max_tokens=m) for m in (3, 2, 1)]
    outs, ev = run_steps(eng, [[5], [6, 7], [8]], params, [0, 2, 9], id_prefix="c-")
    assert [o.request_id for o in outs] == ["c-0", "c-1", "c-2"]
    assert eng.added == {"c-0": 0, "c-1": 2, "c-2": 4}  # nothing runs after step 3: the count jumps to 9
    assert ev.first_token_steps == [0, 2, 9] and ev.arrivals == [0, 2, 9] and ev.steps == 10
    assert ev.prefill_steps() == [1, 1, 1]
    assert (ev.preemptions, ev.preempted_requests, ev.cached_tokens, ev.requests_with_cache_hits) == (1, 1, 12, 3)
    assert ev.first_round_drafted == [None, None, None] and ev.undrafted_steps == [None, None, None]
    assert ev.rows_without_drafts() == 0
    with pytest.raises(ValueError, match="one entry per request"):
        run_steps(FakeEngine(), [[5]], params, [0])
    with pytest.raises(ValueError, match="arrivals must be >= 0"):
        run_steps(FakeEngine(), [[5]], params[:1], [-1])



def test_steps_without_drafts_are_counted_from_vllms_per_request_metrics():
    class Drafting(FakeEngine):
        def step(self):
            outs = super().step()
            for o in outs:  # 6 tokens: 1 from the prefill, 2 accepted, 1 resume: 2 decode steps, 1 with drafts
                o.outputs[0].spec_decode_metrics = SimpleNamespace(per_step_drafted=[3], histogram=[0, 0, 1])
            return outs

    eng = Drafting()
    _, ev = run_steps(eng, [[5], [6]], [SimpleNamespace(max_tokens=6)] * 2, [0, 0])
    assert ev.first_round_drafted == [3, 3]
    assert ev.undrafted_steps == [1, 2] and ev.rows_without_drafts() == 2  # request 0 was preempted once


def test_the_protocol_carries_arrival_and_the_declared_axes():
    r = GenerationRequest((5, 6), arrival=3)
    assert GenerationRequest.from_dict(r.to_dict()) == r
    assert "arrival" not in GenerationRequest((5, 6)).to_dict()  # the form of earlier reports
    with pytest.raises(ValueError, match="arrival must be >= 0, got -1"):
        GenerationRequest((5, 6), arrival=-1)
    assert EngineCapabilities(methods=("draft_model",)).scheduler == ()  # no scheduler: arrival ignored
    assert EngineCapabilities(methods=("ngram",), scheduler=SCHEDULER_AXES).to_dict()["scheduler"] == list(SCHEDULER_AXES)
    with pytest.raises(ValueError, match="scheduler must be a tuple of"):
        EngineCapabilities(methods=("ngram",), scheduler=("swapping",))
