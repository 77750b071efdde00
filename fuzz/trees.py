"""The fuzz phase for tree-protocol samplers: generated draft trees, the same exact rules.

A sampler that declares ``protocol="tree"`` (:mod:`specexact.decoders.tree.protocol`) is
fuzzed on :func:`~specexact.strategies.draft_trees` inputs (full trees, multi-draft
chains, single chains and per-row random trees; i.i.d., without-replacement and top-k
drafting within its declared ``tree_drafting``; every probability family of the target
rows and the float edges of :data:`~specexact.strategies.TREE_EDGES`), in its declared
dtypes, and held to the rules of :data:`~specexact.fuzz.rules.RULES` that apply to a tree:

- ``output_protocol``: :func:`~specexact.decoders.tree.check_tree_output` (shapes, ids in
  ``[0, V)``, left-aligned, the accepted nodes a root path holding their tokens);
- ``zero_probability_token``: no emitted token has target probability 0 in the row it is
  drawn from (the root's row for the first token, then the row after each accepted node);
- ``no_crash``, ``no_hang``, ``inputs_unmodified`` (all four tensors);
- ``same_generator_same_output``: tokens and accepted nodes equal for the same generator
  state with torch's global RNG seeded otherwise;
- ``uses_generator`` (lossless schemes ``"tree"`` / ``"multi_draft"`` declaring generator
  randomness): when the root's target law has two tokens of probability above 1e-6, the
  first emitted token is random (its law is that target law), so the call must draw from
  the generator it is passed;
- ``refuses_invalid_input``: a small tree with one corruption (:data:`TREE_CORRUPTIONS`).

The acceptance-rule probes need supplied uniforms of the chain protocol: not applicable
(:func:`~specexact.fuzz.families.not_applicable` says so).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import torch
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from specexact.decoders import VerifierProtocolError
from specexact.decoders.adapters.protocol import tree_drafting_of
from specexact.decoders.tree.protocol import check_tree_output
from specexact.strategies import TreeVerifyCase, draft_trees

from specexact.fuzz.invalid import expect_refusal
from specexact.fuzz.invariants import GLOBAL_SEED, OTHER_GLOBAL_SEED, guarded_call
from specexact.fuzz.rules import rule_error
from specexact.fuzz.subject import Call, Subject

__all__ = ["TreeProbInputs", "TreeExample", "tree_examples", "check_tree_call", "tree_forbidden",
           "TREE_CORRUPTIONS", "corrupt_tree", "check_tree_refused", "LOSSLESS_TREE_SCHEMES", "TREE_MAX_VOCAB",
           "TREE_MAX_NODES"]

LOSSLESS_TREE_SCHEMES = ("tree", "multi_draft")
"""Schemes whose first emitted token has the root's target law (``uses_generator`` applies)."""
TREE_MAX_VOCAB = 64
"""Largest V of the tree examples (the tree, not the vocabulary, is what varies)."""
TREE_MAX_NODES = 15
"""Largest N of the tree examples."""

TREE_CORRUPTIONS = (
    "nan_draft_prob", "negative_draft_prob", "nan_target_prob", "target_row_without_mass", "draft_id_too_large",
    "draft_id_negative", "parent_not_earlier", "parent_below_root", "parents_shape", "target_missing_node",
    "vocabulary_mismatch", "float_draft_ids", "not_a_generator",
)
"""Corruptions of a tree call."""


@dataclass(frozen=True)
class TreeProbInputs:
    """The four tensors of a ``verify_tree`` call: ``draft_token_ids [B, N]``,
    ``parent_ids [B, N]`` (int64), ``draft_probs [B, N, V]``, ``target_probs [B, N+1, V]``."""

    draft_token_ids: torch.Tensor
    parent_ids: torch.Tensor
    draft_probs: torch.Tensor
    target_probs: torch.Tensor

    FIELDS = ("draft_token_ids", "parent_ids", "draft_probs", "target_probs")

    def clone(self) -> "TreeProbInputs":
        return TreeProbInputs(*(getattr(self, k).clone() for k in self.FIELDS))


