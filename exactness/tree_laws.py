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

The laws of the drafts and the target come from a :class:`PrefixLaws`: fixed vectors, any
function of the prefix, or the toy models through the logits pipeline in float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

import numpy as np
import torch

from specexact.decoders import SamplingParams, batch_params, process_logits
from specexact.decoders.tree.protocol import TreeVerifyOutput, full_tree_parents
from specexact.decoders.tree.typical import ENTROPY_EPS, MEDUSA_DEFAULTS

from .program_law import DecisionRNG, GeneratorRNG, program_law, program_paths

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


# ----------------------------------------------------------------------------------------
# The correct verification programs, one per scheme (per row, from the papers).


def _ratio_prob(r_x: float, q_x: float) -> float:
    """``min(1, r / q)``; ``q = 0`` accepts iff ``r > 0`` (the chain verifier's guard)."""
    if q_x <= 0:
        return 1.0 if r_x > 0 else 0.0
    return min(1.0, r_x / q_x)


def _chain_nodes(row: TreeRow) -> list[int]:
    if row.parents != tuple(range(-1, len(row.parents) - 1)):
        raise ValueError(f"a chain program needs a single chain, got parents {row.parents}")
    return list(range(len(row.parents)))


def tokenwise_program(row: TreeRow, rng: DecisionRNG) -> Emitted:
    """Token-wise modified rejection sampling on a chain (Leviathan et al. 2023, Algorithm 1)."""
    out = []
    for n in _chain_nodes(row):
        x, p, q = row.tokens[n], row.target(n - 1), row.draft_probs[n]
        if not rng.bernoulli(_ratio_prob(p[x], q[x])):
            res = np.maximum(p - q, 0.0)
            nodes = tuple(range(len(out)))
            out.append(rng.categorical(res if res.sum() > 0 else p))
            return Emitted(tuple(out), nodes)
        out.append(x)
    nodes = tuple(range(len(out)))
    out.append(rng.categorical(row.target(len(row.parents) - 1)))
    return Emitted(tuple(out), nodes)


def block_weights(row: TreeRow) -> tuple[list[float], list[float]]:
    """Block verification's ``w_0 .. w_K`` and ``h_1 .. h_K`` of a chain row (Sun et al.,
    arXiv:2403.10444, Algorithm 2; the notation of :mod:`specexact.decoders.tree.block`)."""
    nodes = _chain_nodes(row)
    K = len(nodes)
    w = [1.0]
    for n in nodes:
        x = row.tokens[n]
        w.append(min(w[-1] * _ratio_prob_raw(row.target(n - 1)[x], row.draft_probs[n][x]), 1.0))
    h = []
    for i in range(1, K):
        s = float(np.maximum(w[i] * row.target(i - 1) - row.draft_probs[i], 0.0).sum())
        denom = s + 1.0 - w[i]
        h.append(min(s / denom, 1.0) if denom > 0 else 0.0)  # <= 1 in exact arithmetic
    h.append(w[K])
    return w, h


def _ratio_prob_raw(p_x: float, q_x: float) -> float:
    if q_x <= 0:
        return math.inf if p_x > 0 else 0.0
    return p_x / q_x


def block_program(row: TreeRow, rng: DecisionRNG) -> Emitted:
    """Block verification on a chain (Sun et al., arXiv:2403.10444, Algorithm 2):
    ``tau = max{i : eta_i < h_i}``, scanned from ``i = K`` down; then the residual
    ``max(w_tau p_tau - q_tau, 0)`` or, at ``tau = K``, the bonus from ``p_K``."""
    w, h = block_weights(row)
    K = len(row.parents)
    tau = 0
    for i in range(K, 0, -1):
        if rng.bernoulli(h[i - 1]):
            tau = i
            break
    out = list(row.tokens[:tau])
    p_tau = row.target(tau - 1)
    if tau == K:
        out.append(rng.categorical(p_tau))
    else:
        res = np.maximum(w[tau] * p_tau - row.draft_probs[tau], 0.0)
        out.append(rng.categorical(res if res.sum() > 0 else p_tau))
    return Emitted(tuple(out), tuple(range(tau)))


def rrs_program(row: TreeRow, rng: DecisionRNG) -> Emitted:
    """Recursive rejection sampling down the tree (SpecInfer, arXiv:2305.09781): children in
    sibling order, accepted with ``min(1, r(x) / q_c(x))``; a rejection updates the residual
    ``r <- max(r - q_c, 0)`` (normalised) before the next sibling; with no child accepted, one
    token from ``r``."""
    out, path = [], []
    node = -1
    r = row.target(node)
    while True:
        accepted = None
        for c in row.children(node):
            x, q = row.tokens[c], row.draft_probs[c]
            if rng.bernoulli(_ratio_prob(r[x], q[x])):
                accepted = c
                break
            res = np.maximum(r - q, 0.0)
            if res.sum() > 0:
                r = res / res.sum()
        if accepted is None:
            out.append(rng.categorical(r))
            return Emitted(tuple(out), tuple(path))
        out.append(row.tokens[accepted])
        path.append(accepted)
        node = accepted
        r = row.target(node)


