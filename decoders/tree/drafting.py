"""Tree speculative decoding around any tree verifier, driving the toy models.

Each round, for every unfinished row, the draft model grows a full tree level by level
(``branching[l]`` children for every node of level ``l``; one draft call per level over all
frontier nodes), the target is called *once* on the prefixes of all ``N + 1`` nodes (the
context and every node's path), the logits pipeline processes each node's logits with its own
history (the generated tokens plus the node's path: per-node penalties), and the verifier
picks a root path and one more token (:mod:`.protocol`). EOS and ``max_new_tokens`` cut the
round's output as in the chain decoder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from ..naive import GenerationOutput, check_prompt
from ..params import SamplingParams, batch_params
from ..pipeline import process_logits
from ..rejection_sampling import PLACEHOLDER_ID
from ..sampling import sample_from_probs
from .protocol import TreeVerifyOutput, check_tree_output, chain_parents, full_tree_parents, tree_depths
from .recursive import verify_tree_rrs

__all__ = ["DRAFTING", "TreeRoundRecord", "chain_as_tree_verifier", "draft_children", "tree_speculative_generate"]

DRAFTING = ("iid", "without_replacement", "top_k")
"""How a node's children are drawn from the draft law ``q_u`` after its path:

- ``"iid"``: independently, with replacement; each child's law row is ``q_u``;
- ``"without_replacement"``: one after the other, child ``j`` from ``q_u`` with the earlier
  children's tokens removed and renormalised (its row); when those tokens hold all of
  ``q_u``'s mass the child is drawn from ``q_u`` itself (and its row says so);
- ``"top_k"``: deterministically the most probable tokens of ``q_u`` (ties: lower id); each
  row is a point mass on its token.
"""

TreeVerifier = Callable[..., TreeVerifyOutput]


@dataclass(frozen=True)
class TreeRoundRecord:
    """What one tree round saw and did (for an ``observer``; tensors are the decoder's own:
    read them before returning, do not modify or keep them).

    Attributes
    ----------
    round_index : int
    rows : torch.LongTensor
        Shape ``[A]``: batch row of each active row.
    num_generated : torch.LongTensor
        Shape ``[A]``: tokens generated before this round.
    draft_token_ids, parent_ids : torch.LongTensor
        Shape ``[A, N]``.
    draft_probs : torch.Tensor
        Shape ``[A, N, V]``: the law each node's token was drawn from.
    target_probs : torch.Tensor
        Shape ``[A, N+1, V]``: the processed target law after the context and each node.
    output : TreeVerifyOutput
        The verifier's output.
    num_emitted, num_kept : torch.LongTensor
        Shape ``[A]``: tokens emitted by the verifier, and kept after the EOS / length cut.
    """

    round_index: int
    rows: torch.Tensor
    num_generated: torch.Tensor
    draft_token_ids: torch.Tensor
    parent_ids: torch.Tensor
    draft_probs: torch.Tensor
    target_probs: torch.Tensor
    output: TreeVerifyOutput
    num_emitted: torch.Tensor
    num_kept: torch.Tensor


def draft_children(q: torch.Tensor, k: int, drafting: str,
                   generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw ``k`` children for each of ``M`` nodes from their draft laws.

    Shape: ``q [M, V] -> (tokens [M, k], laws [M, k, V])``; ``laws[m, j]`` is the law child
    ``j`` was drawn from (see :data:`DRAFTING`).

    Raises
    ------
    ValueError
        On an unknown ``drafting``.
    """
    if drafting not in DRAFTING:
        raise ValueError(f"drafting must be one of {DRAFTING}, got {drafting!r}")
    M, V = q.shape
    q = q / q.sum(-1, keepdim=True)
    tokens = torch.empty(M, k, dtype=torch.int64, device=q.device)
    laws = torch.empty(M, k, V, dtype=q.dtype, device=q.device)
    if drafting == "top_k":
        order = torch.sort(-q, dim=-1, stable=True).indices[:, :k]  # ties: lower id first
        if order.shape[1] < k:
            raise ValueError(f"top_k drafting needs branching <= V={V}, got {k}")
        tokens[:] = order
        laws.zero_()
        laws.scatter_(2, order[:, :, None], 1.0)
        return tokens, laws
    remaining = q.clone()
    for j in range(k):
        law = q if drafting == "iid" else remaining
        if drafting == "without_replacement":
            mass = law.sum(-1, keepdim=True)
            law = torch.where(mass > 0, law / torch.where(mass > 0, mass, 1.0), q)
        tokens[:, j] = sample_from_probs(law.contiguous(), generator)
        laws[:, j] = law
        remaining = remaining.scatter(1, tokens[:, j:j + 1], 0.0)
    return tokens, laws


