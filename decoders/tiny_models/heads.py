"""Tiny drafting heads for the tiny targets, made by specexact, deterministic and cached (issue 34).

vLLM drafts with small modules that read the target's hidden states: EAGLE and EAGLE-3 heads,
Medusa heads and a multi-token-prediction (MTP) layer. :func:`make_head` writes one of them
for a :class:`~specexact.decoders.tiny_models.ModelSpec` target, in the layout vLLM's loader
reads (``config.json`` + ``model.safetensors``, float32), and nothing more. Read in vLLM 0.32.0:

==========  ==============================================  =========================================
kind        what vLLM loads it as                           tensors written (shapes for hidden H, V)
==========  ==============================================  =========================================
``eagle``   a Llama config with one layer; vLLM's           ``fc.weight`` [H, 2H]; ``layers.0.``
            ``EAGLEConfig`` renames the architecture to     attention q / k / v / o, post-attention
            ``EagleLlamaForCausalLM``                       norm, MLP (no input norm: the layer has
            (``model_executor/models/llama_eagle.py``)      none); embedding and LM head shared with
                                                            the target (not written)
``eagle3``  the same, renamed ``Eagle3LlamaForCausalLM``    ``midlayer.`` input norm, ``hidden_norm``,
            (``llama_eagle3.py``);                          attention with q / k / v of input 2H,
            ``eagle_aux_hidden_state_layer_ids``            o, post-attention norm, MLP; ``norm``;
            ``[0, 1, 2]``: the target's embedding output    ``fc.weight`` [H, 3H]; its own
            and each of its two layers' outputs (vLLM's     ``lm_head.weight`` [V, H] (full
            default ``(2, L // 2, L - 3)`` is for deep      vocabulary: no ``d2t`` map); embedding
            targets)                                        shared with the target
``medusa``  ``model_type`` ``medusa``, ``MedusaModel``      per head ``h``: ``blocks.h.layers.0.weight``
            (``medusa.py``); vLLM sets the number of        [H, H] (a residual SiLU block) and
            heads to ``num_speculative_tokens``, so a       ``lm_heads.h.weight`` [V, H]
            head folder is made per K
``mtp``     a *target*: the Qwen2 target's own weights     every tensor of the target, byte for byte
            under ``MiMoForCausalLM`` (vLLM's main model    (its law is the Qwen2 target's:
            is Qwen2's, the norm applied in                 ``mimo.py``), plus ``model.mtp_layers.0.``
            ``compute_logits``) with                        ``token_layernorm``, ``hidden_layernorm``,
            ``num_nextn_predict_layers`` 1; vLLM's          ``input_proj`` [H, 2H], a Qwen2 decoder
            ``SpeculativeConfig`` turns it into the         layer (q / k / v with biases),
            ``MiMoMTPModel`` draft (``mimo_mtp.py``)        ``final_layernorm``
==========  ==============================================  =========================================

The ``mtp`` kind needs a Qwen2 target (``qwen2-v64``): vLLM's MTP drafters all belong to
other targets (DeepSeek, GLM, Qwen3-Next, ...), of which MiMo is the one whose main model
is a plain Qwen2.

Weights
-------
One ``torch.Generator`` seeded with ``head_seed`` (default ``spec.seed + HEAD_SEED_OFFSET``)
draws, in float64 and in the order of :func:`head_parameter_names`, one ``torch.randn``
tensor per parameter: a norm weight is ``1 + norm_std * z``, every other tensor
``initializer_range * z`` (the target spec's scales); rounded to float32. The ``mtp``
kind's target tensors are :func:`~specexact.decoders.tiny_models.model_weights` of the spec.
The heads are random, not trained: their drafts are rarely accepted, which changes the
acceptance, never the law of the output.

Cache
-----
``<cache_dir>/<architecture>-v<V>-<kind>[-k<K>]-<hash>``, the hash over the spec, the kind,
the head count, the seed and :data:`HEAD_FORMAT_VERSION`; written into a temporary folder
and renamed into place like the model zoo (:func:`~specexact.decoders.tiny_models.make_model`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from .make import ModelSpec, default_cache_dir, hf_config, model_weights, publish_cached

__all__ = ["HEAD_KINDS", "HEAD_FORMAT_VERSION", "HEAD_SEED_OFFSET", "EAGLE3_AUX_LAYER_IDS", "head_config",
           "head_parameter_names", "head_weights", "make_head", "spec_of"]

HEAD_KINDS = ("eagle", "eagle3", "medusa", "mtp")
"""The heads :func:`make_head` writes."""

HEAD_FORMAT_VERSION = 1
"""Version of the heads' recipe; part of every cache key."""

HEAD_SEED_OFFSET = 2_000_003
"""Default head seed: the target spec's seed plus this."""