def target_only_program(row: TreeRow, rng: DecisionRNG, *, threshold_single: float = 1.0,
                        threshold_acc: float = 1.0) -> Emitted:
    """SGLang's target-only rule (:mod:`specexact.decoders.tree.target_only`) as decisions:
    the node's coin ``u`` selects child ``c_j`` when ``u <= (t_1 + .. + t_j) / threshold_acc`` (or
    ``t_j >= threshold_single``) for the first such ``j``; given that no earlier child was taken
    (``u > S_{j-1}``, ``S`` the running threshold) this has probability
    ``(min(S_j, 1) - min(S_{j-1}, 1)) / (1 - min(S_{j-1}, 1))``. The last token is drawn from the
    target with the rejected children's tokens removed."""
    out, path = [], []
    node = -1
    while True:
        p = row.target(node).copy()
        acc_prev, accepted = 0.0, None
        removed = np.zeros_like(p)
        running = 0.0
        for c in row.children(node):
            x = row.tokens[c]
            t = float(p[x])
            running += t
            if t >= threshold_single:
                prob = 1.0
            else:
                s_prev = min(acc_prev, 1.0)
                s_now = min(running / threshold_acc, 1.0)
                prob = 1.0 if s_prev >= 1.0 else max(s_now - s_prev, 0.0) / (1.0 - s_prev)
            if rng.bernoulli(min(prob, 1.0)):
                accepted = c
                break
            removed[x] = t
            acc_prev = max(acc_prev, running / threshold_acc)
        if accepted is None:
            law = np.maximum(p - removed, 0.0)
            out.append(rng.categorical(law if law.sum() > 0 else p))
            return Emitted(tuple(out), tuple(path))
        out.append(row.tokens[accepted])
        path.append(accepted)
        node = accepted


def typical_program(row: TreeRow, rng: DecisionRNG, *,
                    posterior_threshold: float = MEDUSA_DEFAULTS["posterior_threshold"],
                    posterior_alpha: float = MEDUSA_DEFAULTS["posterior_alpha"],
                    next_token: str = "greedy") -> Emitted:
    """Medusa's typical acceptance (arXiv:2401.10774; :mod:`specexact.decoders.tree.typical`):
    deterministic given the tree, except the ``"sample"`` next token."""
    N = len(row.parents)

    def threshold(law):
        entropy = -float(np.sum(law * np.log(law + ENTROPY_EPS)))
        return min(posterior_threshold, posterior_alpha * math.exp(-entropy))

    ok, loglik = [False] * N, [0.0] * N
    for n in range(N):
        par = row.parents[n]
        law = row.target(par)
        t = float(law[row.tokens[n]])
        ok[n] = (par < 0 or ok[par]) and t > threshold(law)
        loglik[n] = (loglik[par] if par >= 0 else 0.0) + (math.log(t) if t > 0 else -math.inf)
    best, best_key = -1, (0, -math.inf)
    for n in range(N):
        if ok[n]:
            key = (row.depth(n), loglik[n])
            if key > best_key:
                best, best_key = n, key
    nodes = []
    node = best
    while node >= 0:
        nodes.append(node)
        node = row.parents[node]
    nodes.reverse()
    tokens = [row.tokens[n] for n in nodes]
    law = row.target(best)
    if next_token == "greedy":
        tokens.append(int(np.argmax(law)))
    elif next_token == "sample":
        tokens.append(rng.categorical(law))
    else:
        raise ValueError(f"next_token must be 'greedy' or 'sample', got {next_token!r}")
    return Emitted(tuple(tokens), tuple(nodes))


SCHEME_PROGRAMS: dict[str, Callable] = {
    "tokenwise": tokenwise_program,
    "block": block_program,
    "multi_draft": rrs_program,
    "tree": rrs_program,
    "tree_target_only": target_only_program,
    "typical": typical_program,
}
"""The verification program of each built-in reference (the names of
:data:`specexact.decoders.tree.REFERENCE_SAMPLERS`, plus ``"tokenwise"``)."""


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


# ----------------------------------------------------------------------------------------
# Programs as batched samplers (the protocols), one row at a time.


def tree_verifier_from_program(program: Callable, **params) -> Callable:
    """A tree-protocol verifier that runs ``program(row, rng, **params)`` on every row with
    :class:`~.program_law.GeneratorRNG` (one float64 uniform per decision).

    The returned callable has the :mod:`specexact.decoders.tree.protocol` signature and
    returns a :class:`~specexact.decoders.tree.TreeVerifyOutput` with the program's tokens
    and accepted nodes.
    """

    def verify(draft_token_ids, parent_ids, draft_probs, target_probs, generator=None):
        rng = GeneratorRNG(generator)
        B, N = draft_token_ids.shape
        rows = [TreeRow.from_tensors(draft_token_ids, parent_ids, draft_probs, target_probs, b) for b in range(B)]
        D = max(r.depth(n) for r in rows for n in range(N))
        tokens = torch.full((B, D + 1), -1, dtype=torch.int64)
        nodes = torch.full((B, D), -1, dtype=torch.int64)
        for b, row in enumerate(rows):
            emitted = program(row, rng, **params)
            tokens[b, :len(emitted.tokens)] = torch.tensor(emitted.tokens, dtype=torch.int64)
            if emitted.nodes:
                nodes[b, :len(emitted.nodes)] = torch.tensor(emitted.nodes, dtype=torch.int64)
        return TreeVerifyOutput(tokens, nodes)

    verify.__name__ = getattr(program, "__name__", "program")
    return verify


def chain_verifier_from_program(program: Callable, **params) -> Callable:
    """A chain-protocol verifier (``verify(draft_token_ids [B, K], draft_probs, target_probs,
    generator) -> [B, K+1]``) running a chain program per row (:func:`tree_verifier_from_program`)."""
    tree_verify = tree_verifier_from_program(program, **params)

    def verify(draft_token_ids, draft_probs, target_probs, generator=None):
        B, K = draft_token_ids.shape
        parents = torch.arange(-1, K - 1)[None, :].expand(B, -1)
        return tree_verify(draft_token_ids, parents, draft_probs, target_probs, generator).tokens

    verify.__name__ = getattr(program, "__name__", "program")
    return verify
