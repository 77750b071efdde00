"""Verify-level audit cases: the verifier is called directly on many rows that share one
law pair, so no model runs per sample.

A decoder-level case (:class:`~specexact.audit.cases.AuditCase`) runs the toy models for
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
``defect``, as in :func:`~specexact.audit.runner.run_case`.

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
  call / one row in two calls vs control pairs (:func:`~specexact.audit.pairs.pair_checks`);
- ``acceptance_exact``, ``acceptance``, ``recovered_support``: every decision of every row
  at every position judged on its own (:mod:`~specexact.audit.decisions_checks`; the
  observer gets each call as one round of a :class:`~specexact.decoders.RoundRecord`;
  there is no EOS or ``max_new_tokens`` cut at this level, and the recovered and bonus
  laws are tested on counts above).
"""

from __future__ import annotations

import functools
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Sequence

import numpy as np
import torch

from specexact.decoders import (
    SamplingParams,
    ToyLM,
    ToyLMConfig,
    RoundRecord,
    batch_params,
    check_verifier_output,
    process_logits,
)

from .case_result import CaseResult, case_seed, enough_calls, sampler_failure
from .cases import RowClass
from .decisions import DecisionObserver, SlotPlan
from .decisions_checks import VERIFY_DECISION_CHECKS, decision_checks
from .levels import CHI2_TAIL_INFLATION, MIN_EXPECTED
from .pairs import pair_checks

__all__ = ["VerifyCase", "VerifyLaws", "VERIFY_CHECKS", "verify_cases", "run_verify_case", "verify_call",
           "verify_observer"]

VERIFY_CHECKS = 6 + VERIFY_DECISION_CHECKS
"""Checks a :class:`VerifyCase` runs (see the module docstring)."""