def chain_as_tree_verifier(chain_verifier) -> TreeVerifier:
    """A chain verifier (the ``verify`` protocol) as a tree verifier for single-chain trees.

    The returned callable takes the tree protocol's inputs, checks that every row's tree is
    the chain ``parent_ids[b, n] = n - 1`` (ValueError otherwise), calls
    ``chain_verifier(draft_token_ids, draft_probs, target_probs, generator)`` and reports the
    accepted nodes ``0 .. m-1``.
    """

    def verify_as_tree(draft_token_ids, parent_ids, draft_probs, target_probs, generator=None):
        B, N = draft_token_ids.shape
        if not bool((parent_ids.long().cpu() == chain_parents(N)[None, :]).all()):
            raise ValueError("chain_as_tree_verifier needs single-chain trees (parent_ids[b, n] = n - 1)")
        out = chain_verifier(draft_token_ids, draft_probs, target_probs, generator)
        if not isinstance(out, torch.Tensor):
            return out  # the protocol check reports it
        accepted = (out >= 0).sum(1) - 1
        nodes = torch.where(torch.arange(N, device=out.device)[None, :] < accepted[:, None],
                            torch.arange(N, device=out.device)[None, :], PLACEHOLDER_ID)
        return TreeVerifyOutput(out, nodes)

    verify_as_tree.__name__ = f"{getattr(chain_verifier, '__name__', 'chain_verifier')}_as_tree"
    verify_as_tree.capabilities = getattr(chain_verifier, "capabilities", None)
    return verify_as_tree


