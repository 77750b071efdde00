"""Verify-level audit cases: the verifier is called directly on many rows that share one
law pair, so no model runs per sample.

A decoder-level case (:class:`~specexact.audit.cases.decoder_case.AuditCase`) runs the toy models for
every sample; at V=32k their forward passes cost ~100x the verifier. A
:class:`VerifyCase` computes its laws once and then only draws drafts and calls the
verifier, which is what makes a V=32k first-token law auditable to TV 1e-2 in a minute.

What is audited (and what is not)
---------------------------------
Every row of every call gets the *same* laws: draft law ``q_j`` and target law ``p_j`` at
position ``j`` do not depend on the drafted tokens (position 0: the laws after the prompt;
position ``j >= 1``: the laws after the prompt and the case's fixed ``continuation[:j]``).
This is a verifier audit on shared laws: modified rejection sampling must return
``p_0`` as the law of the first emitted token whatever laws it is given, so the laws need
not be those of a real decoder's later prefixes. Bugs that need different laws in different
rows (``first_row_target``), the decoder's bookkeeping, or the models, are audited by the
decoder-level cases, not here.

Per call: ``B`` rows draw ``K`` drafts, position ``j`` from ``q_j`` by inverse CDF on one
shared float64 CDF (torch, the case's seeded generator), then
``verifier(draft_token_ids [B, K], draft_probs [B, K, V], target_probs [B, K+1, V],
generator)`` runs with the laws broadcast by ``expand`` (stride 0, no copy: a verifier that
needs contiguous memory makes its own copy). The output is checked with
:func:`~specexact.decoders.check_verifier_output`; a protocol violation or a crash is a
``defect``, as in :func:`~specexact.audit.cases.dispatch.run_case`.

Laws: computed once in float64 from the models and sampling parameters, rounded to float32
for the verifier; the references are those float32 laws in float64, renormalised (what the
verifier was handed, exactly).

Checks (exact reference laws; chi-square checks on bins of >= ``MIN_EXPECTED`` expected
counts at ``alpha / CHI2_TAIL_INFLATION``, as in ``run_case``; their ``detectable_tv`` is
the TV of the *binned* law):

- ``first_token_law``: first emitted token vs ``p_0`` — the core exactness statement;
- ``accepted_length``: number of accepted drafts vs its exact law
  ``P(N >= i) = prod_{j < i} a_j``, ``a_j = sum_v min(p_j, q_j)`` (positions independent);
- ``recovered_token_law``: the emitted token of rows that reject draft 0 vs the residual
  ``max(p_0 - q_0, 0) / sum`` (a sharper diagnosis of residual bugs: only those rows);
- ``bonus_token_law``: the bonus token of rows that accept all ``K`` drafts vs ``p_K``;
- ``independent_rows`` / ``independent_calls``: first-token agreement of two rows of one
  call / one row in two calls vs control pairs (:func:`~specexact.audit.checks.pair_checks.pair_checks`);
- ``acceptance_exact``, ``acceptance``, ``recovered_support``: every decision of every row
  at every position judged on its own (:mod:`~specexact.audit.checks.decisions_checks`; the
  observer gets each call as one round of a :class:`~specexact.decoders.RoundRecord`;
  there is no EOS or ``max_new_tokens`` cut at this level, and the recovered and bonus
  laws are tested on counts above).

Here: the case, its laws (:meth:`VerifyCase.laws`, :func:`draw_drafts`) and the built-in cases
(:func:`verify_cases`). One verifier call, the run and the kind:
:mod:`~specexact.audit.cases.verify_kind`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from specexact.audit.cases.base import ModelCase, RowClass
from specexact.audit.checks.decisions_checks import VERIFY_DECISION_CHECKS
from specexact.decoders import SamplingParams, ToyLM, ToyLMConfig, batch_params, process_logits

__all__ = ["VerifyCase", "VerifyLaws", "VERIFY_CHECKS", "verify_cases", "draw_drafts"]

VERIFY_CHECKS = 6 + VERIFY_DECISION_CHECKS
"""Checks a :class:`VerifyCase` runs (see the module docstring)."""


@dataclass(frozen=True)
class VerifyCase(ModelCase):
    """One verify-level audit case (see the module docstring).

    Parameters
    ----------
    name, model, mismatch
        As in :class:`~specexact.audit.cases.base.ModelCase`.
    prompt : tuple of int
        Prefix of position 0's laws.
    target_params, draft_params : SamplingParams
        Turn the models' logits into the target / draft laws (e.g. top-p on the target).
    num_draft_tokens : int
        K (γ).
    continuation : tuple of int
        Fixed tokens: position ``j >= 1``'s laws are those after ``prompt + continuation[:j]``;
        at least ``K`` of them.
    batch_size : int
        Rows per verifier call; a multiple of 4 (the independence checks use quads).
    """

    prompt: tuple[int, ...]
    target_params: SamplingParams
    draft_params: SamplingParams
    num_draft_tokens: int = 1
    continuation: tuple[int, ...] = (1,)
    batch_size: int = 4096
    description: str = ""
    weight: float = 1.0
    tags: tuple[str, ...] = field(default_factory=tuple)
    kind: str = "verify"

    def __post_init__(self) -> None:
        if self.kind != "verify":
            raise ValueError(f"case {self.name!r}: kind must be 'verify', got {self.kind!r}")
        if self.num_draft_tokens < 1:
            raise ValueError(f"case {self.name!r}: num_draft_tokens must be >= 1")
        if self.batch_size < 4 or self.batch_size % 4:
            raise ValueError(f"case {self.name!r}: batch_size={self.batch_size} is not a positive multiple of 4 "
                             "(the independence checks compare rows in groups of four)")
        if len(self.continuation) < self.num_draft_tokens:
            raise ValueError(f"case {self.name!r}: continuation needs >= num_draft_tokens={self.num_draft_tokens} "
                             f"tokens, got {len(self.continuation)}")
        if not self.prompt:
            raise ValueError(f"case {self.name!r}: prompt is empty")
        V = self.model.vocab_size
        if any(not 0 <= t < V for t in (*self.prompt, *self.continuation)):
            raise ValueError(f"case {self.name!r}: prompt / continuation ids must be in [0, {V})")

    # The decoder-level cases' interface, as far as the audit uses it: one row class.
    @property
    def row_classes(self) -> tuple[RowClass, ...]:
        return (RowClass(self.prompt, self.target_params, self.draft_params),)

    @property
    def exact(self) -> bool:
        return True  # every reference law is exact

    @property
    def eos_token_id(self) -> int | None:
        return None  # no stopping at the verify level: EOS is an ordinary token of the laws

    def class_id(self, c: int) -> int:
        return c

    def restricted(self, keep: Sequence[int]) -> "VerifyCase":
        if tuple(keep) != (0,):
            raise ValueError(f"keep must be (0,) for a verify case, got {tuple(keep)!r}")
        return self

    def laws(self, device: torch.device | str = "cpu") -> "VerifyLaws":
        """The case's laws (computed once per device and cached)."""
        K = self.num_draft_tokens
        key = (self.model, self.mismatch, tuple(self.prompt), self.target_params, self.draft_params, K,
               tuple(self.continuation[:K]))
        return _laws(key, str(torch.device(device)))



