"""Block verification (Sun et al., arXiv:2403.10444), a chain verifier with the ``verify`` protocol.

Token-wise verification accepts draft ``i`` with probability ``min(1, p_i(d_i) / q_i(d_i))``
on its own. Block verification decides on the whole block: it carries a weight ``w_i`` (the
paper's ``p_i``) along the block, keeps the *longest* prefix whose own coin falls below a
per-position probability ``h_i``, and draws the next token from a residual that involves the
weight. It is lossless and its expected accepted length is the largest any verifier that sees
only the drafted block's probabilities can reach; in particular it accepts at least as much as
token-wise verification, so its accepted-length law is not ``P(N >= i) = sum prod min(p, q)``
(:func:`block_accepted_length_law` in ``specexact.exactness.tree_laws`` gives its own).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..rejection_sampling import PLACEHOLDER_ID
from ..verify_inputs import validate_verify_inputs_reference
from ._draw import check_generator, draw, normalised, uniforms_or_draw

__all__ = ["BlockWeights", "block_verification_weights", "verify_block"]


class BlockWeights(NamedTuple):
    """The per-position quantities of block verification for a batch of drafted blocks.

    Attributes
    ----------
    weights : torch.Tensor
        Shape ``[B, K+1]``, float64: ``w_0 = 1`` and ``w_i = min(w_{i-1} p_{i-1}(d_i) /
        q_{i-1}(d_i), 1)`` (the paper's ``p_i``); ``P(at least i drafts accepted | block) = w_i``.
    residual_mass : torch.Tensor
        Shape ``[B, K]``, float64: ``s_i = sum_x max(w_i p_i(x) - q_i(x), 0)`` for ``i = 0..K-1``.
    stop_probs : torch.Tensor
        Shape ``[B, K]``, float64: ``h_i`` for ``i = 1..K`` (column ``i - 1``):
        ``h_i = s_i / (s_i + 1 - w_i)`` for ``i < K`` (0 when both vanish) and ``h_K = w_K``.
    """

    weights: torch.Tensor
    residual_mass: torch.Tensor
    stop_probs: torch.Tensor


def block_verification_weights(draft_token_ids: torch.Tensor, draft_probs: torch.Tensor,
                               target_probs: torch.Tensor) -> BlockWeights:
    """The weights ``w_i``, residual masses ``s_i`` and stop probabilities ``h_i`` of block verification.

    Shape: ``draft_token_ids [B, K], draft_probs [B, K, V], target_probs [B, K+1, V] ->
    BlockWeights`` (rows are normalised first; everything in float64).

    Sun et al. 2024 (arXiv:2403.10444, Algorithm 2, "block verification"), in the notation
    here (``p_i``, ``q_i``: target and draft laws after the first ``i`` drafts):
    ``w_0 = 1``, ``w_i = min(w_{i-1} p_{i-1}(d_i) / q_{i-1}(d_i), 1)``;
    ``h_i = s_i / (s_i + 1 - w_i)`` with ``s_i = sum_x max(w_i p_i(x) - q_i(x), 0)`` for
    ``i < K``, and ``h_K = w_K``. A draft with ``q_{i-1}(d_i) = 0`` gets ratio ``+inf`` if its
    target probability is positive and 0 otherwise (the chain verifier's guard).

    Raises
    ------
    TypeError, ValueError
        From :func:`~specexact.decoders.validate_verify_inputs_reference` on bad input.
    """
    validate_verify_inputs_reference(draft_token_ids, draft_probs, target_probs)
    q = normalised(draft_probs)  # [B, K, V]
    p = normalised(target_probs)  # [B, K+1, V]
    B, K = draft_token_ids.shape
    ids = draft_token_ids.long()[:, :, None]
    p_d = p[:, :K].gather(2, ids).squeeze(2)  # [B, K]: p_{i-1}(d_i)
    q_d = q.gather(2, ids).squeeze(2)  # [B, K]
    ratio = torch.where(q_d > 0, p_d / torch.where(q_d > 0, q_d, 1.0),
                        torch.where(p_d > 0, torch.inf, 0.0))
    w = torch.ones(B, K + 1, dtype=torch.float64, device=p.device)
    for i in range(1, K + 1):
        w[:, i] = torch.clamp(w[:, i - 1] * ratio[:, i - 1], max=1.0)
    s = (w[:, :K, None] * p[:, :K] - q).clamp_min(0).sum(-1)  # [B, K]: s_0 .. s_{K-1}
    denom = s[:, 1:] + 1 - w[:, 1:K]  # [B, K-1]: for h_1 .. h_{K-1}
    h_inner = torch.where(denom > 0, s[:, 1:] / torch.where(denom > 0, denom, 1.0), 0.0)
    h = torch.cat([h_inner, w[:, K:]], 1)  # [B, K]: h_1 .. h_K
    return BlockWeights(weights=w, residual_mass=s, stop_probs=h)


def verify_block(draft_token_ids: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor,
                 generator: torch.Generator | None = None, *, uniforms: torch.Tensor | None = None,
                 final_uniforms: torch.Tensor | None = None) -> torch.Tensor:
    """Block verification of K drafted tokens per row (the ``verify`` protocol).

    Shape: ``draft_token_ids [B, K], draft_probs [B, K, V], target_probs [B, K+1, V] ->
    emitted [B, K+1]``.

    Sun, Mendlovic, Leviathan, Aharoni, Ro, Beirami, Suresh, "Block Verification Accelerates
    Speculative Decoding", ICLR 2025 (arXiv:2403.10444), Algorithm 2: with the weights and
    stop probabilities of :func:`block_verification_weights`, draw ``eta_1 .. eta_K ~ U[0, 1)``
    and let ``tau = max{i : eta_i < h_i}`` (``tau = 0`` if there is none); emit
    ``d_1 .. d_tau`` and then one token from ``max(w_tau p_tau - q_tau, 0)`` (normalised) if
    ``tau < K``, from ``p_K`` (the bonus token) if ``tau = K``. Every emitted sequence has the
    target's law; ``P(tau >= i | d_1..d_i) = w_i >= prod_{j <= i} min(1, p_{j-1}(d_j)/q_{j-1}(d_j))``
    (the paper's motivating example, ``p = (1/3, 2/3)``, ``q = (2/3, 1/3)``, ``K = 2``:
    expected accepted length 11/9 against token-wise 10/9).

    Parameters
    ----------
    draft_token_ids, draft_probs, target_probs : torch.Tensor
        As :func:`~specexact.decoders.verify`.
    generator : torch.Generator, optional
        The only randomness (torch's default generator when None): ``B * K`` float64
        uniforms ``eta``, then ``B`` for the last token (each only if not given).
    uniforms : torch.Tensor, optional, keyword-only
        Shape ``[B, K]`` in ``[0, 1)``: ``eta`` (injected; column ``i - 1`` is ``eta_i``).
    final_uniforms : torch.Tensor, optional, keyword-only
        Shape ``[B]`` in ``[0, 1)``: the uniform of the last token's inverse-CDF draw.

    Returns
    -------
    torch.LongTensor
        Shape ``[B, K+1]``: ``tau`` accepted drafts, then the recovered or bonus token;
        ``-1`` after.

    Raises
    ------
    TypeError, ValueError
        From :func:`block_verification_weights` on bad input, a generator that is not a
        ``torch.Generator``, or injected uniforms of the wrong shape or outside ``[0, 1)``.

    Notes
    -----
    If rounding leaves the residual at ``tau`` without mass (the target equal to the draft
    up to ulps; ``tau`` is then chosen with probability 0 in exact arithmetic) the last token
    is drawn from ``p_tau``.
    """
    check_generator(generator)
    bw = block_verification_weights(draft_token_ids, draft_probs, target_probs)
    B, K = draft_token_ids.shape
    device = target_probs.device
    eta = uniforms_or_draw(uniforms, (B, K), "uniforms", generator, device)
    hit = eta < bw.stop_probs  # [B, K]: eta_i < h_i, column i - 1
    positions = torch.arange(1, K + 1, device=device)[None, :]
    tau = torch.where(hit, positions, 0).amax(1)  # [B]
    rows = torch.arange(B, device=device)
    p = normalised(target_probs)
    q = normalised(draft_probs)
    p_tau = p[rows, tau]  # [B, V]
    residual = (bw.weights[rows, tau][:, None] * p_tau - q[rows, tau.clamp(max=K - 1)]).clamp_min(0)
    last_law = torch.where((tau < K)[:, None], residual, p_tau)
    no_mass = last_law.amax(-1) <= 0
    last_law = torch.where(no_mass[:, None], p_tau, last_law)
    last = draw(last_law, uniforms_or_draw(final_uniforms, (B,), "final_uniforms", generator, device))
    out = torch.full((B, K + 1), PLACEHOLDER_ID, dtype=torch.int64, device=device)
    out[:, :K] = torch.where(positions - 1 < tau[:, None], draft_token_ids.long(), PLACEHOLDER_ID)
    out[rows, tau] = last
    return out
