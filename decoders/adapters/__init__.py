"""Third-party speculative-decoding samplers behind the ``verify`` protocol.

- :mod:`.protocol`: :class:`Capabilities`, the :class:`SamplerAdapter` protocol and the
  helpers adapters share (seeding torch's global RNG from a generator, log-probabilities).
- :mod:`.transformers`: Hugging Face transformers' ``_speculative_sampling`` (needs
  ``pip install 'specexact[thirdparty]'``; imported only on demand, e.g. through the
  entry point ``specexact audit --sampler transformers``).

vLLM, FlashInfer and SGLang adapters are planned (README, "Third-party samplers").
"""

from .protocol import (
    OPERATIONS,
    RANDOMNESS,
    Capabilities,
    SamplerAdapter,
    check_auditable,
    probs_to_logits,
    seeded_global_rng,
)

__all__ = [
    "Capabilities",
    "OPERATIONS",
    "RANDOMNESS",
    "SamplerAdapter",
    "check_auditable",
    "probs_to_logits",
    "seeded_global_rng",
]
