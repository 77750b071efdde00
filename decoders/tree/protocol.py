"""The tree / multi-draft verification protocol (beside the chain ``verify`` protocol).

A *draft tree* per row has ``N`` nodes; node ``n`` holds one drafted token and the index of
its parent node (``-1``: a child of the root, i.e. of the context itself). Parents come
before children (``parent_ids[b, n] < n``), so the node order is a topological order; the
children of one node are its *siblings* and are verified in increasing node index (the
*sibling order*). ``depth(n) = 1 + depth(parent)``, the root has depth 0; ``D`` is the
largest depth of the batch. The protocol::

    verify_tree(draft_token_ids: LongTensor[B, N],
                parent_ids: LongTensor[B, N],          # -1 or an earlier node index
                draft_probs: FloatTensor[B, N, V],     # the law node n's token was sampled from
                target_probs: FloatTensor[B, N + 1, V],  # row 0: after the context;
                                                       # row n + 1: after node n's path
                generator: torch.Generator | None,
                ) -> TreeVerifyOutput(tokens: LongTensor[B, D + 1],
                                      accepted_nodes: LongTensor[B, D])

``tokens`` holds the accepted drafts along one root path, then one recovered or bonus token,
left-aligned, ``-1`` after; ``accepted_nodes[b, j]`` is the node whose token is
``tokens[b, j]`` (``-1`` after the last accepted one). So a row that accepts ``m`` drafts
emits ``m + 1`` tokens; ``accepted_nodes[b, :m]`` is a root path (node ``j + 1``'s parent is
node ``j``, node 0's parent is ``-1``).

``draft_probs[b, n]`` is the law node ``n``'s token was drawn from, *given the tree drawn
before it* (its parent's path and its earlier siblings). For the usual drafting rules:

- *i.i.d. siblings* (with replacement; SpecInfer's multi-step speculative sampling): every
  child of node ``u`` was drawn independently from ``q_u``, the draft's processed law after
  ``u``'s path, and its row is ``q_u``;
- *siblings without replacement* (sequential: child ``j`` drawn from ``q_u`` with the tokens of
  children ``1 .. j-1`` removed): child ``j``'s row is
  ``q_u(x) 1[x not in {c_1 .. c_{j-1}}] / (1 - sum_{i<j} q_u(c_i))``;
- *deterministic children* (top-k of ``q_u``, as in EAGLE / Medusa trees): the row is a point
  mass on the chosen token (the choice involved no randomness).

Several chains per row (multi-draft) are a tree whose root has one child per chain and whose
other nodes have at most one child: :func:`chains_to_tree` converts the ``[B, C, K]`` layout.
A single chain (``parent_ids[b, n] = n - 1``) is the chain protocol: :func:`chain_parents`.

What the verifier declares in :class:`~specexact.decoders.adapters.Capabilities`: ``scheme``
``"tree"`` or ``"multi_draft"`` for a lossless tree verifier, ``"lossy"`` with its
parameters in ``scheme_params`` for a knowingly inexact one.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import torch

from ..speculative import VerifierProtocolError

__all__ = [
    "TreeVerifyOutput",
    "TreeInputs",
    "validate_tree_inputs",
    "tree_depths",
    "max_depth",
    "full_tree_parents",
    "chain_parents",
    "chains_to_tree",
    "check_tree_output",
]


class TreeVerifyOutput(NamedTuple):
    """What a tree verifier returns.

    Attributes
    ----------
    tokens : torch.LongTensor
        Shape ``[B, D + 1]``: the accepted drafts along one root path, then one recovered or
        bonus token, left-aligned; ``-1`` after the last emitted token.
    accepted_nodes : torch.LongTensor
        Shape ``[B, D]``: the node index of each accepted draft (``tokens[b, j] ==
        draft_token_ids[b, accepted_nodes[b, j]]``), ``-1`` after the last accepted one.
    """

    tokens: torch.Tensor
    accepted_nodes: torch.Tensor


class TreeInputs(NamedTuple):
    """The four tensors of the tree protocol (what :func:`chains_to_tree` returns).

    Attributes
    ----------
    draft_token_ids : torch.LongTensor
        Shape ``[B, N]``.
    parent_ids : torch.LongTensor
        Shape ``[B, N]``.
    draft_probs : torch.Tensor
        Shape ``[B, N, V]``.
    target_probs : torch.Tensor
        Shape ``[B, N + 1, V]``.
    """

    draft_token_ids: torch.Tensor
    parent_ids: torch.Tensor
    draft_probs: torch.Tensor
    target_probs: torch.Tensor


def _check_integer(name: str, t: object) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer tensor, got {t.dtype}")


def _check_law(name: str, t: object) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not t.is_floating_point():
        raise TypeError(f"{name} must be floating point, got {t.dtype}")
    row_min, row_max = torch.aminmax(t, dim=-1)
    if bool(((row_min >= 0) & (row_max > 0) & (row_max < torch.inf)).all()):
        return
    if not bool(torch.isfinite(t).all()):
        bad = (~torch.isfinite(t)).nonzero()[0].tolist()
        raise ValueError(f"{name} has a NaN or infinite value at index {bad}: {t[tuple(bad)].item()}")
    if bool((t < 0).any()):
        bad = (t < 0).nonzero()[0].tolist()
        raise ValueError(f"{name} has a negative probability at index {bad}: {t[tuple(bad)].item()}")
    bad = (row_max <= 0).nonzero()[0].tolist()
    raise ValueError(f"{name} row {bad} has no positive mass")


def validate_tree_inputs(draft_token_ids: torch.Tensor, parent_ids: torch.Tensor,
                         draft_probs: torch.Tensor, target_probs: torch.Tensor) -> None:
    """Check the shapes, dtypes and values of the tree protocol's inputs.

    Shape: ``draft_token_ids [B, N], parent_ids [B, N], draft_probs [B, N, V],
    target_probs [B, N+1, V]``; returns None.

    Parameters
    ----------
    draft_token_ids : torch.Tensor
        Integer dtype, ids in ``[0, V)``.
    parent_ids : torch.Tensor
        Integer dtype; ``parent_ids[b, n]`` is ``-1`` or in ``[0, n)``.
    draft_probs, target_probs : torch.Tensor
        Floating point; every row finite, non-negative, with positive mass (rows need not
        sum to 1 exactly: the verifiers normalise them).

    Raises
    ------
    TypeError
        An argument that is not a tensor, integer ids / parents of a floating or bool
        dtype, or laws of a non-floating dtype.
    ValueError
        An empty batch or tree, mismatched shapes, ids outside ``[0, V)``, a parent that is
        not an earlier node, or a law row with NaN / inf / negative entries or no mass. The
        message names the argument and the offending value.
    """
    _check_integer("draft_token_ids", draft_token_ids)
    _check_integer("parent_ids", parent_ids)
    if draft_token_ids.dim() != 2:
        raise ValueError(f"draft_token_ids must have shape [B, N], got {tuple(draft_token_ids.shape)}")
    B, N = draft_token_ids.shape
    if B == 0:
        raise ValueError("draft_token_ids has an empty batch (B=0)")
    if N == 0:
        raise ValueError("draft_token_ids has N=0 nodes; a draft tree needs N >= 1")
    if tuple(parent_ids.shape) != (B, N):
        raise ValueError(f"parent_ids must have shape [B={B}, N={N}], got {tuple(parent_ids.shape)}")
    for name, t, rows in (("draft_probs", draft_probs, N), ("target_probs", target_probs, N + 1)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 3 or tuple(t.shape[:2]) != (B, rows):
            raise ValueError(f"{name} must have shape [B={B}, {rows}, V], got {tuple(t.shape)}")
    V = draft_probs.shape[2]
    if V == 0:
        raise ValueError("draft_probs has an empty vocabulary (V=0)")
    if target_probs.shape[2] != V:
        raise ValueError(f"target_probs has V={target_probs.shape[2]}, draft_probs has V={V}")
    lo, hi = int(draft_token_ids.min()), int(draft_token_ids.max())
    if lo < 0 or hi >= V:
        raise ValueError(f"draft_token_ids must lie in [0, {V}), got values in [{lo}, {hi}]")
    index = torch.arange(N, device=parent_ids.device)[None, :]
    bad = (parent_ids < -1) | (parent_ids >= index)
    if bool(bad.any()):
        b, n = bad.nonzero()[0].tolist()
        raise ValueError(
            f"parent_ids[{b}, {n}] must be -1 (the root) or an earlier node in [0, {n}), "
            f"got {int(parent_ids[b, n])}"
        )
    _check_law("draft_probs", draft_probs)
    _check_law("target_probs", target_probs)


def tree_depths(parent_ids: torch.Tensor) -> torch.Tensor:
    """Depth of every node: ``1 + depth(parent)``, the root has depth 0.

    Shape: ``parent_ids [B, N] -> depths [B, N]`` (int64). The parents must be valid
    (:func:`validate_tree_inputs`).
    """
    B, N = parent_ids.shape
    depths = torch.zeros(B, N, dtype=torch.int64, device=parent_ids.device)
    parents = parent_ids.long()
    for n in range(N):
        p = parents[:, n]
        depths[:, n] = 1 + torch.where(p >= 0, depths.gather(1, p.clamp_min(0)[:, None])[:, 0], 0)
    return depths


def max_depth(parent_ids: torch.Tensor) -> int:
    """``D``, the largest node depth of the batch (the output has ``D + 1`` columns)."""
    return int(tree_depths(parent_ids).max())


def full_tree_parents(branching: Sequence[int]) -> torch.Tensor:
    """Parent indices of a full tree with ``branching[l]`` children per node at level ``l``.

    Shape: ``-> LongTensor [N]``, ``N = k_1 + k_1 k_2 + ... + k_1 ... k_d``. Nodes are numbered
    breadth first; the children of one node are contiguous and in order of their parent.
    ``(C, 1, 1, ..., 1)`` gives ``C`` chains (multi-draft), ``(1,) * K`` a single chain.

    Raises
    ------
    ValueError
        If ``branching`` is empty or has an entry that is not an integer ``>= 1``.
    """
    branching = tuple(branching)
    if not branching:
        raise ValueError("branching must name at least one level, got ()")
    for k in branching:
        if isinstance(k, bool) or int(k) != k or k < 1:
            raise ValueError(f"branching entries must be integers >= 1, got {branching!r}")
    parents: list[int] = []
    frontier = [-1]
    for k in branching:
        nxt = []
        for f in frontier:
            for _ in range(int(k)):
                nxt.append(len(parents))
                parents.append(f)
        frontier = nxt
    return torch.tensor(parents, dtype=torch.int64)


def chain_parents(num_draft_tokens: int) -> torch.Tensor:
    """Parents of a single chain of ``K`` drafts: ``[-1, 0, 1, ..., K-2]``. Shape ``[K]``."""
    return full_tree_parents((1,) * int(num_draft_tokens))


def chains_to_tree(draft_token_ids: torch.Tensor, draft_probs: torch.Tensor,
                   target_probs: torch.Tensor) -> TreeInputs:
    """Several draft chains per row as one tree (multi-draft, SpecInfer's layout).

    Shape: ``draft_token_ids [B, C, K], draft_probs [B, C, K, V], target_probs
    [B, C, K+1, V] -> TreeInputs`` with ``N = C K`` nodes: node ``c K + k`` is draft ``k`` of
    chain ``c``, its parent is node ``c K + k - 1`` (``-1`` for ``k = 0``). The first drafts of
    all chains are siblings, verified in chain order.

    Raises
    ------
    TypeError, ValueError
        On wrong shapes or dtypes, or when the chains' first target rows (the law after the
        shared context) differ: they must be one law.
    """
    _check_integer("draft_token_ids", draft_token_ids)
    if draft_token_ids.dim() != 3:
        raise ValueError(f"draft_token_ids must have shape [B, C, K], got {tuple(draft_token_ids.shape)}")
    B, C, K = draft_token_ids.shape
    if not isinstance(draft_probs, torch.Tensor) or draft_probs.dim() != 4 or tuple(draft_probs.shape[:3]) != (B, C, K):
        shape = tuple(draft_probs.shape) if isinstance(draft_probs, torch.Tensor) else type(draft_probs).__name__
        raise ValueError(f"draft_probs must have shape [B={B}, C={C}, K={K}, V], got {shape}")
    V = draft_probs.shape[3]
    if not isinstance(target_probs, torch.Tensor) or tuple(target_probs.shape) != (B, C, K + 1, V):
        shape = tuple(target_probs.shape) if isinstance(target_probs, torch.Tensor) else type(target_probs).__name__
        raise ValueError(f"target_probs must have shape [B={B}, C={C}, K+1={K + 1}, V={V}], got {shape}")
    root = target_probs[:, :1, 0]  # [B, 1, V]
    if not bool((target_probs[:, :, 0] == root).all()):
        c = int((target_probs[:, :, 0] != root).any(-1).any(0).nonzero()[0, 0])
        raise ValueError(f"target_probs[:, {c}, 0] differs from target_probs[:, 0, 0]: every chain's first "
                         "target row is the law after the shared context")
    chain_major = torch.arange(C * K).reshape(C, K)  # node index c K + k of draft k of chain c
    parents = torch.where(torch.arange(K)[None, :] == 0, -1, chain_major - 1).reshape(-1)
    ids = draft_token_ids.reshape(B, C * K)
    probs = draft_probs.reshape(B, C * K, V)
    tprobs = torch.cat([root, target_probs[:, :, 1:].reshape(B, C * K, V)], 1)
    return TreeInputs(ids, parents[None, :].expand(B, -1).to(ids.device).clone(), probs, tprobs)


def check_tree_output(out: object, draft_token_ids: torch.Tensor, parent_ids: torch.Tensor,
                      vocab_size: int) -> torch.Tensor:
    """Validate a tree verifier's output against the protocol; return its emitted counts ``[B]``.

    Raises
    ------
    VerifierProtocolError
        Not a :class:`TreeVerifyOutput` (or pair of tensors), wrong shapes or dtypes, an id
        outside ``[0, V)`` other than ``-1``, output not left-aligned, no token, accepted
        nodes that are not a root path of the row's tree, or an accepted token that differs
        from its node's token.
    """
    if not (isinstance(out, tuple) and len(out) == 2 and all(isinstance(t, torch.Tensor) for t in out)):
        raise VerifierProtocolError(
            f"tree verifier must return TreeVerifyOutput(tokens, accepted_nodes), got {type(out).__name__}")
    tokens, nodes = out
    B, N = draft_token_ids.shape
    D = max_depth(parent_ids)
    if tuple(tokens.shape) != (B, D + 1) or tuple(nodes.shape) != (B, D):
        raise VerifierProtocolError(
            f"tree verifier output must have shapes [{B}, {D + 1}] and [{B}, {D}], got "
            f"{tuple(tokens.shape)} and {tuple(nodes.shape)}")
    for name, t in (("tokens", tokens), ("accepted_nodes", nodes)):
        if t.dtype.is_floating_point or t.dtype == torch.bool:
            raise VerifierProtocolError(f"tree verifier {name} must be integer, got {t.dtype}")
    tokens, nodes = tokens.long().cpu(), nodes.long().cpu()
    ids, parents = draft_token_ids.long().cpu(), parent_ids.long().cpu()
    bad = ((tokens < 0) & (tokens != -1)) | (tokens >= vocab_size)
    if bool(bad.any()):
        b, k = bad.nonzero()[0].tolist()
        raise VerifierProtocolError(f"tree verifier emitted id {int(tokens[b, k])} at [row {b}, position {k}], "
                                    f"outside [0, {vocab_size})")
    num = (tokens >= 0).sum(1)
    if bool((num == 0).any()):
        raise VerifierProtocolError(f"tree verifier emitted no token in row {int((num == 0).nonzero()[0, 0])}")
    cols = torch.arange(D + 1)[None, :]
    if not bool(((tokens >= 0) == (cols < num[:, None])).all()):
        raise VerifierProtocolError(
            f"tree verifier tokens row {int((((tokens >= 0) != (cols < num[:, None])).any(1)).nonzero()[0, 0])} "
            "is not left-aligned")
    acc = num - 1
    expected_present = cols[:, :D] < acc[:, None]
    if not bool(((nodes >= 0) == expected_present).all()) or bool(((nodes < -1) | (nodes >= N)).any()):
        b = int((((nodes >= 0) != expected_present) | (nodes < -1) | (nodes >= N)).any(1).nonzero()[0, 0])
        raise VerifierProtocolError(f"tree verifier accepted_nodes row {b} does not list exactly the "
                                    f"{int(acc[b])} accepted nodes")
    for j in range(D):
        rows = (acc > j).nonzero().squeeze(1)
        if rows.numel() == 0:
            break
        n = nodes[rows, j]
        want_parent = torch.full_like(n, -1) if j == 0 else nodes[rows, j - 1]
        wrong = parents[rows, n] != want_parent
        if bool(wrong.any()):
            b = int(rows[wrong.nonzero()[0, 0]])
            raise VerifierProtocolError(f"tree verifier accepted node {int(nodes[b, j])} at depth {j + 1} of row "
                                        f"{b}, which is not a child of the previous accepted node")
        mismatch = ids[rows, n] != tokens[rows, j]
        if bool(mismatch.any()):
            b = int(rows[mismatch.nonzero()[0, 0]])
            raise VerifierProtocolError(f"tree verifier emitted {int(tokens[b, j])} at accepted position {j} of "
                                        f"row {b}, but node {int(nodes[b, j])} holds {int(ids[b, int(nodes[b, j])])}")
    return num
