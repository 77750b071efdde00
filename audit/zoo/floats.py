"""Planted float and randomness faults that only the fuzz phase sees.

Each sampler here is the built-in algorithm (modified rejection sampling, Leviathan et al.
2023, arXiv:2211.17192, Algorithm 1) with one fault of a kind real engines have, and
takes supplied acceptance uniforms (``verify_with_uniforms``, float64) like the built-in.
Every fault changes the emitted law by far less than a statistical audit resolves (or
only with probability about ``2**-53`` per draft), so none is in
:data:`specexact.audit.zoo.WRONG`, whose test runs the statistical cases; each must be
caught by the fuzz phase (``tests/audit/zoo/test_floats.py``):

- ``global_rng_draws``: draws every uniform from torch's global RNG instead of the
  generator it is passed (two audits with the same seed disagree) — rules
  ``uses_generator`` / ``same_generator_same_output``;
- ``bfloat16_ratio``: accepts on ``u < p/q`` with the ratio computed in bfloat16 (a
  relative error up to ``2**-8``) — the acceptance-threshold bisection;
- ``no_empty_residual_guard``: after a rejection samples ``max(p - q, 0)`` without the
  fallback for a residual that rounding left empty, so ``torch.multinomial`` raises — the
  probes' rejections on near-equal laws;
- ``accepts_at_equality``: accepts on ``u <= p/q``, with float64 uniforms that can be 0,
  so a draft of target probability 0 is accepted when its uniform is 0 — the probe
  ``u = 0``.

``specexact audit --sampler specexact.audit.zoo_float:bfloat16_ratio`` audits one of them.
"""

from __future__ import annotations

import torch

from specexact.decoders import PLACEHOLDER_ID, validate_verify_inputs

__all__ = ["WRONG_FLOAT", "FloatFault"]


class FloatFault:
    """The built-in algorithm with one planted fault (module docstring).

    Parameters
    ----------
    name : str
    ratio_dtype : torch.dtype, optional
        Compute the acceptance ratio ``p/q`` in this dtype and accept on ``u < ratio``.
    accept_at_equality : bool
        Accept on ``u * q <= p`` instead of ``u * q < p``.
    residual_guard : bool
        Fall back to the target row when the residual has no mass (the correct guard).
    global_rng : bool
        Draw every uniform from torch's global RNG, ignoring ``generator``.
    """

    uniforms_dtype = torch.float64

    def __init__(self, name: str, *, ratio_dtype: torch.dtype | None = None, accept_at_equality: bool = False,
                 residual_guard: bool = True, global_rng: bool = False) -> None:
        self.name = name
        self.ratio_dtype = ratio_dtype
        self.accept_at_equality = accept_at_equality
        self.residual_guard = residual_guard
        self.global_rng = global_rng

    def __call__(self, draft_token_ids, draft_probs, target_probs, generator=None) -> torch.Tensor:
        """The ``verify`` protocol: ``[B, K], [B, K, V], [B, K+1, V] -> [B, K+1]``."""
        validate_verify_inputs(draft_token_ids, draft_probs, target_probs)
        gen = None if self.global_rng else generator
        u = torch.rand(draft_token_ids.shape, generator=gen, dtype=torch.float64, device=target_probs.device)
        return self._decide(draft_token_ids, draft_probs, target_probs, u, generator)

    def verify_with_uniforms(self, draft_token_ids, draft_probs, target_probs, uniforms, generator=None):
        """The uniforms-injection protocol: ``uniforms [B, K]`` (float64) instead of drawn."""
        validate_verify_inputs(draft_token_ids, draft_probs, target_probs)
        if tuple(uniforms.shape) != tuple(draft_token_ids.shape):
            raise ValueError(f"uniforms must have shape {tuple(draft_token_ids.shape)}, got {tuple(uniforms.shape)}")
        return self._decide(draft_token_ids, draft_probs, target_probs, uniforms.to(torch.float64), generator)

    def _decide(self, ids, draft_probs, target_probs, u, generator) -> torch.Tensor:
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        B, K = ids.shape
        dev = target_probs.device
        ids = ids.long()
        p_d = target_probs[:, :K].gather(2, ids[:, :, None]).squeeze(2).double()  # [B, K]
        q_d = draft_probs.gather(2, ids[:, :, None]).squeeze(2).double()
        if self.ratio_dtype is not None:
            ratio = (p_d.to(self.ratio_dtype) / q_d.to(self.ratio_dtype)).double()
            accepted = u < ratio
        elif self.accept_at_equality:
            accepted = u * q_d <= p_d
        else:
            accepted = u * q_d < p_d
        n = accepted.long().cumprod(1).sum(1)  # [B]
        rows = torch.arange(B, device=dev)
        t_row = target_probs[rows, n].double()
        rejected = n < K
        d_row = draft_probs[rows, n.clamp(max=K - 1)].double()
        law = torch.where(rejected[:, None], (t_row - d_row).clamp_min(0), t_row)
        if self.residual_guard:
            law = torch.where((law.sum(-1) <= 0)[:, None], t_row, law)
        gen = None if self.global_rng else generator
        last = torch.multinomial(law, 1, generator=gen).squeeze(1)
        out = torch.full((B, K + 1), PLACEHOLDER_ID, dtype=torch.int64, device=dev)
        pos = torch.arange(K, device=dev)[None]
        out[:, :K] = torch.where(pos < n[:, None], ids, PLACEHOLDER_ID)
        out[rows, n] = last
        return out

    def __repr__(self) -> str:
        return f"<FloatFault {self.name}>"


global_rng_draws = FloatFault("global_rng_draws", global_rng=True)
bfloat16_ratio = FloatFault("bfloat16_ratio", ratio_dtype=torch.bfloat16)
no_empty_residual_guard = FloatFault("no_empty_residual_guard", residual_guard=False)
accepts_at_equality = FloatFault("accepts_at_equality", accept_at_equality=True)

WRONG_FLOAT = {f.name: f for f in (global_rng_draws, bfloat16_ratio, no_empty_residual_guard, accepts_at_equality)}
"""The planted float / randomness faults, by name."""

CORRECT_FLOAT = FloatFault("correct_float")
"""The same class with no fault (a control: it passes the fuzz phase)."""
