"""Hypothesis strategies of fuzz examples, within what the sampler declares.

Probability level: the project's pair families (:func:`~specexact.strategies.draft_target_pairs`:
independent, identical, rounding, disjoint, removed and zero-probability drafts, one-hot,
greedy, truncated, misreported; every probability family of the target rows: Zipf, flat,
ties, masks, subnormals, half-precision round trips, sums off 1) and the near-equal pairs
of :class:`~specexact.fuzz.examples.NearEqualPair`, over vocabularies from 1 to 262145
(:func:`~specexact.strategies.vocab_sizes`: odd, power-of-two and tile edges, real
tokenizers), in the dtypes the sampler declares. Logits level: raw logits of every logits
family (:func:`~specexact.strategies.logit_tensors`), per-row
:func:`~specexact.strategies.sampling_params` restricted to the declared operations,
prompts and generated histories that repeat tokens, and a draft law of any probability
family.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from specexact.decoders.params import SamplingParams
from specexact.decoders.processing import LogitsProcessing
from specexact.strategies import (
    PROB_FAMILIES,
    draft_target_pairs,
    logit_tensors,
    probability_tensors,
    sampling_params,
    vocab_sizes,
)

from specexact.fuzz.examples import NEAR_EQUAL_FAMILIES, LogitsExample, NearEqualPair, ProbExample

__all__ = ["prob_examples", "near_equal_pairs", "logits_examples", "within_processing", "shrinkable_vocab_sizes",
           "SEEDS"]

SEEDS = st.integers(0, 2**32 - 1)
"""Seeds of recipes and generators (32-bit, as the strategies' recipes)."""

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


def prob_examples(subject, *, max_vocab: int | None = None, max_batch: int = 3,
                  max_drafts: int = 4) -> SearchStrategy[ProbExample]:
    """Probability-level examples for ``subject`` (module docstring): the pair families
    (two thirds) and near-equal pairs (one third), with a generator seed.

    Parameters
    ----------
    subject : Subject
        Supplies the input dtypes (its declared ``dtypes``).
    max_vocab : int, optional
        Largest V (default 262145).
    max_batch, max_drafts : int
        Largest B and K.
    """
    V = shrinkable_vocab_sizes(max_vocab)
    B = st.integers(1, max_batch)
    K = st.integers(1, max_drafts)
    dtypes = subject.input_dtypes
    pairs = draft_target_pairs(vocab_size=V, batch_size=B, num_draft_tokens=K, dtypes=dtypes)
    near = near_equal_pairs(vocab_size=V, batch_size=B, num_draft_tokens=K, dtypes=dtypes)
    return st.builds(ProbExample, pair=st.one_of(pairs, pairs, near), generator_seed=SEEDS)


@st.composite
def _logits_examples(draw, processing: LogitsProcessing, max_vocab: int | None, max_batch: int, max_drafts: int):
    V = draw(shrinkable_vocab_sizes(max_vocab))
    B = draw(st.integers(1, max_batch))
    K = draw(st.integers(1, max_drafts))
    logits = draw(logit_tensors(vocab_size=V, batch_size=B * (K + 1), dtypes=("float32", "float16", "bfloat16")))
    draft = draw(probability_tensors(vocab_size=V, batch_size=B * K, dtypes=("float32",)))
    params = tuple(within_processing(draw(sampling_params(vocab_size=V)), processing) for _ in range(B))
    T0 = draw(st.integers(1, 4))
    ids = st.integers(0, V - 1)
    prompt = tuple(tuple(draw(st.lists(ids, min_size=T0, max_size=T0))) for _ in range(B))
    output = tuple(tuple(draw(st.lists(ids, max_size=6))) for _ in range(B))
    return LogitsExample(logits=logits, draft=draft, num_draft_tokens=K, target_params=params, prompt=prompt,
                         output=output, seed=draw(SEEDS), generator_seed=draw(SEEDS),
                         least_likely_first=draw(st.booleans()))


def logits_examples(subject, *, max_vocab: int | None = None, max_batch: int = 3,
                    max_drafts: int = 4) -> SearchStrategy[LogitsExample]:
    """Logits-level examples for ``subject`` within its declared processing (module docstring)."""
    return _logits_examples(subject.processing, max_vocab, max_batch, max_drafts)
