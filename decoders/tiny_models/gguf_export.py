"""The tiny models written as GGUF (llama.cpp's file format) from the same weights, cached.

:func:`gguf_model` turns a tiny-model folder of :mod:`~specexact.decoders.tiny_models.make`
(``config.json`` + ``model.safetensors``) into ``model.gguf``, written with the ``gguf``
package's :class:`gguf.GGUFWriter` (the writer of llama.cpp's own ``convert_hf_to_gguf.py``);
nothing is downloaded and no weight is redrawn.

What is written
---------------
- **Tensors**, float32 (``LlamaFileType.ALL_F32``: the laws stay exact up to float32
  rounding, as in the safetensors file), under llama.cpp's names
  (``gguf.TENSOR_NAMES``: ``token_embd``, ``blk.N.attn_norm``, ``attn_q`` / ``attn_k`` /
  ``attn_v`` / ``attn_output`` (Qwen2: the q / k / v biases too), ``ffn_norm``, ``ffn_gate`` /
  ``ffn_up`` / ``ffn_down``, ``output_norm``, ``output`` (absent when the embedding is tied)).
  **Llama's q / k rows are permuted** as ``convert_hf_to_gguf.py``'s ``LlamaModel.permute``
  does: Hugging Face's rope rotates the two halves of each head (``rotate_half``), llama.cpp's
  Llama rope (``LLAMA_ROPE_TYPE_NORM``) rotates adjacent pairs, so each head's rows
  ``[x_0 .. x_{d/2-1}, y_0 .. y_{d/2-1}]`` are interleaved to ``[x_0, y_0, x_1, y_1, ...]``
  (the k rows per key-value head). Qwen2's rope in llama.cpp is the NeoX one
  (``rotate_half``): its rows are written as they are.
- **Metadata** of the architecture (``gguf.Keys``, read by llama.cpp's ``llama-arch`` /
  ``llama-model`` loader): ``context_length`` (``max_position_embeddings``),
  ``embedding_length``, ``block_count``, ``feed_forward_length``, ``attention.head_count`` /
  ``head_count_kv``, ``attention.key_length`` / ``value_length`` and ``rope.dimension_count``
  (``head_dim``: 32, not ``hidden_size / heads`` = 16, so they are needed for Llama; llama.cpp's
  Qwen2 does not read them and takes ``hidden_size / heads``: a Qwen2 with another ``head_dim``,
  ``qwen2-v64``, is refused, ``qwen2-v64-h2`` is written),
  ``attention.layer_norm_rms_epsilon``, ``rope.freq_base``, ``vocab_size``.
- **A tokenizer** llama.cpp accepts (``tokenizer.ggml.model = "llama"``, SentencePiece type):
  one token per id, ``<s>`` at the BOS id and ``</s>`` at the EOS id (type CONTROL), every
  other id ``<tN>`` (type NORMAL), scores 0, ``add_bos_token`` false. The engines are given
  token ids and never text, so the tokenizer only has to load and hold ``V`` tokens with the
  zoo's BOS / EOS ids.

Cache
-----
``<model folder>.gguf-v<GGUF_FORMAT_VERSION>/model.gguf`` beside the tiny-model folder (whose
name carries the hash of its spec), made once through
:func:`~specexact.decoders.tiny_models.make.publish_cached` (a temporary folder renamed into
place, so concurrent makers never read half a file).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .architectures import TinyConfig, parameter_names
from .make import publish_cached

__all__ = ["GGUF_FORMAT_VERSION", "GGUF_ARCHITECTURES", "gguf_model", "gguf_tensors", "permute_rope_rows",
           "write_gguf"]

GGUF_FORMAT_VERSION = 1
"""Version of the writing recipe; part of the cache folder's name (bump it when it changes)."""

GGUF_ARCHITECTURES = {"llama": "LLAMA", "qwen2": "QWEN2"}
"""Tiny-model ``model_type`` -> the ``gguf.MODEL_ARCH`` member it is written as."""

