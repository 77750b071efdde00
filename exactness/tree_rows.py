"""The inputs of an exact round law: the prefix laws, one tree row, the drawn draft tree.

- :class:`PrefixLaws`: the target and draft laws after any prefix (fixed vectors, any function
  of the prefix, or the toy models through the logits pipeline in float64), memoised;
- :class:`TreeRow`: one row of the tree protocol in float64 numpy form, what a verification
  program (:mod:`.verify_programs`) reads, and :class:`Emitted`, what it returns;
- :func:`draft_tree`: the decoder's drafting rule as a decision program
  (:mod:`.program_law`), so that a round law (:mod:`.tree_laws`) enumerates every tree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

import numpy as np
import torch
from specexact.decoders import SamplingParams, batch_params, process_logits
from specexact.decoders.tree.protocol import full_tree_parents

from .program_law import DecisionRNG

__all__ = ["PrefixLaws", "TreeRow", "Emitted", "draft_tree"]


def _normalised(v) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    if v.ndim != 1 or v.size == 0 or not np.all(np.isfinite(v)) or np.any(v < 0) or not v.sum() > 0:
        raise ValueError(f"a law must be a non-empty vector of finite entries >= 0 with positive mass, got {v!r}")
    return v / v.sum()


class PrefixLaws:
    """The target and draft laws after any prefix of generated tokens (float64, memoised).

    Parameters
    ----------
    target, draft : callable
        ``law(prefix: tuple[int, ...]) -> array [V]`` (normalised here).
    vocab_size : int

    Use :meth:`fixed` for laws that ignore the prefix and :meth:`from_models` for toy models.
    """

    def __init__(self, target: Callable[[tuple], np.ndarray], draft: Callable[[tuple], np.ndarray],
                 vocab_size: int) -> None:
        if int(vocab_size) != vocab_size or vocab_size < 1:
            raise ValueError(f"vocab_size must be an integer >= 1, got {vocab_size!r}")
        self.vocab_size = int(vocab_size)
        self._target_fn, self._draft_fn = target, draft
        self._target: dict[tuple, np.ndarray] = {}
        self._draft: dict[tuple, np.ndarray] = {}

    def _get(self, cache, fn, prefix) -> np.ndarray:
        prefix = tuple(int(t) for t in prefix)
        law = cache.get(prefix)
        if law is None:
            law = _normalised(fn(prefix))
            if law.shape != (self.vocab_size,):
                raise ValueError(f"a law must have {self.vocab_size} entries, got shape {law.shape}")
            law.setflags(write=False)
            cache[prefix] = law
        return law

    def target(self, prefix: Sequence[int] = ()) -> np.ndarray:
        """Shape ``[V]``: the target's law of the token after ``prefix``."""
        return self._get(self._target, self._target_fn, prefix)

    def draft(self, prefix: Sequence[int] = ()) -> np.ndarray:
        """Shape ``[V]``: the draft's law of the token after ``prefix``."""
        return self._get(self._draft, self._draft_fn, prefix)

    @classmethod
    def fixed(cls, target_probs, draft_probs) -> "PrefixLaws":
        """Laws that do not depend on the prefix (both of shape ``[V]``)."""
        p, q = _normalised(target_probs), _normalised(draft_probs)
        if p.shape != q.shape:
            raise ValueError(f"target_probs and draft_probs must have one shape, got {p.shape} and {q.shape}")
        return cls(lambda prefix: p, lambda prefix: q, p.size)

    @classmethod
    def from_models(cls, target, draft, prompt_ids: torch.Tensor, target_params: SamplingParams,
                    draft_params: SamplingParams | None = None, *,
                    target_processing: Callable | None = None) -> "PrefixLaws":
        """The toy models' processed laws after ``prompt_ids`` (shape ``[T0]``) and a prefix,
        in float64 through :func:`~specexact.decoders.process_logits` with the prefix as the
        penalty history (as the decoders do).

        ``target_processing`` (a :class:`~specexact.decoders.processing.LogitsProcessing`,
        default the built-in pipeline) processes the target side, as a logits-level sampler
        declares; the draft side is always the built-in pipeline (the decoder's own).
        """
        t64, d64 = target.to(dtype=torch.float64), draft.to(dtype=torch.float64)
        prompt = prompt_ids.reshape(1, -1).to(t64.device)
        d_params = target_params if draft_params is None else draft_params

        def law(model, params, processing):
            def fn(prefix):
                hist = torch.tensor([list(prefix)], dtype=torch.int64, device=prompt.device).reshape(1, len(prefix))
                ids = torch.cat([prompt, hist], 1)
                logits = model(ids, torch.tensor([[ids.shape[1] - 1]], device=prompt.device))[:, 0]
                bp = batch_params(params, 1, prompt.device)
                out = (process_logits(logits, bp, hist) if processing is None
                       else processing(logits, bp, hist, prompt))
                return out[0].cpu().numpy()
            return fn

        return cls(law(t64, target_params, target_processing), law(d64, d_params, None), t64.vocab_size)


