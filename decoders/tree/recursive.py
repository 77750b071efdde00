"""Tree and multi-draft verification by recursive rejection sampling (SpecInfer).

Miao et al., "SpecInfer: Accelerating Large Language Model Serving with Tree-based
Speculative Inference and Verification", ASPLOS 2024 (arXiv:2305.09781), multi-step
speculative sampling: walk down the draft tree from the root; at the current node ``u`` keep a
*residual* law ``r`` (first ``p_u``, the target law after ``u``'s path) and try ``u``'s children
in sibling order. Child ``c`` with token ``x`` and draft law ``q_c`` is accepted with probability
``min(1, r(x) / q_c(x))``: the walk moves to ``c`` and ``r`` becomes ``p_c``. On a rejection the
residual is *updated before the next sibling*: ``r <- max(r - q_c, 0)`` (normalised). When no
child is accepted (or ``u`` is a leaf) the row emits one token from ``r`` and stops.

Whatever drafting rule produced the siblings, the emitted sequence has the target's law as
long as each node's token was drawn from the law given in its ``draft_probs`` row, given
everything drawn before it (i.i.d. siblings, siblings without replacement, point masses for
deterministic children; see :mod:`.protocol`): at each sibling the residual ``r`` is the law
of the emitted token given that the walk reached it, because
``min(q_c, r) + max(r - q_c, 0) = r``.
"""

from __future__ import annotations

import torch

from ..rejection_sampling import PLACEHOLDER_ID
from ._draw import accept_ratio, check_generator, draw, normalised, uniforms_or_draw
from .protocol import TreeVerifyOutput, chains_to_tree, max_depth, validate_tree_inputs

__all__ = ["verify_tree_rrs", "verify_multi_draft"]


def verify_tree_rrs(draft_token_ids: torch.Tensor, parent_ids: torch.Tensor, draft_probs: torch.Tensor,
                    target_probs: torch.Tensor, generator: torch.Generator | None = None, *,
                    uniforms: torch.Tensor | None = None,
                    final_uniforms: torch.Tensor | None = None) -> TreeVerifyOutput:
    """Recursive rejection sampling over a draft tree (SpecInfer, arXiv:2305.09781).

    Shape: ``draft_token_ids [B, N], parent_ids [B, N], draft_probs [B, N, V], target_probs
    [B, N+1, V] -> TreeVerifyOutput(tokens [B, D+1], accepted_nodes [B, D])`` (see
    :mod:`.protocol`).

    Parameters
    ----------
    draft_token_ids, parent_ids, draft_probs, target_probs : torch.Tensor
        The tree protocol's inputs (:func:`~.protocol.validate_tree_inputs`); rows are
        normalised, computations are in float64.
    generator : torch.Generator, optional
        The only randomness: ``B * N`` float64 uniforms (one per node, used if the walk
        reaches it), then ``B`` for the last token (each only if not given).
    uniforms : torch.Tensor, optional, keyword-only
        Shape ``[B, N]`` in ``[0, 1)``: node ``n``'s acceptance uniform; ``n`` is accepted iff
        ``u_n q_n(x_n) < r(x_n)``.
    final_uniforms : torch.Tensor, optional, keyword-only
        Shape ``[B]``: the uniform of the last token's inverse-CDF draw from the residual.

    Returns
    -------
    TreeVerifyOutput

    Raises
    ------
    TypeError, ValueError
        On bad input (:func:`~.protocol.validate_tree_inputs`), a generator that is not a
        ``torch.Generator``, or injected uniforms of the wrong shape / outside ``[0, 1)``.

    Notes
    -----
    Nodes are visited in index order, which is a topological order: node ``n`` is tried in
    row ``b`` when its parent is the row's current node and the row has not stopped; the
    children of the current node come after it, so one pass over the nodes walks every row
    down its tree. If rounding leaves an updated residual without mass (target equal to the
    draft up to ulps: a rejection of probability 0 in exact arithmetic) it keeps the previous
    residual.
    """
    check_generator(generator)
    validate_tree_inputs(draft_token_ids, parent_ids, draft_probs, target_probs)
    B, N = draft_token_ids.shape
    device = target_probs.device
    D = max_depth(parent_ids)
    q = normalised(draft_probs)  # [B, N, V]
    p = normalised(target_probs)  # [B, N+1, V]
    ids = draft_token_ids.long()
    parents = parent_ids.long().to(device)
    u = uniforms_or_draw(uniforms, (B, N), "uniforms", generator, device)
    rows = torch.arange(B, device=device)

    current = torch.full((B,), -1, dtype=torch.int64, device=device)  # -1: the root
    depth = torch.zeros(B, dtype=torch.int64, device=device)
    residual = p[:, 0].clone()  # [B, V]
    nodes = torch.full((B, D), PLACEHOLDER_ID, dtype=torch.int64, device=device)
    for n in range(N):
        tried = parents[:, n] == current  # [B]: n is a child of the current node
        if not bool(tried.any()):
            continue
        x = ids[:, n]
        q_n = q[:, n]  # [B, V]
        accepted = tried & accept_ratio(u[:, n], q_n[rows, x], residual[rows, x])
        rejected = tried & ~accepted
        updated = (residual - q_n).clamp_min(0)
        mass = updated.sum(-1, keepdim=True)
        updated = torch.where(mass > 0, updated / torch.where(mass > 0, mass, 1.0), residual)
        residual = torch.where(rejected[:, None], updated, residual)
        residual = torch.where(accepted[:, None], p[:, n + 1], residual)
        nodes[rows[accepted], depth[accepted]] = n
        current = torch.where(accepted, n, current)
        depth = depth + accepted.to(torch.int64)

    last = draw(residual, uniforms_or_draw(final_uniforms, (B,), "final_uniforms", generator, device))
    tokens = torch.full((B, D + 1), PLACEHOLDER_ID, dtype=torch.int64, device=device)
    tokens[:, :D] = torch.where(nodes >= 0, ids.gather(1, nodes.clamp_min(0)), PLACEHOLDER_ID)
    tokens[rows, depth] = last
    return TreeVerifyOutput(tokens, nodes)


def verify_multi_draft(draft_token_ids: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor,
                       generator: torch.Generator | None = None) -> TreeVerifyOutput:
    """Multi-draft verification: ``C`` draft chains per row, recursive rejection sampling.

    Shape: ``draft_token_ids [B, C, K], draft_probs [B, C, K, V], target_probs
    [B, C, K+1, V] -> TreeVerifyOutput(tokens [B, K+1], accepted_nodes [B, K])``; node
    ``c K + k`` is draft ``k`` of chain ``c`` (:func:`~.protocol.chains_to_tree`).

    SpecInfer (arXiv:2305.09781) with the chains as the tree: the chains' first drafts are
    tried in chain order with the residual updated after each rejection; once one is
    accepted its chain is verified token by token (a chain node has one child). Lossless
    when the chains' first drafts are i.i.d. from the draft law after the context (rows
    ``draft_probs[:, c, 0]``) or drawn as their rows state.

    Raises
    ------
    TypeError, ValueError
        From :func:`~.protocol.chains_to_tree` and :func:`verify_tree_rrs`.
    """
    tree = chains_to_tree(draft_token_ids, draft_probs, target_probs)
    return verify_tree_rrs(*tree, generator)
