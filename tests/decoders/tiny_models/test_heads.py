"""The tiny drafting heads: deterministic bytes per seed, the config keys and tensors vLLM's
loaders read, the cache, the refusals; the ``qwen2-v64-h2`` pair's figures."""

from __future__ import annotations

import hashlib
import json
import time

import pytest
import torch
from safetensors import safe_open

from specexact.decoders.tiny_models import CATALOG, ModelSpec, catalog_pair, make_model, measure, model_weights
from specexact.decoders.tiny_models.heads import (EAGLE3_AUX_LAYER_IDS, HEAD_KINDS, head_config,
                                                  head_parameter_names, head_weights, make_head, spec_of)

LLAMA = ModelSpec(architecture="llama")
QWEN2_H2 = CATALOG["qwen2-v64-h2"].spec
FILES = ("config.json", "model.safetensors", "specexact.json")


def spec_for(kind: str) -> ModelSpec:
    return QWEN2_H2 if kind == "mtp" else LLAMA


def heads_of(kind: str) -> int | None:
    return 3 if kind == "medusa" else None


# SHA-256 of model.safetensors at the default head seed (torch.randn on a seeded CPU
# generator, float64 rounded to float32): a changed recipe must bump HEAD_FORMAT_VERSION.
PINNED = {
    "eagle": "ae83cbeb04a60247b5fd10b8c3015ce9985ad4cd52f24a55d30dd49fab82cae2",
    "eagle3": "8518600269a9850777424def8da290e30c117eda3d41910a2959d6fa8fa37d9f",
    "medusa": "0d09abf5f4e9e281ba6f54224a96ab52f30fc4a9fd6114fad1b77cc9fae6e1c8",
    "mtp": "d939bbd9ceb6de97d07276e66ab52296e4ec34c8fbd16de3bfeb901fa68ba118",
}


@pytest.mark.parametrize("kind", HEAD_KINDS)
def test_the_same_seed_gives_byte_identical_files_and_the_pinned_hash(kind, tmp_path):
    spec, n = spec_for(kind), heads_of(kind)
    a = make_head(kind, spec, tmp_path / "a", num_heads=n)
    b = make_head(kind, spec, tmp_path / "b", num_heads=n)
    assert a.name == b.name
    for name in FILES:
        assert (a / name).read_bytes() == (b / name).read_bytes()
    assert hashlib.sha256((a / "model.safetensors").read_bytes()).hexdigest() == PINNED[kind]
    other = make_head(kind, spec, tmp_path / "a", num_heads=n, head_seed=5)
    assert other != a
    assert (other / "model.safetensors").read_bytes() != (a / "model.safetensors").read_bytes()


@pytest.mark.parametrize("kind", HEAD_KINDS)
def test_the_cache_is_reused(kind, tmp_path):
    spec, n = spec_for(kind), heads_of(kind)
    first = make_head(kind, spec, tmp_path, num_heads=n)
    stamp = {name: (first / name).stat().st_mtime_ns for name in FILES}
    time.sleep(0.01)
    assert make_head(kind, spec, tmp_path, num_heads=n) == first
    assert {name: (first / name).stat().st_mtime_ns for name in FILES} == stamp
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no temporary folder left


@pytest.mark.parametrize("kind", HEAD_KINDS)
def test_the_file_holds_exactly_the_drawn_tensors(kind, tmp_path):
    spec, n = spec_for(kind), heads_of(kind)
    folder = make_head(kind, spec, tmp_path, num_heads=n)
    expected = head_weights(kind, spec, n)
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        assert f.metadata() == {"format": "pt"}
        assert set(f.keys()) == set(expected)
        for name in f.keys():
            t = f.get_tensor(name)
            assert t.dtype == torch.float32 and torch.equal(t, expected[name]), name
    drawn = dict(head_parameter_names(kind, spec, n))
    assert {k: tuple(v.shape) for k, v in expected.items() if k in drawn} == drawn
    assert json.loads((folder / "specexact.json").read_text())["kind"] == kind


def test_eagle_config_and_tensors_are_what_vllms_llama_eagle_reads():
    cfg = head_config("eagle", LLAMA)
    assert cfg["architectures"] == ["LlamaForCausalLM"]  # vLLM's EAGLEConfig prefixes "Eagle"
    assert cfg["num_hidden_layers"] == 1 and cfg["hidden_size"] == 64 and cfg["vocab_size"] == 64
    names = dict(head_parameter_names("eagle", LLAMA))
    assert names["fc.weight"] == (64, 128)
    # layer 0 has no input norm (an identity in vLLM); embedding and LM head come from the target
    assert not any("input_layernorm" in k or "embed_tokens" in k or "lm_head" in k for k in names)
    assert names["layers.0.self_attn.q_proj.weight"] == (4 * 32, 64)


