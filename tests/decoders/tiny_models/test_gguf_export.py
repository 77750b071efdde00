"""The tiny models written as GGUF: what the writer puts in the file, read back with the
``gguf`` package's own reader (no llama.cpp needed; llama.cpp's logits on the file are compared
with the float64 forward in ``tests/decoders/engines/test_llamacpp.py``). Skips without ``gguf``."""

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from specexact.decoders.tiny_models import CATALOG, ModelSpec, make_model, model_weights  # noqa: E402
from specexact.decoders.tiny_models.gguf_export import (  # noqa: E402
    GGUF_FORMAT_VERSION,
    gguf_model,
    gguf_tensors,
    permute_rope_rows,
)


def test_permutation_interleaves_each_heads_halves():
    # Two heads of width 4: rows [x0 x1 y0 y1] per head become [x0 y0 x1 y1].
    w = np.arange(8, dtype=np.float32)[:, None] * np.ones((1, 3), np.float32)
    got = permute_rope_rows(w, 2)[:, 0]
    assert got.tolist() == [0, 2, 1, 3, 4, 6, 5, 7]
    bias = np.arange(8, dtype=np.float32)
    assert permute_rope_rows(bias, 2).tolist() == [0, 2, 1, 3, 4, 6, 5, 7]
    with pytest.raises(ValueError, match="heads of even width"):
        permute_rope_rows(np.zeros((6, 2)), 2)


def field(reader, key):
    f = reader.get_field(key)
    assert f is not None, key
    return f.contents()


@pytest.mark.parametrize("pair", ["llama-v64", "qwen2-v64-h2"])
def test_file_read_back_holds_the_same_tensors_and_metadata(pair, tmp_path):
    target_dir, _ = CATALOG[pair].make(tmp_path)
    path = gguf_model(target_dir)
    assert path == tmp_path / f"{target_dir.name}.gguf-v{GGUF_FORMAT_VERSION}" / "model.gguf"
    spec = CATALOG[pair].spec
    hf = model_weights(spec)
    reader = gguf.GGUFReader(str(path))
    tensors = {t.name: np.array(t.data) for t in reader.tensors}
    assert {t.tensor_type for t in reader.tensors} == {gguf.GGMLQuantizationType.F32}
    expected = gguf_tensors(spec.config(), hf)
    assert sorted(tensors) == sorted(expected)
    for name, arr in expected.items():
        assert tensors[name].shape == arr.shape and np.array_equal(tensors[name], arr), name
    # Every Hugging Face tensor is in the file, bit for bit: Llama's q / k through the permutation.
    H, K = spec.num_attention_heads, spec.num_key_value_heads
    for n in range(spec.num_hidden_layers):
        q, k = hf[f"model.layers.{n}.self_attn.q_proj.weight"].numpy(), hf[f"model.layers.{n}.self_attn.k_proj.weight"].numpy()
        if spec.architecture == "llama":
            q, k = permute_rope_rows(q, H), permute_rope_rows(k, K)
        assert np.array_equal(tensors[f"blk.{n}.attn_q.weight"], q) and np.array_equal(tensors[f"blk.{n}.attn_k.weight"], k)
        assert np.array_equal(tensors[f"blk.{n}.ffn_down.weight"], hf[f"model.layers.{n}.mlp.down_proj.weight"].numpy())
        assert (f"blk.{n}.attn_q.bias" in tensors) == (spec.architecture == "qwen2")
    assert np.array_equal(tensors["token_embd.weight"], hf["model.embed_tokens.weight"].numpy())
    assert np.array_equal(tensors["output.weight"], hf["lm_head.weight"].numpy())
    arch = spec.architecture
    assert field(reader, "general.architecture") == arch
    assert field(reader, f"{arch}.attention.key_length") == spec.head_dim == field(reader, f"{arch}.rope.dimension_count")
    assert field(reader, f"{arch}.attention.head_count_kv") == K and field(reader, f"{arch}.block_count") == 2
    assert field(reader, f"{arch}.rope.freq_base") == spec.rope_theta
    tokens = field(reader, "tokenizer.ggml.tokens")
    assert len(tokens) == spec.vocab_size and len(set(tokens)) == spec.vocab_size
    assert tokens[spec.eos_token_id] == "</s>" and field(reader, "tokenizer.ggml.eos_token_id") == spec.eos_token_id
    assert field(reader, "tokenizer.ggml.bos_token_id") == spec.bos_token_id
    # Cached: a second call returns the same file without writing it again.
    stamp = path.stat().st_mtime_ns
    assert gguf_model(target_dir) == path and path.stat().st_mtime_ns == stamp


def test_tied_embedding_writes_no_output_tensor(tmp_path):
    spec = ModelSpec(tie_word_embeddings=True, num_hidden_layers=1)
    names = {t.name for t in gguf.GGUFReader(str(gguf_model(make_model(spec, cache_dir=tmp_path)))).tensors}
    assert "output.weight" not in names and "token_embd.weight" in names


def test_qwen2_with_another_head_width_is_refused(tmp_path):
    # llama.cpp's Qwen2 takes head_dim = hidden / heads (qwen2-v64: 32 != 64 / 4).
    target_dir, _ = CATALOG["qwen2-v64"].make(tmp_path)
    with pytest.raises(ValueError, match="head_dim = hidden_size / num_attention_heads"):
        gguf_model(target_dir)
    assert not list(tmp_path.glob("*.gguf-v*"))


def test_missing_folder_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        gguf_model(tmp_path)
