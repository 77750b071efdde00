"""Shared pieces of the tree-package verifiers: uniforms, inverse-CDF draws, law rows."""

from __future__ import annotations

import torch

from ..sampling import uniform


def check_generator(generator) -> None:
    """Raise TypeError unless ``generator`` is a ``torch.Generator`` or None."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")


def uniforms_or_draw(uniforms: torch.Tensor | None, shape: tuple[int, ...], name: str,
                     generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """``uniforms`` checked to be float64-castable values in ``[0, 1)`` of ``shape``, or fresh
    float64 uniforms from ``generator``."""
    if uniforms is None:
        return uniform(shape, generator, device)
    if not isinstance(uniforms, torch.Tensor) or not uniforms.is_floating_point():
        raise TypeError(f"{name} must be a floating torch.Tensor, got {type(uniforms).__name__}")
    if tuple(uniforms.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {list(shape)}, got {list(uniforms.shape)}")
    u = uniforms.to(device=device, dtype=torch.float64)
    if bool(((u < 0) | (u >= 1) | torch.isnan(u)).any()):
        raise ValueError(f"{name} must lie in [0, 1), got values in [{float(u.min())}, {float(u.max())}]")
    return u


def normalised(probs: torch.Tensor) -> torch.Tensor:
    """Float64 copy of ``probs`` with every row divided by its sum. Shape ``[..., V]``."""
    p = probs.to(torch.float64)
    return p / p.sum(-1, keepdim=True)


def draw(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One id per row by inverse CDF: the first index whose float64 cumulative weight
    exceeds ``u * total``, clamped to the last positive entry (rounding of the target up to
    the total). Shape: ``weights [B, V] (>= 0, each row with mass), u [B] -> ids [B]``.
    A zero-weight id is never returned."""
    cdf = torch.cumsum(weights.to(torch.float64), dim=-1)  # [B, V]
    target = (u.to(torch.float64) * cdf[:, -1])[:, None]  # [B, 1]
    idx = torch.searchsorted(cdf, target, right=True)  # [B, 1]
    V = weights.shape[-1]
    last = (V - 1) - torch.argmax((weights.flip(-1) > 0).to(torch.int8), dim=-1, keepdim=True)
    return torch.minimum(idx, last).squeeze(1)


def accept_ratio(u: torch.Tensor, q: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """``u < min(1, p / q)`` as ``u q < p`` in float64 (no division): a token with ``q = 0`` is
    accepted iff ``p > 0`` (the chain verifier's guard). Shapes broadcast; returns bool."""
    return u.to(torch.float64) * q.to(torch.float64) < p.to(torch.float64)