EAGLE3_AUX_LAYER_IDS = (0, 1, 2)
"""The target's hidden states an EAGLE-3 head reads (vLLM's numbering: 0 the embedding
output, ``i`` the output of layer ``i - 1``); written for a 2-layer target."""


def _check(kind: str, spec: ModelSpec, num_heads: int | None) -> None:
    if kind not in HEAD_KINDS:
        raise ValueError(f"kind must be one of {HEAD_KINDS}, got {kind!r}")
    if not isinstance(spec, ModelSpec):
        raise TypeError(f"spec must be a ModelSpec, got {type(spec).__name__}")
    if kind == "mtp" and spec.architecture != "qwen2":
        raise ValueError(f"kind='mtp' needs a qwen2 target (vLLM's MiMo MTP), got spec.architecture="
                         f"{spec.architecture!r}")
    if kind in ("eagle", "eagle3") and spec.architecture != "llama":
        raise ValueError(f"kind={kind!r} needs a llama target (vLLM's Llama EAGLE heads), got "
                         f"spec.architecture={spec.architecture!r}")
    if kind == "eagle3" and spec.num_hidden_layers + 1 < len(EAGLE3_AUX_LAYER_IDS):
        raise ValueError(f"kind='eagle3' reads hidden states {EAGLE3_AUX_LAYER_IDS}: spec.num_hidden_layers must be "
                         f">= {len(EAGLE3_AUX_LAYER_IDS) - 1}, got {spec.num_hidden_layers}")
    if kind == "medusa":
        if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
            raise ValueError(f"kind='medusa' needs num_heads, an int >= 1, got {num_heads!r}")
    elif num_heads is not None:
        raise ValueError(f"num_heads is for kind='medusa' only, got num_heads={num_heads!r} with kind={kind!r}")


def _layer_names(prefix: str, spec: ModelSpec, *, input_norm: bool, qkv_in: int, bias: bool) -> list:
    """One decoder layer's tensors in Hugging Face naming (as ``parameter_names`` orders them)."""
    D, hd, I = spec.hidden_size, spec.head_dim, spec.intermediate_size
    out = [(prefix + "input_layernorm.weight", (D,))] if input_norm else []
    for proj, rows in (("q_proj", spec.num_attention_heads * hd), ("k_proj", spec.num_key_value_heads * hd),
                       ("v_proj", spec.num_key_value_heads * hd)):
        out.append((prefix + f"self_attn.{proj}.weight", (rows, qkv_in)))
        if bias:
            out.append((prefix + f"self_attn.{proj}.bias", (rows,)))
    out.append((prefix + "self_attn.o_proj.weight", (D, spec.num_attention_heads * hd)))
    out.append((prefix + "post_attention_layernorm.weight", (D,)))
    out += [(prefix + "mlp.gate_proj.weight", (I, D)), (prefix + "mlp.up_proj.weight", (I, D)),
            (prefix + "mlp.down_proj.weight", (D, I))]
    return out


def head_parameter_names(kind: str, spec: ModelSpec, num_heads: int | None = None) -> list[tuple[str, tuple]]:
    """The drawn tensors of a head, in the order they are drawn, with their shapes (the
    module docstring's table; for ``mtp`` the MTP layer only, the target's tensors come
    from :func:`~specexact.decoders.tiny_models.model_weights`).

    Raises
    ------
    ValueError
        An unknown ``kind``, a target of another architecture, or ``num_heads`` missing
        (``medusa``) or given (other kinds); the message names the argument.
    """
    _check(kind, spec, num_heads)
    D, V = spec.hidden_size, spec.vocab_size
    if kind == "eagle":
        return [("fc.weight", (D, 2 * D))] + _layer_names("layers.0.", spec, input_norm=False, qkv_in=D, bias=False)
    if kind == "eagle3":
        n_aux = len(EAGLE3_AUX_LAYER_IDS)
        layer = _layer_names("midlayer.", spec, input_norm=True, qkv_in=2 * D, bias=False)
        return (layer[:1] + [("midlayer.hidden_norm.weight", (D,))] + layer[1:]
                + [("norm.weight", (D,)), ("fc.weight", (D, n_aux * D)), ("lm_head.weight", (V, D))])
    if kind == "medusa":
        out = []
        for h in range(num_heads):
            out += [(f"blocks.{h}.layers.0.weight", (D, D)), (f"lm_heads.{h}.weight", (V, D))]
        return out
    p = "model.mtp_layers.0."
    return ([(p + "token_layernorm.weight", (D,)), (p + "hidden_layernorm.weight", (D,)),
             (p + "input_proj.weight", (D, 2 * D))]
            + _layer_names(p, spec, input_norm=True, qkv_in=D, bias=True)
            + [(p + "final_layernorm.weight", (D,))])


def _seed(spec: ModelSpec, head_seed: int | None) -> int:
    if head_seed is None:
        return spec.seed + HEAD_SEED_OFFSET
    if isinstance(head_seed, bool) or not isinstance(head_seed, int) or head_seed < 0:
        raise ValueError(f"head_seed must be an int >= 0 or None, got {head_seed!r}")
    return head_seed