@dataclass(frozen=True)
class TreeExample:
    """One tree fuzz example: a :class:`~specexact.strategies.TreeVerifyCase` and the seed
    of the call's generator."""

    tree: TreeVerifyCase
    generator_seed: int = 0

    @cached_property
    def inputs(self) -> TreeProbInputs:
        """Fresh tensors of the tree (a copy: a call may not touch the recipe's cache)."""
        t = self.tree
        return TreeProbInputs(t.draft_token_ids.clone(), t.parent_ids.clone(), t.draft_probs.clone(),
                              t.target_probs.clone())

    @property
    def vocab_size(self) -> int:
        return int(self.tree.vocab_size)

    def describe(self) -> dict:
        """Sizes and the input family (``tree_<shape>/<drafting>[/<edge>]``), for reports and
        finding keys."""
        t = self.tree
        edge = "" if t.edge == "none" else f"/{t.edge}"
        return {"family": f"tree_{t.shape}/{t.drafting}{edge}", "vocab_size": self.vocab_size,
                "batch_size": int(t.batch_size), "num_draft_tokens": int(t.num_nodes), "dtype": t.dtype}

    def __repr__(self) -> str:
        return f"TreeExample(tree={self.tree!r}, generator_seed={self.generator_seed!r})"

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(repr(self))


SEEDS = st.integers(0, 2**32 - 1)


def tree_examples(subject: Subject, *, max_vocab: int | None = None, max_batch: int = 3,
                  max_nodes: int = TREE_MAX_NODES) -> SearchStrategy[TreeExample]:
    """Tree examples for ``subject``: its declared dtypes and tree drafting rules, V up to
    ``max_vocab`` (default :data:`TREE_MAX_VOCAB`; V = 1 included)."""
    top = TREE_MAX_VOCAB if max_vocab is None else max(1, min(TREE_MAX_VOCAB, max_vocab))
    V = st.one_of(st.integers(1, min(8, top)), st.integers(1, top))
    trees = draft_trees(vocab_size=V, batch_size=st.integers(1, max_batch), drafting=tree_drafting_of(subject.sampler),
                        dtypes=subject.input_dtypes, max_nodes=max_nodes)
    return st.builds(TreeExample, tree=trees, generator_seed=SEEDS)


def tree_forbidden(inputs: TreeProbInputs) -> torch.Tensor:
    """``[B, N+1, V]`` bool: target probability exactly 0."""
    return inputs.target_probs.detach().cpu() == 0


def _rows_of(out_nodes: torch.Tensor, num: torch.Tensor) -> torch.Tensor:
    """``[B, D+1]``: the target row each emitted token is drawn from (0 for the first, then
    ``accepted_nodes[b, j-1] + 1``); -1 past the emitted tokens."""
    B, D = out_nodes.shape
    rows = torch.cat([torch.zeros(B, 1, dtype=torch.int64), out_nodes.clamp_min(-1) + 1], 1)  # [B, D+1]
    cols = torch.arange(D + 1)[None, :]
    return torch.where(cols < num[:, None], rows, -1)


def _checked(subject: Subject, call: Call, generator, global_seed: int, forbidden: torch.Tensor):
    x = call.inputs
    out = guarded_call(subject, call, generator, global_seed)
    try:
        num = check_tree_output(out, x.draft_token_ids, x.parent_ids, call.vocab_size)
    except VerifierProtocolError as exc:
        raise rule_error("output_protocol", str(exc), call) from None
    tokens, nodes = out[0].detach().long().cpu(), out[1].detach().long().cpu()
    rows = _rows_of(nodes, num.cpu())
    present = rows >= 0
    bad = present & forbidden[torch.arange(tokens.shape[0])[:, None], rows.clamp_min(0), tokens.clamp_min(0)]
    if bool(bad.any()):
        b, j = bad.nonzero()[0].tolist()
        what = "an accepted draft" if j < int(num[b]) - 1 else "the last (recovered or bonus) token"
        where = "the root's row" if j == 0 else f"the row after node {int(nodes[b, j - 1])}"
        raise rule_error("zero_probability_token",
                         f"emitted token {int(tokens[b, j])} at row {b}, position {j} ({what}), whose target "
                         f"probability in {where} is 0; tokens {tokens[b].tolist()}, accepted nodes "
                         f"{nodes[b].tolist()}", call)
    return tokens, nodes


def _random_first_token(inputs: TreeProbInputs) -> bool:
    p = inputs.target_probs.detach().to(torch.float64).cpu()[:, 0]
    p = p / p.sum(-1, keepdim=True)
    if p.shape[-1] < 2:
        return False
    second = torch.topk(p, 2, dim=-1).values[:, 1]
    return bool((second > 1e-6).any())


