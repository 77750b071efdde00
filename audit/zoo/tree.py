"""Planted bugs and correct variants of tree, multi-draft and block verification.

Each entry is a plain per-row *decision program* ``program(row, rng) -> Emitted`` (see
:mod:`specexact.exactness.program_law`: its randomness is ``rng.bernoulli`` / ``rng.categorical``),
so its exact law is known by enumeration (:func:`exact_discrepancy`), and it runs as a batched
sampler with the tree or chain protocol through :data:`WRONG_SAMPLERS` / :data:`CORRECT_SAMPLERS`
(e.g. ``specexact.audit.zoo_tree:WRONG_SAMPLERS['rrs_residual_not_updated']``), each declaring
its protocol and scheme, so the audit drives it with its tree-level cases
(:mod:`specexact.audit.cases.tree_case`). The block entries also have a batched form
(:func:`batched_block`, the same decisions on the same uniforms), which is what their
samplers run (the row-by-row programs take seconds per 2048-row call).

Wrong (each plants one bug; its emitted law differs from the target's):

- ``rrs_residual_not_updated``: recursive rejection sampling that tests every sibling against
  the node's target law ``p_u`` (no residual update between siblings) and draws the last token
  from ``max(p_u - q_last, 0)``: the single-chain code reused for siblings;
- ``tree_child_against_parent_law``: below the root, a node's children are verified against
  the target law of the node's *parent* (the target row one level up: an off-by-one in the
  row of the tree's target tensor);
- ``block_tokenwise_residual``: block verification that draws the token after ``tau`` from
  the token-wise residual ``max(p_tau - q_tau, 0)`` instead of ``max(w_tau p_tau - q_tau, 0)``;
- ``block_first_failure``: block verification that stops at the first ``eta_i >= h_i``
  (token-wise style) instead of taking the last ``i`` with ``eta_i < h_i``;
- ``multi_draft_resample_target``: after every sibling is rejected, the last token comes from
  the target law ``p_u`` instead of the updated residual.

Correct (written differently from the references, same law):

- ``rrs_unnormalised``: the residual kept unnormalised, ``R <- max(R - Z q, 0)`` with ``Z = sum R``,
  acceptance ``min(1, R(x) / (Z q(x)))``;
- ``target_only_sequential_coins``: SGLang's target-only rule with a fresh coin per child
  (child ``j`` accepted with ``t_j / (1 - t_1 - .. - t_{j-1})``) instead of one coin per node;
- ``block_forward_scan``: block verification drawing every ``eta_i`` forward and keeping the
  last success (the reference program scans backward and stops at the first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from specexact.decoders.adapters.protocol import Capabilities
from specexact.decoders.tree._draw import check_generator, draw, normalised, uniforms_or_draw
from specexact.decoders.tree.block import block_verification_weights
from specexact.decoders.tree.samplers import TreeSampler
from specexact.exactness.program_law import DecisionRNG
from specexact.exactness.tree_laws import (
    SCHEME_PROGRAMS,
    Emitted,
    PrefixLaws,
    TreeRow,
    accepted_length_law,
    block_weights,
    chain_verifier_from_program,
    complete_with_target,
    round_law,
    target_sequence_law,
    total_variation,
    tree_verifier_from_program,
)

__all__ = ["ZooEntry", "Discrepancy", "WRONG", "CORRECT", "WRONG_SAMPLERS", "CORRECT_SAMPLERS", "exact_discrepancy",
           "batched_block"]


def _ratio(r_x: float, q_x: float) -> float:
    if q_x <= 0:
        return 1.0 if r_x > 0 else 0.0
    return min(1.0, r_x / q_x)


def _walk(row: TreeRow, rng: DecisionRNG, *, law_of: Callable[[int], np.ndarray], update: bool,
          final_from_target: bool = False) -> Emitted:
    """Recursive rejection sampling with a pluggable target row and residual update."""
    out, path, node = [], [], -1
    while True:
        p_u = law_of(node)
        r, last_q, accepted = p_u, None, None
        for c in row.children(node):
            x, q = row.tokens[c], row.draft_probs[c]
            if rng.bernoulli(_ratio(r[x], q[x])):
                accepted = c
                break
            last_q = q
            if update:
                res = np.maximum(r - q, 0.0)
                if res.sum() > 0:
                    r = res / res.sum()
        if accepted is None:
            if final_from_target:
                law = p_u
            elif update or last_q is None:
                law = r
            else:
                law = np.maximum(p_u - last_q, 0.0)
                law = law if law.sum() > 0 else p_u
            out.append(rng.categorical(law))
            return Emitted(tuple(out), tuple(path))
        out.append(row.tokens[accepted])
        path.append(accepted)
        node = accepted


# --- wrong ---------------------------------------------------------------------------------

def rrs_residual_not_updated(row: TreeRow, rng: DecisionRNG) -> Emitted:
    """Siblings all tested against ``p_u``; last token from ``max(p_u - q_last, 0)``."""
    return _walk(row, rng, law_of=row.target, update=False)


def tree_child_against_parent_law(row: TreeRow, rng: DecisionRNG) -> Emitted:
    """Children of a non-root node verified against the target law of the node's parent."""
    return _walk(row, rng, law_of=lambda node: row.target(row.parents[node] if node >= 0 else -1), update=True)


