"""The pure-torch Llama / Qwen2 forward against transformers' own models, and the decoders on it."""

from __future__ import annotations

import json

import pytest
import torch

from specexact.decoders import SamplingParams, naive_generate, speculative_generate
from specexact.decoders.tiny_models import ModelSpec, TinyCausalLM, TinyConfig, load_model, make_model

transformers = pytest.importorskip("transformers")

# transformers computes the rotary angles in float32 even for a float64 model (the
# position * inv_freq product, up to ~1e-6 relative error at position 15): logits of a
# float64 transformers model differ from ours by ~3e-6 (measured 1.9e-6 .. 3.1e-6 over the
# four llama / qwen2, tied / untied models), by ~1e-5 for a float32 one (logits up to ~6).
# A wrong operation (rope sign, a missing bias, a norm weight, the GQA head mapping) moves
# them by > 1e-1.
TOL_FLOAT64 = 1e-4
TOL_FLOAT32 = 2e-4


@pytest.mark.parametrize("architecture,tied", [("llama", False), ("qwen2", True)])
def test_logits_equal_transformers_own_model(model_cache, architecture, tied):
    directory = make_model(ModelSpec(architecture=architecture, tie_word_embeddings=tied, seed=3), None, model_cache)
    ours = load_model(directory)
    ids = torch.randint(0, 64, (3, 16), generator=torch.Generator().manual_seed(1))
    expected_class = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}[architecture]
    for dtype, tol in ((torch.float64, TOL_FLOAT64), (torch.float32, TOL_FLOAT32)):
        hf = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=dtype, attn_implementation="eager")
        assert type(hf).__name__ == expected_class
        with torch.no_grad():
            reference = hf(ids).logits.to(torch.float64)  # [3, 16, V]
        logits = ours(ids)
        assert logits.dtype == torch.float64 and logits.shape == (3, 16, 64)
        assert float((logits - reference).abs().max()) < tol
        # The model is not degenerate: the logits vary with the prefix and between tokens.
        assert float(logits.std()) > 0.5


def test_positions_select_the_logits_of_the_prefix_and_padding_is_harmless(llama_pair):
    target, _ = llama_pair
    ids = torch.randint(0, 64, (4, 10), generator=torch.Generator().manual_seed(2))
    full = target(ids)  # [4, 10, V]
    positions = torch.tensor([[0, 9], [3, 4], [9, 0], [5, 5]])
    picked = target(ids, positions)
    assert picked.shape == (4, 2, 64)
    torch.testing.assert_close(picked, full.gather(1, positions[:, :, None].expand(-1, -1, 64)), rtol=0, atol=1e-12)
    padded = ids.clone()
    padded[:, 6:] = -1  # right padding: positions before it are unaffected (causal attention)
    torch.testing.assert_close(target(padded)[:, :6], full[:, :6], rtol=0, atol=1e-12)
    # The law after a prefix depends on every token of it, not only the last one.
    other = ids.clone()
    other[:, 0] = (ids[:, 0] + 1) % 64
    assert float((target(other)[:, 9] - full[:, 9]).abs().max()) > 1e-3


def test_to_switches_dtype_and_keeps_the_weights(llama_pair):
    target, _ = llama_pair
    f32 = target.to(dtype=torch.float32)
    assert f32.dtype == torch.float32 and target.dtype == torch.float64
    ids = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(3))
    out = f32(ids)
    assert out.dtype == torch.float32
    assert float((out.double() - target(ids)).abs().max()) < 1e-4
    assert f32.vocab_size == 64 and f32.eos_token_id == 1


def test_chunked_forward_equals_the_whole_batch(llama_pair, monkeypatch):
    target, _ = llama_pair
    ids = torch.randint(0, 64, (9, 8), generator=torch.Generator().manual_seed(4))
    whole = target(ids)
    monkeypatch.setattr(TinyCausalLM, "max_elements", 8 * 128 * 2)  # two rows per forward
    torch.testing.assert_close(target(ids), whole, rtol=0, atol=1e-12)


def test_unsupported_configs_and_bad_inputs_are_refused(model_cache, llama_pair):
    directory = make_model(ModelSpec(), None, model_cache)
    hf = json.loads((directory / "config.json").read_text())
    for change, field in (({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_scaling"),
                          ({"rope_parameters": {"rope_type": "yarn", "factor": 2.0}}, "rope_parameters"),
                          ({"hidden_act": "gelu"}, "hidden_act"),
                          ({"model_type": "gpt2"}, "model_type"),
                          ({"num_key_value_heads": 3}, "num_key_value_heads")):
        with pytest.raises(ValueError, match=field):
            TinyConfig.from_hf({**hf, **change})
    target, _ = llama_pair
    state = target.state_dict()
    del state["model.layers.1.mlp.up_proj.weight"]
    with pytest.raises(ValueError, match="up_proj"):
        TinyCausalLM(target.config, state)
    with pytest.raises(ValueError, match="input_ids"):
        target(torch.tensor([[64]]))
    with pytest.raises(ValueError, match="positions"):
        target(torch.tensor([[3, 4]]), torch.tensor([[2]]))
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        load_model(model_cache / "no-such-model")


def test_the_builtin_decoders_run_on_a_tiny_pair(llama_pair):
    """speculative_generate / naive_generate take a TinyCausalLM unchanged; the decoder's
    target laws in its rounds are the model's own softmax after each candidate prefix."""
    target64, draft64 = llama_pair
    target, draft = target64.to(dtype=torch.float32), draft64.to(dtype=torch.float32)
    prompt = torch.tensor([[5, 9, 3, 7]] * 24)
    records = []

    def observer(record):
        records.append((record.rows.clone(), record.num_generated.clone(), record.draft_token_ids.clone(),
                        record.target_probs.clone()))

    out = speculative_generate(target, draft, prompt, SamplingParams(), num_draft_tokens=3, max_new_tokens=5,
                               generator=torch.Generator().manual_seed(0), eos_token_id=1, observer=observer)
    assert out.tokens.shape == (24, 5)
    assert bool(((out.tokens >= -1) & (out.tokens < 64)).all())
    accepted = out.accepted_lengths[:, 0]
    assert 0 < float(accepted.float().mean()) < 3  # neither never nor always accepted
    rows, num_generated, drafts, target_probs = records[0]
    assert bool((num_generated == 0).all())
    # Position j of round 0: the target's law after the prompt and drafts[:j].
    for j in range(4):
        ids = torch.cat([prompt[rows], drafts[:, :j]], 1)
        expected = torch.softmax(target64(ids, torch.full((ids.shape[0], 1), ids.shape[1] - 1))[:, 0], -1)
        assert float((target_probs[:, j].double() - expected).abs().max()) < 1e-5
    naive = naive_generate(target, prompt, SamplingParams(top_k=5), max_new_tokens=5,
                           generator=torch.Generator().manual_seed(1), eos_token_id=1)
    assert naive.tokens.shape == (24, 5)


def test_a_draft_equal_to_the_target_is_always_accepted(llama_pair):
    target64, _ = llama_pair
    target = target64.to(dtype=torch.float32)
    out = speculative_generate(target, target, torch.tensor([[2, 4, 6]] * 16), SamplingParams(),
                               num_draft_tokens=3, max_new_tokens=8, generator=torch.Generator().manual_seed(5))
    # Without EOS, the rounds are full (3 accepted) until the cut at max_new_tokens.
    assert bool((out.accepted_lengths[:, 0] == 3).all())
