"""Decoder-level cases: the sampler under audit inside the built-in speculative decoder.

The case kind of :class:`~specexact.audit.cases.decoder_case.AuditCase` (:mod:`.case_kind`). Per exact
case and row class ``c`` (its own law), with ``n`` sequences of class ``c``:

- ``sequence_law[c]``: goodness of fit of the first ``length`` generated tokens against the
  law enumerated in float64 (any sequence of zero probability fails at once);
- ``accepted_length[c]``: law of the drafts accepted in the first round against its exact
  law (``P(N >= i)`` is a sum of products of ``min(target, draft)``); under-acceptance
  fails here even when the emitted law is right;
- ``independent_rows[c]`` / ``independent_calls[c]``: pairs of same-class rows of one
  decoder call, and the same row in two successive calls, must agree no more often than
  control pairs (different call, different row); shared randomness inflates agreement.

Per two-sample case (V too large to enumerate): the first token against its exact law, the
first-round acceptance count against ``sum_v min(target, draft)`` (exact binomial), the
sequences against naive target-only sampling (chi-square homogeneity), and the same
independence checks on the first token.

Per case, every case: the per-event checks of
:mod:`~specexact.audit.checks.decisions_checks` (``acceptance_exact``, ``acceptance``,
``recovered_support``, ``recovered_token_law``, ``bonus_token_law``, ``eos_cut``), from a
:class:`~specexact.audit.checks.decisions.DecisionObserver` that sees every round of every
decoder call (:func:`decision_observer`).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from specexact.audit.cases.decoder_case import AuditCase
from specexact.audit.cases.planning import PLAN_MAX_BINS, first_token_bins, support_size
from specexact.audit.cases.result import CaseResult, case_seed
from specexact.audit.cases.sampling import RunSettings, sample_calls
from specexact.audit.cases.tree_case import chain_case_reason
from specexact.audit.checks.acceptance import accepted_length_check, chain_accepted_length_laws
from specexact.audit.checks.decisions import DecisionObserver
from specexact.audit.checks.decisions_checks import DECISION_CHECKS, decision_checks
from specexact.audit.checks.lossy import lossy_tv_check
from specexact.audit.checks.pair_checks import pair_checks
from specexact.audit.checks.sequence_checks import sequence_counts, sequence_law_check
from specexact.audit.core.errors import AuditInternalError
from specexact.audit.core.levels import CHI2_TAIL_INFLATION, MIN_EXPECTED
from specexact.decoders import (
    batch_params,
    naive_generate,
    process_logits,
    speculative_generate,
)
from specexact.decoders.adapters.protocol import processing_of, scheme_of
from specexact.decoders.processing import BUILTIN_PROCESSING, LogitsProcessing
from specexact.exactness.enumeration import acceptance_law, encode_sequences, sequence_law
from specexact.exactness.exact_tests import binomial_check
from specexact.exactness.goodness_of_fit import chisquare_gof
from specexact.exactness.results import CheckResult
from specexact.exactness.two_sample import chisquare_homogeneity

__all__ = ["DecoderKind", "CASE_KIND", "decision_observer", "run_decoder_case"]


def run_decoder_case(case: AuditCase, verifier, **run) -> CaseResult:
    """Sample a decoder-level ``case`` (already restricted to the sampler) with ``verifier``
    inside the built-in decoder and check its laws (module docstring; ``run`` holds the
    settings of :func:`~specexact.audit.cases.dispatch.run_case`,
    :class:`~specexact.audit.cases.sampling.RunSettings`)."""
    settings = RunSettings(**run)
    false_fail_rate, min_expected, device = settings.false_fail_rate, settings.min_expected, settings.device
    processing = processing_of(verifier)
    start = time.perf_counter()
    result = CaseResult(case=case, seed=case_seed(settings.seed, case))
    gen = torch.Generator(device=device).manual_seed(result.seed)
    naive_gen = torch.Generator(device=device).manual_seed(result.seed ^ 0x5EED)
    target, draft = case.models(device)
    prompts, t_params, d_params = case.batch(device)
    C = len(case.row_classes)
    L = case.length
    observer = _Guarded(decision_observer(case, prompts, verifier, result.seed))
    tokens, first_round, naive_tokens = [], [], []

    def call():
        observer.start_call()
        out = speculative_generate(
            target, draft, prompts, t_params, d_params,
            num_draft_tokens=case.num_draft_tokens, max_new_tokens=L,
            generator=gen, eos_token_id=case.eos_token_id, verifier=verifier, observer=observer,
        )
        observer.finish_call(out)
        return out

    def keep(out) -> None:
        tokens.append(out.tokens.cpu())
        first_round.append(out.accepted_lengths[:, 0].cpu())
        if not case.exact:
            naive_tokens.append(naive_generate(target, prompts, t_params, max_new_tokens=L,
                                               generator=naive_gen, eos_token_id=case.eos_token_id,
                                               processing=processing).tokens.cpu())

    sample_calls(settings, result, start, call, keep, rows=case.batch_size, what="decoder call")
    if result.defect is None:
        all_tokens = torch.stack(tokens)  # [nb, B, L]
        accepted = torch.stack(first_round)  # [nb, B]
        naive_all = torch.stack(naive_tokens) if naive_tokens else None
        for c in range(C):
            result.checks.extend(
                _class_checks(case, c, target, draft, all_tokens, accepted, naive_all, false_fail_rate, min_expected,
                              processing, scheme_of(verifier))
            )
        result.checks.extend(decision_checks(observer.summary(), alpha=false_fail_rate, min_expected=min_expected))
    result.wall_time_s = time.perf_counter() - start
    return result


class _Guarded:
    """The observer, with its own failures raised as :class:`AuditInternalError` (the
    decoder calls it between the sampler's calls, inside the runner's ``except`` for the
    sampler's crashes)."""

    def __init__(self, observer: DecisionObserver) -> None:
        self.observer = observer

    def _run(self, fn, *args):
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - any failure here is the audit's own
            raise AuditInternalError(f"the per-event observer failed: {type(exc).__name__}: {exc}") from exc

    def __call__(self, rec) -> None:
        self._run(self.observer, rec)

    def start_call(self) -> None:
        self._run(self.observer.start_call)

    def finish_call(self, output=None) -> None:
        self._run(self.observer.finish_call, output)

    def summary(self) -> dict:
        return self._run(self.observer.summary)


def decision_observer(case: AuditCase, prompts: torch.Tensor, verifier, seed: int) -> DecisionObserver:
    """The per-event observer of one run of ``case`` (:mod:`~specexact.audit.checks.decisions`):
    rows are of class ``row % C``; its own generator is seeded from the case seed, apart
    from the sampler's."""
    C = len(case.row_classes)
    return DecisionObserver(
        batch_size=case.batch_size, num_draft_tokens=case.num_draft_tokens, max_new_tokens=case.length,
        row_class=torch.arange(case.batch_size) % C, num_classes=C, prompts=prompts,
        eos_token_id=case.eos_token_id, scheme=scheme_of(verifier), seed=seed ^ 0xDEC15,
    )


def unsupported_reason(case: AuditCase, verifier) -> str | None:
    """Why some classes of a decoder-level ``case`` cannot audit ``verifier``: a sampler of
    another protocol or scheme (:func:`~specexact.audit.cases.tree_case.chain_case_reason`), or a
    logits-level sampler whose declared operations do not cover their target parameters."""
    if (reason := chain_case_reason(case, verifier)) is not None:
        return reason
    processing = processing_of(verifier)
    missing = [f"class {case.class_id(c)}: {', '.join(bad)}" for c, rc in enumerate(case.row_classes)
               if (bad := processing.unsupported(rc.target_params))]
    return f"the sampler does not implement {'; '.join(missing)}" if missing else None


def decoder_event_inputs(case, event: dict, verifier=None) -> dict:
    """:func:`event_laws` of a decoder-level case's event (its laws recomputed from the
    case's toy models, for the row class, history and drafts of the event)."""
    drafts = torch.tensor([event["drafts"]], dtype=torch.int64)
    c = int(event["class"])
    if not 0 <= c < len(case.row_classes):
        raise ValueError(f"class {c} not in case {case.name!r} ({len(case.row_classes)} classes)")
    rc = case.row_classes[c]
    g = case.num_draft_tokens
    if drafts.shape[1] != g:
        raise ValueError(f"event has {drafts.shape[1]} drafts, case {case.name!r} has gamma={g}")
    target, draft = case.models()
    prompt = torch.tensor([rc.prompt], dtype=torch.int64)
    history = torch.tensor([list(event["history"])], dtype=torch.int64).reshape(1, -1)
    work = torch.cat([prompt, history, drafts], 1)  # [1, T0 + H + g]
    T = prompt.shape[1] + history.shape[1]
    d_params = batch_params(rc.draft_params, 1)
    t_params = batch_params(rc.target_params, 1)

    q = []
    for i in range(g):
        logits = draft(work[:, :T + i], torch.tensor([[T + i - 1]]))[:, 0]
        hist = torch.cat([history, drafts[:, :i]], 1)
        q.append(process_logits(logits, d_params, hist))
    t_logits = target(work, (T - 1 + torch.arange(g + 1))[None])  # [1, g+1, V]
    process = processing_of(verifier)
    p = [process(t_logits[:, j], t_params, torch.cat([history, drafts[:, :j]], 1), prompt) for j in range(g + 1)]
    return {"draft_token_ids": drafts, "draft_probs": torch.stack(q, 1), "target_probs": torch.stack(p, 1),
            "target_logits": t_logits, "prompt": prompt, "history": history, "target_params": rc.target_params}


class DecoderKind:
    """The :class:`~specexact.audit.cases.protocol.CaseKind` of decoder-level cases."""

    name = "decoder"

    def handles(self, case) -> bool:
        return isinstance(case, AuditCase)

    def checks(self, case: AuditCase) -> int:
        per_class = 4 if case.exact else 5
        return per_class * len(case.row_classes) + DECISION_CHECKS

    def restrict(self, case: AuditCase, verifier):
        if (reason := chain_case_reason(case, verifier)) is not None:
            return None, reason
        processing = processing_of(verifier)
        keep = [c for c, rc in enumerate(case.row_classes) if not processing.unsupported(rc.target_params)]
        reason = unsupported_reason(case, verifier)
        if not keep:
            return None, reason
        return case.restricted(keep), reason

    def fixed_calls(self, case) -> int:
        return 0

    def planning_checks(self, case) -> list[tuple[int, bool]]:
        V, L = case.model.vocab_size, case.length
        if case.exact:
            return [(min(support_size(V, L), PLAN_MAX_BINS), False), (case.num_draft_tokens + 1, False)]
        return [(first_token_bins(case), False), (min(support_size(V, L), PLAN_MAX_BINS), True)]

    def prepare(self, case: AuditCase, device, sampler):
        return case.models(device), case.batch(device)

    def call(self, case: AuditCase, prepared, sampler, *, rows: int | None, device, full: bool) -> None:
        (target, draft), (prompts, t_params, d_params) = prepared
        if rows is not None:
            prompts, t_params, d_params = prompts[:rows], t_params[:rows], d_params[:rows]
        # A full call is timed with the per-event observer the case runs with, so the plan
        # includes its cost (a sliced warm-up call runs without it), and with the naive
        # sampler of a two-sample case.
        observer = None
        if full:
            observer = decision_observer(case, prompts, sampler, 0)
            observer.start_call()
        out = speculative_generate(target, draft, prompts, t_params, d_params, num_draft_tokens=case.num_draft_tokens,
                                   max_new_tokens=case.length, generator=torch.Generator(device=device).manual_seed(0),
                                   eos_token_id=case.eos_token_id, verifier=sampler, observer=observer)
        if observer is not None:
            observer.finish_call(out)
        if full and not case.exact:
            naive_generate(target, prompts, t_params, max_new_tokens=case.length,
                           generator=torch.Generator(device=device).manual_seed(1), eos_token_id=case.eos_token_id,
                           processing=processing_of(sampler))

    def run(self, case, sampler, **kwargs) -> CaseResult:
        return run_decoder_case(case, sampler, **kwargs)

    def event_inputs(self, case: AuditCase, event: dict, sampler) -> dict:
        return decoder_event_inputs(case, event, sampler)


CASE_KIND = DecoderKind()
"""Decoder-level cases' kind (:mod:`.case_kind`)."""


def _class_checks(case, c, target, draft, all_tokens, accepted, naive_all, alpha,
                  min_expected=MIN_EXPECTED, processing: LogitsProcessing = BUILTIN_PROCESSING,
                  scheme: str = "tokenwise") -> list[CheckResult]:
    alpha_chi2 = alpha / CHI2_TAIL_INFLATION
    C = len(case.row_classes)
    rc = case.row_classes[c]
    label = f"class {case.class_id(c)}"
    prompt = torch.tensor(rc.prompt, dtype=torch.int64)
    toks = all_tokens[:, c::C]  # [nb, R, L]
    nb, R, L = toks.shape
    flat = toks.reshape(nb * R, L)
    acc = accepted[:, c::C].reshape(-1).numpy()
    gamma = case.num_draft_tokens
    checks: list[CheckResult] = []
    # The declared scheme's own law (block: larger than token-wise; lossy: none, measured).
    acc_law, tokenwise_law = chain_accepted_length_laws(target, draft, prompt, rc.target_params, rc.draft_params,
                                                        num_draft_tokens=gamma, scheme=scheme, processing=processing,
                                                        acceptance_law=acceptance_law)
    if case.exact:
        law = sequence_law(target, prompt, rc.target_params, length=L, eos_token_id=case.eos_token_id,
                           processing=processing)
        if scheme == "lossy":  # measured, not tested
            counts, probs, _, codes = sequence_counts(law, flat)
            checks.append(lossy_tv_check(counts, probs, false_fail_rate=alpha, min_expected=min_expected,
                                         name=f"lossy_tv[{label}]"))
        else:
            chk, codes = sequence_law_check(law, flat, false_fail_rate=alpha_chi2, min_expected=min_expected,
                                            name=f"sequence_law[{label}]")
            checks.append(chk)
        codes = codes.reshape(nb, R)
    else:
        p0 = processing(target.to(dtype=torch.float64)(prompt[None], torch.tensor([[len(rc.prompt) - 1]]))[:, 0],
                        batch_params(rc.target_params, 1), None, prompt[None]).numpy()[0]
        first = np.bincount(flat[:, 0].numpy(), minlength=case.model.vocab_size)
        checks.append(chisquare_gof(first, p0, false_fail_rate=alpha_chi2, min_expected=min_expected,
                                    name=f"first_token_law[{label}]"))
        spec_codes = encode_sequences(flat, case.model.vocab_size)
        naive_codes = encode_sequences(naive_all[:, c::C].reshape(-1, L), case.model.vocab_size)
        support, inv = np.unique(np.concatenate([spec_codes, naive_codes]), return_inverse=True)
        ca = np.bincount(inv[: len(spec_codes)], minlength=len(support))
        cb = np.bincount(inv[len(spec_codes):], minlength=len(support))
        checks.append(chisquare_homogeneity(ca, cb, false_fail_rate=alpha_chi2, min_expected=min_expected,
                                            name=f"sequences_vs_naive[{label}]", outcome_codes=support))
        codes = flat[:, 0].numpy().reshape(nb, R)
    if acc_law is not None and np.isnan(acc_law).any():
        at_least_one = float(1.0 - acc_law[0])
        checks.append(binomial_check(int((acc >= 1).sum()), int(acc.size), at_least_one,
                                     false_fail_rate=alpha, name=f"first_acceptance[{label}]"))
    else:
        # Unbinned counts for plots and baselines; means (the scheme's and the token-wise
        # optimum) for reading and for the report's under-acceptance finding.
        checks.append(accepted_length_check(acc, acc_law, scheme=scheme, max_accepted=gamma,
                                            false_fail_rate=alpha if acc_law is None else alpha_chi2,
                                            min_expected=min_expected, name=f"accepted_length[{label}]",
                                            tokenwise_law=tokenwise_law))
    checks.extend(pair_checks(codes, alpha, label))
    return checks