def multi_draft_resample_target(row: TreeRow, rng: DecisionRNG) -> Emitted:
    """After every sibling is rejected, the last token from ``p_u`` instead of the residual."""
    return _walk(row, rng, law_of=row.target, update=True, final_from_target=True)


def _block(row: TreeRow, rng: DecisionRNG, *, first_failure: bool, tokenwise_residual: bool) -> Emitted:
    w, h = block_weights(row)
    K = len(row.parents)
    tau = 0
    if first_failure:
        while tau < K and rng.bernoulli(h[tau]):
            tau += 1
    else:
        for i in range(1, K + 1):
            if rng.bernoulli(h[i - 1]):
                tau = i
    p_tau = row.target(tau - 1)
    if tau == K:
        last = rng.categorical(p_tau)
    else:
        weight = 1.0 if tokenwise_residual else w[tau]
        res = np.maximum(weight * p_tau - row.draft_probs[tau], 0.0)
        last = rng.categorical(res if res.sum() > 0 else p_tau)
    return Emitted(tuple(row.tokens[:tau]) + (last,), tuple(range(tau)))


def block_tokenwise_residual(row: TreeRow, rng: DecisionRNG) -> Emitted:
    """Block verification with the token-wise residual ``max(p_tau - q_tau, 0)``."""
    return _block(row, rng, first_failure=False, tokenwise_residual=True)


def block_first_failure(row: TreeRow, rng: DecisionRNG) -> Emitted:
    """Block verification stopping at the first ``eta_i >= h_i``."""
    return _block(row, rng, first_failure=True, tokenwise_residual=False)


# --- correct -------------------------------------------------------------------------------

def rrs_unnormalised(row: TreeRow, rng: DecisionRNG) -> Emitted:
    """Recursive rejection sampling with an unnormalised residual ``R`` (``r = R / sum R``)."""
    out, path, node = [], [], -1
    while True:
        R = row.target(node).copy()
        accepted = None
        for c in row.children(node):
            x, q = row.tokens[c], row.draft_probs[c]
            Z = R.sum()
            if rng.bernoulli(1.0 if q[x] <= 0 and R[x] > 0 else (0.0 if q[x] <= 0 else min(1.0, R[x] / (Z * q[x])))):
                accepted = c
                break
            nxt = np.maximum(R - Z * q, 0.0)
            R = nxt if nxt.sum() > 0 else R
        if accepted is None:
            out.append(rng.categorical(R))
            return Emitted(tuple(out), tuple(path))
        out.append(row.tokens[accepted])
        path.append(accepted)
        node = accepted


