"""Making tiny Llama / Qwen2 models deterministically, in the Hugging Face layout, cached on disk.

:func:`make_model` writes a model folder (``config.json`` + ``model.safetensors``, float32)
that vLLM, ``transformers`` and mlx-lm load, and that
:func:`~specexact.decoders.tiny_models.load_model` reads for the float64 reference.

Weights
-------
Drawn by specexact, not by ``transformers``' initialisation, so the files are the same
whatever ``transformers`` is installed: one ``torch.Generator`` seeded with
``ModelSpec.seed`` draws, in float64 and in the order of
:func:`~specexact.decoders.tiny_models.architectures.parameter_names` (embedding; per
layer: input norm, q / k / v / o weight then bias, post-attention norm, gate / up / down;
final norm; LM head), one ``torch.randn`` tensor per parameter:

- a norm weight is ``1 + norm_std * z``;
- every other tensor (weights and biases) is ``initializer_range * z``;

then each is rounded to float32. A draft (``draft_noise = ε``) is the target plus relative
noise: a second generator seeded with ``draft_seed`` (default ``seed + 1_000_003``) draws
``z'`` per tensor in the same order, and the draft tensor is ``w + ε * rms(w) * z'``
(``w`` the float64 target tensor, ``rms`` its root mean square), rounded to float32.

Files
-----
``model.safetensors`` holds float32 tensors with metadata ``{"format": "pt"}``;
``config.json`` is written with sorted keys. No tokenizer file is written: the engines are
given token ids (vLLM with ``skip_tokenizer_init=True``, ``transformers``'
``from_pretrained`` of the model class and mlx-lm's ``load_model`` need none).

Cache
-----
A model lives in ``<cache_dir>/<name>-<hash>``, ``hash`` a SHA-256 of the spec, the draft
noise and seed, and :data:`FORMAT_VERSION`. It is written into a temporary folder beside
it and renamed into place (atomic on one file system), so concurrent makers (pytest-xdist
workers) never see a half-written model: the first rename wins, the others discard theirs.
``cache_dir`` defaults to ``$SPECEXACT_MODEL_CACHE``, else ``~/.cache/specexact/models``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from .architectures import ARCHITECTURES, TinyConfig, parameter_names

__all__ = ["FORMAT_VERSION", "ModelSpec", "default_cache_dir", "make_model", "make_pair", "model_weights",
           "hf_config", "publish_cached"]

FORMAT_VERSION = 1
"""Version of the making recipe; part of every cache key (bump it when the recipe changes)."""

CACHE_ENV = "SPECEXACT_MODEL_CACHE"


@dataclass(frozen=True)
class ModelSpec:
    """What a tiny model is: architecture, sizes, the scale of its random weights, its seed.

    Parameters
    ----------
    architecture : {"llama", "qwen2"}
        Qwen2 is Llama with q / k / v biases.
    vocab_size : int
        V (token ids ``0 .. V-1``).
    hidden_size, intermediate_size, num_hidden_layers, num_attention_heads : int
    num_key_value_heads : int
        Divides ``num_attention_heads`` (grouped-query attention when smaller).
    head_dim : int
        32 by default: vLLM's CPU attention refuses 16.
    initializer_range : float
        Standard deviation of the weights; larger is more peaked (0.2 gives about 2.6
        nats of next-token entropy at V=64, 0.5 an almost deterministic model).
    norm_std : float
        Standard deviation of the norm weights around 1.
    rms_norm_eps, rope_theta : float
    max_position_embeddings : int
        Longest prompt + output the engines are told the model takes.
    tie_word_embeddings : bool
    eos_token_id, bos_token_id : int
    seed : int

    Raises
    ------
    ValueError
        An unknown architecture, a size below 1, heads that do not divide, a negative or
        non-finite scale, token ids outside ``[0, V)``; the message names the field.
    """

    architecture: str = "llama"
    vocab_size: int = 64
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    initializer_range: float = 0.2
    norm_std: float = 0.1
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 64
    tie_word_embeddings: bool = False
    eos_token_id: int = 1
    bos_token_id: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise ValueError(f"architecture must be one of {sorted(ARCHITECTURES)}, got {self.architecture!r}")
        for name in ("initializer_range", "norm_std"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
        for name in ("eos_token_id", "bos_token_id"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 0 <= value < self.vocab_size:
                raise ValueError(f"{name} must be an int in [0, vocab_size={self.vocab_size}), got {value!r}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be an int >= 0, got {self.seed!r}")
        self.config()  # sizes checked by TinyConfig

    def config(self) -> TinyConfig:
        """The forward's config of this spec."""
        return TinyConfig(
            model_type=self.architecture, vocab_size=self.vocab_size, hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size, num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads, num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim, rms_norm_eps=self.rms_norm_eps, rope_theta=self.rope_theta,
            tie_word_embeddings=self.tie_word_embeddings, eos_token_id=self.eos_token_id,
            bos_token_id=self.bos_token_id, max_position_embeddings=self.max_position_embeddings)

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return asdict(self)


