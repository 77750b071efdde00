"""Draft trees for the tree / multi-draft protocol (:mod:`specexact.decoders.tree.protocol`).

A :class:`TreeVerifyCase` holds the recipe of one ``verify_tree`` input (tree shape,
drafting rule, sizes, families, a seed) and builds, on first access,
``draft_token_ids [B, N]``, ``parent_ids [B, N]``, ``draft_probs [B, N, V]`` and
``target_probs [B, N+1, V]``, as the chain strategies do for ``verify``
(:mod:`.pairs`): large tensors are built from the seed, never drawn element by element,
and ``repr`` rebuilds the case bit for bit.

Every node's token is drawn from its ``draft_probs`` row as the drafting rule says
(:data:`specexact.decoders.tree.DRAFTING`: i.i.d. siblings, siblings without
replacement, deterministic top-k children as point masses), the draft law after a node
being a mixture of the target's law there and an independent Zipf law (``mismatch``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cached_property
from typing import ClassVar

import numpy as np
import torch
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from specexact.decoders.tree.protocol import full_tree_parents

from ._validation import InvalidArgument, check_families, check_int, check_real, int_or_strategy
from .laws import DTYPES, PROB_FAMILIES, ProbsCase

__all__ = ["TREE_SHAPES", "TREE_DRAFTING_RULES", "TREE_EDGES", "TreeVerifyCase", "draft_trees"]

TREE_SHAPES: tuple[str, ...] = ("full", "chains", "chain", "random")
"""``full``: a full tree of ``branching`` (``branching[l]`` children per node of level
``l``); ``chains``: ``branching = (C, 1, ..., 1)``, C draft chains (multi-draft);
``chain``: a single chain ``(1,) * K``; ``random``: as many nodes as ``branching`` gives,
but every row its own tree (each node's parent drawn among the root and the earlier nodes)."""

TREE_DRAFTING_RULES: tuple[str, ...] = ("iid", "without_replacement", "top_k")
"""The drafting rules (the tree decoder's, :data:`specexact.decoders.tree.DRAFTING`)."""

TREE_EDGES: tuple[str, ...] = ("none", "identical", "target_removed", "one_hot_target")
"""Float edges on top of the tree: ``identical``: the draft law after every node is the
target's there bit for bit (every residual is empty in exact arithmetic);
``target_removed``: the target gives the root's first child token probability 0 (where
it keeps mass elsewhere); ``one_hot_target``: every target row a point mass."""

_SEED_MAX = 2**32 - 1
_MAX_NODES = 64


def _normalise(p: torch.Tensor) -> torch.Tensor:
    return p / p.sum(-1, keepdim=True)


@dataclass(frozen=True)
class TreeVerifyCase:
    """One input of the tree protocol, built from a seed (see :func:`draft_trees`).

    Parameters
    ----------
    vocab_size, batch_size : int
        V >= 1, B >= 1.
    branching : tuple of int
        Children per node at each level (entries >= 1); ``N = k_1 + k_1 k_2 + ...`` nodes
        (at most 64).
    shape : str
        One of :data:`TREE_SHAPES` (``chains`` needs ``branching[1:]`` all 1, ``chain``
        every entry 1).
    drafting : str
        One of :data:`TREE_DRAFTING_RULES`.
    seed : int
        Seeds every tensor, the random trees and the drafted ids (``0 <= seed < 2**32``).
    dtype : str
        dtype of ``draft_probs`` and ``target_probs`` (``laws.DTYPES``).
    target_family : str
        Probability family (``laws.PROB_FAMILIES``) of the target rows.
    mismatch : float
        In [0, 1]: weight of an independent Zipf law in every draft law.
    edge : str
        One of :data:`TREE_EDGES`.

    Raises
    ------
    InvalidArgument
        A field out of range (the message names it and its value).
    """

    vocab_size: int
    batch_size: int = 1
    branching: tuple[int, ...] = (2,)
    shape: str = "full"
    drafting: str = "iid"
    seed: int = 0
    dtype: str = "float32"
    target_family: str = "zipf"
    mismatch: float = 0.5
    edge: str = "none"

    _always: ClassVar[tuple[str, ...]] = ("vocab_size", "batch_size", "branching", "shape", "drafting", "seed",
                                          "dtype")

    def __post_init__(self) -> None:
        check_int(self.vocab_size, "vocab_size", minimum=1)
        check_int(self.batch_size, "batch_size", minimum=1)
        check_int(self.seed, "seed", minimum=0, maximum=_SEED_MAX)
        if not isinstance(self.branching, tuple) or not self.branching:
            raise InvalidArgument(f"branching={self.branching!r} must be a non-empty tuple of integers >= 1")
        for k in self.branching:
            check_int(k, "branching entry", minimum=1)
        if self.shape not in TREE_SHAPES:
            raise InvalidArgument(f"shape={self.shape!r} must be one of {TREE_SHAPES!r}")
        if self.shape == "chains" and any(k != 1 for k in self.branching[1:]):
            raise InvalidArgument(f"shape='chains' needs branching (C, 1, ..., 1), got branching={self.branching!r}")
        if self.shape == "chain" and any(k != 1 for k in self.branching):
            raise InvalidArgument(f"shape='chain' needs branching (1, ..., 1), got branching={self.branching!r}")
        if self.num_nodes > _MAX_NODES:
            raise InvalidArgument(f"branching={self.branching!r} gives {self.num_nodes} nodes; at most {_MAX_NODES}")
        if self.drafting not in TREE_DRAFTING_RULES:
            raise InvalidArgument(f"drafting={self.drafting!r} must be one of {TREE_DRAFTING_RULES!r}")
        if self.dtype not in DTYPES:
            raise InvalidArgument(f"dtype={self.dtype!r} must be one of {DTYPES!r}")
        if self.target_family not in PROB_FAMILIES:
            raise InvalidArgument(f"target_family={self.target_family!r} must be one of {PROB_FAMILIES!r}")
        check_real(self.mismatch, "mismatch", low=0.0, high=1.0)
        if self.edge not in TREE_EDGES:
            raise InvalidArgument(f"edge={self.edge!r} must be one of {TREE_EDGES!r}")

    def __repr__(self) -> str:
        parts = [f"{f}={getattr(self, f)!r}" for f in self._always]
        parts += [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self)
                  if f.name not in self._always and getattr(self, f.name) != f.default]
        return f"TreeVerifyCase({', '.join(parts)})"

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(repr(self))

    @property
    def num_nodes(self) -> int:
        """N."""
        n, width = 0, 1
        for k in self.branching:
            width *= int(k)
            n += width
        return n

    @cached_property
    def _tensors(self) -> dict[str, torch.Tensor]:
        B, N, V = self.batch_size, self.num_nodes, self.vocab_size
        dt = getattr(torch, self.dtype)
        rng = np.random.default_rng(self.seed)
        full = full_tree_parents(self.branching).numpy()
        parents = np.empty((B, N), dtype=np.int64)
        for b in range(B):
            if self.shape == "random":
                parents[b] = [-1] + [int(rng.integers(-1, n)) for n in range(1, N)]
            else:
                parents[b] = full
        if self.edge == "one_hot_target":
            hot = torch.from_numpy(rng.integers(V, size=(B * (N + 1), 1)))
            target = torch.zeros(B * (N + 1), V, dtype=torch.float64).scatter_(1, hot, 1.0).to(dt)
        else:
            target = ProbsCase(family=self.target_family, vocab_size=V, batch_size=B * (N + 1), seed=self.seed,
                               dtype=self.dtype, num_spikes=3).probs
        target = target.to(torch.float64).reshape(B, N + 1, V)
        other = ProbsCase(family="zipf", vocab_size=V, batch_size=B * (N + 1), seed=(self.seed + 1) % (_SEED_MAX + 1),
                          dtype="float64").probs.reshape(B, N + 1, V)
        if self.edge == "identical":
            q_after = target.clone()  # q_u = p_u bit for bit (in the dtype)
        else:
            q_after = _normalise((1 - self.mismatch) * _normalise(target) + self.mismatch * other)
        ids = np.empty((B, N), dtype=np.int64)
        rows = torch.empty(B, N, V, dtype=torch.float64)
        for b in range(B):
            earlier: dict[int, list[int]] = {}  # parent node -> its children's tokens so far
            for n in range(N):
                u = int(parents[b, n])
                q = q_after[b, u + 1]
                taken = earlier.setdefault(u, [])
                if self.drafting == "top_k":
                    order = torch.sort(-q, stable=True).indices
                    tok = int(order[len(taken) % V])
                    law = torch.zeros(V, dtype=torch.float64)
                    law[tok] = 1.0
                else:
                    law = q.clone()
                    if self.drafting == "without_replacement" and taken:
                        law[taken] = 0.0
                        law = q.clone() if float(law.sum()) <= 0 else law
                    law = law / law.sum()
                    if float(law.to(dt).to(torch.float64).sum()) <= 0:  # flushed by a half dtype: the node's q
                        law = q / q.sum()
                    tok = int(rng.choice(V, p=(law / law.sum()).numpy()))
                ids[b, n] = tok
                rows[b, n] = law
                taken.append(tok)
        if self.edge == "target_removed":
            for b in range(B):
                d = int(ids[b, 0])
                if float(target[b, 0].sum() - target[b, 0, d]) > 0:
                    target[b, 0, d] = 0.0
        draft_out, target_out = rows.to(dt), target.to(dt)
        for name, t in (("draft_probs", draft_out), ("target_probs", target_out)):
            if not bool((t.to(torch.float64).sum(-1) > 0).all()):  # pragma: no cover - guarded above
                raise AssertionError(f"{self!r} built a {name} row with no mass")
        return {"draft_token_ids": torch.from_numpy(ids), "parent_ids": torch.from_numpy(parents),
                "draft_probs": draft_out, "target_probs": target_out}

    @property
    def draft_token_ids(self) -> torch.Tensor:
        """``[B, N]`` int64 drafted ids."""
        return self._tensors["draft_token_ids"]

    @property
    def parent_ids(self) -> torch.Tensor:
        """``[B, N]`` int64: ``-1`` or an earlier node."""
        return self._tensors["parent_ids"]

    @property
    def draft_probs(self) -> torch.Tensor:
        """``[B, N, V]``: the law each node's token was drawn from, dtype :attr:`dtype`."""
        return self._tensors["draft_probs"]

    @property
    def target_probs(self) -> torch.Tensor:
        """``[B, N+1, V]``: the target law after the context (row 0) and after each node's
        path (row ``n + 1``), dtype :attr:`dtype`."""
        return self._tensors["target_probs"]


