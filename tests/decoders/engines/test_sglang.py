"""The SGLang end-to-end adapter: with a fake ``sglang`` module standing in for ``sglang.Engine``
(the translation both ways: requests to ``Engine`` / ``generate`` arguments, output dicts to
results), and on the real engine where SGLang and a GPU are present (``tox -e sglang-e2e`` on a
CUDA machine, ``scripts/gpu_check.sh``; SGLang does not start on a CPU: docs/engines/sglang.md)."""

from __future__ import annotations

import importlib.util
import sys
import types
from typing import ClassVar

import pytest
from specexact.decoders.engines import GenerationRequest, check_generation_results
from specexact.decoders.engines.registry import EngineError, resolve_engine
from specexact.decoders.engines.sglang import (
    METHODS,
    SGLANG_E2E_PROCESSING,
    SglangEngine,
    speculative_kwargs,
)
from specexact.decoders.engines.sglang_requests import (
    generation_results,
    sampling_params,
    unsupported,
)
from specexact.decoders.params import SamplingParams

EOS = 1  # the tiny models' eos_token_id (config.json)


class FakeEngine:
    """Records what ``sglang.Engine`` is given and answers ``generate`` as SGLang does (one
    dict per request: ``output_ids``, ``meta_info``)."""

    made: ClassVar[list] = []

    def __init__(self, **kwargs):
        self.kwargs, self.calls, self.shut = kwargs, [], False
        FakeEngine.made.append(self)

    def generate(self, *, input_ids, sampling_params):
        self.calls.append((input_ids, sampling_params))
        spec = "speculative_algorithm" in self.kwargs
        outs = []
        for ids, sp in zip(input_ids, sampling_params):
            toks = [(ids[-1] + j + 2) % 64 for j in range(sp["max_new_tokens"])]
            meta = {"finish_reason": {"type": "length", "length": len(toks)}}
            if spec:
                meta.update(spec_num_proposed_drafts=6, spec_num_correct_drafts=4, spec_verify_ct=3)
            outs.append({"output_ids": toks, "meta_info": meta})
        return outs[0] if len(outs) == 1 else outs

    def shutdown(self):
        self.shut = True


@pytest.fixture
def fake_sglang(monkeypatch):
    FakeEngine.made = []
    monkeypatch.setitem(sys.modules, "sglang", types.SimpleNamespace(Engine=FakeEngine, __version__="fake"))
    return FakeEngine


def test_request_maps_to_sampling_params():
    req = GenerationRequest((5, 6), SamplingParams(temperature=0.7, top_k=4, top_p=0.9, repetition_penalty=1.3,
                                                   frequency_penalty=0.3, presence_penalty=0.2),
                            max_tokens=5, min_tokens=2, eos_token_id=EOS, seed=11)
    assert sampling_params(req, model_eos_ids=(EOS,)) == {
        "temperature": 0.7, "top_k": 4, "top_p": 0.9, "min_p": 0.0, "repetition_penalty": 1.3,
        "presence_penalty": 0.2, "frequency_penalty": 0.3, "max_new_tokens": 5, "min_new_tokens": 2,
        "sampling_seed": 11, "ignore_eos": False, "stop_token_ids": [EOS], "no_stop_trim": True}
    # top_k 0 (off) is SGLang's -1; no EOS: ignore_eos, no stop ids.
    plain = sampling_params(GenerationRequest((5,), SamplingParams(temperature=0.0)), model_eos_ids=(EOS,))
    assert plain["top_k"] == -1 and plain["temperature"] == 0.0 and plain["ignore_eos"] and plain["stop_token_ids"] is None


@pytest.mark.parametrize("kwargs, field", [
    ({"params": SamplingParams(min_p=0.1)}, "min_p"),
    ({"params": SamplingParams(temperature=1e-7)}, "temperature"),
    ({"params": SamplingParams(presence_penalty=2.5)}, "presence_penalty"),
    ({"params": SamplingParams(repetition_penalty=2.5)}, "repetition_penalty"),
    ({"seed": None}, "seed=None"),
    ({"eos_token_id": 7}, "eos_token_id=7"),
    ({"min_tokens": 2}, "min_tokens=2"),
])
def test_what_sglang_cannot_state_is_refused(kwargs, field):
    req = GenerationRequest((5,), **{"max_tokens": 4, **kwargs})
    why = unsupported(req, model_eos_ids=(EOS,))
    assert why is not None and field in why
    with pytest.raises(ValueError, match=field.split("=")[0]):
        sampling_params(req, model_eos_ids=(EOS,))


def test_outputs_map_to_results():
    outs = [{"output_ids": [3, 4, EOS], "meta_info": {"spec_num_proposed_drafts": 4, "spec_num_correct_drafts": 1}},
            {"output_ids": [9], "meta_info": {}}]
    spec = generation_results(outs, speculative=True)
    assert [r.token_ids for r in spec] == [(3, 4, EOS), (9,)]
    assert (spec[0].num_draft_tokens, spec[0].num_accepted_tokens, spec[0].first_round_accepted) == (4, 1, None)
    assert spec[1].num_draft_tokens is None and spec[1].num_accepted_tokens is None
    assert generation_results(outs, speculative=False)[0].num_draft_tokens is None
    with pytest.raises(ValueError, match="output_ids"):
        generation_results([{"text": "x"}], speculative=False)


