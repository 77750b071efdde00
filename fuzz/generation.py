"""Hypothesis strategies of fuzz examples, within what the sampler declares.

Probability level: the project's pair families (:func:`~specexact.strategies.draft_target_pairs`:
independent, identical, rounding, disjoint, removed and zero-probability drafts, one-hot,
greedy, truncated, misreported; every probability family of the target rows: Zipf, flat,
ties, masks, subnormals, half-precision round trips, sums off 1) and the near-equal pairs
of :class:`~specexact.fuzz.examples.NearEqualPair`, over vocabularies from 1 to 262145
(:func:`~specexact.strategies.vocab_sizes`: odd, power-of-two and tile edges, real
tokenizers), in the dtypes the sampler declares. Logits level: raw logits of every logits
family (:func:`~specexact.strategies.logit_tensors`), per-row
:func:`~specexact.strategies.sampling_params` restricted to the declared operations (or,
one example in three, order-sensitive parameters:
:func:`~specexact.strategies.order_sensitive_params`), prompts and generated histories
that repeat tokens, and a draft law of any probability family; logits and draft laws in
float16 / bfloat16 handed over as such to a sampler that declares them. At both levels γ
runs from 1 to 16 (:func:`example_sizes`: 8 and 15 drawn as values of their own, ``B (γ+1) V``
bounded as before).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from specexact.decoders.params import SamplingParams
from specexact.decoders.processing import LogitsProcessing
from specexact.strategies import (
    PROB_FAMILIES,
    draft_target_pairs,
    logit_tensors,
    order_pairs,
    order_sensitive_params,
    probability_tensors,
    capped_vocab_size,
    draft_lengths,
    sampling_params,
    vocab_sizes,
)

from specexact.fuzz.examples import NEAR_EQUAL_FAMILIES, LogitsExample, NearEqualPair, ProbExample

__all__ = ["prob_examples", "near_equal_pairs", "logits_examples", "within_processing", "shrinkable_vocab_sizes",
           "SEEDS", "MAX_DRAFTS", "CELLS_PER_DRAFT_ROW", "ORDER_MAX_VOCAB", "example_sizes"]

SEEDS = st.integers(0, 2**32 - 1)
"""Seeds of recipes and generators (32-bit, as the strategies' recipes)."""

MAX_DRAFTS = 16
"""Largest γ of the chain families (:func:`~specexact.strategies.draft_lengths`: 1 to 4,
the long range with 8 and 15, a block drafter's block)."""

CELLS_PER_DRAFT_ROW = 5
"""The cost bound: an example's ``B (γ+1) V`` stays within ``max_batch * 5 * max_vocab``,
the largest example before γ went past 4 (γ = 4, so 5 positions), so a long γ comes with
a smaller V (:func:`~specexact.strategies.capped_vocab_size`) and the cost stays flat."""

# operation -> (SamplingParams field, its neutral value)
_FIELD_OF = {
    "repetition_penalty": ("repetition_penalty", 1.0),
    "frequency_penalty": ("frequency_penalty", 0.0),
    "presence_penalty": ("presence_penalty", 0.0),
    "temperature": ("temperature", 1.0),
    "min_p": ("min_p", 0.0),
    "top_k": ("top_k", 0),
    "top_p": ("top_p", 1.0),
}


def within_processing(params: SamplingParams, processing: LogitsProcessing) -> SamplingParams:
    """``params`` with every setting the processing does not implement set to neutral
    (and greedy replaced by temperature 1 where greedy is unsupported)."""
    changes = {field: neutral for op, (field, neutral) in _FIELD_OF.items() if op not in processing.order}
    out = replace(params, **changes) if changes else params
    if out.temperature == 0 and not processing.greedy:
        out = replace(out, temperature=1.0)
    return out


def near_equal_pairs(*, vocab_size: SearchStrategy[int], batch_size: SearchStrategy[int],
                     num_draft_tokens: SearchStrategy[int], dtypes: tuple[str, ...]) -> SearchStrategy[NearEqualPair]:
    """:class:`NearEqualPair` recipes (family, sizes, base law family, ulps, dtype, seed)."""
    return st.builds(NearEqualPair, family=st.sampled_from(NEAR_EQUAL_FAMILIES), vocab_size=vocab_size,
                     batch_size=batch_size, num_draft_tokens=num_draft_tokens, seed=SEEDS,
                     dtype=st.sampled_from(dtypes), base_family=st.sampled_from(PROB_FAMILIES),
                     num_ulps=st.integers(1, 4))


def shrinkable_vocab_sizes(max_vocab: int | None = None) -> SearchStrategy[int]:
    """V from :func:`~specexact.strategies.vocab_sizes` (two thirds) or from 1..8 (one third,
    the first branch). :func:`vocab_sizes` picks a family, then a value of it, which
    Hypothesis shrinks poorly (a smaller family re-reads the rest of the example); a
    failure that also happens at a small V shrinks into the first branch instead."""
    top = 8 if max_vocab is None else max(1, min(8, max_vocab))
    big = vocab_sizes(max_size=max_vocab)
    return st.one_of(st.integers(1, top), big, big)


@st.composite
def example_sizes(draw, max_vocab: int | None = None, max_batch: int = 3, max_drafts: int = MAX_DRAFTS):
    """``(K, B, V)`` of one example: γ from :func:`~specexact.strategies.draft_lengths`
    (shrinking to 1), B in ``[1, max_batch]``, then V from :func:`shrinkable_vocab_sizes`
    capped so that ``B (K+1) V <= max_batch * CELLS_PER_DRAFT_ROW * max_vocab``
    (:data:`CELLS_PER_DRAFT_ROW`; ``max_vocab`` None: 262145)."""
    K = draw(draft_lengths(max_length=max_drafts))
    B = draw(st.integers(1, max_batch))
    top = 262145 if max_vocab is None else max_vocab
    cap = capped_vocab_size(max_batch * CELLS_PER_DRAFT_ROW * top, B, K, max_vocab=top)
    V = draw(shrinkable_vocab_sizes(None if cap == 262145 else cap))
    return K, B, V


@st.composite
def _prob_examples(draw, dtypes, max_vocab, max_batch, max_drafts):
    K, B, V = draw(example_sizes(max_vocab, max_batch, max_drafts))
    pairs = draft_target_pairs(vocab_size=V, batch_size=B, num_draft_tokens=K, dtypes=dtypes)
    near = near_equal_pairs(vocab_size=st.just(V), batch_size=st.just(B), num_draft_tokens=st.just(K), dtypes=dtypes)
    return ProbExample(pair=draw(st.one_of(pairs, pairs, near)), generator_seed=draw(SEEDS))


def prob_examples(subject, *, max_vocab: int | None = None, max_batch: int = 3,
                  max_drafts: int = MAX_DRAFTS) -> SearchStrategy[ProbExample]:
    """Probability-level examples for ``subject`` (module docstring): the pair families
    (two thirds) and near-equal pairs (one third), with a generator seed.

    Parameters
    ----------
    subject : Subject
        Supplies the input dtypes (its declared ``dtypes``: float16 and bfloat16 laws
        reach every sampler that declares them, and every plain ``verify`` callable).
    max_vocab : int, optional
        Largest V (default 262145).
    max_batch, max_drafts : int
        Largest B and K (γ; :func:`example_sizes` bounds ``B (K+1) V``).
    """
    return _prob_examples(subject.input_dtypes, max_vocab, max_batch, max_drafts)


#: Floating dtypes of logits and draft laws as engines hand them over.
_LOGITS_DTYPES = ("float32", "float16", "bfloat16")


#: Logits families of the order-sensitive rows (a law spread enough for two operations to act).
_ORDER_LOGIT_FAMILIES = ("zipf", "near_tie", "spikes", "fp16_roundtrip", "bf16_roundtrip")
#: Largest V of the order-sensitive rows (each try enumerates the law twice).
ORDER_MAX_VOCAB = 8193


@st.composite
def _logits_examples(draw, processing: LogitsProcessing, accepted: tuple[str, ...], max_vocab: int | None,
                     max_batch: int, max_drafts: int):
    pairs = order_pairs(processing)
    order = bool(pairs) and draw(st.sampled_from((False, False, True)))
    cap = ORDER_MAX_VOCAB if max_vocab is None else min(max_vocab, ORDER_MAX_VOCAB)
    K, B, V = draw(example_sizes(cap if order else max_vocab, max_batch, max_drafts))
    if order and V < 2:
        V = 2
    families = _ORDER_LOGIT_FAMILIES if order else None
    logits = draw(logit_tensors(vocab_size=V, batch_size=B * (K + 1), dtypes=_LOGITS_DTYPES, families=families))
    halves = tuple(d for d in _LOGITS_DTYPES if d in accepted) or ("float32",)
    draft = draw(probability_tensors(vocab_size=V, batch_size=B * K, dtypes=halves))
    T0 = draw(st.integers(1, 4))
    ids = st.integers(0, V - 1)
    prompt = tuple(tuple(draw(st.lists(ids, min_size=T0, max_size=T0))) for _ in range(B))
    output = tuple(tuple(draw(st.lists(ids, max_size=6))) for _ in range(B))
    if order:  # every row's first position order-sensitive (strategies.orders)
        x = logits.logits.to(torch.float32).reshape(B, K + 1, V)
        params = tuple(draw(order_sensitive_params(logits=x[b, 0], processing=processing, history=output[b],
                                                   prompt=prompt[b]))[0] for b in range(B))
    else:
        params = tuple(within_processing(draw(sampling_params(vocab_size=V)), processing) for _ in range(B))
    # handed over in the dtype the values were rounded to, where the sampler accepts it
    return LogitsExample(logits=logits, draft=draft, num_draft_tokens=K, target_params=params, prompt=prompt,
                         output=output, seed=draw(SEEDS), generator_seed=draw(SEEDS),
                         least_likely_first=draw(st.booleans()),
                         logits_dtype=logits.dtype if logits.dtype in accepted else "float32",
                         draft_dtype=draft.dtype if draft.dtype in accepted else "float32")


def logits_examples(subject, *, max_vocab: int | None = None, max_batch: int = 3,
                    max_drafts: int = MAX_DRAFTS) -> SearchStrategy[LogitsExample]:
    """Logits-level examples for ``subject`` within its declared processing (module docstring).

    Raw logits rounded to float32, float16 or bfloat16 and draft laws rounded to the
    float32 / float16 / bfloat16 the subject declares, each handed over in its own dtype
    where the subject declares it (as GPU engines hand them over), else in float32; the
    reference law is computed from the tensors handed over. γ and V as :func:`example_sizes`.
    One example in three (where the declared order has two operations whose swap can change
    the law, :func:`~specexact.strategies.order_pairs`) has order-sensitive rows: each row's
    parameters make its first position's law differ from the law of the order with two
    operations swapped by at least :data:`~specexact.strategies.MIN_ORDER_TV` in total
    variation (:func:`~specexact.strategies.order_sensitive_params`; V up to
    :data:`ORDER_MAX_VOCAB`), so an engine applying them in another order than it declares
    meets a law it does not give.
    """
    return _logits_examples(subject.processing, tuple(subject.input_dtypes), max_vocab, max_batch, max_drafts)