@st.composite
def _branchings(draw, shape: str, max_nodes: int) -> tuple[int, ...]:
    if shape == "chain":
        return (1,) * draw(st.integers(1, min(6, max_nodes)))
    if shape == "chains":
        C = draw(st.integers(1, 4))
        K = draw(st.integers(1, max(1, min(4, max_nodes // C))))
        return (C,) + (1,) * (K - 1)
    levels, n, width = [], 0, 1
    for _ in range(draw(st.integers(1, 3))):
        k = draw(st.integers(1, 3))
        if n + width * k > max_nodes:
            break
        width *= k
        n += width
        levels.append(k)
    return tuple(levels) or (1,)


@st.composite
def _trees(draw, vocab_size, batch_size, shapes, draftings, dtypes, target_families, edges, max_nodes):
    shape = draw(st.sampled_from(shapes))
    branching = draw(_branchings(shape, max_nodes))
    return TreeVerifyCase(vocab_size=draw(vocab_size), batch_size=draw(batch_size), branching=branching,
                          shape=shape, drafting=draw(st.sampled_from(draftings)), seed=draw(st.integers(0, _SEED_MAX)),
                          dtype=draw(st.sampled_from(dtypes)), target_family=draw(st.sampled_from(target_families)),
                          mismatch=draw(st.one_of(st.sampled_from([0.0, 0.5, 1.0]), st.floats(0, 1))),
                          edge=draw(st.sampled_from(edges)))


def draft_trees(
    *,
    vocab_size: int | SearchStrategy[int] | None = None,
    batch_size: int | SearchStrategy[int] | None = None,
    shapes: tuple[str, ...] | None = None,
    drafting: tuple[str, ...] | None = None,
    dtypes: tuple[str, ...] | None = None,
    target_families: tuple[str, ...] | None = None,
    edges: tuple[str, ...] | None = None,
    max_nodes: int = 24,
) -> SearchStrategy[TreeVerifyCase]:
    """Inputs of the tree protocol: tree shapes, drafting rules and float edges.

    Parameters
    ----------
    vocab_size : int or SearchStrategy[int], keyword-only
        V (default 1..64).
    batch_size : int or SearchStrategy[int], keyword-only
        B (default 1..3).
    shapes : sequence of str, keyword-only
        Subset of :data:`TREE_SHAPES` (default all): full trees of depth 1..3 with 1..3
        children per level, 1..4 chains of 1..4 drafts, single chains of 1..6, random
        per-row trees.
    drafting : sequence of str, keyword-only
        Subset of :data:`TREE_DRAFTING_RULES` (default all).
    dtypes : sequence of str, keyword-only
        dtypes of the probability tensors (default all of ``laws.DTYPES``).
    target_families : sequence of str, keyword-only
        Probability families of the target rows (default all of ``laws.PROB_FAMILIES``:
        Zipf, flat, ties, masks, subnormals, half-precision round trips, ...).
    edges : sequence of str, keyword-only
        Subset of :data:`TREE_EDGES` (default all).
    max_nodes : int, keyword-only
        Largest N (1..64, default 24).

    Returns
    -------
    SearchStrategy[TreeVerifyCase]
        ``draft_token_ids [B, N]``, ``parent_ids [B, N]`` (int64), ``draft_probs [B, N, V]``,
        ``target_probs [B, N+1, V]``.

    Raises
    ------
    InvalidArgument
        On bad sizes or unknown / repeated names.
    """
    V = int_or_strategy(vocab_size if vocab_size is not None else st.integers(1, 64), "vocab_size", minimum=1)
    B = int_or_strategy(batch_size if batch_size is not None else st.integers(1, 3), "batch_size", minimum=1)
    check_int(max_nodes, "max_nodes", minimum=1, maximum=_MAX_NODES)
    return _trees(V, B, check_families(shapes, "shapes", TREE_SHAPES),
                  check_families(drafting, "drafting", TREE_DRAFTING_RULES),
                  check_families(dtypes, "dtypes", DTYPES),
                  check_families(target_families, "target_families", PROB_FAMILIES),
                  check_families(edges, "edges", TREE_EDGES), int(max_nodes))