@dataclass(frozen=True)
class VerifyLaws:
    """Laws of a :class:`VerifyCase`: float32 for the verifier, float64 references."""

    draft32: torch.Tensor  # [K, V]
    target32: torch.Tensor  # [K+1, V]
    draft_cdf: torch.Tensor  # [K, V] float64 cumulative sums of draft32
    draft64: np.ndarray  # [K, V] float32 laws in float64, renormalised
    target64: np.ndarray  # [K+1, V]

    @property
    def acceptance(self) -> np.ndarray:
        """``a_j = sum_v min(p_j, q_j)``, ``j < K``."""
        K = self.draft64.shape[0]
        return np.minimum(self.target64[:K], self.draft64).sum(axis=1)

    def accepted_length_law(self) -> np.ndarray:
        """``P(N = k)``, ``k = 0..K``."""
        a = self.acceptance
        K = len(a)
        reach = np.concatenate([[1.0], np.cumprod(a)])  # P(N >= k)
        law = reach[:K + 1].copy()
        law[:K] -= reach[1:K + 1]
        return np.clip(law, 0.0, None) / law.clip(0.0, None).sum()

    def residual(self) -> np.ndarray:
        """``max(p_0 - q_0, 0) / sum`` (the recovered token's law after rejecting draft 0)."""
        r = np.clip(self.target64[0] - self.draft64[0], 0.0, None)
        s = r.sum()
        return r / s if s > 0 else self.target64[0]


