"""Tiny models of real architectures, made by specexact, for end-to-end engine audits (issue 22).

- :mod:`~specexact.decoders.tiny_models.architectures`: :class:`TinyCausalLM`, a pure-torch
  float64 forward of Hugging Face Llama / Qwen2 with the :class:`~specexact.decoders.ToyLM`
  call interface, and :func:`load_model` (``config.json`` + ``model.safetensors``);
- :mod:`~specexact.decoders.tiny_models.make`: :class:`ModelSpec` and :func:`make_model` /
  :func:`make_pair`, which write targets and drafts deterministically into a cache folder;
- :mod:`~specexact.decoders.tiny_models.catalog`: named pairs with measured entropy and
  draft closeness (:data:`CATALOG`, :func:`catalog_pair`);
- :mod:`~specexact.decoders.tiny_models.laws`: the reference laws of a request computed
  from the model itself (:func:`exact_sequence_law`, :func:`conditional_laws`,
  :func:`expected_acceptance`).
"""

from .architectures import ARCHITECTURES, TinyCausalLM, TinyConfig, load_model, parameter_names
from .catalog import CATALOG, TinyPair, catalog_pair, measure, measure_prompts
from .laws import ConditionalLaws, conditional_laws, exact_sequence_law, expected_acceptance
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
    "CATALOG",
    "TinyPair",
    "catalog_pair",
    "measure",
    "measure_prompts",
    "exact_sequence_law",
    "ConditionalLaws",
    "conditional_laws",
    "expected_acceptance",
]