@dataclass(frozen=True)
class VerifyCase:
    """One verify-level audit case (see the module docstring).

    Parameters
    ----------
    name : str
        Unique, short, file-name safe.
    model : ToyLMConfig
        The target model; the draft is ``ToyLM(model).draft(mismatch)``.
    mismatch : float
        Draft/target mismatch.
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

    name: str
    model: ToyLMConfig
    mismatch: float
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

    def to_dict(self) -> dict:
        d = asdict(self)
        d["row_classes"] = [rc.describe() for rc in self.row_classes]
        return d


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


def verify_call(case: VerifyCase, laws: VerifyLaws, verifier: Callable, generator: torch.Generator,
                observer: Callable | None = None):
    """One verifier call: ``(drafts [B, K], output [B, K+1], emitted counts [B])``.

    ``observer``, if given, gets the call as one :class:`~specexact.decoders.RoundRecord`
    (every row active, nothing generated before, no cut).

    Raises what the verifier raises, or :class:`VerifierProtocolError` on a bad output.
    """
    B, K = case.batch_size, case.num_draft_tokens
    V = laws.target32.shape[1]
    ids = draw_drafts(laws, B, generator)
    draft_probs = laws.draft32[None].expand(B, K, V)
    target_probs = laws.target32[None].expand(B, K + 1, V)
    out = verifier(ids, draft_probs, target_probs, generator)
    num = check_verifier_output(out, ids, V)
    out = out.long()
    if observer is not None:
        rows = torch.arange(B, device=ids.device)
        observer(RoundRecord(round_index=0, rows=rows, num_generated=torch.zeros_like(rows), draft_token_ids=ids,
                             draft_probs=draft_probs, target_probs=target_probs, output=out.to(ids.device),
                             num_emitted=num, num_kept=num))
    return ids, out, num


def verify_observer(case: VerifyCase, verifier, seed: int) -> DecisionObserver:
    """The per-event observer of a verify-level case: one class, one round per call,
    ``K`` decision slots per row, no token-law PITs (tested on counts) and no cut."""
    from specexact.decoders.adapters.protocol import scheme_of

    B, K = case.batch_size, case.num_draft_tokens
    return DecisionObserver(
        batch_size=B, num_draft_tokens=K, max_new_tokens=K + 1, row_class=torch.zeros(B, dtype=torch.int64),
        num_classes=1, prompts=torch.tensor([case.prompt], dtype=torch.int64).expand(B, -1),
        eos_token_id=None, scheme=scheme_of(verifier), seed=seed ^ 0xDEC15,
        slots=SlotPlan(decisions=K, recovered=1, bonus=1), token_laws=False, check_cut=False)


def run_verify_case(
    case: VerifyCase,
    verifier: Callable,
    *,
    false_fail_rate: float,
    seed: int = 0,
    num_batches: int | None = None,
    time_budget_s: float | None = None,
    min_batches: int = 2,
    device: torch.device | str = "cpu",
    progress: Callable[[int, int], None] | None = None,
    min_expected: float | None = None,
):
    """Sample ``case`` with ``verifier`` called directly and check its laws (the module
    docstring); the arguments and the result are those of :func:`~specexact.audit.runner.run_case`."""
    from specexact.exactness.goodness_of_fit import chisquare_gof

    if (num_batches is None) == (time_budget_s is None):
        raise ValueError("give exactly one of num_batches and time_budget_s")
    min_expected = MIN_EXPECTED if min_expected is None else min_expected
    start = time.perf_counter()
    result = CaseResult(case=case, seed=case_seed(seed, case))
    gen = torch.Generator(device=device).manual_seed(result.seed)
    laws = case.laws(device)
    B, K = case.batch_size, case.num_draft_tokens
    V = case.model.vocab_size
    first = torch.zeros(V, dtype=torch.int64)
    recovered = torch.zeros(V, dtype=torch.int64)
    bonus = torch.zeros(V, dtype=torch.int64)
    accepted = torch.zeros(K + 1, dtype=torch.int64)
    codes: list[torch.Tensor] = []
    observer = verify_observer(case, verifier, result.seed)
    b = 0
    while True:
        try:
            observer.start_call()
            _, out, num = verify_call(case, laws, verifier, gen, observer)
            observer.finish_call(None)
        except Exception as exc:  # noqa: BLE001 - a crash of the sampler is a finding
            result.defect, chk = sampler_failure(exc, f"verifier call {b}", false_fail_rate)
            result.checks.append(chk)
            break
        out, num = out.cpu(), num.cpu()
        n_acc = num - 1  # [B] in [0, K]
        tok0 = out[:, 0]
        first += torch.bincount(tok0, minlength=V)
        accepted += torch.bincount(n_acc, minlength=K + 1)
        recovered += torch.bincount(tok0[n_acc == 0], minlength=V)
        bonus += torch.bincount(out[n_acc == K, K], minlength=V)
        codes.append(tok0.to(torch.int32))
        b += 1
        result.num_batches = b
        result.num_sequences = b * B
        if progress is not None:
            progress(result.num_sequences, b)
        if enough_calls(b, num_batches, time_budget_s, time.perf_counter() - start, min_batches):
            break
    if result.defect is None:
        alpha = false_fail_rate
        a2 = alpha / CHI2_TAIL_INFLATION
        labels = [str(v) for v in range(V)]
        checks = result.checks
        checks.append(chisquare_gof(first.numpy(), laws.target64[0], false_fail_rate=a2, min_expected=min_expected,
                                    labels=labels, name="first_token_law"))
        acc_law = laws.accepted_length_law()
        obs = accepted.numpy()
        res = chisquare_gof(obs, acc_law, false_fail_rate=a2, min_expected=min_expected,
                            labels=[f"N={k}" for k in range(K + 1)], name="accepted_length")
        checks.append(replace(res, details={
            **res.details,
            "observed_counts": obs.astype(int).tolist(),
            "expected_probs": [float(x) for x in acc_law],
            "mean_accepted_length": float(np.dot(np.arange(K + 1), obs) / max(obs.sum(), 1)),
            "expected_mean_accepted_length": float(np.dot(np.arange(K + 1), acc_law)),
        }))
        for name, counts, law in (("recovered_token_law", recovered, laws.residual()),
                                  ("bonus_token_law", bonus, laws.target64[K])):
            if int(counts.sum()) == 0:  # no such row at all: nothing to test (p-value 1)
                checks.append(_empty_check(name, a2))
                continue
            checks.append(chisquare_gof(counts.numpy(), law, false_fail_rate=a2, min_expected=min_expected,
                                        labels=labels, name=name))
        checks.extend(pair_checks(torch.stack(codes).numpy(), alpha, "first token")
                      if codes else [])
        # _pair_checks names its checks "independent_rows[first token]"; keep plain names.
        for i, chk in enumerate(checks):
            if chk.name.endswith("[first token]"):
                checks[i] = replace(chk, name=chk.name.split("[")[0])
        checks.extend(decision_checks(observer.summary(), alpha=alpha, min_expected=min_expected, level="verify"))
    result.wall_time_s = time.perf_counter() - start
    return result


def _empty_check(name: str, alpha: float):
    from specexact.exactness.results import CheckResult

    return CheckResult(name=name, method="exact", statistic=0.0, pvalue=1.0, dof=None, n=0, false_fail_rate=alpha,
                       detectable_tv=float("inf"), false_pass_rate=0.01, passed=True, worst=(),
                       details={"message": "no rows in this condition"}, description="no samples")


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


class VerifyKind:
    """The :class:`~specexact.audit.case_kind.CaseKind` of verify-level cases."""

    name = "verify"

    def handles(self, case) -> bool:
        return isinstance(case, VerifyCase)

    def checks(self, case: VerifyCase) -> int:
        return VERIFY_CHECKS

    def restrict(self, case: VerifyCase, verifier):
        from specexact.decoders.adapters.protocol import is_logits_level

        from .tree_case import chain_case_reason

        if (reason := chain_case_reason(case, verifier)) is not None:
            return None, reason
        if is_logits_level(verifier):
            return None, ("a verify-level case calls the verifier with probabilities; a logits-level sampler "
                          "takes logits")
        return case, None

    def planning_checks(self, case: VerifyCase) -> list[tuple[int, bool]]:
        """``first_token_law`` and ``accepted_length`` (its conditional ``recovered_token_law``
        / ``bonus_token_law`` checks see only part of the rows and report their own, larger,
        detectable TV)."""
        from .plan import PLAN_MAX_BINS

        return [(min(case.model.vocab_size, PLAN_MAX_BINS), False), (case.num_draft_tokens + 1, False)]

    def prepare(self, case: VerifyCase, device, sampler):
        return case.laws(device)

    def call(self, case: VerifyCase, prepared, sampler, *, rows: int | None, device, full: bool) -> None:
        c = case if rows is None else replace(case, batch_size=rows)
        verify_call(c, prepared, sampler, torch.Generator(device=device).manual_seed(0))

    def run(self, case, sampler, **kwargs):
        return run_verify_case(case, sampler, **kwargs)

    def event_inputs(self, case: VerifyCase, event: dict, sampler) -> dict:
        laws = case.laws()
        drafts = torch.tensor([event["drafts"]], dtype=torch.int64)
        K = case.num_draft_tokens
        if drafts.shape[1] != K:
            raise ValueError(f"event has {drafts.shape[1]} drafts, case {case.name!r} has K={K}")
        return {"draft_token_ids": drafts, "draft_probs": laws.draft32[None].clone(),
                "target_probs": laws.target32[None].clone()}


CASE_KIND = VerifyKind()
"""Verify-level cases' kind (:mod:`~specexact.audit.case_kind`)."""
