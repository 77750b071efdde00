"""The built-in engine: specexact's decoder behind the end-to-end protocol."""

import pytest
import torch

from specexact.decoders.engines import GenerationRequest, check_generation_results
from specexact.decoders.engines.builtin import BuiltinEngine, MinTokensModel
from specexact.decoders.engines.registry import EngineError, resolve_engine
from specexact.decoders.params import SamplingParams
from specexact.decoders.tiny_models import catalog_pair


@pytest.fixture(scope="module")
def engine():
    e = BuiltinEngine()
    target_dir, draft_dir = catalog_pair("llama-v64")
    e.load(target_dir, draft_dir, method="draft_model", num_speculative_tokens=2)
    yield e
    e.close()


def _requests(n=64, **kw):
    return [GenerationRequest(prompt_token_ids=(5, 9, 11, 3), params=SamplingParams(temperature=2.0, top_k=8),
                              max_tokens=4, seed=i, **kw) for i in range(n)]


def test_outputs_follow_the_protocol_and_report_first_round_acceptance(engine):
    reqs = _requests(eos_token_id=1, min_tokens=2)
    for speculative in (True, False):
        res = engine.generate(reqs, speculative=speculative)
        assert check_generation_results(reqs, res, 64) is None
        assert all((r.first_round_accepted is not None) == speculative for r in res)
    assert all(0 <= r.first_round_accepted <= 2 for r in engine.generate(reqs, speculative=True))


def test_same_requests_same_seeds_same_outputs(engine):
    reqs = _requests()
    for speculative in (True, False):
        a, b = engine.generate(reqs, speculative=speculative), engine.generate(reqs, speculative=speculative)
        assert a == b
    other = [GenerationRequest(prompt_token_ids=r.prompt_token_ids, params=r.params, max_tokens=4, seed=r.seed + 1000)
             for r in reqs]
    assert engine.generate(other, speculative=True) != engine.generate(reqs, speculative=True)


def test_the_models_resume_their_calls_from_a_key_value_cache(engine):
    # the decoder's calls repeat the columns before the first rejected draft: with the cache each
    # call computes its new columns only (the cache's own tests: tests/decoders/tiny_models/test_kv_cache.py)
    before = [(m.kv_cache.computed_columns, m.kv_cache.reused_columns) for m in (engine.target, engine.draft)]
    engine.generate([GenerationRequest(prompt_token_ids=(5, 9, 11, 3), params=SamplingParams(temperature=2.0, top_k=8),
                                       max_tokens=24, seed=i) for i in range(16)], speculative=True)
    for m, (computed, reused) in zip((engine.target, engine.draft), before):
        assert m.kv_cache.reused_columns - reused > m.kv_cache.computed_columns - computed > 0


def test_min_tokens_masks_eos_until_enough_tokens():
    class Flat:
        vocab_size, device = 4, torch.device("cpu")

        def __call__(self, ids, positions):
            return torch.zeros(ids.shape[0], positions.shape[1], 4, dtype=torch.float64)

    m = MinTokensModel(Flat(), prompt_len=3, min_tokens=2, eos_token_id=1)
    logits = m(torch.zeros(1, 6, dtype=torch.int64), torch.tensor([[2, 3, 4, 5]]))
    assert torch.isinf(logits[0, :2, 1]).all() and (logits[0, 2:, 1] == 0).all()
    assert (logits[0, :, [0, 2, 3]] == 0).all()


def test_load_refuses_what_it_cannot_run():
    e = BuiltinEngine()
    target_dir, draft_dir = catalog_pair("llama-v64")
    with pytest.raises(ValueError, match="method must be one of"):
        e.load(target_dir, draft_dir, method="ngram", num_speculative_tokens=2)
    with pytest.raises(ValueError, match="draft_dir is required"):
        e.load(target_dir, None, method="draft_model", num_speculative_tokens=2)
    with pytest.raises(RuntimeError, match="before load"):
        e.generate(_requests(2), speculative=True)


def test_engines_resolve_by_name_or_path_and_bad_names_say_why():
    engine, target = resolve_engine("builtin")
    assert isinstance(engine, BuiltinEngine) and target.endswith("builtin:BuiltinEngine")
    engine, _ = resolve_engine("specexact.audit.zoo_e2e:SeedIgnored")
    assert engine.name == "zoo-e2e:seed_ignored"
    with pytest.raises(EngineError, match="unknown engine 'nope'.*builtin"):
        resolve_engine("nope")
    with pytest.raises(EngineError, match="not an end-to-end engine"):
        resolve_engine("specexact.decoders:verify")
    with pytest.raises(EngineError, match="cannot be imported here.*install the engine's library") as info:
        resolve_engine("no_such_module_xyz:Engine")
    assert "tox -e" not in str(info.value)  # no env is named after a module path


def test_an_engine_whose_library_is_missing_is_refused_with_its_tox_env(monkeypatch):
    from specexact.decoders.engines import registry
    from specexact.decoders.engines.vllm import VllmEngine

    monkeypatch.setattr(VllmEngine, "requires", ("no_such_module_xyz",))
    with pytest.raises(EngineError, match=r"engine 'vllm' needs no_such_module_xyz, not installed here; "
                                          r"run it in its own environment: tox -e vllm-e2e"):
        resolve_engine("vllm")
    monkeypatch.setattr(registry, "_importable", lambda m: True)
    engine, _ = resolve_engine("vllm")  # the check is the only thing that refused it
    assert engine.name == "vllm"
