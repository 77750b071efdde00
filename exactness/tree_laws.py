"""Exact laws of tree, multi-draft, block and lossy verification rounds, by enumeration.

For a small vocabulary every speculative round can be enumerated: the draft tree (or chain)
is a decision program over the draft laws, the verification another over its acceptance
probabilities and residuals (:mod:`.program_law`), and the two together give the exact law
of the round's emitted tokens. From it:

- :func:`round_law`: the law of one round's emitted tokens (a tuple of 1 .. D+1 ids) after a
  prefix, for a scheme's verification program (:data:`SCHEME_PROGRAMS`) or any other one (the
  zoo's bugs and variants are programs too);
- :func:`accepted_length_law`: the round's accepted-length law (its emitted length minus 1);
  closed forms for the schemes that have one: :func:`tokenwise_accepted_length_law`
  (``P(N >= i) = sum prod min(p, q)``), :func:`block_accepted_length_law` (``P(tau >= i) =
  E[w_i]``, larger), :func:`target_only_accepted_length_law` (a deterministic tree), and a
  level recursion for recursive rejection sampling, :func:`rrs_accepted_length_law`;
- :func:`complete_with_target`: the round's output continued by target sampling to a fixed
  length; a scheme is lossless iff this equals :func:`target_sequence_law` (the round's own
  statement of exactness);
- :func:`generation_law`: the law of the first ``length`` tokens of a whole generation by
  repeated rounds (what the audit's sequence checks sample), e.g. of a lossy scheme, and
  :func:`total_variation` between laws.

The laws of the drafts and the target come from a :class:`~.tree_rows.PrefixLaws`; the
schemes' verification programs are in :mod:`.verify_programs` (their names are re-exported
here, where the laws' users have always imported them).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
from specexact.decoders.tree.protocol import full_tree_parents

from .program_law import GeneratorRNG, program_law, program_paths
from .tree_rows import Emitted, PrefixLaws, TreeRow, draft_tree
from .verify_programs import (
    SCHEME_PROGRAMS,
    _ratio_prob,
    block_program,
    block_weights,
    chain_verifier_from_program,
    rrs_program,
    target_only_program,
    tokenwise_program,
    tree_verifier_from_program,
    typical_program,
)

__all__ = [
    "PrefixLaws",
    "TreeRow",
    "Emitted",
    "draft_tree",
    "tokenwise_program",
    "block_program",
    "block_weights",
    "rrs_program",
    "target_only_program",
    "typical_program",
    "SCHEME_PROGRAMS",
    "round_law",
    "accepted_length_law",
    "tokenwise_accepted_length_law",
    "block_accepted_length_law",
    "target_only_accepted_length_law",
    "rrs_accepted_length_law",
    "target_sequence_law",
    "complete_with_target",
    "generation_law",
    "total_variation",
    "tree_verifier_from_program",
    "chain_verifier_from_program",
]


# ----------------------------------------------------------------------------------------
# Laws.


def round_law(laws: PrefixLaws, verify_program: Callable | str, *, branching: Sequence[int],
              drafting: str = "iid", prefix: Sequence[int] = (), max_runs: int = 2_000_000,
              **params) -> dict:
    """Exact law of one round's emitted tokens after ``prefix``.

    Parameters
    ----------
    laws : PrefixLaws
    verify_program : callable or str
        ``program(row: TreeRow, rng, **params) -> Emitted`` (only its tokens matter), or a name in
        :data:`SCHEME_PROGRAMS`.
    branching : sequence of int
        The draft tree (:func:`~specexact.decoders.tree.full_tree_parents`); ``(1,) * K`` for
        a chain.
    drafting : {"iid", "without_replacement", "top_k"}
    prefix : sequence of int
        Tokens generated before the round.
    max_runs : int
        Passed to :func:`~.program_law.program_law`.
    **params
        Keyword parameters of the program (e.g. thresholds).

    Returns
    -------
    dict
        ``{emitted tuple: probability}``.
    """
    program = SCHEME_PROGRAMS[verify_program] if isinstance(verify_program, str) else verify_program
    law: dict = {}
    trees = program_paths(lambda rng: draft_tree(laws, rng, branching=branching, drafting=drafting, prefix=prefix),
                          max_runs=max_runs)
    for row, weight in trees:  # the draft tree first, then the verification on it
        for tokens, prob in program_law(lambda rng: tuple(program(row, rng, **params).tokens),
                                        max_runs=max_runs).items():
            law[tokens] = law.get(tokens, 0.0) + weight * prob
    return law


def accepted_length_law(law: dict, max_accepted: int) -> np.ndarray:
    """Shape ``[max_accepted + 1]``: ``P(accepted = k)`` from a :func:`round_law` (emitted
    length minus one)."""
    out = np.zeros(max_accepted + 1)
    for tokens, prob in law.items():
        out[len(tokens) - 1] += prob
    return out


def _at_least_to_law(at_least: list[float]) -> np.ndarray:
    at_least = np.asarray(at_least + [0.0])
    return at_least[:-1] - at_least[1:]


def tokenwise_accepted_length_law(laws: PrefixLaws, gamma: int, prefix: Sequence[int] = ()) -> np.ndarray:
    """``P(N = k)``, ``k = 0..gamma``, of token-wise verification: ``P(N >= i) = sum over draft
    paths of prod_j min(p_j(x_j), q_j(x_j))`` (Leviathan et al. 2023, sec. 3.1)."""
    prefix = tuple(prefix)
    layer = {(): 1.0}
    at_least = [1.0]
    for _ in range(gamma):
        nxt = {}
        for path, w in layer.items():
            m = np.minimum(laws.target(prefix + path), laws.draft(prefix + path))
            for x in np.flatnonzero(m > 0):
                nxt[path + (int(x),)] = w * m[x]
        layer = nxt
        at_least.append(sum(layer.values()))
    return _at_least_to_law(at_least)


def block_accepted_length_law(laws: PrefixLaws, gamma: int, prefix: Sequence[int] = ()) -> np.ndarray:
    """``P(tau = k)``, ``k = 0..gamma``, of block verification: ``P(tau >= i) = sum over draft
    paths x_1..x_i of prod_j q_{j-1}(x_j) * w_i`` with ``w_i = min(w_{i-1} p_{i-1}(x_i) /
    q_{i-1}(x_i), 1)`` (Sun et al., arXiv:2403.10444: ``P(tau >= i | block) = w_i``). It is at
    least :func:`tokenwise_accepted_length_law`'s tail."""
    prefix = tuple(prefix)
    layer = {(): (1.0, 1.0)}  # path -> (draft probability, weight w)
    at_least = [1.0]
    for _ in range(gamma):
        nxt = {}
        for path, (pq, w) in layer.items():
            p, q = laws.target(prefix + path), laws.draft(prefix + path)
            for x in np.flatnonzero(q > 0):
                nxt[path + (int(x),)] = (pq * q[x], min(w * p[x] / q[x], 1.0))
        layer = nxt
        at_least.append(sum(pq * w for pq, w in layer.values()))
    return _at_least_to_law(at_least)


