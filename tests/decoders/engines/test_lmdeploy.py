"""The LMDeploy end-to-end adapter: with a fake ``lmdeploy`` module standing in for its pipeline
(the translation both ways: requests to ``GenerationConfig`` / ``preprocess`` arguments on the
pipeline's event loop, ``GenOut`` back to results), and on the real engine where LMDeploy and a
GPU are present (``tox -e lmdeploy-e2e`` on a CUDA machine, ``scripts/gpu_check.sh``; LMDeploy
does not start on a CPU: docs/engines/lmdeploy.md)."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import threading
import types
from dataclasses import dataclass, field
from typing import ClassVar

import pytest
from specexact.decoders.engines import GenerationRequest, check_generation_results
from specexact.decoders.engines.lmdeploy import (
    LMDEPLOY_E2E_PROCESSING,
    METHODS,
    LmdeployEngine,
    tokenized_model_dir,
)
from specexact.decoders.engines.lmdeploy_requests import (
    generation_config_kwargs,
    generation_result,
    unsupported,
)
from specexact.decoders.engines.registry import EngineError, resolve_engine
from specexact.decoders.params import SamplingParams

EOS = 1  # the tiny models' eos_token_id (config.json)


@dataclass
class GenOut:
    token_ids: list
    finish_reason: str | None
    response: str = ""
    error_message: str | None = None


class FakeAsyncEngine:
    """``preprocess`` / ``generate`` as LMDeploy 0.18.0's ``AsyncEngine`` streams (``serve/core/
    async_engine.py``): one ``GenOut`` per step with that step's new ids (the stop token cut),
    then a last one with ``finish_reason`` and no ids, or the stop token alone under
    ``include_stop_str_in_output``; records the calls and the loop they ran on."""

    def __init__(self):
        self.calls, self.loops = [], set()

    async def preprocess(self, messages, session_id, gen_config=None, do_preprocess=True, input_ids=None):
        assert messages is None and do_preprocess is False
        self.calls.append((session_id, input_ids, gen_config))
        self.loops.add(asyncio.get_running_loop())
        return (input_ids, gen_config)

    async def generate(self, request, stream_response=True):
        assert stream_response is False
        ids, cfg = request
        toks = [(ids[-1] + j + 2) % 64 for j in range(cfg.max_new_tokens)]
        stop = set(cfg.stop_token_ids or []) if not cfg.ignore_eos else set()
        for j, t in enumerate(toks):
            if t in stop and j >= cfg.min_new_tokens:
                for k in range(0, j, 2):  # two new ids a step
                    yield GenOut(toks[k:min(k + 2, j)], None)
                yield GenOut([t] if cfg.include_stop_str_in_output else [], "stop")
                return
        for k in range(0, len(toks), 2):
            yield GenOut(toks[k:k + 2], None)
        yield GenOut([], "length")


class FakePipeline:
    made: ClassVar[list] = []

    def __init__(self, model_path, backend_config=None, speculative_config=None, log_level="WARNING"):
        self.model_path, self.backend_config, self.speculative_config = model_path, backend_config, speculative_config
        self.async_engine, self.closed = FakeAsyncEngine(), False
        loop = asyncio.new_event_loop()
        self.internal_thread = types.SimpleNamespace(loop=loop)
        self._thread = threading.Thread(target=loop.run_forever, daemon=True)
        self._thread.start()
        FakePipeline.made.append(self)

    def close(self):
        self.closed = True
        self.internal_thread.loop.call_soon_threadsafe(self.internal_thread.loop.stop)
        self._thread.join(5)


@dataclass
class Config:
    """Stands in for ``PytorchEngineConfig``, ``GenerationConfig`` and ``SpeculativeConfig``: keeps its keywords."""

    kwargs: dict = field(default_factory=dict)

    def __getattr__(self, name):
        try:
            return self.__dict__["kwargs"][name]
        except KeyError:
            raise AttributeError(name) from None


def _config(**kw):
    return Config(kw)


@pytest.fixture
def fake_lmdeploy(monkeypatch):
    FakePipeline.made = []
    mod = types.SimpleNamespace(pipeline=FakePipeline, PytorchEngineConfig=_config, GenerationConfig=_config,
                                __version__="fake")
    monkeypatch.setitem(sys.modules, "lmdeploy", mod)
    monkeypatch.setitem(sys.modules, "lmdeploy.messages", types.SimpleNamespace(SpeculativeConfig=_config))
    yield FakePipeline
    for p in FakePipeline.made:
        if not p.closed:
            p.close()


def test_request_maps_to_generation_config():
    req = GenerationRequest((5, 6), SamplingParams(temperature=0.7, top_k=4, top_p=0.9, min_p=0.1,
                                                   repetition_penalty=1.3),
                            max_tokens=5, min_tokens=2, eos_token_id=EOS, seed=11)
    assert generation_config_kwargs(req, model_eos_ids=(EOS,)) == dict(
        n=1, max_new_tokens=5, min_new_tokens=2, do_sample=True, temperature=0.7, top_k=4, top_p=0.9, min_p=0.1,
        repetition_penalty=1.3, random_seed=11, ignore_eos=False, stop_token_ids=[EOS], skip_special_tokens=False,
        include_stop_str_in_output=True)
    # greedy: do_sample False; top_k 0 (off) is sent (LMDeploy's own default is 50); no EOS: ignore_eos.
    greedy = generation_config_kwargs(GenerationRequest((5,), SamplingParams(temperature=0.0), seed=None),
                                      model_eos_ids=(EOS,))
    assert not greedy["do_sample"] and greedy["top_k"] == 0 and greedy["ignore_eos"] and greedy["random_seed"] is None


@pytest.mark.parametrize("kwargs, field", [
    ({"params": SamplingParams(presence_penalty=0.5)}, "presence_penalty"),
    ({"params": SamplingParams(frequency_penalty=0.5)}, "frequency_penalty"),
    ({"params": SamplingParams(temperature=0.0, repetition_penalty=1.2)}, "repetition_penalty"),
    ({"params": SamplingParams(temperature=2.5)}, "temperature"),
    ({"eos_token_id": 7}, "eos_token_id=7"),
    ({"min_tokens": 2}, "min_tokens=2"),
])
def test_what_lmdeploy_cannot_state_is_refused(kwargs, field):
    req = GenerationRequest((5,), **{"max_tokens": 4, **kwargs})
    why = unsupported(req, model_eos_ids=(EOS,))
    assert why is not None and field in why
    with pytest.raises(ValueError, match=field.split("=")[0]):
        generation_config_kwargs(req, model_eos_ids=(EOS,))


def test_outputs_map_to_results():
    req = GenerationRequest((5,), max_tokens=4, eos_token_id=EOS)
    assert generation_config_kwargs(req, model_eos_ids=(EOS,))["include_stop_str_in_output"] is True
    # each step's new ids, then the finish: the stop token itself (include_stop_str_in_output) or nothing
    assert generation_result([GenOut([3], None), GenOut([4], None), GenOut([EOS], "stop")], req).token_ids == (3, 4, EOS)
    assert generation_result([GenOut([3, 4], None), GenOut([5, 6], None), GenOut([], "length")],
                             req).token_ids == (3, 4, 5, 6)
    with pytest.raises(ValueError, match="error"):
        generation_result([GenOut([3], None), GenOut([], "error", error_message="boom")], req)
    with pytest.raises(ValueError, match="no output"):
        generation_result([], req)


def test_tokenized_model_dir_links_the_target(llama_dirs):
    target, _ = llama_dirs
    out = tokenized_model_dir(target)
    assert out.name == f"{target.name}-lmdeploy" and (out / "config.json").resolve() == (target / "config.json").resolve()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    assert tok.convert_tokens_to_ids(["t0", "t5", "t63"]) == [0, 5, 63] and tokenized_model_dir(target) == out


def test_engine_against_a_fake_pipeline(fake_lmdeploy, llama_dirs):
    target, _ = llama_dirs
    eng = LmdeployEngine()
    with pytest.raises(RuntimeError, match="before load"):
        eng.generate([GenerationRequest((5,))], speculative=True)
    eng.load(target, None, method="eagle3", num_speculative_tokens=2)
    plain, spec = fake_lmdeploy.made
    assert plain.speculative_config is None and plain.model_path.endswith("-lmdeploy")
    assert spec.speculative_config.method == "eagle3" and spec.speculative_config.num_speculative_tokens == 2
    assert spec.backend_config.device_type == "cuda" and spec.backend_config.session_len == 64
    # The fake counts up from the last prompt token: EOS (1) comes after 62, 63, 0 and is cut, then put back.
    reqs = [GenerationRequest((5, 6), SamplingParams(temperature=0.5), max_tokens=3, seed=1),
            GenerationRequest((60,), max_tokens=6, eos_token_id=EOS, seed=None)]
    res = eng.generate(reqs, speculative=True)
    assert [r.token_ids for r in res] == [(8, 9, 10), (62, 63, 0, EOS)]
    assert check_generation_results(reqs, res, 64) is None
    assert spec.async_engine.loops == {spec.internal_thread.loop}  # on the pipeline's own loop
    assert [c[1] for c in spec.async_engine.calls] == [[5, 6], [60]]
    assert [c[2].random_seed for c in spec.async_engine.calls] == [1, None]
    assert not plain.async_engine.calls
    eng.generate(reqs[:1], speculative=False)
    assert len(plain.async_engine.calls) == 1
    with pytest.raises(ValueError, match="presence_penalty"):  # refused before anything runs
        eng.generate([reqs[0], GenerationRequest((5,), SamplingParams(presence_penalty=0.5))], speculative=True)
    assert len(spec.async_engine.calls) == 2
    caps = eng.capabilities()
    assert caps.methods == METHODS and caps.processing is LMDEPLOY_E2E_PROCESSING and not caps.reports_acceptance
    assert caps.seeds.unseeded_independent and caps.max_context == 64
    eng.close()
    assert plain.closed and spec.closed


def test_declared_processing_is_the_fused_processor():
    p = LMDEPLOY_E2E_PROCESSING
    assert p.order == ("repetition_penalty", "temperature", "top_k", "top_p", "min_p")
    assert p.penalty_context("repetition_penalty") == ("output", None)  # generated_ids only
    assert p.unsupported(SamplingParams(presence_penalty=0.5)) == ["presence_penalty=0.5"]


@pytest.mark.skipif(importlib.util.find_spec("lmdeploy") is not None, reason="lmdeploy is installed here")
def test_registry_names_the_env_when_the_engine_is_missing():
    with pytest.raises(EngineError, match="tox -e lmdeploy-e2e"):
        resolve_engine("lmdeploy")


def _gpu_and_lmdeploy() -> bool:
    if importlib.util.find_spec("lmdeploy") is None:
        return False
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(not _gpu_and_lmdeploy(), reason="needs LMDeploy and a CUDA GPU (LMDeploy does not start on a CPU)")
@pytest.mark.parametrize("method", METHODS)
def test_real_engine_cuda_keeps_the_output_protocol(llama_dirs, method):
    target, _ = llama_dirs
    eng = LmdeployEngine()
    try:
        eng.load(target, None, method=method, num_speculative_tokens=2)
        reqs = [GenerationRequest((5, 6, 7), SamplingParams(temperature=1.0), max_tokens=6, seed=s) for s in range(4)]
        reqs.append(GenerationRequest((5, 6), max_tokens=6, eos_token_id=EOS, min_tokens=2, seed=9))
        for speculative in (True, False):
            res = eng.generate(reqs, speculative=speculative)
            assert check_generation_results(reqs, res, 64) is None
    finally:
        eng.close()
