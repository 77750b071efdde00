"""What the exact rules compare with: forbidden tokens and the acceptance band.

- :func:`forbidden_tokens`: ``[B, K+1, V]`` tokens no correct sampler may emit at a
  position. Probability level: target probability exactly 0. Logits level: zero under the
  declared processing *and* not tied with a kept token (a token that a different but
  valid tie-break or rounding at a top-k / top-p / min-p boundary could keep is not
  counted), so a correct engine with another tie convention is never blamed.
- :func:`acceptance_band`: per drafted token, the interval of uniforms where either
  decision is allowed. Exact rule: accept iff ``u < min(1, p(d)/q(d))``. Allowed slack:
  the ratio of the given (unnormalised) values and of the normalised laws may both be
  meant, plus the rounding of the declared dtype (see :func:`relative_tolerance`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from specexact.decoders.adapters.protocol import LogitsVerifyInputs

from specexact.fuzz.examples import ProbInputs

__all__ = ["forbidden_tokens", "AcceptanceBand", "acceptance_band", "relative_tolerance", "target_law"]

#: Below this the acceptance probability counts as zero for "must accept" (absolute slack).
_ABS_SLACK = {torch.float64: 1e-300, torch.float32: 1e-30, torch.float16: 1e-7, torch.bfloat16: 1e-30}


def target_law(subject, inputs) -> torch.Tensor:
    """``[B, K+1, V]`` float64 target law the rules use (the given ``target_probs``, or the
    declared processing of the raw logits per candidate prefix)."""
    if isinstance(inputs, ProbInputs):
        return inputs.target_probs.detach().to(torch.float64).cpu()
    return subject.reference_target_probs(inputs).detach().to(torch.float64).cpu()


def _untruncated(inputs: LogitsVerifyInputs) -> LogitsVerifyInputs:
    params = tuple(replace(p, top_k=0, top_p=1.0, min_p=0.0, temperature=p.temperature or 1.0)
                   for p in inputs.target_params)
    return replace(inputs, target_params=params)


def forbidden_tokens(subject, inputs, law: torch.Tensor | None = None) -> torch.Tensor:
    """``[B, K+1, V]`` bool: tokens of target probability 0 that no valid convention keeps.

    Probability level: ``target_probs == 0``. Logits level: zero under the declared
    processing and either ``-inf`` raw logits or less probable (before truncation, by a
    margin of 1e-3 relative) than every kept token of the position.
    """
    law = target_law(subject, inputs) if law is None else law
    zero = law == 0
    if isinstance(inputs, ProbInputs):
        return zero
    raw = inputs.target_logits.detach().cpu()
    masked = torch.isneginf(raw)
    full = subject.reference_target_probs(_untruncated(inputs)).detach().to(torch.float64).cpu()
    kept_min = torch.where(law > 0, full, torch.inf).amin(-1, keepdim=True)  # [B, K+1, 1]
    return zero & (masked | (full < (1 - 1e-3) * kept_min))


def relative_tolerance(subject, inputs, p_d: torch.Tensor, q_d: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """Relative slack of the acceptance threshold, per drafted token (``[N]`` float64).

    ``eps * (16 + |ln p(d)| + |ln q(d)| + 2 log2 V)`` with ``eps`` of the declared dtype: a
    sampler that renormalises the laws (softmax of log-probabilities, transformers) loses
    about ``|ln x| * eps`` relative in ``exp`` and ``log2 V * eps`` in the normaliser. At the
    logits level the processed logits' distance from the row maximum enters instead of the
    logs (temperature divides it).
    """
    eps = torch.finfo(subject.rounding_dtype).eps
    V = (inputs.target_probs if isinstance(inputs, ProbInputs) else inputs.target_logits).shape[-1]
    logs = -torch.log(p_d.clamp_min(1e-300)) - torch.log(q_d.clamp_min(1e-300))
    base = 16 + 2 * math.log2(max(V, 2))
    if isinstance(inputs, LogitsVerifyInputs):
        x = inputs.target_logits.detach().to(torch.float64).cpu()
        finite = torch.where(torch.isfinite(x), x, torch.nan)
        span = (torch.nan_to_num(finite.amax(-1), nan=0.0) - torch.nan_to_num(finite.amin(-1), nan=0.0))  # [B, K+1]
        temps = torch.tensor([p.temperature or 1.0 for p in inputs.target_params], dtype=torch.float64)
        span = (span / temps.clamp_max(1.0)[:, None]).reshape(-1)[pos]
        return eps * (base + 4 * span + logs.clamp_max(1e4))
    return eps * (base + logs.clamp_max(1e4))


@dataclass(frozen=True)
class AcceptanceBand:
    """Per drafted token (flattened over rows and positions, ``[N]``): the exact threshold
    bounds ``low <= high`` (``min(1, p/q)`` of the raw and of the normalised laws, ``inf``
    for ``q(d) = 0 < p(d)``), the relative slack, the absolute slack, whether ``p(d) = 0``
    exactly (no slack at all: never accept), and whether the band is unclear (logits level:
    the position has a tie at a truncation boundary; only the zero rule applies there)."""

    low: torch.Tensor
    high: torch.Tensor
    rel: torch.Tensor
    abs_slack: float
    zero: torch.Tensor
    unclear: torch.Tensor
    p_d: torch.Tensor
    q_d: torch.Tensor

    def must_accept(self, u: torch.Tensor) -> torch.Tensor:
        """Bool ``[N]``: ``u`` is below the band (every valid rule accepts)."""
        return ~self.zero & ~self.unclear & (u < self.low * (1 - self.rel) - self.abs_slack)

    def must_reject(self, u: torch.Tensor) -> torch.Tensor:
        """Bool ``[N]``: ``u`` is above the band, or ``p(d) = 0``."""
        above = ~self.unclear & (u >= self.high * (1 + self.rel) + self.abs_slack) & (self.high < 1)
        return self.zero | above

    def threshold(self, k: int) -> float:
        return float(self.low[k]) if float(self.low[k]) == float(self.high[k]) else float("nan")


def acceptance_band(subject, inputs, law: torch.Tensor | None = None) -> AcceptanceBand:
    """The :class:`AcceptanceBand` of each drafted token of ``inputs`` (order: row-major ``(b, i)``).

    ``inputs`` may be probability- or logits-level; the laws are :func:`target_law`.
    """
    law = target_law(subject, inputs) if law is None else law
    forbid = forbidden_tokens(subject, inputs, law)
    ids = inputs.draft_token_ids.detach().long().cpu()
    B, K = ids.shape
    q = inputs.draft_probs.detach().to(torch.float64).cpu()
    p = law[:, :K]
    p_d = p.gather(2, ids[:, :, None]).squeeze(2).reshape(-1)
    q_d = q.gather(2, ids[:, :, None]).squeeze(2).reshape(-1)
    sum_p = p.sum(-1).reshape(-1)
    sum_q = q.sum(-1).reshape(-1)
    with torch.no_grad():
        raw = torch.where(q_d > 0, p_d / q_d.clamp_min(1e-320), torch.where(p_d > 0, torch.inf, 0.0))
        norm = torch.where(q_d > 0, (p_d / sum_p) / (q_d / sum_q).clamp_min(1e-320), raw)
    low = torch.minimum(raw, norm).clamp_max(1.0)
    high = torch.maximum(raw, norm).clamp_max(1.0)
    zero_d = forbid[:, :K].gather(2, ids[:, :, None]).squeeze(2).reshape(-1)
    unclear = torch.zeros_like(zero_d)
    if isinstance(inputs, LogitsVerifyInputs):
        # a zero of the reference that is not robustly forbidden: ties at a truncation boundary
        ambiguous = ((law[:, :K] == 0) & ~forbid[:, :K]).any(-1).reshape(-1)
        unclear = ambiguous & ~zero_d
    pos = torch.arange(B * K)
    pos = (pos // K) * (K + 1) + pos % K  # flat index into [B, K+1]
    rel = relative_tolerance(subject, inputs, p_d, q_d, pos)
    return AcceptanceBand(low=low, high=high, rel=rel, abs_slack=_ABS_SLACK.get(subject.rounding_dtype, 1e-30),
                          zero=zero_d, unclear=unclear, p_d=p_d, q_d=q_d)
