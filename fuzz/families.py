"""The fuzz families: what is generated and which exact rules each example is held to.

A :class:`Family` pairs a Hypothesis strategy of examples with a check that raises
:class:`~specexact.fuzz.rules.RuleBroken`. :func:`families_for` lists those that apply
to a sampler (the probes only where acceptance uniforms can be supplied, and only for the
token-wise scheme); :func:`not_applicable` says what does not apply and why:

==========================  =====================================================  ==========================
family                      examples                                               rules
==========================  =====================================================  ==========================
``verify_calls``            pair families and near-equal pairs, V 1..262145        protocol, zero-probability
                                                                                   token, crash, hang, inputs
                                                                                   unmodified, generator
``acceptance_probes``       the same, V <= 8193; each draft probed with boundary   acceptance rule (and the
                            uniforms and its threshold bisected                    above on every probe call)
``invalid_inputs``          a small valid example with one corruption              refuses invalid input
``logits_calls``            raw logits, parameters, histories (logits level)       as ``verify_calls``
``logits_acceptance_probes``  the same, V <= 8193                                  as ``acceptance_probes``
``logits_invalid_inputs``   a small logits example with one corruption             refuses invalid input
``tree_calls``              draft trees (:mod:`.trees`), V <= 64, N <= 15          as ``verify_calls`` (tree
                                                                                   output protocol)
``tree_invalid_inputs``     a small draft tree with one corruption                 refuses invalid input
==========================  =====================================================  ==========================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from specexact.fuzz.generation import SEEDS, logits_examples, prob_examples
from specexact.fuzz.invalid import LOGITS_CORRUPTIONS, PROB_CORRUPTIONS, check_refused
from specexact.fuzz.invariants import check_call_invariants
from specexact.fuzz.probes import probe_example
from specexact.fuzz.subject import Call, Subject
from specexact.fuzz.trees import (LOSSLESS_TREE_SCHEMES, TREE_CORRUPTIONS, check_tree_call, check_tree_refused, tree_examples)

__all__ = ["Family", "families_for", "not_applicable", "PROBE_MAX_VOCAB", "INVALID_MAX_VOCAB"]

#: Largest V of the probe families (a bisection makes ~30-60 calls per example).
PROBE_MAX_VOCAB = 8193
#: Largest V of the invalid-input families (the corruption matters, not the size).
INVALID_MAX_VOCAB = 64
#: Corruptions of the draft law only: not applicable to sample-and-compare (:func:`not_applicable`).
DRAFT_PROB_CORRUPTIONS = ("nan_draft_prob", "negative_draft_prob")


@dataclass(frozen=True)
class Family:
    """One fuzz family.

    Attributes
    ----------
    name, description : str
    rules : tuple of str
        The rules its check can break.
    strategy : SearchStrategy
        Examples (``ProbExample``, ``LogitsExample``, or ``(example, corruption, seed)``).
    check : callable
        ``check(example)``: raises :class:`~specexact.fuzz.rules.RuleBroken`.
    weight : float
        Its share of the fuzz time (normalised over the families that run).
    describe : callable
        ``describe(example) -> dict`` (family, vocab_size, ...) for the report's tallies.
    """

    name: str
    description: str
    rules: tuple[str, ...]
    strategy: SearchStrategy
    check: Callable
    weight: float
    describe: Callable


_CALL_RULES = ("output_protocol", "zero_probability_token", "no_crash", "no_hang", "inputs_unmodified",
               "uses_generator", "same_generator_same_output")
_PROBE_RULES = ("acceptance_rule", "zero_probability_token", "no_crash", "no_hang", "output_protocol")


def _calls(subject: Subject):
    entry = "verify_logits" if subject.logits_level else "verify"

    def check(example) -> None:
        call = Call(entry=entry, inputs=example.inputs, generator_seed=example.generator_seed,
                    source=f"{example!r}.inputs")
        check_call_invariants(subject, call)

    return check


def _probes(subject: Subject):
    def check(example) -> None:
        probe_example(subject, example.inputs, generator_seed=example.generator_seed, source=f"{example!r}.inputs")

    return check


def _invalid(subject: Subject):
    def check(case) -> None:
        example, kind, seed = case
        check_refused(subject, example.inputs, kind, seed=seed, source=f"corrupt({example!r}.inputs, {kind!r}, {seed})")

    return check


def _describe(example) -> dict:
    return example.describe()


def _describe_invalid(case) -> dict:
    example, kind, _ = case
    return {**example.describe(), "family": kind}


def not_applicable(subject: Subject) -> list[dict]:
    """What of the fuzz phase does not apply to ``subject``, and why:
    ``[{"what": family or rule name, "reason": str}]``.

    - A tree-protocol sampler gets the tree families (:mod:`.trees`): no acceptance-rule
      probes (supplied uniforms are a chain-protocol entry point), and ``uses_generator``
      only for a lossless tree scheme declaring generator randomness.
    - The acceptance-rule probes compare each draft's acceptance threshold with
      ``min(1, p/q)``, and the rule ``uses_generator`` calls a decision random when that
      ratio is strictly inside (0, 1): both are the token-wise rule's, so a sampler that
      declares another scheme (sample-compare, block, lossy) is not held to them.
    - Sample-and-compare never reads ``draft_probs``: the corruptions of the draft law
      (:data:`DRAFT_PROB_CORRUPTIONS`) are not invalid inputs of its rule. The other
      rules (protocol, zero-probability token, crash, hang, inputs unmodified, the same
      generator state giving the same output, invalid inputs) hold for every scheme.
    """
    out = []
    if subject.protocol == "tree":
        out.append({"what": "acceptance_probes", "reason": "the probes supply acceptance uniforms through the chain "
                                                           "protocol's verify_with_uniforms; the sampler declares "
                                                           "protocol 'tree'"})
        if subject.scheme not in LOSSLESS_TREE_SCHEMES or subject.randomness != "generator":
            out.append({"what": "uses_generator", "reason": f"a random first token is the law of a lossless tree "
                                                            f"scheme drawing from its generator; the sampler declares "
                                                            f"scheme {subject.scheme!r}, randomness "
                                                            f"{subject.randomness!r}"})
        return out
    if subject.protocol != "chain":
        out.append({"what": "every family", "reason": f"no examples of protocol {subject.protocol!r}"})
        return out
    if subject.scheme != "tokenwise":
        why = (f"judges the token-wise acceptance rule min(1, p/q); the sampler declares scheme "
               f"{subject.scheme!r}")
        if subject.uniforms:
            out.append({"what": f"{'logits_' if subject.logits_level else ''}acceptance_probes", "reason": why})
        out.append({"what": "uses_generator", "reason": why})
    if subject.scheme == "sample_compare":
        out.append({"what": f"{'logits_' if subject.logits_level else ''}invalid_inputs[{', '.join(DRAFT_PROB_CORRUPTIONS)}]",
                    "reason": "sample-and-compare never reads draft_probs (the target samples its own token), so a "
                              "corrupted draft law is not an input of its rule"})
    return out


def families_for(subject: Subject, *, max_vocab: int | None = None) -> list[Family]:
    """The families that apply to ``subject`` (module docstring; :func:`not_applicable`
    lists the rest).

    ``max_vocab`` caps V everywhere (default: 262145 for the call families).
    """
    if subject.protocol == "tree":
        return _tree_families(subject, max_vocab)
    if subject.protocol != "chain":
        return []
    tokenwise = subject.scheme == "tokenwise"
    def cap(v: int | None) -> int | None:
        return v if max_vocab is None else (max_vocab if v is None else min(v, max_vocab))

    if subject.logits_level:
        examples, corruptions, prefix, calls = logits_examples, LOGITS_CORRUPTIONS, "logits_", "logits_calls"
    else:
        examples, corruptions, prefix, calls = prob_examples, PROB_CORRUPTIONS, "", "verify_calls"
    # logits level: a finding that the law of the declared order with two operations swapped
    # explains is the declared_processing rule's (fuzz.declared_order)
    order = ("declared_processing",) if subject.logits_level else ()
    out = [Family(calls,
                  "generated inputs (every pair / logits family, V up to 262145): one call, then the same "
                  "generator state again with torch's global RNG reseeded",
                  (_CALL_RULES if tokenwise else tuple(r for r in _CALL_RULES if r != "uses_generator")) + order,
                  examples(subject, max_vocab=cap(None)), _calls(subject), 0.35, _describe)]
    if subject.uniforms and tokenwise:
        out.append(Family(f"{prefix}acceptance_probes",
                          f"each draft probed with supplied uniforms (0, smallest, just below / at / just above "
                          f"p/q, largest below 1) and its acceptance threshold bisected on the "
                          f"{str(subject.uniforms_dtype).removeprefix('torch.')} grid",
                          _PROBE_RULES + order, examples(subject, max_vocab=cap(PROBE_MAX_VOCAB)), _probes(subject),
                          0.45,
                          _describe))
    small = examples(subject, max_vocab=cap(INVALID_MAX_VOCAB), max_batch=2, max_drafts=2)
    if subject.scheme == "sample_compare":
        corruptions = tuple(c for c in corruptions if c not in DRAFT_PROB_CORRUPTIONS)
    out.append(Family(f"{prefix}invalid_inputs", "a valid example with one corruption (NaN, inf, negative, no mass, "
                                                 "ids out of range, wrong shapes or dtypes, not a generator)",
                      ("refuses_invalid_input",), st.tuples(small, st.sampled_from(corruptions), SEEDS),
                      _invalid(subject), 0.2, _describe_invalid))
    return out


def _tree_families(subject: Subject, max_vocab: int | None) -> list[Family]:
    """``tree_calls`` and ``tree_invalid_inputs`` (:mod:`.trees`)."""
    def calls(example) -> None:
        check_tree_call(subject, Call(entry="verify_tree", inputs=example.inputs,
                                      generator_seed=example.generator_seed, source=f"{example!r}.inputs"))

    def invalid(case) -> None:
        example, kind, seed = case
        check_tree_refused(subject, example.inputs, kind, seed=seed,
                           source=f"corrupt_tree({example!r}.inputs, {kind!r}, {seed})")

    rules = _CALL_RULES
    if subject.scheme not in LOSSLESS_TREE_SCHEMES or subject.randomness != "generator":
        rules = tuple(r for r in _CALL_RULES if r != "uses_generator")
    small = tree_examples(subject, max_vocab=min(max_vocab or INVALID_MAX_VOCAB, INVALID_MAX_VOCAB), max_batch=2,
                          max_nodes=6)
    return [Family("tree_calls", "generated draft trees (full trees, chains, per-row random trees; i.i.d., "
                                 "without-replacement and top-k drafting; float edges; V up to 64): one call, then "
                                 "the same generator state again with torch's global RNG reseeded",
                   rules, tree_examples(subject, max_vocab=max_vocab), calls, 0.7, _describe),
            Family("tree_invalid_inputs", "a small draft tree with one corruption (NaN, negative, no mass, ids out "
                                          "of range, parents not earlier nodes, wrong shapes or dtypes, not a "
                                          "generator)",
                   ("refuses_invalid_input",), st.tuples(small, st.sampled_from(TREE_CORRUPTIONS), SEEDS), invalid,
                   0.3, _describe_invalid)]
