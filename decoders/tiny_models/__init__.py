"""Tiny models of real architectures, made by specexact, for end-to-end engine audits (issue 22).

- :mod:`~specexact.decoders.tiny_models.architectures`: :class:`TinyCausalLM`, a pure-torch
  float64 forward of Hugging Face Llama / Qwen2 with the :class:`~specexact.decoders.ToyLM`
  call interface, and :func:`load_model` (``config.json`` + ``model.safetensors``);
- :mod:`~specexact.decoders.tiny_models.make`: :class:`ModelSpec` and :func:`make_model` /
  :func:`make_pair`, which write targets and drafts deterministically into a cache folder.
"""

from .architectures import ARCHITECTURES, TinyCausalLM, TinyConfig, load_model, parameter_names
from .make import FORMAT_VERSION, ModelSpec, default_cache_dir, hf_config, make_model, make_pair, model_weights

__all__ = [
    "ARCHITECTURES",
    "TinyConfig",
    "TinyCausalLM",
    "load_model",
    "parameter_names",
    "FORMAT_VERSION",
    "ModelSpec",
    "default_cache_dir",
    "hf_config",
    "make_model",
    "make_pair",
    "model_weights",
]
