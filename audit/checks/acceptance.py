"""The accepted-length reference of a sampler's declared scheme, and the check against it.

A sampler is judged by its own scheme's exact accepted-length law
(:attr:`~specexact.decoders.adapters.Capabilities.scheme`):

- ``"tokenwise"``: ``P(N >= i) = sum over draft paths of prod min(p, q)`` (Leviathan et al.
  2023), the optimum of token-wise verification;
- ``"sample_compare"``: ``prod p q`` instead of ``min(p, q)`` (its own law; it accepts less
  than the token-wise optimum by design, which the report notes without failing it);
- ``"block"``: ``P(tau >= i) = E[w_i]`` (Sun et al., arXiv:2403.10444), at least the
  token-wise tail: a correct block verifier passes, a token-wise one declared ``"block"``
  under-accepts and fails;
- ``"lossy"``: no reference law: the accepted length is *measured* (a record that always
  passes), as its emitted law is (:mod:`.lossy`).

Beside the check's own reference, every accepted-length check of a chain case carries the
token-wise optimum (``details["tokenwise_optimum_mean_accepted_length"]``), so the report can
tell *exact but under-accepting* samplers from inexact ones.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from specexact.decoders.params import SamplingParams
from specexact.decoders.processing import BUILTIN_PROCESSING, LogitsProcessing
from specexact.exactness.enumeration import acceptance_law
from specexact.exactness.goodness_of_fit import chisquare_gof
from specexact.exactness.results import CheckResult
from specexact.exactness.tree_laws import PrefixLaws, block_accepted_length_law

__all__ = ["CHAIN_SCHEMES", "chain_accepted_length_laws", "accepted_length_check", "mean_of_law"]

CHAIN_SCHEMES = ("tokenwise", "sample_compare", "block", "lossy")
"""Schemes whose samplers the chain decoder's cases can judge (the others verify trees)."""


def mean_of_law(law: np.ndarray | None) -> float | None:
    """``sum_k k P(N = k)``, or ``None`` for a missing or partly unknown (NaN) law."""
    if law is None or np.isnan(law).any():
        return None
    return float(np.dot(np.arange(len(law)), law))


def chain_accepted_length_laws(target, draft, prompt_ids: torch.Tensor, target_params: SamplingParams,
                               draft_params: SamplingParams, *, num_draft_tokens: int, scheme: str,
                               processing: LogitsProcessing = BUILTIN_PROCESSING,
                               max_paths: int = 500_000,
                               acceptance_law=acceptance_law) -> tuple[np.ndarray | None, np.ndarray]:
    """The first round's accepted-length law under ``scheme``, and the token-wise optimum.

    Shapes: ``prompt_ids [T0] -> (law [γ + 1] or None, tokenwise [γ + 1])``, float64,
    ``P(N = k)`` for ``k = 0..γ``. Where the draft paths of some depth exceed ``max_paths``
    (large V), entries are NaN from the first unknown ``k`` on and the last known entry holds
    ``P(N >= k)`` (as :func:`~specexact.exactness.enumeration.acceptance_law`): block
    verification's ``P(N >= 1) = sum_v min(p, q)`` is the token-wise one.

    ``acceptance_law`` is :func:`~specexact.exactness.enumeration.acceptance_law` (the runner
    passes its own reference, which :func:`specexact.audit.zoo.selfcheck.cached_exact_laws`
    memoises).

    Raises
    ------
    ValueError
        A scheme the chain decoder cannot judge (``"tree"``, ``"multi_draft"``: tree cases).
    """
    if scheme not in CHAIN_SCHEMES:
        raise ValueError(f"scheme must be one of {CHAIN_SCHEMES} for a chain case, got {scheme!r}")
    common = dict(num_draft_tokens=num_draft_tokens, max_paths=max_paths, target_processing=processing)
    tokenwise = acceptance_law(target, draft, prompt_ids, target_params, draft_params, **common)
    if scheme == "tokenwise":
        return tokenwise, tokenwise
    if scheme == "sample_compare":
        return acceptance_law(target, draft, prompt_ids, target_params, draft_params, scheme="sample_compare",
                              **common), tokenwise
    if scheme == "lossy":
        return None, tokenwise
    gamma = int(num_draft_tokens)
    if target.vocab_size ** gamma > max_paths:
        law = np.full(gamma + 1, np.nan)
        law[0] = tokenwise[0]
        law[1] = 1.0 - tokenwise[0]  # P(N >= 1): the same as token-wise (w_1 = min(p/q, 1))
        return law, tokenwise
    laws = PrefixLaws.from_models(target, draft, prompt_ids, target_params, draft_params,
                                  target_processing=None if processing.is_builtin else processing)
    return block_accepted_length_law(laws, gamma), tokenwise