def head_weights(kind: str, spec: ModelSpec, num_heads: int | None = None, *,
                 head_seed: int | None = None) -> dict[str, torch.Tensor]:
    """The float32 tensors of a head's ``model.safetensors`` (module docstring's recipe).

    Raises
    ------
    ValueError
        As :func:`head_parameter_names`, or ``head_seed`` not an int >= 0.
    """
    names = head_parameter_names(kind, spec, num_heads)
    g = torch.Generator().manual_seed(_seed(spec, head_seed))
    out = model_weights(spec) if kind == "mtp" else {}
    for name, shape in names:
        z = torch.randn(shape, generator=g, dtype=torch.float64)
        w = 1.0 + spec.norm_std * z if name.endswith("norm.weight") else spec.initializer_range * z
        out[name] = w.to(torch.float32).contiguous()
    return out


def head_config(kind: str, spec: ModelSpec, num_heads: int | None = None) -> dict:
    """The ``config.json`` of a head: the keys vLLM's loader reads for it (module docstring).

    Raises
    ------
    ValueError
        As :func:`head_parameter_names`.
    """
    _check(kind, spec, num_heads)
    if kind == "medusa":
        return {"architectures": ["MedusaModel"], "model_type": "medusa", "hidden_size": spec.hidden_size,
                "vocab_size": spec.vocab_size, "num_heads": num_heads, "num_hidden_layers": 1,
                "torch_dtype": "float32"}
    d = hf_config(spec)
    if kind == "mtp":
        d.update(architectures=["MiMoForCausalLM"], num_nextn_predict_layers=1)
        return d
    d.update(num_hidden_layers=1)
    if kind == "eagle3":
        d.update(eagle_aux_hidden_state_layer_ids=list(EAGLE3_AUX_LAYER_IDS), draft_vocab_size=spec.vocab_size)
    return d


def _key(kind: str, spec: ModelSpec, num_heads: int | None, seed: int) -> str:
    payload = json.dumps({"format": HEAD_FORMAT_VERSION, "kind": kind, "spec": spec.to_dict(),
                          "num_heads": num_heads, "head_seed": seed}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def make_head(kind: str, spec: ModelSpec, cache_dir: str | Path | None = None, *, num_heads: int | None = None,
              head_seed: int | None = None) -> Path:
    """The folder of a head for the target ``spec`` (made on first use, then reused).

    Parameters
    ----------
    kind : {"eagle", "eagle3", "medusa", "mtp"}
    spec : ModelSpec
        The target's spec (Llama for the EAGLE heads, Qwen2 for ``mtp``, either for Medusa).
    cache_dir : str or Path, optional
        Default :func:`~specexact.decoders.tiny_models.default_cache_dir`.
    num_heads : int, optional
        Medusa's head count (vLLM runs as many heads as speculative tokens); other kinds: None.
    head_seed : int, optional
        Default ``spec.seed + HEAD_SEED_OFFSET``.

    Returns
    -------
    Path
        A folder holding ``config.json``, ``model.safetensors`` and ``specexact.json``
        (what made it).

    Raises
    ------
    ValueError, TypeError
        As :func:`head_parameter_names`; ``head_seed`` not an int >= 0.
    OSError
        The cache folder cannot be written.
    """
    _check(kind, spec, num_heads)
    seed = _seed(spec, head_seed)
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    k = f"-k{num_heads}" if kind == "medusa" else ""
    final = cache / f"{spec.architecture}-v{spec.vocab_size}-{kind}{k}-{_key(kind, spec, num_heads, seed)}"

    def write(tmp: Path) -> None:
        from safetensors.torch import save_file

        save_file(head_weights(kind, spec, num_heads, head_seed=seed), str(tmp / "model.safetensors"),
                  metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(head_config(kind, spec, num_heads), indent=2, sort_keys=True)
                                         + "\n")
        (tmp / "specexact.json").write_text(json.dumps(
            {"format": HEAD_FORMAT_VERSION, "kind": kind, "spec": spec.to_dict(), "num_heads": num_heads,
             "head_seed": seed}, indent=2, sort_keys=True) + "\n")

    return publish_cached(final, write)


def spec_of(model_dir: str | Path) -> ModelSpec:
    """The :class:`~specexact.decoders.tiny_models.ModelSpec` a zoo folder was made from
    (its ``specexact.json``).

    Raises
    ------
    ValueError
        ``model_dir`` holds no ``specexact.json`` with a ``spec`` (not made by the zoo).
    """
    path = Path(model_dir) / "specexact.json"
    try:
        spec = json.loads(path.read_text())["spec"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"model_dir must be a folder made by make_model (with specexact.json), got "
                         f"{str(model_dir)!r}: {exc}") from exc
    return ModelSpec(**spec)
