"""Target-only tree verification, as SGLang's ``tree_speculative_sampling_target_only``.

What the sgl-kernel CUDA kernel ``TreeSpeculativeSamplingTargetOnly``
(``sgl-kernel/csrc/speculative/speculative_sampling.cuh``) computes, per batch row, read from
its source (its node 0 is the already-verified root token; here the root is the context and
node ``n`` of the kernel is node ``n - 1`` here):

1. ``coin`` = the uniform of the root; ``prob_acc = 0``; the current node is the root.
2. For each child ``c`` of the current node in sibling order (``retrieve_next_token`` then
   ``retrieve_next_sibling``), with ``t = target_probs[current, token(c)]``:
   ``prob_acc += t``; if ``coin <= prob_acc / threshold_acc`` or ``t >= threshold_single``
   the child is accepted: ``prob_acc = 0``, the current node becomes ``c``, ``coin`` becomes
   ``c``'s own uniform, and the walk continues with ``c``'s children; otherwise the kernel
   writes ``t`` into the draft-probability buffer at ``(current, token(c))`` and tries the
   next sibling. When no child is accepted the walk stops.
3. The last token is drawn with a separate uniform (``uniform_samples_for_final_sampling``)
   from ``relu(target_probs[current] - draft_probs[current])`` (normalised); the draft
   buffer holds zeros except the rejected children's target probabilities, so this is the
   target law after the current node with the rejected children's tokens removed (at full
   depth the kernel reads no draft row at all: the plain target law).

Draft probabilities play no part: SGLang calls it with a zero ``draft_probs`` buffer (the
drafts are deterministic top-k children, point masses). With ``threshold_single =
threshold_acc = 1`` and *distinct* sibling tokens, child ``c_j`` is accepted exactly when the
coin falls in ``(sum_{i<j} t_i, sum_{i<=j} t_i]``, i.e. with probability ``t_j``: the walk
is inverse-CDF sampling from the target along the tree, and the last token is a target
sample conditioned on missing the children. The emitted sequence then has the target's law
(it is recursive rejection sampling with point-mass drafts, with one coin per node instead of
one per child). It is *not* exact when two siblings hold the same token (that token's
probability is counted twice in ``prob_acc``), and it is lossy with ``threshold_single < 1``
(a child with ``t >= threshold_single`` is accepted whatever the coin) or ``threshold_acc < 1``
(``prob_acc`` is inflated by ``1 / threshold_acc``). The comparison ``coin <= prob_acc`` also
accepts a first child of target probability 0 when the coin is exactly 0.
"""

from __future__ import annotations

import math

import torch

from ..rejection_sampling import PLACEHOLDER_ID
from ._draw import check_generator, draw, normalised, uniforms_or_draw
from .protocol import TreeVerifyOutput, max_depth, validate_tree_inputs

__all__ = ["verify_tree_target_only"]

_MIN_THRESHOLD_ACC = 1e-9
"""The kernel's launcher clamps ``threshold_acc`` to at least this."""