def check_tree_call(subject: Subject, call: Call) -> None:
    """Every single-example rule on a tree call (module docstring); raises
    :class:`~specexact.fuzz.rules.RuleBroken`."""
    x = call.inputs
    forbidden = tree_forbidden(x)
    copy = x.clone()
    gen = call.generator(subject.device)
    before = gen.get_state()
    tokens, nodes = _checked(subject, call, gen, GLOBAL_SEED, forbidden)
    for name in TreeProbInputs.FIELDS:
        now, was = getattr(x, name), getattr(copy, name)
        if now.dtype != was.dtype or now.shape != was.shape or not torch.equal(
                torch.nan_to_num(now.detach()), torch.nan_to_num(was)):
            # the call of the finding holds the inputs as they were before the call
            raise rule_error("inputs_unmodified", f"the call modified its input {name}", replace(call, inputs=copy))
    if (subject.scheme in LOSSLESS_TREE_SCHEMES and subject.randomness == "generator" and _random_first_token(x)
            and torch.equal(before, gen.get_state())):
        raise rule_error("uses_generator", "the root's target law gives two tokens probability above 1e-6 (the first "
                                           "emitted token is random) but the call left its generator untouched (the "
                                           "sampler draws its randomness elsewhere)", call)
    again = _checked(subject, call, call.generator(subject.device), OTHER_GLOBAL_SEED, forbidden)
    if not (torch.equal(tokens, again[0]) and torch.equal(nodes, again[1])):
        raise rule_error("same_generator_same_output",
                         f"two calls with the same generator state (seed {call.generator_seed}) gave tokens "
                         f"{tokens.tolist()} and {again[0].tolist()} (torch's global RNG seeded {GLOBAL_SEED} and "
                         f"{OTHER_GLOBAL_SEED})", call)


def _poke(t: torch.Tensor, value: float, seed: int) -> torch.Tensor:
    t = t.clone()
    flat = t.view(-1)
    flat[seed % flat.numel()] = value
    return t


def corrupt_tree(inputs: TreeProbInputs, kind: str, seed: int = 0) -> TreeProbInputs:
    """``inputs`` with corruption ``kind`` (:data:`TREE_CORRUPTIONS`; the generator is
    replaced separately for ``not_a_generator``).

    Raises
    ------
    ValueError
        An unknown ``kind``.
    """
    ids, par, q, p = inputs.draft_token_ids, inputs.parent_ids, inputs.draft_probs, inputs.target_probs
    B, N = ids.shape
    V = q.shape[-1]
    if kind == "nan_draft_prob":
        return TreeProbInputs(ids, par, _poke(q, float("nan"), seed), p)
    if kind == "negative_draft_prob":
        return TreeProbInputs(ids, par, _poke(q, -0.25, seed), p)
    if kind == "nan_target_prob":
        return TreeProbInputs(ids, par, q, _poke(p, float("nan"), seed))
    if kind == "target_row_without_mass":
        p = p.clone()
        p[seed % B, seed % (N + 1)] = 0.0
        return TreeProbInputs(ids, par, q, p)
    if kind == "draft_id_too_large":
        return TreeProbInputs(_poke(ids, V + seed % 3, seed), par, q, p)
    if kind == "draft_id_negative":
        return TreeProbInputs(_poke(ids, -1 - seed % 2, seed), par, q, p)
    if kind == "parent_not_earlier":
        par = par.clone()
        n = seed % N
        par[seed % B, n] = n  # itself: not an earlier node
        return TreeProbInputs(ids, par, q, p)
    if kind == "parent_below_root":
        return TreeProbInputs(ids, _poke(par, -2, seed), q, p)
    if kind == "parents_shape":
        return TreeProbInputs(ids, torch.cat([par, par[:, :1]], 1), q, p)
    if kind == "target_missing_node":
        return TreeProbInputs(ids, par, q, p[:, :N].contiguous())
    if kind == "vocabulary_mismatch":
        return TreeProbInputs(ids, par, q, torch.cat([p, p[..., :1]], -1))
    if kind == "float_draft_ids":
        return TreeProbInputs(ids.to(torch.float32), par, q, p)
    if kind == "not_a_generator":
        return inputs
    raise ValueError(f"unknown tree corruption {kind!r}; known: {TREE_CORRUPTIONS}")


def check_tree_refused(subject: Subject, inputs: TreeProbInputs, kind: str, *, seed: int = 0,
                       source: str = "") -> None:
    """Call the tree sampler on ``inputs`` with corruption ``kind``; raise
    ``refuses_invalid_input`` unless it raises ``ValueError`` or ``TypeError``."""
    bad = corrupt_tree(inputs, kind, seed)
    call = Call(entry="verify_tree", inputs=bad, generator_seed=seed, source=source + f"  # corrupted: {kind}")
    expect_refusal(subject, call, kind, seed=seed, shown=_shown_tree_output)


def _shown_tree_output(out) -> str:
    """A tree sampler's output in a finding: its tokens when small, else its type."""
    if isinstance(out, tuple) and out and isinstance(out[0], torch.Tensor) and out[0].numel() <= 32:
        return f"tokens {out[0].tolist()}"
    return type(out).__name__
