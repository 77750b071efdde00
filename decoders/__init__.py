"""Samplers under audit and the models that drive them.

- :func:`process_logits`: the logits pipeline (penalties, temperature, min-p, top-k, top-p).
- :class:`LogitsProcessing`: the same operations in a declared order (logits-level engines).
- :func:`naive_generate`: target-only autoregressive sampling (the reference law);
  :func:`naive_generate_reference` computes every row's law (same output).
- :func:`speculative_generate`: chain speculative decoding around any verifier; each
  distinct law of a call is computed once (:mod:`~specexact.decoders.law_table`);
  :func:`speculative_generate_reference` computes every row's (same output).
- :func:`verify`: modified rejection sampling with the probability-level protocol (a fast
  path; :func:`verify_reference` is its readable reference, same output on the same
  generator state); :func:`verify_with_uniforms`: the same with the acceptance uniforms
  supplied (boundary-uniform probes).
- :class:`ToyLM`: small seeded prefix-dependent language models.
"""

from .models import ToyLM, ToyLMConfig
from .naive import GenerationOutput, naive_generate, naive_generate_reference
from .params import BatchedParams, SamplingParams, batch_params
from .pipeline import process_logits, token_counts
from .processing import LogitsProcessing, process_logits_in_order
from .sampling import sample_from_probs, sample_from_probs_reference, sample_from_table
from .speculative import (
    RoundRecord,
    VerifierProtocolError,
    check_verifier_output,
    speculative_generate,
    speculative_generate_reference,
)
from .rejection_sampling import (
    PLACEHOLDER_ID,
    validate_verify_inputs,
    validate_verify_inputs_reference,
    verify,
    verify_reference,
    verify_with_uniforms,
)

__all__ = [
    "BatchedParams",
    "GenerationOutput",
    "LogitsProcessing",
    "PLACEHOLDER_ID",
    "RoundRecord",
    "SamplingParams",
    "ToyLM",
    "ToyLMConfig",
    "VerifierProtocolError",
    "batch_params",
    "check_verifier_output",
    "naive_generate",
    "naive_generate_reference",
    "process_logits",
    "process_logits_in_order",
    "sample_from_probs",
    "sample_from_probs_reference",
    "sample_from_table",
    "speculative_generate",
    "speculative_generate_reference",
    "token_counts",
    "validate_verify_inputs",
    "validate_verify_inputs_reference",
    "verify",
    "verify_reference",
    "verify_with_uniforms",
]
