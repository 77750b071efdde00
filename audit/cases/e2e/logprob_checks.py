"""The logprob checks of an end-to-end case: each reported logprob against the exact law.

An engine that declares logprobs (:attr:`EngineCapabilities.logprobs
<specexact.decoders.engines.protocol.EngineCapabilities>`) returns, for every emitted token
``x_j`` of a request that asked, the log of its probability. The reference is exact, no
sampling: the target's law at the output's own prefix ``x_{<j}``, teacher-forced in float64
(:func:`~specexact.decoders.tiny_models.conditional_laws`) and processed as the engine
declares — penalties over the prompt and output so far, the ``min_tokens`` EOS mask,
temperature and truncation — for ``"processed"``, or the unprocessed model's law for
``"raw"``. Under speculative decoding the logprob of an accepted draft must be the
*target's* (what naive sampling would report), never the draft's ``q``; of a recovered token,
the target's too (not the residual's): the law of the output is the target's, and so is each
token's reported probability (vLLM #34497, llama.cpp #27196). A greedy row's (temperature 0)
processed logprobs are not compared: engines report the softmax of the logits the argmax was
taken from, not the point mass the token has.

One check per path: ``token_logprobs`` (speculative outputs) and ``plain_token_logprobs``
(the engine's plain sampling). A check fails when any reported logprob differs from its exact
value by more than :data:`LOGPROB_TOLERANCE` nats (a reported ``-inf`` matches an exact
probability 0 only). It is deterministic given the outputs: its false-fail rate is that of
the tolerance against the engine's float32 arithmetic (a float32 forward of the tiny models
differs from float64 by about 1e-6 in a logprob), not a sampling error.

Shapes: outputs ``[N, L]`` int64, ``-1`` after their end; logprobs ``[N, L]`` float64, NaN
where no token (classes interleaved as the outputs).
"""

from __future__ import annotations

import math

import torch

from specexact.audit.cases.e2e.case import E2ECase
from specexact.audit.cases.e2e.laws import case_models
from specexact.decoders.engines.protocol import EngineCapabilities, GenerationResult
from specexact.decoders.params import SamplingParams
from specexact.decoders.tiny_models import conditional_laws
from specexact.exactness.results import CheckResult

__all__ = ["LOGPROB_PATHS", "LOGPROB_TOLERANCE", "padded_tokens", "padded_logprobs", "exact_logprobs", "logprob_checks",
           "results_logprob_checks"]

LOGPROB_PATHS = (("token_logprobs", True), ("plain_token_logprobs", False))
"""The logprob check names and whether each reads the speculative outputs."""

LOGPROB_TOLERANCE = 1e-3
"""Nats a reported logprob may differ from its exact float64 value: a probability off by a
factor outside ``[e^-0.001, e^0.001]`` (0.1 %) fails; float32 arithmetic is far inside."""


def padded_tokens(results: list[GenerationResult], length: int) -> torch.Tensor:
    """``[N, length]`` int64: each result's token ids, ``-1`` past its end."""
    out = torch.full((len(results), length), -1, dtype=torch.int64)
    for i, r in enumerate(results):
        toks = list(r.token_ids)[:length]
        if toks:
            out[i, : len(toks)] = torch.tensor(toks, dtype=torch.int64)
    return out


def padded_logprobs(results: list[GenerationResult], length: int) -> torch.Tensor:
    """``[N, length]`` float64: each result's reported logprobs, NaN past its tokens (or all
    NaN where it reported none)."""
    out = torch.full((len(results), length), math.nan, dtype=torch.float64)
    for i, r in enumerate(results):
        lp = list(r.logprobs or ())[:length]
        if lp:
            out[i, : len(lp)] = torch.tensor(lp, dtype=torch.float64)
    return out


def exact_logprobs(case: E2ECase, c: int, caps: EngineCapabilities, outputs: torch.Tensor) -> torch.Tensor:
    """``[n, max_tokens]`` float64: the exact logprob of each emitted token of class ``c``'s
    ``outputs`` under the law ``caps.logprobs`` declares (module docstring); NaN past the end
    (and everywhere for a greedy class's processed logprobs: not compared).

    Raises
    ------
    ValueError
        ``caps.logprobs`` is not ``"processed"`` or ``"raw"``.
    """
    if caps.logprobs not in ("processed", "raw"):
        raise ValueError(f"caps.logprobs must be 'processed' or 'raw', got {caps.logprobs!r}")
    rc = case.row_classes[c]
    seqs = outputs[:, : rc.max_tokens].to(torch.int64)
    target, _ = case_models(case)
    eos = rc.eos_id(target.eos_token_id)
    if caps.logprobs == "processed" and rc.params.temperature == 0:
        return torch.full((seqs.shape[0], rc.max_tokens), math.nan, dtype=torch.float64)
    if caps.logprobs == "processed":
        laws = conditional_laws(target, rc.prompt, seqs, rc.params, caps.processing, min_tokens=rc.min_tokens,
                                eos_token_id=eos)
    else:  # the model's own law: no temperature, truncation, penalty or min_tokens mask
        laws = conditional_laws(target, rc.prompt, seqs, SamplingParams(), caps.processing, eos_token_id=eos)
    exact = laws.token_probs().to(torch.float64).log()
    return torch.where(laws.valid, exact, torch.full_like(exact, math.nan))


