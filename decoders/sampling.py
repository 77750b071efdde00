"""Drawing token ids from probability rows with an explicit generator."""

from __future__ import annotations

import torch

__all__ = ["sample_from_probs", "uniform", "BLOCK"]

BLOCK = 1024
"""Vocabulary block of the two-level inverse CDF (rows longer than ``4 * BLOCK``)."""


def uniform(shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """Float64 uniforms on ``[0, 1)`` drawn from ``generator`` (torch's default if None)."""
    return torch.rand(shape, generator=generator, dtype=torch.float64, device=device)


def _last_positive(probs: torch.Tensor) -> torch.Tensor:
    """Index of the last positive entry of each row. Shape: ``[B, N] -> [B, 1]``."""
    N = probs.shape[-1]
    return (N - 1) - torch.argmax((probs.flip(-1) > 0).to(torch.int8), dim=-1, keepdim=True)


def _inverse_cdf(probs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """First index whose float64 cumulative mass exceeds ``target`` ``[B, 1]``; clamped to
    the last positive entry (rounding of ``target`` up to the total)."""
    cdf = torch.cumsum(probs.to(torch.float64), dim=-1)  # [B, N]
    idx = torch.searchsorted(cdf, target, right=True)  # [B, 1]
    return torch.minimum(idx, _last_positive(probs))


def sample_from_probs(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token id per row by inverse CDF with float64 accumulation.

    Shape: ``probs [B, V] -> ids [B]``.

    Parameters
    ----------
    probs : torch.Tensor
        Shape ``[B, V]``, non-negative, each row with positive finite mass (it need not sum
        to 1: rows are normalised by their own sum).
    generator : torch.Generator, optional
        Source of the one float64 uniform per row; on ``probs``' device.

    Returns
    -------
    torch.LongTensor
        Shape ``[B]``; every id has positive probability in its row and lies in ``[0, V)``.

    Raises
    ------
    ValueError
        If a row has no positive mass.

    Notes
    -----
    ``u * total`` with ``u ~ U[0, 1)`` is located in the float64 cumulative sum with
    ``searchsorted(right=True)``, so an id whose probability is zero (a flat step of the
    CDF) is never returned. For ``V > 4 * BLOCK`` the search is two-level: first among
    float64 block masses, then inside the chosen block, so only one row block is
    converted to float64 (the law is the same up to float64 rounding). A rounding of the
    target up to a block's or row's total maps to its last id of positive mass.
    """
    B, V = probs.shape
    if V <= 4 * BLOCK:
        total = probs.sum(-1, keepdim=True, dtype=torch.float64)  # [B, 1]
        _check_mass(total)
        return _inverse_cdf(probs, uniform((B, 1), generator, probs.device) * total).squeeze(-1)
    pad = (-V) % BLOCK
    blocks = torch.nn.functional.pad(probs, (0, pad)).view(B, -1, BLOCK)  # [B, nb, BLOCK]
    block_mass = blocks.sum(-1, dtype=torch.float64)  # [B, nb]
    cdf = block_mass.cumsum(-1)  # [B, nb]
    total = cdf[:, -1:]  # [B, 1]
    _check_mass(total)
    target = uniform((B, 1), generator, probs.device) * total  # [B, 1]
    b = torch.minimum(torch.searchsorted(cdf, target, right=True), _last_positive(block_mass))  # [B, 1]
    offset = target - (cdf.gather(1, b) - block_mass.gather(1, b))  # mass before, inside the block
    rows = torch.arange(B, device=probs.device)
    inner = blocks[rows, b.squeeze(1)]  # [B, BLOCK]
    j = _inverse_cdf(inner, offset.clamp_min(0))  # [B, 1]
    return (b * BLOCK + j).squeeze(-1)


def _check_mass(total: torch.Tensor) -> None:
    ok = (total > 0) & torch.isfinite(total)
    if not bool(ok.all()):
        raise ValueError(f"probs row {int((~ok[:, 0]).nonzero()[0, 0])} has no positive finite mass")