def default_cache_dir() -> Path:
    """``$SPECEXACT_MODEL_CACHE`` if set, else ``~/.cache/specexact/models``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "specexact" / "models"


def hf_config(spec: ModelSpec) -> dict:
    """The ``config.json`` of a spec: the Hugging Face fields vLLM, ``transformers`` and
    mlx-lm read (``architectures``, ``model_type``, sizes, ``rope_theta``, ``torch_dtype``
    float32, the bos / eos ids, ...)."""
    d = {
        "architectures": [ARCHITECTURES[spec.architecture]],
        "model_type": spec.architecture,
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads,
        "head_dim": spec.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": spec.max_position_embeddings,
        "initializer_range": spec.initializer_range,
        "rms_norm_eps": spec.rms_norm_eps,
        "rope_theta": spec.rope_theta,
        "rope_scaling": None,
        "attention_dropout": 0.0,
        "tie_word_embeddings": spec.tie_word_embeddings,
        "bos_token_id": spec.bos_token_id,
        "eos_token_id": spec.eos_token_id,
        "pad_token_id": None,
        "torch_dtype": "float32",
        "use_cache": True,
    }
    if spec.architecture == "llama":
        d.update(attention_bias=False, mlp_bias=False, pretraining_tp=1)
    else:  # qwen2
        d.update(use_sliding_window=False, sliding_window=None, max_window_layers=spec.num_hidden_layers)
    return d


def model_weights(spec: ModelSpec, draft_noise: float | None = None,
                  draft_seed: int | None = None) -> dict[str, torch.Tensor]:
    """The float32 state dict of a spec (the target), or of its draft with ``draft_noise``.

    The recipe is the module docstring's. Shapes: as
    :func:`~specexact.decoders.tiny_models.architectures.parameter_names`.

    Raises
    ------
    ValueError
        ``draft_noise`` negative or not finite.
    """
    if draft_noise is not None and not (math.isfinite(draft_noise) and draft_noise >= 0):
        raise ValueError(f"draft_noise must be finite and >= 0 or None, got {draft_noise!r}")
    names = parameter_names(spec.config())
    g = torch.Generator().manual_seed(spec.seed)
    target: dict[str, torch.Tensor] = {}
    for name, shape in names:
        z = torch.randn(shape, generator=g, dtype=torch.float64)
        norm = name.endswith("norm.weight")
        target[name] = 1.0 + spec.norm_std * z if norm else spec.initializer_range * z
    if draft_noise is not None:
        gd = torch.Generator().manual_seed(spec.seed + 1_000_003 if draft_seed is None else draft_seed)
        for name, shape in names:
            w = target[name]
            z = torch.randn(shape, generator=gd, dtype=torch.float64)
            target[name] = w + draft_noise * w.pow(2).mean().sqrt() * z
    return {k: v.to(torch.float32).contiguous() for k, v in target.items()}


def _cache_key(spec: ModelSpec, draft_noise: float | None, draft_seed: int | None) -> str:
    payload = json.dumps({"format": FORMAT_VERSION, "spec": spec.to_dict(), "draft_noise": draft_noise,
                          "draft_seed": draft_seed}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _write(folder: Path, spec: ModelSpec, draft_noise: float | None, draft_seed: int | None) -> None:
    from safetensors.torch import save_file

    save_file(model_weights(spec, draft_noise, draft_seed), str(folder / "model.safetensors"),
              metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(hf_config(spec), indent=2, sort_keys=True) + "\n")
    (folder / "specexact.json").write_text(json.dumps(
        {"format": FORMAT_VERSION, "spec": spec.to_dict(), "draft_noise": draft_noise, "draft_seed": draft_seed},
        indent=2, sort_keys=True) + "\n")


def make_model(spec: ModelSpec, draft_noise: float | None = None, cache_dir: str | Path | None = None, *,
               draft_seed: int | None = None) -> Path:
    """The folder of a spec's model (made on first use, then reused from the cache).

    Parameters
    ----------
    spec : ModelSpec
    draft_noise : float, optional
        None: the target. A number ``ε >= 0``: the draft, the target's weights plus
        relative noise ``ε`` (module docstring).
    cache_dir : str or Path, optional
        Default :func:`default_cache_dir`.
    draft_seed : int, optional
        Seed of the draft's noise (default ``spec.seed + 1_000_003``).

    Returns
    -------
    Path
        ``<cache_dir>/<architecture>-v<V>-<target|draft>-<hash>`` holding ``config.json``,
        ``model.safetensors`` and ``specexact.json`` (the spec that made it).

    Raises
    ------
    TypeError
        ``spec`` not a :class:`ModelSpec`.
    ValueError
        ``draft_noise`` negative or not finite.
    OSError
        The cache folder cannot be written.
    """
    if not isinstance(spec, ModelSpec):
        raise TypeError(f"spec must be a ModelSpec, got {type(spec).__name__}")
    if draft_noise is not None and not (math.isfinite(draft_noise) and draft_noise >= 0):
        raise ValueError(f"draft_noise must be finite and >= 0 or None, got {draft_noise!r}")
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    role = "target" if draft_noise is None else "draft"
    final = cache / f"{spec.architecture}-v{spec.vocab_size}-{role}-{_cache_key(spec, draft_noise, draft_seed)}"
    return publish_cached(final, lambda tmp: _write(tmp, spec, draft_noise, draft_seed))


def publish_cached(final: Path, write) -> Path:
    """``final``, a cache folder made once: if it holds no ``specexact.json`` yet,
    ``write(tmp)`` fills a temporary folder beside it, which is renamed to ``final``
    (atomic: a concurrent maker that got there first wins, and its folder is kept).

    Raises
    ------
    OSError
        The cache folder cannot be written.
    """
    if (final / "specexact.json").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        write(tmp)
        try:
            os.rename(tmp, final)  # atomic; fails if another maker got there first
        except OSError:
            if not (final / "specexact.json").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def make_pair(spec: ModelSpec, draft_noise: float, cache_dir: str | Path | None = None, *,
              draft_seed: int | None = None) -> tuple[Path, Path]:
    """The folders of a spec's target and of its draft with ``draft_noise``
    (:func:`make_model` twice). Returns ``(target_dir, draft_dir)``."""
    if draft_noise is None:
        raise ValueError("draft_noise must be a number >= 0 for a pair, got None")
    return (make_model(spec, None, cache_dir),
            make_model(spec, draft_noise, cache_dir, draft_seed=draft_seed))
