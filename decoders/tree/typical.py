"""Medusa's typical acceptance (Cai et al., arXiv:2401.10774): a knowingly lossy verifier.

Cai, Li, Geng, Peng, Lee, Chen, Dao, "Medusa: Simple LLM Inference Acceleration Framework
with Multiple Decoding Heads", ICML 2024, sec. 2.3.1: a drafted token ``x`` after a prefix
whose target law is ``p`` is accepted when

    ``p(x) > min(epsilon, delta * exp(-H(p)))``,  ``H(p) = -sum_v p(v) log(p(v) + 1e-5)``

(``epsilon`` = ``posterior_threshold``, ``delta`` = ``posterior_alpha``; the ``1e-5`` inside the
log is the reference implementation's, ``medusa/model/utils.py`` ``evaluate_posterior``, also
vLLM's ``TypicalAcceptanceSampler``). A candidate is a root path of the draft tree; its
accepted length is the number of leading tokens that pass. The longest accepted prefix over
all candidates wins; among equally long ones the largest likelihood ``sum log p(x)`` along it
(Medusa's rule), then the lowest node index. The next token is the target's argmax after the
accepted prefix (Medusa's ``generate_candidates`` takes the base model's greedy token; lowest
id among ties) or, with ``next_token="sample"``, a draw from the target law there.

No draft probability enters the decision, so the emitted law is not the target's: the audit
measures its TV from the target instead of failing it (scheme ``"lossy"``).
"""

from __future__ import annotations

import math

import torch

from ..rejection_sampling import PLACEHOLDER_ID
from ._draw import check_generator, draw, normalised, uniforms_or_draw
from .protocol import TreeVerifyOutput, chain_parents, max_depth, tree_depths, validate_tree_inputs

__all__ = ["typical_thresholds", "verify_tree_typical", "verify_chain_typical", "MEDUSA_DEFAULTS"]

MEDUSA_DEFAULTS = {"posterior_threshold": 0.09, "posterior_alpha": 0.3}
"""The defaults of Medusa's ``medusa_generate`` (and vLLM's typical-acceptance sampler)."""

ENTROPY_EPS = 1e-5
"""Added inside the logarithm of the entropy, as Medusa and vLLM do."""


def typical_thresholds(target_probs: torch.Tensor, *, posterior_threshold: float,
                       posterior_alpha: float) -> torch.Tensor:
    """``min(epsilon, delta * exp(-H(p)))`` for each target row.

    Shape: ``target_probs [..., V] -> [...]`` (float64; rows normalised first).
    """
    p = normalised(target_probs)
    entropy = -(p * torch.log(p + ENTROPY_EPS)).sum(-1)
    return torch.clamp(posterior_alpha * torch.exp(-entropy), max=posterior_threshold)