def verify_tree_target_only(draft_token_ids: torch.Tensor, parent_ids: torch.Tensor, draft_probs: torch.Tensor,
                            target_probs: torch.Tensor, generator: torch.Generator | None = None, *,
                            threshold_single: float = 1.0, threshold_acc: float = 1.0,
                            uniforms: torch.Tensor | None = None,
                            final_uniforms: torch.Tensor | None = None) -> TreeVerifyOutput:
    """Target-only tree verification (SGLang's ``tree_speculative_sampling_target_only``).

    Shape: ``draft_token_ids [B, N], parent_ids [B, N], draft_probs [B, N, V], target_probs
    [B, N+1, V] -> TreeVerifyOutput(tokens [B, D+1], accepted_nodes [B, D])``.

    The module docstring states the kernel's rule. ``draft_probs`` is validated for the
    protocol's sake and otherwise ignored (the kernel receives zeros there).

    Parameters
    ----------
    draft_token_ids, parent_ids, draft_probs, target_probs : torch.Tensor
        The tree protocol's inputs; target rows are normalised, computations in float64.
    generator : torch.Generator, optional
        ``B * (N + 1)`` float64 uniforms (the root's, then one per node), then ``B`` for the
        last token (each only if not given).
    threshold_single : float, keyword-only
        Accept a child whose target probability is ``>= threshold_single`` whatever the coin
        (1: off in effect, since a probability reaches 1 only for a point mass).
    threshold_acc : float, keyword-only
        Accept while ``coin <= prob_acc / threshold_acc``; must be ``> 0`` (clamped to at least
        ``1e-9`` as the kernel's launcher does). 1: the lossless rule.
    uniforms : torch.Tensor, optional, keyword-only
        Shape ``[B, N + 1]``: column 0 is the root's coin, column ``n + 1`` node ``n``'s.
    final_uniforms : torch.Tensor, optional, keyword-only
        Shape ``[B]``: the last token's uniform.

    Returns
    -------
    TreeVerifyOutput

    Raises
    ------
    TypeError, ValueError
        On bad input, a non-finite threshold, ``threshold_acc <= 0``, or injected uniforms
        of the wrong shape / outside ``[0, 1)``.
    """
    check_generator(generator)
    validate_tree_inputs(draft_token_ids, parent_ids, draft_probs, target_probs)
    for name, value in (("threshold_single", threshold_single), ("threshold_acc", threshold_acc)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
    if threshold_acc <= 0:
        raise ValueError(f"threshold_acc must be > 0, got {threshold_acc!r}")
    threshold_acc = max(float(threshold_acc), _MIN_THRESHOLD_ACC)
    B, N = draft_token_ids.shape
    device = target_probs.device
    D = max_depth(parent_ids)
    p = normalised(target_probs)  # [B, N+1, V]
    ids = draft_token_ids.long()
    parents = parent_ids.long().to(device)
    coins = uniforms_or_draw(uniforms, (B, N + 1), "uniforms", generator, device)
    rows = torch.arange(B, device=device)

    current = torch.full((B,), -1, dtype=torch.int64, device=device)
    depth = torch.zeros(B, dtype=torch.int64, device=device)
    coin = coins[:, 0].clone()
    prob_acc = torch.zeros(B, dtype=torch.float64, device=device)
    removed = torch.zeros(B, p.shape[2], dtype=torch.float64, device=device)  # the kernel's draft row
    nodes = torch.full((B, D), PLACEHOLDER_ID, dtype=torch.int64, device=device)
    for n in range(N):
        tried = parents[:, n] == current
        if not bool(tried.any()):
            continue
        x = ids[:, n]
        t = p[rows, current + 1, x]  # target prob of the child's token after the current node
        acc = prob_acc + t
        accepted = tried & ((coin <= acc / threshold_acc) | (t >= threshold_single))
        rejected = tried & ~accepted
        prob_acc = torch.where(rejected, acc, torch.where(accepted, 0.0, prob_acc))
        removed[rows[rejected], x[rejected]] = t[rejected]
        removed[accepted] = 0.0  # a new current node: its row of the buffer is untouched zeros
        coin = torch.where(accepted, coins[:, n + 1], coin)
        nodes[rows[accepted], depth[accepted]] = n
        current = torch.where(accepted, n, current)
        depth = depth + accepted.to(torch.int64)

    law = (p[rows, current + 1] - removed).clamp_min(0)
    no_mass = law.amax(-1) <= 0  # every token of the node removed: cannot happen with distinct tokens
    law = torch.where(no_mass[:, None], p[rows, current + 1], law)
    last = draw(law, uniforms_or_draw(final_uniforms, (B,), "final_uniforms", generator, device))
    tokens = torch.full((B, D + 1), PLACEHOLDER_ID, dtype=torch.int64, device=device)
    tokens[:, :D] = torch.where(nodes >= 0, ids.gather(1, nodes.clamp_min(0)), PLACEHOLDER_ID)
    tokens[rows, depth] = last
    return TreeVerifyOutput(tokens, nodes)
