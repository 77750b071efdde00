"""Third-party speculative-decoding samplers behind one protocol, at two levels.

- :mod:`.protocol`: :class:`Capabilities`, the probability-level :class:`SamplerAdapter`
  and logits-level :class:`LogitsSamplerAdapter` protocols (:class:`LogitsVerifyInputs`)
  and the helpers adapters share (seeding torch's global RNG from a generator, log-probs).
- :mod:`.builtin_logits`: the built-in verifier at the logits level, in any declared
  order of operations (``--sampler builtin-logits``; the template for an engine's adapter).
- :mod:`.transformers`: Hugging Face transformers' ``_speculative_sampling`` (needs
  ``pip install 'specexact[thirdparty]'``; imported only on demand, e.g. through the
  entry point ``specexact audit --sampler transformers``).
- :mod:`.transformers_logits`: transformers' own logits processors per candidate prefix,
  then ``_speculative_sampling`` (``--sampler transformers-logits``).

vLLM, FlashInfer and SGLang adapters are planned (README, "Third-party samplers").
"""

from .protocol import (
    OPERATIONS,
    PROTOCOLS,
    RANDOMNESS,
    SCHEMES,
    Capabilities,
    LogitsSamplerAdapter,
    LogitsVerifyInputs,
    SamplerAdapter,
    check_auditable,
    is_logits_level,
    processing_of,
    probs_to_logits,
    protocol_of,
    scheme_of,
    seeded_global_rng,
    takes_uniforms,
    uniforms_dtype_of,
)

__all__ = [
    "Capabilities",
    "LogitsSamplerAdapter",
    "LogitsVerifyInputs",
    "OPERATIONS",
    "PROTOCOLS",
    "RANDOMNESS",
    "SCHEMES",
    "SamplerAdapter",
    "check_auditable",
    "is_logits_level",
    "processing_of",
    "scheme_of",
    "protocol_of",
    "takes_uniforms",
    "uniforms_dtype_of",
    "probs_to_logits",
    "seeded_global_rng",
]
