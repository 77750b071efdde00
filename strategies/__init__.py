"""Hypothesis strategies for speculative-decoding samplers.

Every strategy is a function with keyword-only arguments, validated when it is called
(:class:`InvalidArgument`, a ``ValueError``, names the argument and its value), that
returns a :class:`hypothesis.strategies.SearchStrategy`. Large tensors are never drawn
element by element: a case draws a family, a seed and a few shape numbers, and builds its
tensors with seeded generators; its ``repr`` rebuilds it.

Modules
-------
vocab
    :func:`vocab_sizes`: 1, 2, odd, power-of-two and tile edges (8193), real tokenizers.
laws
    :func:`logit_tensors`, :func:`probability_tensors`: Zipf heads, flat, one-hot, near
    and exact ties, ``-inf`` masks, huge magnitudes, subnormals, half-precision round
    trips, sums off 1 by rounding.
pairs
    :func:`draft_target_pairs`: ``verify`` inputs (identical, rounding, disjoint, removed
    or zero-probability drafts, one-hot, truncated, misreported).
truncation
    :func:`sampling_params`, :func:`histories`, :func:`pipeline_cases`: top-k / top-p /
    min-p edges and penalties with repeating histories.
trees
    :func:`draft_trees`: inputs of the tree protocol (full trees, chains, per-row random
    trees; i.i.d., without-replacement and top-k drafting; float edges).
scenarios
    :func:`e2e_scenarios`: end-to-end scenarios (γ, request shapes of mixed prompt lengths,
    parameters, limits and EOS in one generate call), shrinking toward the simplest.
draft_lengths
    :func:`draft_lengths`: γ from 1 to 4 and the long range (8, 15: block drafters);
    :func:`capped_vocab_size`: V within a budget of ``B (γ+1) V`` cells.
orders
    :func:`order_sensitive_rows`: logits rows whose processed law changes when two
    operations of a declared order are swapped (by at least a stated total variation).
uniforms
    :func:`acceptance_probes`, :func:`boundary_uniforms`: uniforms on the acceptance
    boundary ``u * q < p``.
"""

from ._validation import InvalidArgument
from .draft_lengths import BLOCK_DRAFT_LENGTH, LONG_DRAFT_LENGTHS, capped_vocab_size, draft_lengths
from .laws import (
    DTYPES,
    LOGIT_FAMILIES,
    PROB_FAMILIES,
    LogitsCase,
    ProbsCase,
    logit_tensors,
    probability_tensors,
)
from .orders import (
    COMMUTING_PAIRS,
    MIN_ORDER_TV,
    OrderSensitiveRow,
    flipped_relations,
    order_pairs,
    order_sensitive_params,
    order_sensitive_rows,
    order_tv,
    swapped_processing,
)
from .pairs import (
    DISHONEST_PAIR_FAMILIES,
    HONEST_PAIR_FAMILIES,
    PAIR_FAMILIES,
    VerifyCase,
    draft_target_pairs,
    first_token_law,
)
from .truncation import (
    HISTORY_KINDS,
    PARAM_FAMILIES,
    PIPELINE_FAMILIES,
    PipelineCase,
    histories,
    params_repr,
    pipeline_cases,
    sampling_params,
    sampling_params_family,
)
from .scenarios import (
    KV_BLOCK,
    PARAM_RANGES,
    SCHEDULER_RANGES,
    RequestShape,
    Scenario,
    SchedulerSettings,
    e2e_scenarios,
    scenario_axes,
)
from .trees import TREE_DRAFTING_RULES, TREE_EDGES, TREE_SHAPES, TreeVerifyCase, draft_trees
from .uniforms import (
    PROBE_PAIR_KINDS,
    UNIFORM_KINDS,
    AcceptanceProbe,
    acceptance_probes,
    boundary_uniforms,
)
from .vocab import REAL_VOCAB_SIZES, VOCAB_FAMILIES, vocab_size_family, vocab_sizes

__all__ = [
    "COMMUTING_PAIRS",
    "MIN_ORDER_TV",
    "OrderSensitiveRow",
    "flipped_relations",
    "order_pairs",
    "order_sensitive_params",
    "order_sensitive_rows",
    "order_tv",
    "swapped_processing",
    "BLOCK_DRAFT_LENGTH",
    "LONG_DRAFT_LENGTHS",
    "capped_vocab_size",
    "draft_lengths",
    "DISHONEST_PAIR_FAMILIES",
    "DTYPES",
    "HISTORY_KINDS",
    "HONEST_PAIR_FAMILIES",
    "LOGIT_FAMILIES",
    "PAIR_FAMILIES",
    "PARAM_FAMILIES",
    "PIPELINE_FAMILIES",
    "PROBE_PAIR_KINDS",
    "PROB_FAMILIES",
    "REAL_VOCAB_SIZES",
    "TREE_DRAFTING_RULES",
    "TREE_EDGES",
    "TREE_SHAPES",
    "UNIFORM_KINDS",
    "VOCAB_FAMILIES",
    "AcceptanceProbe",
    "InvalidArgument",
    "KV_BLOCK",
    "PARAM_RANGES",
    "RequestShape",
    "Scenario",
    "SchedulerSettings",
    "SCHEDULER_RANGES",
    "LogitsCase",
    "PipelineCase",
    "TreeVerifyCase",
    "ProbsCase",
    "VerifyCase",
    "acceptance_probes",
    "boundary_uniforms",
    "draft_target_pairs",
    "draft_trees",
    "first_token_law",
    "histories",
    "logit_tensors",
    "params_repr",
    "pipeline_cases",
    "probability_tensors",
    "sampling_params",
    "sampling_params_family",
    "scenario_axes",
    "e2e_scenarios",
    "vocab_size_family",
    "vocab_sizes",
]