def _law(model: ToyLM, prefix: tuple[int, ...], params: SamplingParams) -> torch.Tensor:
    ids = torch.tensor([prefix], dtype=torch.int64)
    logits = model(ids, torch.tensor([[len(prefix) - 1]]))[:, 0]
    return process_logits(logits, batch_params(params, 1), ids)[0]


@functools.lru_cache(maxsize=8)
def _laws(key: tuple, device: str) -> VerifyLaws:
    model, mismatch, prompt, target_params, draft_params, K, continuation = key
    target = ToyLM(model, dtype=torch.float64)
    draft = target.draft(mismatch)
    prefixes = [prompt + continuation[:j] for j in range(K + 1)]
    t64 = torch.stack([_law(target, p, target_params) for p in prefixes])
    d64 = torch.stack([_law(draft, p, draft_params) for p in prefixes[:K]])
    t32, d32 = t64.float(), d64.float()
    cdf = d32.double().cumsum(dim=1)

    def ref(x: torch.Tensor) -> np.ndarray:
        a = x.double().numpy()
        return a / a.sum(axis=1, keepdims=True)

    dev = torch.device(device)
    return VerifyLaws(draft32=d32.to(dev), target32=t32.to(dev), draft_cdf=cdf.to(dev), draft64=ref(d32),
                      target64=ref(t32))


def draw_drafts(laws: VerifyLaws, batch_size: int, generator: torch.Generator) -> torch.Tensor:
    """``[B, K]`` drafts, position ``j`` from ``q_j`` by inverse CDF (``B * K`` float64 uniforms)."""
    cdf = laws.draft_cdf
    K, V = cdf.shape
    u = torch.rand(K, batch_size, generator=generator, dtype=torch.float64, device=cdf.device)
    u = u * cdf[:, -1:]
    # right=True: the first index whose CDF exceeds u, so zero-mass tokens are never drawn.
    ids = torch.searchsorted(cdf, u, right=True).clamp_(max=V - 1)  # [K, B]
    return ids.T.contiguous()


def verify_cases() -> list[VerifyCase]:
    """The built-in verify-level cases."""
    return [
        VerifyCase(
            name="v32000-verify",
            description="verifier called directly on shared laws: V=32000 Zipf head, target T=0.9 top-p 0.95, "
                        "draft T=1; first token exact, residual and bonus laws",
            # The law of benchmarks/audit_power.py's goal: class 0 of v4096-zipf at V=32000.
            model=ToyLMConfig(vocab_size=32000, seed=17, zipf_exponent=1.1, context_strength=1.5,
                              eos_token_id=31999, eos_logit=-3.0),
            mismatch=0.4,
            prompt=(7, 8),
            target_params=SamplingParams(temperature=0.9, top_p=0.95),
            draft_params=SamplingParams(temperature=1.0),
            num_draft_tokens=1,
            continuation=(1,),
            batch_size=4096,
            weight=2.0,
        ),
    ]