def tree_speculative_generate(
    target,
    draft,
    prompt_ids: torch.Tensor,
    target_params: SamplingParams | Sequence[SamplingParams],
    draft_params: SamplingParams | Sequence[SamplingParams] | None = None,
    *,
    branching: Sequence[int],
    max_new_tokens: int,
    drafting: str = "iid",
    generator: torch.Generator | None = None,
    eos_token_id: int | None = None,
    verifier: TreeVerifier = verify_tree_rrs,
    observer: Callable[[TreeRoundRecord], None] | None = None,
) -> GenerationOutput:
    """Tree speculative decoding: draft a full tree, verify all its nodes in one target call.

    Shape: ``prompt_ids [B, T0] -> tokens [B, max_new_tokens]``.

    Parameters
    ----------
    target, draft : callable
        ``model(input_ids [B, T], positions [B, n]) -> logits [B, n, V]`` with ``vocab_size``
        and ``device`` (e.g. :class:`~specexact.decoders.ToyLM`); same V.
    prompt_ids : torch.LongTensor
        Shape ``[B, T0]``.
    target_params, draft_params : SamplingParams or sequence of B
        The target's law (as naive sampling) and the draft's (default: the target's).
    branching : sequence of int
        Children per node at each level (the depth is ``len(branching)``): ``(k,) * d`` is a
        full k-ary tree of depth d, ``(C, 1, ..., 1)`` is C chains (multi-draft), ``(1,) * K``
        one chain.
    max_new_tokens : int
        Tokens to generate per row at most.
    drafting : {"iid", "without_replacement", "top_k"}
        How children are drawn (:data:`DRAFTING`).
    generator : torch.Generator, optional
        The only randomness (drafting and the verifier's draws).
    eos_token_id : int, optional
        A row stops after emitting it.
    verifier : callable
        The tree protocol (:mod:`.protocol`), called on the unfinished rows with the
        processed laws; a chain verifier goes through :func:`chain_as_tree_verifier`.
    observer : callable, optional
        ``observer(record)`` after every round with a :class:`TreeRoundRecord`.

    Returns
    -------
    GenerationOutput
        ``accepted_lengths [B, R]``: drafts accepted per round (``-1`` once a row finished);
        ``draft_calls`` counts one call per tree level.

    Raises
    ------
    ValueError
        On bad prompts, ``branching`` or ``drafting``, or models with different vocabularies.
    VerifierProtocolError
        If the verifier's output breaks the tree protocol.
    """
    V = target.vocab_size
    if draft.vocab_size != V:
        raise ValueError(f"draft vocab_size {draft.vocab_size} != target vocab_size {V}")
    branching = tuple(branching)
    parents_1 = full_tree_parents(branching)  # validates branching
    if drafting not in DRAFTING:
        raise ValueError(f"drafting must be one of {DRAFTING}, got {drafting!r}")
    if drafting == "top_k" and max(branching) > V:
        raise ValueError(f"top_k drafting needs every branching <= V={V}, got {branching}")
    check_prompt(prompt_ids, V, max_new_tokens)
    device = target.device
    prompt_ids = prompt_ids.to(device)
    B, T0 = prompt_ids.shape
    depth_max = len(branching)
    N = parents_1.numel()
    node_depth = tree_depths(parents_1[None, :])[0].to(device)  # [N]
    parents_1 = parents_1.to(device)
    level_start = [0]
    count = 1
    for k in branching:
        count *= k
        level_start.append(level_start[-1] + count)  # nodes of depth l: [level_start[l-1], level_start[l])
    t_bp = batch_params(target_params, B, device)
    d_bp = batch_params(target_params if draft_params is None else draft_params, B, device)

    L = T0 + max_new_tokens + depth_max + 1
    seq = torch.full((B, L), PLACEHOLDER_ID, dtype=torch.int64, device=device)
    seq[:, :T0] = prompt_ids
    lengths = torch.full((B,), T0, dtype=torch.int64, device=device)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    accepted_log: list[torch.Tensor] = []
    target_calls = draft_calls = 0

    while not bool(done.all()):
        act = (~done).nonzero().squeeze(1)
        A = act.numel()
        a_len = lengths[act]  # [A]
        W = int(a_len.max()) + depth_max
        # node_seq[:, 0] is the context, node_seq[:, n + 1] the context followed by node n's path.
        node_seq = seq[act, :W][:, None, :].repeat(1, N + 1, 1)  # [A, N+1, W]
        ids = torch.empty(A, N, dtype=torch.int64, device=device)
        dprobs = torch.empty(A, N, V, dtype=torch.float32, device=device)
        d_act = d_bp.select(act)
        for level, k in enumerate(branching):
            frontier = (torch.tensor([-1], device=device) if level == 0
                        else torch.arange(level_start[level - 1], level_start[level], device=device))
            M = frontier.numel()
            rows_seq = node_seq[:, frontier + 1]  # [A, M, W]
            positions = (a_len - 1 + level)[:, None].expand(A, M).reshape(A * M, 1)
            logits = draft(rows_seq.reshape(A * M, W), positions)[:, 0]  # [A*M, V]
            draft_calls += 1
            hist = rows_seq[:, :, T0:].reshape(A * M, W - T0)
            q = process_logits(logits, d_act.repeat_interleave(M), hist)  # [A*M, V]
            toks, laws = draft_children(q, k, drafting, generator)  # [A*M, k], [A*M, k, V]
            first = level_start[level]
            children = torch.arange(first, first + M * k, device=device)  # [M*k], in parent order
            ids[:, children] = toks.reshape(A, M * k)
            dprobs[:, children] = laws.reshape(A, M * k, V).to(dprobs.dtype)
            parent_rows = parents_1[children] + 1  # [M*k]
            node_seq[:, children + 1] = node_seq[:, parent_rows]
            col = (a_len + level)[:, None].expand(A, M * k)
            node_seq[:, children + 1] = node_seq[:, children + 1].scatter(
                2, col[:, :, None], ids[:, children][:, :, None])

        # One target call for the context and all N nodes; per-node processing.
        positions = (a_len[:, None] - 1 + torch.cat([torch.zeros(1, dtype=torch.int64, device=device),
                                                     node_depth])[None, :])  # [A, N+1]
        t_logits = target(node_seq.reshape(A * (N + 1), W), positions.reshape(-1, 1))[:, 0]  # [A*(N+1), V]
        target_calls += 1
        tprobs = process_logits(t_logits, t_bp.select(act).repeat_interleave(N + 1),
                                node_seq[:, :, T0:].reshape(A * (N + 1), W - T0)).reshape(A, N + 1, V)
        del t_logits
        parent_ids = parents_1[None, :].expand(A, N).clone()
        out = verifier(ids.clone(), parent_ids.clone(), dprobs, tprobs, generator)
        num = check_tree_output(out, ids, parent_ids, V).to(device)  # [A]
        tokens = out[0].to(device).long()
        round_log = torch.full((B,), -1, dtype=torch.int64, device=device)
        round_log[act] = num - 1
        accepted_log.append(round_log)

        steps = torch.arange(tokens.shape[1], device=device)
        keep = steps[None] < num[:, None]
        if eos_token_id is not None:
            is_eos = (tokens == eos_token_id) & keep
            after_eos = (is_eos.to(torch.int64).cumsum(1) - is_eos.to(torch.int64)) > 0
            keep &= ~after_eos
        remaining = T0 + max_new_tokens - a_len
        keep &= steps[None] < remaining[:, None]
        m = keep.sum(1)
        if observer is not None:
            observer(TreeRoundRecord(round_index=len(accepted_log) - 1, rows=act, num_generated=a_len - T0,
                                     draft_token_ids=ids, parent_ids=parent_ids, draft_probs=dprobs,
                                     target_probs=tprobs, output=out, num_emitted=num, num_kept=m))
        r_idx, c_idx = keep.nonzero(as_tuple=True)
        seq[act[r_idx], a_len[r_idx] + c_idx] = tokens[r_idx, c_idx]
        lengths[act] = a_len + m
        finished = lengths[act] >= T0 + max_new_tokens
        if eos_token_id is not None:
            finished |= ((tokens == eos_token_id) & keep).any(1)
        done[act] = finished

    out_tokens = seq[:, T0:T0 + max_new_tokens]
    return GenerationOutput(tokens=out_tokens, num_tokens=lengths - T0, target_calls=target_calls,
                            draft_calls=draft_calls, accepted_lengths=torch.stack(accepted_log, 1))