_LAYER_TENSORS = {  # Hugging Face suffix -> gguf.MODEL_TENSOR member
    "input_layernorm.weight": ("ATTN_NORM", "weight"),
    "self_attn.q_proj.weight": ("ATTN_Q", "weight"),
    "self_attn.q_proj.bias": ("ATTN_Q", "bias"),
    "self_attn.k_proj.weight": ("ATTN_K", "weight"),
    "self_attn.k_proj.bias": ("ATTN_K", "bias"),
    "self_attn.v_proj.weight": ("ATTN_V", "weight"),
    "self_attn.v_proj.bias": ("ATTN_V", "bias"),
    "self_attn.o_proj.weight": ("ATTN_OUT", "weight"),
    "self_attn.o_proj.bias": ("ATTN_OUT", "bias"),
    "post_attention_layernorm.weight": ("FFN_NORM", "weight"),
    "mlp.gate_proj.weight": ("FFN_GATE", "weight"),
    "mlp.up_proj.weight": ("FFN_UP", "weight"),
    "mlp.down_proj.weight": ("FFN_DOWN", "weight"),
}
_GLOBAL_TENSORS = {
    "model.embed_tokens.weight": ("TOKEN_EMBD", "weight"),
    "model.norm.weight": ("OUTPUT_NORM", "weight"),
    "lm_head.weight": ("OUTPUT", "weight"),
}