def rrs_accepted_length_law(laws: PrefixLaws, branching: Sequence[int], drafting: str = "iid",
                            prefix: Sequence[int] = ()) -> np.ndarray:
    """``P(accepted = k)``, ``k = 0..D``, of recursive rejection sampling (:func:`rrs_program`)
    on a full draft tree (:func:`draft_tree`), by a recursion over the tree's levels.

    At a node ``u`` (path ``s``, depth ``l``) with ``k = branching[l]`` children: for every
    sequence of child tokens ``x_1 .. x_k`` (drawn by ``drafting`` from ``q_s``, with its
    probability), the walk accepts child ``j`` with probability
    ``prod_{i<j} (1 - a_i) a_j``, ``a_i = min(1, r_i(x_i) / q_i(x_i))`` with the residual
    ``r`` updated after each rejection as :func:`rrs_program` does; an accepted child ``j``
    adds one to the accepted length of its own subtree (path ``s + (x_j,)``). Subtrees are
    drawn independently given their roots, so the law is the mixture of the children's laws
    shifted by one. It equals ``accepted_length_law(round_law(laws, rrs_program, ...), D)``
    at a cost of ``V^k`` per distinct path instead of one program run per decision path of
    every whole tree.

    Shape: ``-> [D + 1]`` float64.

    Raises
    ------
    ValueError
        On an unknown ``drafting`` or a bad ``branching``.
    """
    if drafting not in ("iid", "without_replacement", "top_k"):
        raise ValueError(f"drafting must be 'iid', 'without_replacement' or 'top_k', got {drafting!r}")
    branching = tuple(int(k) for k in branching)
    full_tree_parents(branching)  # validates branching
    D = len(branching)
    memo: dict[tuple, np.ndarray] = {}

    def children(q: np.ndarray, k: int):
        """``(probability, tokens, rows)`` of every draw of ``k`` children from ``q``."""
        if drafting == "top_k":
            order = np.argsort(-q, kind="stable")[:k]
            rows = []
            for x in order:
                row = np.zeros_like(q)
                row[x] = 1.0
                rows.append(row)
            yield 1.0, [int(x) for x in order], rows
            return
        stack = [(1.0, [], [], q.copy())]
        while stack:
            w, toks, rows, remaining = stack.pop()
            if len(toks) == k:
                yield w, toks, rows
                continue
            row = q if drafting == "iid" or remaining.sum() <= 0 else remaining / remaining.sum()
            for x in np.flatnonzero(row > 0):
                rest = remaining.copy()
                rest[x] = 0.0
                stack.append((w * float(row[x]), toks + [int(x)], rows + [row], rest))

    def law_at(path: tuple, level: int) -> np.ndarray:
        key = (path, level)
        if key in memo:
            return memo[key]
        out = np.zeros(D + 1)
        if level == D:
            out[0] = 1.0
            memo[key] = out
            return out
        p, q = laws.target(tuple(prefix) + path), laws.draft(tuple(prefix) + path)
        for w, toks, rows in children(q, branching[level]):
            r, reach = p, 1.0
            for x, row in zip(toks, rows):
                a = _ratio_prob(r[x], row[x])
                if a > 0:
                    out[1:] += w * reach * a * law_at(path + (x,), level + 1)[:-1]
                reach *= 1.0 - a
                if reach <= 0:
                    break
                res = np.maximum(r - row, 0.0)
                if res.sum() > 0:
                    r = res / res.sum()
            out[0] += w * reach
        memo[key] = out
        return out

    return law_at((), 0)


