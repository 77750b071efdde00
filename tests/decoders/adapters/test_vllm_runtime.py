"""vllm_runtime's engine-free parts, and the engine modules' lazy entry points (main suite: no
engine needed)."""

import importlib
import importlib.util

import pytest
import torch

from specexact.decoders.adapters.vllm_runtime import per_request_generators

ENGINE_MODULES = [("vllm", "verify", "vllm"), ("vllm_logits", "verify_logits_level", "vllm"),
                  ("sglang", "verify", "sglang"), ("sglang", "verify_block", "sglang"),
                  ("lmdeploy", "verify", "lmdeploy"), ("mlx", "verify", "mlx_lm"),
                  ("eagle", "verify", "eagle"), ("eagle", "verify_logits_level", "eagle"),
                  ("flashinfer", "verify", "flashinfer"), ("sglang_tree", "verify", "sglang")]


def test_per_request_generators_are_a_function_of_the_passed_generator():
    a = per_request_generators(torch.Generator().manual_seed(1), 4, torch.device("cpu"))
    b = per_request_generators(torch.Generator().manual_seed(1), 4, torch.device("cpu"))
    c = per_request_generators(torch.Generator().manual_seed(2), 4, torch.device("cpu"))
    draw = lambda gens: [torch.rand(3, generator=g).tolist() for g in gens.values()]  # noqa: E731
    da, db, dc = draw(a), draw(b), draw(c)
    assert sorted(a) == [0, 1, 2, 3] and da == db and da != dc
    assert len({tuple(x) for x in da}) == 4, "rows get distinct streams"


@pytest.mark.parametrize("module, attr, engine", ENGINE_MODULES)
def test_engine_modules_import_without_their_engine(module, attr, engine):
    mod = importlib.import_module(f"specexact.decoders.adapters.{module}")
    assert mod.__doc__ and "What runs" in mod.__doc__
    if importlib.util.find_spec(engine) is None:
        with pytest.raises(ImportError):
            getattr(mod, attr)
    with pytest.raises(AttributeError):
        mod.no_such_attribute  # noqa: B018
