"""End-to-end engines: the engine's own speculative generate loop under audit (issue 22).

A verify-level or logits-level adapter (:mod:`specexact.decoders.adapters`) hands one
verification call specexact's inputs; drafting, the target forward, per-position
processing and bookkeeping are then specexact's. An *end-to-end engine* here is called the
way its users call it (``LLM.generate``, ``model.generate(assistant_model=...)``,
``mlx_lm``'s speculative generation): it loads a target (and a draft) model from disk, takes
prompts as token ids with sampling parameters and a seed per request, and returns the
generated token ids. The audit compares those outputs with the laws that specexact computes
from the same model files (:mod:`specexact.decoders.tiny_models`).

- :mod:`.protocol`: :class:`GenerationRequest`, :class:`GenerationResult`,
  :class:`EngineCapabilities`, the :class:`EndToEndEngine` protocol;
- :mod:`.seeds`: :class:`SeedPromise`, what an engine promises about seeds.
"""

from .protocol import (
    EndToEndEngine,
    EngineCapabilities,
    GenerationRequest,
    GenerationResult,
    SCHEDULER_AXES,
    SPECULATIVE_METHODS,
    check_generation_results,
    is_engine,
)
from .seeds import SeedPromise

__all__ = [
    "EndToEndEngine",
    "EngineCapabilities",
    "GenerationRequest",
    "GenerationResult",
    "SCHEDULER_AXES",
    "SPECULATIVE_METHODS",
    "SeedPromise",
    "check_generation_results",
    "is_engine",
]
