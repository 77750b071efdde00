"""The seed checks of an end-to-end case: independent unseeded requests, seeded ones in another mix or alone.

What an engine promises about seeds (:class:`~specexact.decoders.engines.seeds.SeedPromise`)
is checked where it declares it:

- ``independent_requests`` (``unseeded_independent``; the case's ``unseeded`` requests, every
  second request of each class): in every call and on each path (speculative, plain), the
  unseeded requests of one class are paired in call order (1st with 2nd, 3rd with 4th, ...);
  two independent draws agree with probability ``pi = sum_s P(s)**2``, exactly, from the
  class's exact law: its sequence law for an enumerable case (the whole output), its first
  token's law for a case with position bands (long and scenario cases, whose outputs cannot
  be enumerated: the first tokens of a pair are compared). The agreeing pairs are tested
  against the convolution of ``Binomial(pairs, pi)`` over the classes, one-sided
  (:func:`~specexact.exactness.pooled_pairs.pooled_pair_agreement_check`): exact, at the
  case's per-check rate. It reuses the outputs of the case's calls (no call of its own), the
  first calls' pairs up to :data:`MAX_PAIRS_PER_CLASS` per class. A shared stream
  (TensorRT-LLM #19487: unseeded requests identical at low concurrency) makes every pair
  agree. Its tier is *inexact* (the joint law of a call's outputs is wrong).
- ``reproducible_in_mix`` (``other_mix``): the first call's seeded requests generated again,
  reversed and without the unseeded ones (:meth:`E2ECase.mix_requests
  <specexact.audit.cases.e2e.case.E2ECase.mix_requests>`), speculative and plain, must give
  the outputs they had in the first call: exact, a broken promise is a *defect*.
- ``reproducible_alone`` (``alone``): the first call's first seeded request generated again
  as the only request of a call (:meth:`E2ECase.alone_requests
  <specexact.audit.cases.e2e.case.E2ECase.alone_requests>`), speculative and plain, must give
  the output it had in the first call: exact, a broken promise is a *defect* (an engine whose
  seeded stream is shared by a batch's requests, or whose batch shape changes the draws).

Shapes: outputs ``[N, L]`` int64, ``-1`` after their end.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from specexact.audit.cases.e2e.case import E2ECase
from specexact.audit.cases.e2e.laws import case_models, class_laws
from specexact.audit.cases.result import defect_check
from specexact.decoders.engines.protocol import EngineCapabilities
from specexact.decoders.tiny_models import conditional_laws
from specexact.exactness.pooled_pairs import pooled_pair_agreement_check
from specexact.exactness.results import CheckResult

__all__ = ["MAX_PAIRS_PER_CLASS", "collision_probability_of_class", "independent_requests_check", "reproducible_alone_check",
           "reproducible_in_mix_check"]

MAX_PAIRS_PER_CLASS = 512
"""Pairs of unseeded requests per class the independence check reads at most (the first
calls', speculative then plain within a call): bounds its exact law's size."""


def collision_probability_of_class(case: E2ECase, c: int, caps: EngineCapabilities) -> float:
    """``pi`` of class ``c`` (module docstring): ``sum_s P(s)**2`` over its exact sequence law,
    or over its first token's law where the case has position bands."""
    if not case.position_bands:
        return class_laws(case, c, caps).sequence.collision_probability()
    rc = case.row_classes[c]
    target, _ = case_models(case)
    laws = conditional_laws(target, rc.prompt, torch.zeros((1, 1), dtype=torch.int64), rc.params, caps.processing,
                            min_tokens=rc.min_tokens, eos_token_id=rc.eos_id(target.eos_token_id))
    p = laws.probs[0, 0].to(torch.float64)
    return float(min(1.0, float((p * p).sum())))


def independent_requests_check(case: E2ECase, caps: EngineCapabilities, spec: list, plain: list,
                               alpha: float) -> CheckResult:
    """The ``independent_requests`` check (module docstring).

    Parameters
    ----------
    case : E2ECase
        A case with ``unseeded`` requests.
    caps : EngineCapabilities
    spec, plain : list of torch.LongTensor
        Per call, its ``[B, L]`` outputs (request ``r`` at row ``r``), speculative and plain.
    alpha : float
        The check's false-fail rate.

    Returns
    -------
    CheckResult
        Named ``independent_requests``; ``details["groups"]`` per class.
    """
    C = len(case.row_classes)
    unseeded = [r for r in range(case.batch_size) if not case.is_seeded(r)]
    equal, pairs, probs, labels = [], [], [], []
    for c in range(C):
        rows = [r for r in unseeded if r % C == c]
        rows = rows[: len(rows) - len(rows) % 2]
        first, second = rows[0::2], rows[1::2]
        L = case.row_classes[c].max_tokens if not case.position_bands else 1
        k = n = 0
        for out_spec, out_plain in zip(spec, plain):
            for out in (out_spec, out_plain):
                take = min(len(first), MAX_PAIRS_PER_CLASS - n)
                if take <= 0:
                    break
                a, b = out[first[:take], :L], out[second[:take], :L]
                k += int((a == b).all(1).sum())
                n += take
        equal.append(k)
        pairs.append(n)
        probs.append(collision_probability_of_class(case, c, caps) if n else 0.0)
        labels.append(f"class {case.class_id(c)}")
    chk = pooled_pair_agreement_check(equal, pairs, probs, false_fail_rate=alpha, name="independent_requests",
                                      labels=labels)
    what = "first tokens" if case.position_bands else "outputs"
    return replace(chk, details={**chk.details, "compared": what},
                   description=f"unseeded requests of one call and class independent: pairs' {what} agree as "
                               f"independent draws' ({chk.description})")


def reproducible_in_mix_check(mix: torch.Tensor, first: torch.Tensor, mix_plain: torch.Tensor,
                              first_plain: torch.Tensor, alpha: float) -> CheckResult:
    """The exact ``reproducible_in_mix`` check: ``mix`` / ``mix_plain`` (``[S, L]``, the seeded
    requests in the mix call's order) against the same requests' outputs in the first call
    (``first`` / ``first_plain``, rows in the same order)."""
    diff = int((mix != first).any(1).sum())
    diff_plain = int((mix_plain != first_plain).any(1).sum())
    n = int(first.shape[0])
    text = "seeded requests reproduce in another mix (reversed, unseeded requests left out; exact)"
    if diff or diff_plain:
        chk = defect_check("reproducible_in_mix", f"the first call's seeded requests again, reversed and without the "
                           f"unseeded ones, gave other outputs: {diff} of {n} speculative and {diff_plain} of {n} "
                           "plain requests (the engine promises a seeded request's output whatever else the call "
                           "holds)", alpha)
        return replace(chk, description=text, details={**chk.details, "speculative_differ": diff,
                                                       "plain_differ": diff_plain, "requests": n})
    return CheckResult(name="reproducible_in_mix", method="exact", statistic=0.0, pvalue=1.0, dof=None, n=2 * n,
                       false_fail_rate=alpha, detectable_tv=0.0, false_pass_rate=0.01, passed=True, worst=(),
                       details={"speculative_differ": 0, "plain_differ": 0, "requests": n}, description=text)


def reproducible_alone_check(alone: torch.Tensor, first: torch.Tensor, alone_plain: torch.Tensor,
                             first_plain: torch.Tensor, alpha: float) -> CheckResult:
    """The exact ``reproducible_alone`` check: ``alone`` / ``alone_plain`` (``[1, L]``, the
    request generated alone) against its outputs in the first call (``first`` / ``first_plain``,
    ``[1, L]``)."""
    diff = int((alone != first).any(1).sum())
    diff_plain = int((alone_plain != first_plain).any(1).sum())
    text = "a seeded request reproduces alone (the only request of a call; exact)"
    if diff or diff_plain:
        chk = defect_check("reproducible_alone", f"the first call's first seeded request again, alone in its call, gave "
                           f"another output: speculative {'differs' if diff else 'the same'}, plain "
                           f"{'differs' if diff_plain else 'the same'} (the engine promises a seeded request's "
                           "output whatever else the call holds, nothing included)", alpha)
        return replace(chk, description=text, details={**chk.details, "speculative_differ": diff,
                                                       "plain_differ": diff_plain, "requests": 1})
    return CheckResult(name="reproducible_alone", method="exact", statistic=0.0, pvalue=1.0, dof=None, n=2,
                       false_fail_rate=alpha, detectable_tv=0.0, false_pass_rate=0.01, passed=True, worst=(),
                       details={"speculative_differ": 0, "plain_differ": 0, "requests": 1}, description=text)