def test_speculative_kwargs_per_method(llama_dirs):
    target, draft = llama_dirs
    assert speculative_kwargs("ngram", target, None, 3) == {
        "speculative_algorithm": "NGRAM", "speculative_num_draft_tokens": 4,
        "speculative_ngram_min_bfs_breadth": 1, "speculative_ngram_max_bfs_breadth": 1}
    standalone = speculative_kwargs("draft_model_greedy", target, draft, 2)
    assert standalone == {"speculative_algorithm": "STANDALONE", "speculative_num_draft_tokens": 3,
                          "speculative_num_steps": 2, "speculative_eagle_topk": 1,
                          "speculative_draft_model_path": str(draft)}
    eagle3 = speculative_kwargs("eagle3", target, None, 2)
    assert eagle3["speculative_algorithm"] == "EAGLE3" and eagle3["speculative_eagle_topk"] == 1
    with pytest.raises(ValueError, match="draft_dir"):
        speculative_kwargs("draft_model_greedy", target, None, 2)
    with pytest.raises(ValueError, match="method"):
        speculative_kwargs("medusa", target, None, 2)
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        speculative_kwargs("ngram", target, None, 0)


def test_engine_against_a_fake_sglang(fake_sglang, llama_dirs):
    target, draft = llama_dirs
    eng = SglangEngine()
    with pytest.raises(RuntimeError, match="before load"):
        eng.generate([GenerationRequest((5,))], speculative=True)
    eng.load(target, draft, method="draft_model_greedy", num_speculative_tokens=2)
    plain, spec = fake_sglang.made
    for made in (plain, spec):
        assert {k: made.kwargs[k] for k in ("model_path", "device", "skip_tokenizer_init", "dtype", "context_length",
                                            "enable_deterministic_inference", "sampling_backend")} == {
            "model_path": str(target), "device": "cuda", "skip_tokenizer_init": True, "dtype": "float32",
            "context_length": 64, "enable_deterministic_inference": True, "sampling_backend": "pytorch"}
    assert "speculative_algorithm" not in plain.kwargs and spec.kwargs["speculative_algorithm"] == "STANDALONE"
    reqs = [GenerationRequest((5, 6), SamplingParams(temperature=0.5), max_tokens=3, seed=1),
            GenerationRequest((7,), max_tokens=2, eos_token_id=EOS, seed=2)]
    res = eng.generate(reqs, speculative=True)
    ids, params = spec.calls[-1]
    assert ids == [[5, 6], [7]] and [p["sampling_seed"] for p in params] == [1, 2]
    assert [r.token_ids for r in res] == [(8, 9, 10), (9, 10)] and res[0].num_accepted_tokens == 4
    assert check_generation_results(reqs, res, 64) is None
    one = eng.generate(reqs[:1], speculative=False)  # SGLang answers one request with its dict alone
    assert plain.calls and one[0].token_ids == (8, 9, 10) and one[0].num_draft_tokens is None
    caps = eng.capabilities()
    assert caps.methods == METHODS and caps.processing is SGLANG_E2E_PROCESSING and caps.max_context == 64
    assert caps.seeds.other_mix and not caps.seeds.unseeded_independent and caps.draft_sampling == "greedy"
    eng.close()
    assert plain.shut and spec.shut and eng._spec is None


def test_declared_processing_leaves_min_p_out():
    p = SGLANG_E2E_PROCESSING
    assert p.order == ("repetition_penalty", "frequency_penalty", "presence_penalty", "temperature", "top_k", "top_p")
    assert p.penalty_context("repetition_penalty") == ("output", None)  # SGLang's penalizers count the output only
    assert "min_p" not in p.order and p.unsupported(SamplingParams(min_p=0.1)) == ["min_p=0.1"]


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="sglang is installed here")
def test_registry_names_the_env_when_the_engine_is_missing():
    with pytest.raises(EngineError, match="tox -e sglang-e2e"):
        resolve_engine("sglang")


def _gpu_and_sglang() -> bool:
    if importlib.util.find_spec("sglang") is None:
        return False
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(not _gpu_and_sglang(), reason="needs SGLang and a CUDA GPU (SGLang does not start on a CPU)")
@pytest.mark.parametrize("method", ["ngram", "draft_model_greedy"])
def test_real_engine_cuda_keeps_the_output_protocol(llama_dirs, method):
    target, draft = llama_dirs
    eng = SglangEngine()
    try:
        eng.load(target, draft, method=method, num_speculative_tokens=2)
        reqs = [GenerationRequest((5, 6, 7), SamplingParams(temperature=1.0), max_tokens=6, seed=s) for s in range(4)]
        reqs.append(GenerationRequest((5, 6), max_tokens=6, eos_token_id=EOS, min_tokens=2, seed=9))
        for speculative in (True, False):
            res = eng.generate(reqs, speculative=speculative)
            assert check_generation_results(reqs, res, 64) is None
            assert eng.generate(reqs, speculative=speculative) == res  # seeded: the same outputs again
    finally:
        eng.close()
