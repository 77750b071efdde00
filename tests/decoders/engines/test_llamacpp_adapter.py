"""The llama.cpp adapter without llama-cpp-python: it imports, maps a request to
``Llama.generate``'s keywords, and the registry names its tox env when the engine is missing."""

import importlib.util

import pytest

from specexact.decoders.engines import GenerationRequest
from specexact.decoders.engines.llamacpp import LLAMACPP_LAST_N, LLAMACPP_PROCESSING, LlamaCppEngine, generate_kwargs
from specexact.decoders.engines.registry import EngineError, resolve_engine
from specexact.decoders.params import SamplingParams


def test_request_maps_to_generate_keywords():
    req = GenerationRequest((5, 6), SamplingParams(temperature=0.7, top_k=4, top_p=0.9, min_p=0.1,
                                                   repetition_penalty=1.3, frequency_penalty=0.3, presence_penalty=0.2))
    assert generate_kwargs(req) == {"top_k": 4, "top_p": 0.9, "min_p": 0.1, "typical_p": 1.0, "temp": 0.7,
                                    "repeat_penalty": 1.3, "frequency_penalty": 0.3, "presence_penalty": 0.2}
    # specexact's neutral values are llama.cpp's "off" values (its own defaults are 40 / 0.95 / 0.05 / 0.8).
    assert generate_kwargs(GenerationRequest((5,))) == {"top_k": 0, "top_p": 1.0, "min_p": 0.0, "typical_p": 1.0,
                                                        "temp": 1.0, "repeat_penalty": 1.0, "frequency_penalty": 0.0,
                                                        "presence_penalty": 0.0}


def test_declared_processing_is_the_sampler_chain():
    p = LLAMACPP_PROCESSING
    assert p.order[-4:] == ("top_k", "top_p", "min_p", "temperature") and p.greedy
    for penalty in ("repetition_penalty", "frequency_penalty", "presence_penalty"):
        assert p.penalty_context(penalty) == ("output", LLAMACPP_LAST_N)
    assert LlamaCppEngine.name == "llamacpp" and set(LlamaCppEngine.requires) == {"llama_cpp", "gguf"}


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is not None, reason="llama-cpp-python is installed here")
def test_registry_names_the_env_when_the_engine_is_missing():
    with pytest.raises(EngineError, match="tox -e llamacpp-e2e"):
        resolve_engine("llamacpp")