def test_eagle3_config_and_tensors_are_what_vllms_llama_eagle3_reads():
    cfg = head_config("eagle3", LLAMA)
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["num_hidden_layers"] == 1
    assert cfg["eagle_aux_hidden_state_layer_ids"] == list(EAGLE3_AUX_LAYER_IDS) == [0, 1, 2]
    assert cfg["draft_vocab_size"] == cfg["vocab_size"] == 64  # no d2t map
    names = dict(head_parameter_names("eagle3", LLAMA))
    assert names["fc.weight"] == (64, 3 * 64)
    assert names["midlayer.self_attn.q_proj.weight"] == (4 * 32, 2 * 64)  # [embedding, hidden] in
    assert names["midlayer.self_attn.k_proj.weight"] == (2 * 32, 2 * 64)
    assert names["lm_head.weight"] == (64, 64) and names["norm.weight"] == (64,)
    assert "midlayer.hidden_norm.weight" in names and not any("embed_tokens" in k for k in names)


def test_medusa_config_and_tensors_are_what_vllms_medusa_reads():
    cfg = head_config("medusa", LLAMA, num_heads=3)
    assert cfg == {"architectures": ["MedusaModel"], "model_type": "medusa", "hidden_size": 64, "vocab_size": 64,
                   "num_heads": 3, "num_hidden_layers": 1, "torch_dtype": "float32"}
    names = dict(head_parameter_names("medusa", LLAMA, 3))
    assert names == {**{f"blocks.{h}.layers.0.weight": (64, 64) for h in range(3)},
                     **{f"lm_heads.{h}.weight": (64, 64) for h in range(3)}}


def test_mtp_target_is_the_qwen2_target_byte_for_byte_plus_the_mtp_layer(tmp_path):
    cfg = head_config("mtp", QWEN2_H2)
    assert cfg["architectures"] == ["MiMoForCausalLM"] and cfg["num_nextn_predict_layers"] == 1
    assert cfg["model_type"] == "qwen2" and cfg["num_hidden_layers"] == 2
    w = head_weights("mtp", QWEN2_H2)
    target = model_weights(QWEN2_H2)
    for name, t in target.items():
        assert torch.equal(w[name], t), name
    mtp = {k for k in w if k not in target}
    assert mtp == {name for name, _ in head_parameter_names("mtp", QWEN2_H2)}
    assert all(k.startswith("model.mtp_layers.0.") for k in mtp)
    assert "model.mtp_layers.0.self_attn.q_proj.bias" in mtp  # Qwen2's decoder layer: q / k / v biases
    assert w["model.mtp_layers.0.input_proj.weight"].shape == (64, 128)


def test_spec_of_reads_back_the_zoo_spec(tmp_path):
    assert spec_of(make_model(QWEN2_H2, None, tmp_path)) == QWEN2_H2
    with pytest.raises(ValueError, match="model_dir"):
        spec_of(tmp_path / "missing")


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(kind="lookahead", spec=LLAMA), "kind"),
    (dict(kind="mtp", spec=LLAMA), "qwen2"),
    (dict(kind="eagle", spec=QWEN2_H2), "llama"),
    (dict(kind="eagle3", spec=ModelSpec(num_hidden_layers=1)), "num_hidden_layers"),
    (dict(kind="medusa", spec=LLAMA), "num_heads"),
    (dict(kind="medusa", spec=LLAMA, num_heads=0), "num_heads"),
    (dict(kind="eagle", spec=LLAMA, num_heads=2), "num_heads"),
    (dict(kind="eagle", spec=LLAMA, head_seed=-1), "head_seed"),
])
def test_bad_arguments_are_refused_naming_them(kwargs, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        make_head(cache_dir=tmp_path, **kwargs)
    with pytest.raises(TypeError, match="spec"):
        make_head("eagle", "llama", tmp_path)


def test_the_qwen2_h2_pair_has_its_catalogued_figures(model_cache):
    pair = CATALOG["qwen2-v64-h2"]
    assert pair.spec.hidden_size // pair.spec.num_attention_heads == pair.spec.head_dim  # what vLLM's Qwen2 reads
    figures = measure(pair, model_cache)
    assert round(figures["entropy"], 2) == pair.entropy
    assert round(figures["closeness"], 2) == pair.closeness
    assert round(figures["eos_mass"], 3) == pair.eos_mass
    assert catalog_pair("qwen2-v64-h2", model_cache)[0].name.startswith("qwen2-v64-target-")
