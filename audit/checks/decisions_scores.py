"""The per-event arithmetic of the observer: PITs, log-likelihoods and scaled-acceptance cells.

Helpers of :class:`~specexact.audit.checks.decisions.DecisionObserver` on batches of
events: the randomised PIT of tokens under (unnormalised) rows of a law
(:func:`pit_rows`), the log-likelihood of decisions and tokens under their own or a
neighbouring position's law (:func:`ll_bernoulli`, :func:`ll_rows`), the outcomes of
probability 0 (:func:`impossible_bernoulli`), and the expected PIT cells of decisions
under acceptance scaled by a factor (:func:`scaled_cells`, the detectable scale).
"""

from __future__ import annotations

import torch

from specexact.exactness.pit import FINE_CELLS, discrete_pit

__all__ = ["scaled_cells", "ll_bernoulli", "impossible_bernoulli", "pit_rows", "ll_rows"]

_LOG_FLOOR = 1e-12
_FINE_LO = torch.arange(FINE_CELLS, dtype=torch.float64) / FINE_CELLS
_FINE_HI = (torch.arange(FINE_CELLS, dtype=torch.float64) + 1) / FINE_CELLS


def scaled_cells(a: torch.Tensor, ratio: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    """Summed cell probabilities ``[G, FINE_CELLS]`` of the PITs under ``a`` (``[n]``) of
    decisions whose true acceptance probability is ``min(1, s * ratio)`` for each ``s`` of
    ``grid`` (``[G]``). A decision's PIT then has density ``a_s / a`` on ``[0, a)`` and
    ``(1 - a_s) / (1 - a)`` on ``[a, 1)``; a rejection at ``a = 1`` maps to 1 (last cell)."""
    a = a.double().cpu()
    ratio = ratio.double().cpu()
    a_s = torch.where(ratio > 0, (grid[:, None] * ratio[None]).clamp(max=1.0), torch.zeros(()))  # [G, n]
    below = (torch.minimum(_FINE_HI[None], a[:, None]) - _FINE_LO[None]).clamp_min(0.0)  # [n, C]
    above = (1.0 / FINE_CELLS) - below
    lo = torch.where(a[None] > 0, a_s / a.clamp_min(1e-300)[None], torch.zeros(()))  # [G, n]
    hi = torch.where(a[None] < 1, (1.0 - a_s) / (1.0 - a).clamp_min(1e-300)[None], torch.zeros(()))
    cells = lo @ below + hi @ above  # [G, C]
    cells[:, -1] += torch.where(a[None] >= 1, 1.0 - a_s, torch.zeros(())).sum(1)
    return cells


def ll_bernoulli(success: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    return torch.log(torch.where(success, a, 1.0 - a).clamp_min(_LOG_FLOOR))


def impossible_bernoulli(success: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Outcomes of probability 0 under ``a``: accepted at ``a = 0``, rejected at ``a = 1``."""
    return torch.where(success, a <= 0, a >= 1)


def pit_rows(r: torch.Tensor, t: torch.Tensor, w: torch.Tensor):
    """PIT of tokens ``t`` under rows ``r [c, V]`` (unnormalised, float64), tokens ordered
    by decreasing mass, ties by lower id. Returns ``(U, prob, surprise)``: the PIT, the
    normalised probability of ``t`` and ``r(t) / max r``."""
    total = r.sum(1)
    r_t = r.gather(1, t[:, None])  # [c, 1]
    idx = torch.arange(r.shape[1], device=r.device)[None]
    before = (r > r_t) | ((r == r_t) & (idx < t[:, None]))
    mass_before = torch.where(before, r, 0.0).sum(1)
    r_t = r_t.squeeze(1)
    u = discrete_pit(mass_before, r_t, total, w.to(r.device))
    return u, r_t / total, r_t / r.amax(1)


def ll_rows(r: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Log-probabilities (floored) of tokens ``t`` under rows ``r``, and how many are 0."""
    total = r.sum(1).clamp_min(1e-300)
    r_t = r.gather(1, t[:, None]).squeeze(1)
    return torch.log((r_t / total).clamp_min(_LOG_FLOOR)), int((r_t <= 0).sum())