def target_only_accepted_length_law(laws: PrefixLaws, branching: Sequence[int],
                                    prefix: Sequence[int] = ()) -> np.ndarray:
    """``P(accepted = k)`` of the target-only rule on the deterministic top-k tree: the walk
    follows a target sample, so ``P(accepted >= d) = sum over depth-d nodes of prod p`` along
    the path (distinct siblings, thresholds 1)."""
    row = draft_tree(laws, GeneratorRNG(None), branching=branching, drafting="top_k", prefix=prefix)
    prob = {-1: 1.0}
    at_least = [1.0] + [0.0] * len(branching)
    for n, par in enumerate(row.parents):
        prob[n] = prob[par] * float(row.target(par)[row.tokens[n]])
        at_least[row.depth(n)] += prob[n]
    return _at_least_to_law(at_least)


def target_sequence_law(laws: PrefixLaws, length: int, prefix: Sequence[int] = ()) -> dict:
    """``{tokens: probability}`` of ``length`` target tokens after ``prefix``."""
    layer = {(): 1.0}
    prefix = tuple(prefix)
    for _ in range(length):
        nxt = {}
        for path, w in layer.items():
            p = laws.target(prefix + path)
            for x in np.flatnonzero(p > 0):
                nxt[path + (int(x),)] = w * p[x]
        layer = nxt
    return layer


def complete_with_target(law: dict, laws: PrefixLaws, length: int, prefix: Sequence[int] = ()) -> dict:
    """A round's law continued by target sampling to ``length`` tokens (outputs longer than
    ``length`` are cut). A lossless round gives :func:`target_sequence_law`."""
    prefix = tuple(prefix)
    out: dict = {}
    for tokens, prob in law.items():
        tokens = tuple(tokens)[:length]
        for rest, w in target_sequence_law(laws, length - len(tokens), prefix + tokens).items():
            key = tokens + rest
            out[key] = out.get(key, 0.0) + prob * w
    return out


def generation_law(laws: PrefixLaws, round_law_at: Callable[[tuple], dict], length: int, *,
                   eos_token_id: int | None = None) -> dict:
    """Law of the first ``length`` tokens of a generation by repeated rounds.

    Parameters
    ----------
    laws : PrefixLaws
        Unused except for documentation of where ``round_law_at`` gets its laws (kept for a
        uniform signature).
    round_law_at : callable
        ``round_law_at(prefix) -> {emitted tuple: probability}`` (e.g. a ``functools.partial``
        of :func:`round_law`); called once per distinct prefix.
    length : int
        Tokens per outcome.
    eos_token_id : int, optional
        A sequence ends after it; the outcome is padded with ``-1`` (as
        :func:`~specexact.exactness.enumeration.sequence_law`).

    Returns
    -------
    dict
        ``{tuple of length ids (-1 padded): probability}``.
    """
    del laws
    cache: dict[tuple, dict] = {}
    out: dict = {}
    stack = [((), 1.0)]
    while stack:
        prefix, w = stack.pop()
        if len(prefix) >= length or (eos_token_id is not None and prefix and prefix[-1] == eos_token_id):
            key = prefix[:length] + (-1,) * (length - len(prefix[:length]))
            out[key] = out.get(key, 0.0) + w
            continue
        if prefix not in cache:
            cache[prefix] = round_law_at(prefix)
        for tokens, prob in cache[prefix].items():
            tokens = tuple(tokens)
            if eos_token_id is not None and eos_token_id in tokens:
                tokens = tokens[:tokens.index(eos_token_id) + 1]
            stack.append((prefix + tokens, w * prob))
    return out


def total_variation(a: dict, b: dict) -> float:
    """``(1/2) sum |a(x) - b(x)|`` over the union of outcomes of two laws given as dicts."""
    return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))