def target_only_sequential_coins(row: TreeRow, rng: DecisionRNG) -> Emitted:
    """The target-only rule with a fresh coin per child: ``t_j / (1 - sum_{i<j} t_i)``."""
    out, path, node = [], [], -1
    while True:
        p = row.target(node)
        taken, accepted = 0.0, None
        removed = set()
        for c in row.children(node):
            x = row.tokens[c]
            if x in removed:  # distinct tokens are assumed; a repeat has nothing left
                continue
            left = 1.0 - taken
            if left > 0 and rng.bernoulli(min(1.0, float(p[x]) / left)):
                accepted = c
                break
            taken += float(p[x])
            removed.add(x)
        if accepted is None:
            law = p.copy()
            law[list(removed)] = 0.0
            out.append(rng.categorical(law if law.sum() > 0 else p))
            return Emitted(tuple(out), tuple(path))
        out.append(row.tokens[accepted])
        path.append(accepted)
        node = accepted


def block_forward_scan(row: TreeRow, rng: DecisionRNG) -> Emitted:
    """Block verification with every ``eta_i`` drawn forward, keeping the last success."""
    return _block(row, rng, first_failure=False, tokenwise_residual=False)


# --- batched forms of the block programs (the per-row programs are slow on 2048-row calls) ---

def batched_block(*, first_failure: bool, tokenwise_residual: bool) -> Callable:
    """A chain-protocol sampler computing :func:`_block` for all rows at once.

    ``verify(draft_token_ids [B, K], draft_probs [B, K, V], target_probs [B, K+1, V], generator,
    *, uniforms=None, final_uniforms=None) -> [B, K+1]``. Row ``b`` returns what the per-row
    program returns when its ``i``-th ``bernoulli`` compares ``uniforms[b, i]`` and its one
    ``categorical`` draws by inverse CDF at ``final_uniforms[b]`` (``tests/audit/zoo/test_tree.py``
    checks that), so its law is the program's exact law (:func:`exact_discrepancy`).
    """

    def verify(draft_token_ids, draft_probs, target_probs, generator=None, *, uniforms=None, final_uniforms=None):
        check_generator(generator)
        bw = block_verification_weights(draft_token_ids, draft_probs, target_probs)
        B, K = draft_token_ids.shape
        device = target_probs.device
        eta = uniforms_or_draw(uniforms, (B, K), "uniforms", generator, device)
        hit = eta < bw.stop_probs  # [B, K]: eta_i < h_i
        positions = torch.arange(1, K + 1, device=device)[None, :]
        if first_failure:  # the bug: stop at the first eta_i >= h_i
            tau = hit.long().cumprod(1).sum(1)
        else:  # the last i with eta_i < h_i
            tau = torch.where(hit, positions, 0).amax(1)
        rows = torch.arange(B, device=device)
        p, q = normalised(target_probs), normalised(draft_probs)
        p_tau = p[rows, tau]
        weight = torch.ones(B, dtype=torch.float64, device=device) if tokenwise_residual else bw.weights[rows, tau]
        residual = (weight[:, None] * p_tau - q[rows, tau.clamp(max=K - 1)]).clamp_min(0)
        law = torch.where((tau < K)[:, None], residual, p_tau)
        law = torch.where((law.sum(-1) <= 0)[:, None], p_tau, law)
        last = draw(law, uniforms_or_draw(final_uniforms, (B,), "final_uniforms", generator, device))
        out = torch.full((B, K + 1), -1, dtype=torch.int64, device=device)
        out[:, :K] = torch.where(positions - 1 < tau[:, None], draft_token_ids.long(), -1)
        out[rows, tau] = last
        return out

    verify.__name__ = ("block_first_failure" if first_failure else "block") + (
        "_tokenwise_residual" if tokenwise_residual else "") + "_batched"
    return verify


# --- registry ------------------------------------------------------------------------------

@dataclass(frozen=True)
class ZooEntry:
    """One planted bug or correct variant.

    Attributes
    ----------
    name : str
    program : callable
        ``program(row, rng) -> Emitted``.
    protocol : {"tree", "chain"}
    scheme : str
        The scheme it claims (a key of :data:`~specexact.exactness.tree_laws.SCHEME_PROGRAMS`),
        i.e. the reference its laws are compared with.
    drafting : str
        The drafting rule it is meant for (``"top_k"`` for the target-only rule).
    batched : callable, optional
        A batched sampler computing the same program for all rows at once (its sampler
        then; :func:`batched_block`), else the program runs row by row.
    """

    name: str
    program: Callable
    protocol: str
    scheme: str
    drafting: str = "iid"
    batched: Callable | None = None


