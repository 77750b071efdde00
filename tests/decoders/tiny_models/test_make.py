"""Making tiny models: deterministic bytes, the cache, concurrent makers, the files' fields."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from specexact.decoders.tiny_models import (ModelSpec, default_cache_dir, load_model, make_model, make_pair,
                                            model_weights, parameter_names)

FILES = ("config.json", "model.safetensors", "specexact.json")


def test_the_same_spec_gives_byte_identical_files(tmp_path):
    spec = ModelSpec(architecture="qwen2", seed=7)
    a = make_model(spec, 0.1, tmp_path / "a")
    b = make_model(spec, 0.1, tmp_path / "b")
    assert a.name == b.name
    for name in FILES:
        assert (a / name).read_bytes() == (b / name).read_bytes()
    # Another seed, another noise or the target: other weights and another folder.
    for other in (make_model(ModelSpec(architecture="qwen2", seed=8), 0.1, tmp_path / "a"),
                  make_model(spec, 0.2, tmp_path / "a"), make_model(spec, None, tmp_path / "a")):
        assert other != a
        assert (other / "model.safetensors").read_bytes() != (a / "model.safetensors").read_bytes()


def test_the_cache_is_reused(tmp_path):
    spec = ModelSpec()
    first = make_model(spec, None, tmp_path)
    stamp = {name: (first / name).stat().st_mtime_ns for name in FILES}
    time.sleep(0.01)
    assert make_model(spec, None, tmp_path) == first
    assert {name: (first / name).stat().st_mtime_ns for name in FILES} == stamp
    assert sorted(p.name for p in tmp_path.iterdir()) == [first.name]  # no temporary folder left


def test_the_cache_folder_defaults_to_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECEXACT_MODEL_CACHE", str(tmp_path / "env-cache"))
    assert default_cache_dir() == tmp_path / "env-cache"
    assert make_model(ModelSpec()).parent == tmp_path / "env-cache"
    monkeypatch.delenv("SPECEXACT_MODEL_CACHE")
    assert default_cache_dir() == default_cache_dir().home() / ".cache" / "specexact" / "models"


def _maker(cache: str, go, out: str) -> None:
    """A forked maker: waits for ``go`` (both start together), makes the shared model in
    ``cache``, records the folder it got."""
    go.wait(timeout=120)
    Path(out).write_text(str(make_model(ModelSpec(architecture="llama", seed=11), 0.05, Path(cache))))


def test_concurrent_makers_agree_and_leave_one_whole_model(tmp_path):
    """Two maker processes forked from this one (its imports already done by the reference
    model made first: a fresh interpreter per maker cost 2-3 s of CPU importing torch),
    released together by one event, make the same model in one cache."""
    import multiprocessing

    cache = tmp_path / "cache"
    reference = make_model(ModelSpec(architecture="llama", seed=11), 0.05, tmp_path / "alone")
    ctx = multiprocessing.get_context("fork")
    go = ctx.Event()
    outs = [tmp_path / f"maker-{i}.path" for i in range(2)]
    procs = [ctx.Process(target=_maker, args=(str(cache), go, str(outs[i]))) for i in range(2)]
    for p in procs:
        p.start()
    go.set()  # both make the same model at once
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    paths = {o.read_text().strip() for o in outs}
    assert len(paths) == 1
    folder = paths.pop()
    assert sorted(os.listdir(cache)) == [os.path.basename(folder)]  # the loser's temporary folder removed
    for name in FILES:
        assert (cache / os.path.basename(folder) / name).read_bytes() == (reference / name).read_bytes()


def test_the_files_hold_what_the_engines_read(tmp_path):
    spec = ModelSpec(architecture="llama", vocab_size=48, num_hidden_layers=3, eos_token_id=5, bos_token_id=2)
    target_dir, draft_dir = make_pair(spec, 0.08, tmp_path)
    config = json.loads((target_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["model_type"] == "llama"
    assert (config["vocab_size"], config["num_hidden_layers"], config["head_dim"]) == (48, 3, 32)
    assert (config["eos_token_id"], config["bos_token_id"], config["torch_dtype"]) == (5, 2, "float32")
    assert config["rope_scaling"] is None and config["hidden_act"] == "silu"
    with safe_open(str(target_dir / "model.safetensors"), "pt") as f:
        assert f.metadata() == {"format": "pt"}
        names = sorted(f.keys())
        assert all(f.get_tensor(k).dtype == torch.float32 for k in names)
    assert names == sorted(n for n, _ in parameter_names(spec.config()))
    target, draft = load_model(target_dir), load_model(draft_dir)
    assert target.eos_token_id == 5 and target.vocab_size == 48
    assert sorted(os.listdir(target_dir)) == sorted(FILES)  # no tokenizer: the engines are given token ids


def test_the_draft_is_the_target_plus_relative_noise():
    spec = ModelSpec()
    target = model_weights(spec)
    same = model_weights(spec, 0.0)
    draft = model_weights(spec, 0.08)
    for name, w in target.items():
        assert torch.equal(same[name], w)
        rel = float((draft[name].double() - w.double()).pow(2).mean().sqrt() / w.double().pow(2).mean().sqrt())
        assert 0.06 < rel < 0.10, (name, rel)
    # The documented recipe: a norm weight is 1 + norm_std * z, the rest initializer_range * z.
    g = torch.Generator().manual_seed(spec.seed)
    embed = spec.initializer_range * torch.randn(64, 64, generator=g, dtype=torch.float64)
    norm = 1 + spec.norm_std * torch.randn(64, generator=g, dtype=torch.float64)
    assert torch.equal(target["model.embed_tokens.weight"], embed.float())
    assert torch.equal(target["model.layers.0.input_layernorm.weight"], norm.float())


def test_bad_specs_are_refused(tmp_path):
    for kwargs, field in (({"architecture": "gpt2"}, "architecture"), ({"num_key_value_heads": 3}, "num_key_value"),
                          ({"eos_token_id": 64}, "eos_token_id"), ({"initializer_range": -1.0}, "initializer_range"),
                          ({"head_dim": 31}, "head_dim")):
        with pytest.raises(ValueError, match=field):
            ModelSpec(**kwargs)
    with pytest.raises(ValueError, match="draft_noise"):
        make_model(ModelSpec(), float("nan"), tmp_path)
    with pytest.raises(TypeError, match="ModelSpec"):
        make_model({"architecture": "llama"}, None, tmp_path)