def permute_rope_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """``convert_hf_to_gguf.py``'s ``LlamaModel.permute``: each head's rows from Hugging Face's
    half-split rope order to llama.cpp's interleaved pairs.

    Parameters
    ----------
    w : numpy.ndarray
        ``[n_head * head_dim, ...]`` (a q or k weight, or a bias).
    n_head : int
        Heads in ``w`` (the key-value heads for k).

    Returns
    -------
    numpy.ndarray
        Same shape and dtype; row ``h * d + 2 i + j`` is input row ``h * d + j * d / 2 + i``.

    Raises
    ------
    ValueError
        Rows not a multiple of ``2 * n_head``.
    """
    rows = w.shape[0]
    if n_head < 1 or rows % (2 * n_head):
        raise ValueError(f"{rows} rows do not split into {n_head} heads of even width")
    return np.ascontiguousarray(w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def gguf_tensors(config: TinyConfig, state: dict) -> dict[str, np.ndarray]:
    """The GGUF tensors of a tiny model: llama.cpp's names -> float32 arrays in the Hugging Face
    shape (``GGUFWriter`` reverses the dimensions for ggml), q / k rows permuted for Llama.

    Parameters
    ----------
    config : TinyConfig
    state : dict of str to torch.Tensor or numpy.ndarray
        Hugging Face names (:func:`~specexact.decoders.tiny_models.parameter_names`).

    Raises
    ------
    ValueError
        An architecture without a GGUF mapping, a tensor name it does not map (named), or a
        Qwen2 whose ``head_dim`` is not ``hidden_size / num_attention_heads`` (llama.cpp's
        Qwen2 loader does not read ``attention.key_length``: ``qwen2-v64`` cannot be loaded,
        ``qwen2-v64-h2`` can).
    KeyError
        A tensor of :func:`parameter_names` missing from ``state``.
    """
    import gguf

    if config.model_type not in GGUF_ARCHITECTURES:
        raise ValueError(f"no GGUF mapping for model_type {config.model_type!r}; known: {sorted(GGUF_ARCHITECTURES)}")
    if config.model_type == "qwen2" and config.head_dim * config.num_attention_heads != config.hidden_size:
        raise ValueError(f"llama.cpp's Qwen2 takes head_dim = hidden_size / num_attention_heads "
                         f"({config.hidden_size} / {config.num_attention_heads}), got head_dim={config.head_dim} "
                         "(its loader does not read attention.key_length for qwen2; use the qwen2-v64-h2 pair)")
    out: dict[str, np.ndarray] = {}
    for name, _ in parameter_names(config):
        value = state[name]
        arr = np.asarray(value.detach().cpu().numpy() if hasattr(value, "detach") else value, dtype=np.float32)
        if name.startswith("model.layers."):
            layer, suffix = name[len("model.layers."):].split(".", 1)
            if suffix not in _LAYER_TENSORS:
                raise ValueError(f"tensor {name!r} has no GGUF name")
            member, kind = _LAYER_TENSORS[suffix]
            base = gguf.TENSOR_NAMES[gguf.MODEL_TENSOR[member]].format(bid=int(layer))
        else:
            if name not in _GLOBAL_TENSORS:
                raise ValueError(f"tensor {name!r} has no GGUF name")
            member, kind = _GLOBAL_TENSORS[name]
            base = gguf.TENSOR_NAMES[gguf.MODEL_TENSOR[member]]
        if config.model_type == "llama" and member in ("ATTN_Q", "ATTN_K"):
            arr = permute_rope_rows(arr, config.num_attention_heads if member == "ATTN_Q" else config.num_key_value_heads)
        out[f"{base}.{kind}"] = np.ascontiguousarray(arr)
    return out


def write_gguf(path: str | Path, config: TinyConfig, state: dict, *, name: str = "specexact-tiny") -> None:
    """Write ``model.gguf`` of a tiny model (the module docstring's tensors, metadata, tokenizer).

    Parameters
    ----------
    path : str or Path
        The file to write.
    config : TinyConfig
    state : dict of str to torch.Tensor or numpy.ndarray
    name : str
        ``general.name``.

    Raises
    ------
    ValueError, KeyError
        As :func:`gguf_tensors`.
    OSError
        The file cannot be written.
    """
    import gguf

    tensors = gguf_tensors(config, state)
    arch = gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH[GGUF_ARCHITECTURES[config.model_type]]]
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_context_length(config.max_position_embeddings)
    w.add_embedding_length(config.hidden_size)
    w.add_block_count(config.num_hidden_layers)
    w.add_feed_forward_length(config.intermediate_size)
    w.add_head_count(config.num_attention_heads)
    w.add_head_count_kv(config.num_key_value_heads)
    w.add_key_length(config.head_dim)
    w.add_value_length(config.head_dim)
    w.add_rope_dimension_count(config.head_dim)
    w.add_rope_freq_base(float(config.rope_theta))
    w.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    w.add_vocab_size(config.vocab_size)
    tokens, types = [], []
    for i in range(config.vocab_size):
        special = {config.bos_token_id: "<s>", config.eos_token_id: "</s>"}.get(i)
        tokens.append(special or f"<t{i}>")
        types.append(gguf.TokenType.CONTROL if special else gguf.TokenType.NORMAL)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * config.vocab_size)
    w.add_token_types(types)
    w.add_bos_token_id(config.bos_token_id)
    w.add_eos_token_id(config.eos_token_id)
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)
    for tname, arr in tensors.items():
        w.add_tensor(tname, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gguf_model(model_dir: str | Path) -> Path:
    """``model.gguf`` of a tiny-model folder, written on first use and cached beside it.

    Parameters
    ----------
    model_dir : str or Path
        A folder of :func:`~specexact.decoders.tiny_models.make_model` (``config.json``,
        ``model.safetensors``).

    Returns
    -------
    Path
        ``<model_dir>.gguf-v<GGUF_FORMAT_VERSION>/model.gguf``.

    Raises
    ------
    FileNotFoundError
        ``config.json`` or ``model.safetensors`` missing.
    ValueError
        A config the tiny forward or the GGUF mapping does not support (named).
    ImportError
        The ``gguf`` package is not installed.
    """
    from safetensors.torch import load_file

    model_dir = Path(model_dir)
    for fname in ("config.json", "model.safetensors"):
        if not (model_dir / fname).is_file():
            raise FileNotFoundError(f"{model_dir / fname} not found (a model folder holds config.json and "
                                    "model.safetensors)")
    config = TinyConfig.from_hf(json.loads((model_dir / "config.json").read_text()))
    final = model_dir.parent / f"{model_dir.name}.gguf-v{GGUF_FORMAT_VERSION}"

    def write(tmp: Path) -> None:
        state = load_file(str(model_dir / "model.safetensors"))
        write_gguf(tmp / "model.gguf", config, state, name=model_dir.name)
        (tmp / "specexact.json").write_text(json.dumps(
            {"gguf_format": GGUF_FORMAT_VERSION, "source": model_dir.name, "dtype": "float32"},
            indent=2, sort_keys=True) + "\n")

    return publish_cached(final, write) / "model.gguf"
