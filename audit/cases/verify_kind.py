"""Running verify-level cases: one verifier call, its observer, the run and the kind.

The cases, their laws and the checks they get: :mod:`~specexact.audit.cases.verify_case`. Here
:func:`verify_call` makes one verifier call on a case's laws, :func:`verify_observer` builds
the per-event observer of a case, :func:`run_verify_case` samples a case and checks it, and
:data:`CASE_KIND` is the verify-level :class:`~specexact.audit.cases.protocol.CaseKind`.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable

import numpy as np
import torch

from specexact.audit.cases.planning import PLAN_MAX_BINS
from specexact.audit.cases.result import CaseResult, case_seed
from specexact.audit.cases.sampling import RunSettings, sample_calls
from specexact.audit.cases.tree_case import chain_case_reason
from specexact.audit.cases.verify_case import VERIFY_CHECKS, VerifyCase, VerifyLaws, draw_drafts
from specexact.audit.checks.decisions import DecisionObserver
from specexact.audit.checks.decisions_checks import decision_checks
from specexact.audit.checks.decisions_tally import SlotPlan
from specexact.audit.checks.pair_checks import pair_checks
from specexact.audit.core.levels import CHI2_TAIL_INFLATION
from specexact.decoders import RoundRecord, check_verifier_output
from specexact.decoders.adapters.protocol import is_logits_level, scheme_of
from specexact.exactness.goodness_of_fit import chisquare_gof
from specexact.exactness.results import CheckResult

__all__ = ["VerifyKind", "CASE_KIND", "run_verify_case", "verify_call", "verify_observer"]


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
    B, K = case.batch_size, case.num_draft_tokens
    return DecisionObserver(
        batch_size=B, num_draft_tokens=K, max_new_tokens=K + 1, row_class=torch.zeros(B, dtype=torch.int64),
        num_classes=1, prompts=torch.tensor([case.prompt], dtype=torch.int64).expand(B, -1),
        eos_token_id=None, scheme=scheme_of(verifier), seed=seed ^ 0xDEC15,
        slots=SlotPlan(decisions=K, recovered=1, bonus=1), token_laws=False, check_cut=False)


def run_verify_case(case: VerifyCase, verifier: Callable, **run) -> CaseResult:
    """Sample ``case`` with ``verifier`` called directly and check its laws (the checks:
    :mod:`~specexact.audit.cases.verify_case`); ``run`` holds the settings of
    :func:`~specexact.audit.cases.dispatch.run_case`
    (:class:`~specexact.audit.cases.sampling.RunSettings`), and the result is ``run_case``'s."""
    settings = RunSettings(**run)
    min_expected = settings.min_expected
    start = time.perf_counter()
    result = CaseResult(case=case, seed=case_seed(settings.seed, case))
    gen = torch.Generator(device=settings.device).manual_seed(result.seed)
    laws = case.laws(settings.device)
    B, K = case.batch_size, case.num_draft_tokens
    V = case.model.vocab_size
    first = torch.zeros(V, dtype=torch.int64)
    recovered = torch.zeros(V, dtype=torch.int64)
    bonus = torch.zeros(V, dtype=torch.int64)
    accepted = torch.zeros(K + 1, dtype=torch.int64)
    codes: list[torch.Tensor] = []
    observer = verify_observer(case, verifier, result.seed)

    def call() -> tuple[torch.Tensor, torch.Tensor]:
        observer.start_call()
        _, out, num = verify_call(case, laws, verifier, gen, observer)
        observer.finish_call(None)
        return out, num

    def keep(called: tuple[torch.Tensor, torch.Tensor]) -> None:
        out, num = called[0].cpu(), called[1].cpu()
        n_acc = num - 1  # [B] in [0, K]
        tok0 = out[:, 0]
        first.add_(torch.bincount(tok0, minlength=V))
        accepted.add_(torch.bincount(n_acc, minlength=K + 1))
        recovered.add_(torch.bincount(tok0[n_acc == 0], minlength=V))
        bonus.add_(torch.bincount(out[n_acc == K, K], minlength=V))
        codes.append(tok0.to(torch.int32))

    sample_calls(settings, result, start, call, keep, rows=B, what="verifier call")
    if result.defect is None:
        alpha = settings.false_fail_rate
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
    return CheckResult(name=name, method="exact", statistic=0.0, pvalue=1.0, dof=None, n=0, false_fail_rate=alpha,
                       detectable_tv=float("inf"), false_pass_rate=0.01, passed=True, worst=(),
                       details={"message": "no rows in this condition"}, description="no samples")



class VerifyKind:
    """The :class:`~specexact.audit.cases.protocol.CaseKind` of verify-level cases."""

    name = "verify"

    def handles(self, case) -> bool:
        return isinstance(case, VerifyCase)

    def checks(self, case: VerifyCase) -> int:
        return VERIFY_CHECKS

    def restrict(self, case: VerifyCase, verifier):
        if (reason := chain_case_reason(case, verifier)) is not None:
            return None, reason
        if is_logits_level(verifier):
            return None, ("a verify-level case calls the verifier with probabilities; a logits-level sampler "
                          "takes logits")
        return case, None

    def fixed_calls(self, case) -> int:
        return 0

    def planning_checks(self, case: VerifyCase) -> list[tuple[int, bool]]:
        """``first_token_law`` and ``accepted_length`` (its conditional ``recovered_token_law``
        / ``bonus_token_law`` checks see only part of the rows and report their own, larger,
        detectable TV)."""
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
"""Verify-level cases' kind (:mod:`~specexact.audit.cases.protocol`)."""