WRONG = {e.name: e for e in (
    ZooEntry("rrs_residual_not_updated", rrs_residual_not_updated, "tree", "tree"),
    ZooEntry("tree_child_against_parent_law", tree_child_against_parent_law, "tree", "tree"),
    ZooEntry("multi_draft_resample_target", multi_draft_resample_target, "tree", "multi_draft"),
    ZooEntry("block_tokenwise_residual", block_tokenwise_residual, "chain", "block",
             batched=batched_block(first_failure=False, tokenwise_residual=True)),
    ZooEntry("block_first_failure", block_first_failure, "chain", "block",
             batched=batched_block(first_failure=True, tokenwise_residual=False)),
)}
CORRECT = {e.name: e for e in (
    ZooEntry("rrs_unnormalised", rrs_unnormalised, "tree", "tree"),
    ZooEntry("target_only_sequential_coins", target_only_sequential_coins, "tree", "tree_target_only", "top_k"),
    ZooEntry("block_forward_scan", block_forward_scan, "chain", "block",
             batched=batched_block(first_failure=False, tokenwise_residual=False)),
)}


#: The scheme each zoo entry declares in its Capabilities (the reference it is judged by).
_DECLARED_SCHEME = {"tree": "tree", "multi_draft": "multi_draft", "block": "block", "tree_target_only": "tree"}


def _sampler(entry: ZooEntry) -> TreeSampler:
    make = tree_verifier_from_program if entry.protocol == "tree" else chain_verifier_from_program
    # The target-only rule is exact for distinct siblings and has recursive rejection
    # sampling's accepted length on deterministic trees only: it declares top-k drafting.
    drafting = ("top_k",) if entry.scheme == "tree_target_only" else ()
    caps = Capabilities(max_batch_size=None, dtypes=(torch.float64,), devices=("cpu",), randomness="generator",
                        scheme=_DECLARED_SCHEME[entry.scheme], protocol=entry.protocol, tree_drafting=drafting,
                        notes=f"specexact.audit.zoo_tree entry {entry.name!r} (per-row decision program)")
    fn = entry.batched if entry.batched is not None else make(entry.program)
    return TreeSampler(entry.name, caps, fn, paper="specexact.audit.zoo_tree")


WRONG_SAMPLERS = {name: _sampler(e) for name, e in WRONG.items()}
"""The wrong entries as batched samplers (:class:`~specexact.decoders.tree.TreeSampler`, one row
at a time) declaring their protocol and scheme, so the audit drives them with their cases."""
CORRECT_SAMPLERS = {name: _sampler(e) for name, e in CORRECT.items()}
"""The correct entries as batched samplers declaring their protocol and scheme."""


@dataclass(frozen=True)
class Discrepancy:
    """Exact distances of a zoo entry's first round from its scheme's reference.

    Attributes
    ----------
    emitted_tv : float
        TV between the entry's round output continued by target sampling and the target law
        (0 for a lossless round).
    round_tv : float
        TV between the entry's round law and the reference program's round law.
    accepted_length_tv : float
        TV between the two accepted-length laws.
    """

    emitted_tv: float
    round_tv: float
    accepted_length_tv: float


def exact_discrepancy(entry: ZooEntry, laws: PrefixLaws, *, branching, drafting: str | None = None,
                      prefix=()) -> Discrepancy:
    """Exact TVs of ``entry``'s first round after ``prefix`` from the target and from the
    reference of the scheme it claims (enumeration; small vocabularies only)."""
    drafting = entry.drafting if drafting is None else drafting
    mine = round_law(laws, entry.program, branching=branching, drafting=drafting, prefix=prefix)
    ref = round_law(laws, SCHEME_PROGRAMS[entry.scheme], branching=branching, drafting=drafting, prefix=prefix)
    L = len(tuple(branching)) + 1
    emitted = total_variation(complete_with_target(mine, laws, L, prefix), target_sequence_law(laws, L, prefix))
    D = len(tuple(branching))
    acc = 0.5 * float(np.abs(accepted_length_law(mine, D) - accepted_length_law(ref, D)).sum())
    return Discrepancy(emitted_tv=emitted, round_tv=total_variation(mine, ref), accepted_length_tv=acc)