def logprob_checks(case: E2ECase, caps: EngineCapabilities, spec: torch.Tensor, plain: torch.Tensor,
                   spec_logprobs: torch.Tensor, plain_logprobs: torch.Tensor, alpha: float) -> list[CheckResult]:
    """The case's two logprob checks, in the order of :data:`LOGPROB_PATHS` (module docstring).

    Parameters
    ----------
    case : E2ECase
    caps : EngineCapabilities
        ``caps.logprobs`` names the law.
    spec, plain : torch.LongTensor
        ``[N, L]`` outputs, classes interleaved (row ``i`` is class ``i % C``).
    spec_logprobs, plain_logprobs : torch.Tensor
        ``[N, L]`` float64 reported logprobs (:func:`padded_logprobs`).
    alpha : float
        The check's share of the false-fail rate (reports; the check is deterministic).

    Returns
    -------
    list of CheckResult
        Two checks, ``method="exact"``; ``statistic`` the largest difference in nats.
    """
    C = len(case.row_classes)
    out = []
    for (name, speculative), outputs, reported in ((LOGPROB_PATHS[0], spec, spec_logprobs),
                                                   (LOGPROB_PATHS[1], plain, plain_logprobs)):
        worst, compared, bad, largest = [], 0, 0, 0.0
        for c in range(C):
            exact = exact_logprobs(case, c, caps, outputs[c::C])
            got = reported[c::C][:, : exact.shape[1]]
            emitted = ~torch.isnan(exact)
            both_inf = torch.isinf(exact) & torch.isinf(got) & (exact < 0) & (got < 0)
            diff = torch.where(both_inf, torch.zeros_like(exact), (got - exact).abs())
            diff = torch.where(emitted, torch.nan_to_num(diff, nan=math.inf), torch.zeros_like(diff))
            compared += int(emitted.sum())
            off = emitted & (diff > LOGPROB_TOLERANCE)
            bad += int(off.sum())
            largest = max(largest, float(diff.max()) if diff.numel() else 0.0)
            for r, j in off.nonzero().tolist()[: 5 - len(worst)]:
                tok, seen = int(outputs[c::C][r, j]), float(got[r, j])
                worst.append((f"class {case.class_id(c)} request {r} position {j} token {tok}"
                              + (" (no logprob reported)" if math.isnan(seen) else ""),
                              math.inf if math.isnan(seen) else seen, float(exact[r, j])))
        passed = bad == 0
        what = "speculative" if speculative else "plain"
        msg = (f"{bad} of {compared} reported logprobs differ from the exact {caps.logprobs} law by more than "
               f"{LOGPROB_TOLERANCE:g} nats (largest {largest:.3g})" if not passed else "")
        out.append(CheckResult(
            name=name, method="exact", statistic=largest, pvalue=1.0 if passed else 0.0, dof=None, n=compared,
            false_fail_rate=alpha, detectable_tv=0.0, false_pass_rate=0.01, passed=passed,
            worst=tuple(worst),
            details={"tolerance_nats": LOGPROB_TOLERANCE, "law": caps.logprobs, "speculative": speculative,
                     "tokens": compared, "differ": bad, **({"message": msg} if msg else {})},
            description=(f"each {what} output token's reported logprob against its exact {caps.logprobs} law at "
                         f"its prefix (float64, teacher-forced), within {LOGPROB_TOLERANCE:g} nats (exact, no "
                         "sampling)" + ("; " + msg if msg else ""))))
    return out


def results_logprob_checks(case: E2ECase, caps: EngineCapabilities, spec: list[GenerationResult],
                           plain: list[GenerationResult], alpha: float) -> list[CheckResult]:
    """:func:`logprob_checks` of one speculative and one plain call's results (the case's
    requests, classes interleaved), padded to the case's length."""
    L = case.length
    return logprob_checks(case, caps, padded_tokens(spec, L), padded_tokens(plain, L), padded_logprobs(spec, L),
                          padded_logprobs(plain, L), alpha)
