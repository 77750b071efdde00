"""The correct verification program of each scheme, per row, as decisions (from the papers).

A program ``program(row: TreeRow, rng: DecisionRNG, **params) -> Emitted`` reads one
:class:`~.tree_rows.TreeRow` and draws every random decision from ``rng``, so that
:mod:`.program_law` can enumerate its exact law (:func:`~.tree_laws.round_law`) or run it
with uniforms (:func:`tree_verifier_from_program`, :func:`chain_verifier_from_program`: a
program as a batched sampler of the tree or chain protocol, one row at a time). The zoo's
faulty verifiers are programs too.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch
from specexact.decoders.tree.protocol import TreeVerifyOutput
from specexact.decoders.tree.typical import ENTROPY_EPS, MEDUSA_DEFAULTS

from .program_law import DecisionRNG, GeneratorRNG
from .tree_rows import Emitted, TreeRow

__all__ = ["tokenwise_program", "block_program", "block_weights", "rrs_program", "target_only_program",
           "typical_program", "SCHEME_PROGRAMS", "tree_verifier_from_program", "chain_verifier_from_program"]


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