def accepted_length_check(accepted: np.ndarray, law: np.ndarray | None, *, scheme: str, false_fail_rate: float,
                          min_expected: float, name: str, tokenwise_law: np.ndarray | None = None,
                          max_accepted: int | None = None) -> CheckResult:
    """The accepted-length check of one row class against its scheme's law (module docstring).

    Parameters
    ----------
    accepted : np.ndarray
        Shape ``[n]``, int: drafts accepted in the first round, one per sequence.
    law : np.ndarray or None
        Shape ``[D + 1]``: the scheme's exact law ``P(N = k)`` (no NaN); ``None`` for a lossy
        sampler: the result is then a measurement that passes (p-value 1, detectable TV inf).
    scheme : str
        The declared scheme (recorded in ``details``).
    false_fail_rate : float
        The chi-square check's level (the audit's per-check rate over ``CHI2_TAIL_INFLATION``).
    min_expected : float
    name : str
    tokenwise_law : np.ndarray, optional
        Shape ``[D + 1]``: the token-wise optimum, for chain cases (recorded, not tested).
    max_accepted : int, optional
        ``D``; default ``len(law) - 1`` (required when ``law`` is None).

    Returns
    -------
    CheckResult
        ``details`` holds ``observed_counts``, ``mean_accepted_length``, ``scheme``, and, where
        known, ``expected_probs`` / ``expected_mean_accepted_length`` (the scheme's law) and
        ``tokenwise_expected_probs`` / ``tokenwise_optimum_mean_accepted_length``.

    Raises
    ------
    ValueError
        No ``law`` and no ``max_accepted``, or no samples.
    """
    if law is None and max_accepted is None:
        raise ValueError("give max_accepted when law is None (a lossy sampler's measurement)")
    D = len(law) - 1 if max_accepted is None else int(max_accepted)
    accepted = np.asarray(accepted)
    if accepted.size == 0:
        raise ValueError("accepted holds no samples")
    obs = np.bincount(np.clip(accepted, 0, D), minlength=D + 1)
    extra = {"observed_counts": obs.astype(int).tolist(), "mean_accepted_length": float(accepted.mean()),
             "scheme": scheme}
    tokenwise_mean = mean_of_law(tokenwise_law)
    if tokenwise_mean is not None:
        extra["tokenwise_expected_probs"] = [float(x) for x in tokenwise_law]
        extra["tokenwise_optimum_mean_accepted_length"] = tokenwise_mean
    if law is None:
        return CheckResult(
            name=name, method="exact", statistic=float(accepted.mean()), pvalue=1.0, dof=None, n=int(accepted.size),
            false_fail_rate=false_fail_rate, detectable_tv=float("inf"), false_pass_rate=0.01, passed=True, worst=(),
            details={**extra, "measured": True},
            description=(f"lossy scheme {scheme!r}: no reference law for the accepted length; the mean "
                         f"{accepted.mean():.4g} is measured, not tested"))
    res = chisquare_gof(obs, law, false_fail_rate=false_fail_rate, min_expected=min_expected,
                        labels=[f"N={k}" for k in range(D + 1)], name=name)
    details = {**res.details, **extra, "expected_probs": [float(x) for x in law],
               "expected_mean_accepted_length": mean_of_law(law)}
    return replace(res, details=details, description=res.description + f" Reference: the {scheme} scheme's exact law.")
