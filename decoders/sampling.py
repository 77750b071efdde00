"""Drawing token ids from probability rows with an explicit generator."""

from __future__ import annotations

import torch

__all__ = ["sample_from_probs", "uniform"]


def uniform(shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """Float64 uniforms on ``[0, 1)`` drawn from ``generator`` (torch's default if None)."""
    return torch.rand(shape, generator=generator, dtype=torch.float64, device=device)


def sample_from_probs(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token id per row by inverse CDF in float64.

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
    CDF) is never returned; the rare rounding of ``u * total`` up to ``total`` is mapped to
    the last id of positive mass.
    """
    cdf = torch.cumsum(probs.to(torch.float64), dim=-1)  # [B, V]
    total = cdf[:, -1:]  # [B, 1]
    if not bool((total > 0).all()):
        raise ValueError(f"probs row {int((total[:, 0] <= 0).nonzero()[0, 0])} has no positive mass")
    u = uniform((probs.shape[0], 1), generator, probs.device) * total  # [B, 1]
    ids = torch.searchsorted(cdf, u, right=True)  # [B, 1]
    last_positive = (probs.shape[-1] - 1) - torch.argmax(
        (probs.flip(-1) > 0).to(torch.int8), dim=-1, keepdim=True
    )
    return torch.minimum(ids, last_positive).squeeze(-1)