class Emitted(NamedTuple):
    """What a verification program returns for one row.

    Attributes
    ----------
    tokens : tuple of int
        The accepted drafts, then the recovered / bonus token.
    nodes : tuple of int
        The accepted nodes (one fewer than ``tokens``).
    """

    tokens: tuple
    nodes: tuple


@dataclass(frozen=True)
class TreeRow:
    """One row of the tree protocol in float64 numpy form (what the programs read).

    Attributes
    ----------
    tokens : tuple of int
        ``N`` node tokens.
    parents : tuple of int
        ``N`` parent indices (``-1``: the root).
    draft_probs : np.ndarray
        Shape ``[N, V]``: the law each node's token was drawn from (rows normalised).
    target_probs : np.ndarray
        Shape ``[N+1, V]``: row 0 after the context, row ``n + 1`` after node ``n``'s path.
    """

    tokens: tuple
    parents: tuple
    draft_probs: np.ndarray
    target_probs: np.ndarray

    def children(self, node: int) -> list[int]:
        """Children of ``node`` (``-1``: the root) in sibling (index) order."""
        return [n for n, par in enumerate(self.parents) if par == node]

    def target(self, node: int) -> np.ndarray:
        """Shape ``[V]``: the target law after ``node``'s path (``-1``: the context)."""
        return self.target_probs[node + 1]

    def depth(self, node: int) -> int:
        d = 0
        while node >= 0:
            node, d = self.parents[node], d + 1
        return d

    @classmethod
    def from_tensors(cls, draft_token_ids, parent_ids, draft_probs, target_probs, row: int) -> "TreeRow":
        """Row ``row`` of the tree protocol's tensors."""
        q = draft_probs[row].to(torch.float64).cpu().numpy()
        p = target_probs[row].to(torch.float64).cpu().numpy()
        return cls(tuple(int(t) for t in draft_token_ids[row].tolist()),
                   tuple(int(t) for t in parent_ids[row].tolist()),
                   q / q.sum(-1, keepdims=True), p / p.sum(-1, keepdims=True))


def draft_tree(laws: PrefixLaws, rng: DecisionRNG, *, branching: Sequence[int], drafting: str = "iid",
               prefix: Sequence[int] = ()) -> TreeRow:
    """Draw a full draft tree after ``prefix`` (the decoder's rule,
    :func:`~specexact.decoders.tree.draft_children`) as a decision program.

    Children of each node are drawn from the draft law after its path, level by level in
    breadth-first order: ``"iid"`` (row = that law), ``"without_replacement"`` (each child from
    the law with earlier siblings' tokens removed, renormalised; the law itself when nothing is
    left) or ``"top_k"`` (the most probable tokens, ties lower id; point-mass rows).
    """
    if drafting not in ("iid", "without_replacement", "top_k"):
        raise ValueError(f"drafting must be 'iid', 'without_replacement' or 'top_k', got {drafting!r}")
    parents = [int(x) for x in full_tree_parents(branching).tolist()]
    V = laws.vocab_size
    prefix = tuple(prefix)
    paths: dict[int, tuple] = {-1: ()}
    tokens = [0] * len(parents)
    rows = np.zeros((len(parents), V))
    n = 0
    frontier = [-1]
    for k in branching:
        nxt = []
        for f in frontier:
            q = laws.draft(prefix + paths[f])
            remaining = q.copy()
            order = np.argsort(-q, kind="stable")
            for j in range(int(k)):
                if drafting == "top_k":
                    x = int(order[j])
                    row = np.zeros(V)
                    row[x] = 1.0
                else:
                    row = q if drafting == "iid" or remaining.sum() <= 0 else remaining / remaining.sum()
                    x = rng.categorical(row)
                    remaining[x] = 0.0
                tokens[n], rows[n] = x, row
                paths[n] = paths[f] + (x,)
                nxt.append(n)
                n += 1
        frontier = nxt
    target_rows = np.stack([laws.target(prefix)] + [laws.target(prefix + paths[m]) for m in range(len(parents))])
    return TreeRow(tuple(tokens), tuple(parents), rows, target_rows)