def _check_params(posterior_threshold, posterior_alpha, next_token) -> None:
    for name, value in (("posterior_threshold", posterior_threshold), ("posterior_alpha", posterior_alpha)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if next_token not in ("greedy", "sample"):
        raise ValueError(f"next_token must be 'greedy' or 'sample', got {next_token!r}")


def verify_tree_typical(draft_token_ids: torch.Tensor, parent_ids: torch.Tensor, draft_probs: torch.Tensor,
                        target_probs: torch.Tensor, generator: torch.Generator | None = None, *,
                        posterior_threshold: float = MEDUSA_DEFAULTS["posterior_threshold"],
                        posterior_alpha: float = MEDUSA_DEFAULTS["posterior_alpha"],
                        next_token: str = "greedy",
                        final_uniforms: torch.Tensor | None = None) -> TreeVerifyOutput:
    """Typical acceptance over a draft tree (Medusa, arXiv:2401.10774): lossy.

    Shape: ``draft_token_ids [B, N], parent_ids [B, N], draft_probs [B, N, V], target_probs
    [B, N+1, V] -> TreeVerifyOutput(tokens [B, D+1], accepted_nodes [B, D])``.

    The rule is in the module docstring. ``draft_probs`` is validated and otherwise unused.

    Parameters
    ----------
    draft_token_ids, parent_ids, draft_probs, target_probs : torch.Tensor
        The tree protocol's inputs.
    generator : torch.Generator, optional
        Used only with ``next_token="sample"``: ``B`` float64 uniforms.
    posterior_threshold : float, keyword-only
        ``epsilon`` (Medusa default 0.09), ``>= 0``.
    posterior_alpha : float, keyword-only
        ``delta`` (Medusa default 0.3), ``>= 0``.
    next_token : {"greedy", "sample"}, keyword-only
        The token after the accepted prefix: the target's argmax (Medusa) or a target draw.
    final_uniforms : torch.Tensor, optional, keyword-only
        Shape ``[B]``: the uniforms of the ``"sample"`` draw.

    Returns
    -------
    TreeVerifyOutput

    Raises
    ------
    TypeError, ValueError
        On bad input, a negative or non-finite parameter or an unknown ``next_token``.
    """
    check_generator(generator)
    validate_tree_inputs(draft_token_ids, parent_ids, draft_probs, target_probs)
    _check_params(posterior_threshold, posterior_alpha, next_token)
    B, N = draft_token_ids.shape
    device = target_probs.device
    D = max_depth(parent_ids)
    p = normalised(target_probs)  # [B, N+1, V]
    ids = draft_token_ids.long()
    parents = parent_ids.long().to(device)
    depths = tree_depths(parents)  # [B, N]
    thresholds = typical_thresholds(p, posterior_threshold=posterior_threshold,
                                    posterior_alpha=posterior_alpha)  # [B, N+1]
    rows = torch.arange(B, device=device)[:, None]
    parent_row = parents + 1  # [B, N]: target row of each node's parent
    t = p[rows, parent_row, ids]  # [B, N]: p_parent(x_n)
    passes = t > thresholds.gather(1, parent_row)  # [B, N]

    # A node is accepted when it and all its ancestors pass; likelihood summed along the path.
    ok = torch.zeros(B, N, dtype=torch.bool, device=device)
    loglik = torch.zeros(B, N, dtype=torch.float64, device=device)
    for n in range(N):
        par = parents[:, n]
        par_ok = torch.where(par >= 0, ok.gather(1, par.clamp_min(0)[:, None])[:, 0], True)
        par_ll = torch.where(par >= 0, loglik.gather(1, par.clamp_min(0)[:, None])[:, 0], 0.0)
        ok[:, n] = par_ok & passes[:, n]
        loglik[:, n] = par_ll + torch.log(t[:, n])

    # Best node: deepest accepted, then largest likelihood, then lowest index.
    score_depth = torch.where(ok, depths, 0)
    best_depth = score_depth.amax(1)  # [B]
    candidate = ok & (depths == best_depth[:, None])
    ll = torch.where(candidate, loglik, -torch.inf)
    best_ll = ll.amax(1, keepdim=True)
    first = torch.argmax((candidate & (ll == best_ll)).to(torch.int8), dim=1)  # lowest index among ties
    best = torch.where(best_depth > 0, first, -1)  # [B]; -1: nothing accepted

    # The accepted path, walked up from the best node.
    nodes = torch.full((B, D), PLACEHOLDER_ID, dtype=torch.int64, device=device)
    node = best.clone()
    for level in range(D, 0, -1):
        here = (best_depth >= level)
        nodes[here, level - 1] = node[here]
        node = torch.where(here, parents.gather(1, node.clamp_min(0)[:, None])[:, 0], node)
    row_ids = torch.arange(B, device=device)
    law = p[row_ids, best + 1]  # [B, V]: target after the accepted prefix
    if next_token == "greedy":
        last = torch.argmax(law, dim=-1)
    else:
        last = draw(law, uniforms_or_draw(final_uniforms, (B,), "final_uniforms", generator, device))
    tokens = torch.full((B, D + 1), PLACEHOLDER_ID, dtype=torch.int64, device=device)
    tokens[:, :D] = torch.where(nodes >= 0, ids.gather(1, nodes.clamp_min(0)), PLACEHOLDER_ID)
    tokens[row_ids, best_depth] = last
    return TreeVerifyOutput(tokens, nodes)


def verify_chain_typical(draft_token_ids: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor,
                         generator: torch.Generator | None = None, **params) -> torch.Tensor:
    """Typical acceptance on one draft chain (the ``verify`` protocol; vLLM's typical sampler
    with Medusa's greedy next token by default).

    Shape: ``draft_token_ids [B, K], draft_probs [B, K, V], target_probs [B, K+1, V] ->
    emitted [B, K+1]``: the longest prefix whose tokens all pass, then the next token.
    ``params`` as :func:`verify_tree_typical`.
    """
    if not isinstance(draft_token_ids, torch.Tensor) or draft_token_ids.dim() != 2:
        shape = tuple(draft_token_ids.shape) if isinstance(draft_token_ids, torch.Tensor) else type(draft_token_ids).__name__
        raise ValueError(f"draft_token_ids must have shape [B, K], got {shape}")
    B, K = draft_token_ids.shape
    parents = chain_parents(K).to(draft_token_ids.device)[None, :].expand(B, -1)
    return verify_tree_typical(draft_token_ids, parents, draft_probs, target_probs, generator, **params).tokens
