"""The checks of an end-to-end case, and how many a case has.

Per row class, on the engine's speculative and plain outputs (:func:`class_checks`):
``sequence_law`` and ``plain_sequence_law`` against the class's exact law
(:func:`~specexact.audit.cases.e2e.laws.class_laws`), ``sequences_vs_plain`` (chi-square
homogeneity) and, where the case checks acceptance, ``accepted_length``; per case
``reproducible`` (:func:`reproducible_check`, exact) and, where the engine promises them, the
seed checks ``independent_requests`` and ``reproducible_in_mix``
(:mod:`~specexact.audit.cases.e2e.seed_checks`). A long case (``position_bands`` set)
has per-token checks instead of the per-class ones, two per band
(:mod:`~specexact.audit.cases.e2e.token_checks`). :func:`e2e_num_checks` counts them (the
report reads the same count from a case's config).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from specexact.audit.cases.e2e.case import E2ECase
from specexact.audit.cases.e2e.laws import class_laws
from specexact.audit.cases.result import defect_check
from specexact.audit.checks.acceptance import accepted_length_check
from specexact.audit.checks.sequence_checks import sequence_law_check
from specexact.audit.core.errors import AuditInternalError
from specexact.audit.core.levels import CHI2_TAIL_INFLATION
from specexact.decoders.engines.protocol import EngineCapabilities
from specexact.exactness.enumeration import encode_sequences
from specexact.exactness.results import CheckResult
from specexact.exactness.two_sample import chisquare_homogeneity

__all__ = ["E2E_CHECKS_PER_CLASS", "e2e_num_checks", "reproducible_check", "class_checks"]

E2E_CHECKS_PER_CLASS = 3
"""``sequence_law``, ``plain_sequence_law``, ``sequences_vs_plain`` (plus ``accepted_length``
where the case checks acceptance)."""


def e2e_num_checks(num_classes: int, num_acceptance_checked: int, num_bands: int = 0,
                   check_logprobs: bool = False, unseeded: bool = False, check_in_mix: bool = False,
                   check_alone: bool = False) -> int:
    """Checks of an end-to-end case: :data:`E2E_CHECKS_PER_CLASS` per class (a long case with
    ``num_bands > 0`` position bands: ``token_law`` and ``plain_token_law`` per band instead),
    ``reproducible``, one ``accepted_length`` per class that checks acceptance, with
    ``check_logprobs`` the two logprob checks, with ``unseeded`` ``independent_requests`` and
    with ``check_in_mix`` ``reproducible_in_mix``, with ``check_alone`` ``reproducible_alone``
    (:mod:`~specexact.audit.cases.e2e.seed_checks`; the report reads the same count from a
    case's config)."""
    per = 2 * int(num_bands) if num_bands else E2E_CHECKS_PER_CLASS * num_classes
    return (per + 1 + num_acceptance_checked + 2 * bool(check_logprobs) + bool(unseeded) + bool(check_in_mix)
            + bool(check_alone))


def reproducible_check(again, first, again_plain, first_plain, alpha: float, rows=None):
    """The exact reproducibility check: the first call's requests again, same seeds (``[B, L]``
    outputs each); ``rows``, when given, are the seeded requests' places, the only ones
    compared (an unseeded request draws afresh)."""
    if rows is not None:
        again, first, again_plain, first_plain = (x[list(rows)] for x in (again, first, again_plain, first_plain))
    diff = int((again != first).any(1).sum())
    diff_plain = int((again_plain != first_plain).any(1).sum())
    n = int(first.shape[0])
    if diff or diff_plain:
        chk = defect_check("reproducible", f"same requests, same seeds, different outputs: {diff} of {n} speculative "
                           f"and {diff_plain} of {n} plain requests (the engine does not use the seeds)", alpha)
        return replace(chk, description="seeded reproducibility: same seed, same output (exact)",
                       details={**chk.details, "speculative_differ": diff, "plain_differ": diff_plain, "requests": n})
    return CheckResult(name="reproducible", method="exact", statistic=0.0, pvalue=1.0, dof=None, n=2 * n,
                       false_fail_rate=alpha, detectable_tv=0.0, false_pass_rate=0.01, passed=True, worst=(),
                       details={"speculative_differ": 0, "plain_differ": 0, "requests": n},
                       description="seeded reproducibility: same seed, same output (exact)")


def class_checks(case: E2ECase, c: int, caps: EngineCapabilities, spec: torch.Tensor, plain: torch.Tensor,
                  first_round: list, alpha: float, min_expected: float) -> list:
    label = f"class {case.class_id(c)}"
    rc = case.row_classes[c]
    laws = class_laws(case, c, caps)
    alpha_chi2 = alpha / CHI2_TAIL_INFLATION
    L = rc.max_tokens
    spec, plain = spec[:, :L], plain[:, :L]
    checks = [sequence_law_check(laws.sequence, spec, false_fail_rate=alpha_chi2, min_expected=min_expected,
                                 name=f"sequence_law[{label}]")[0],
              sequence_law_check(laws.sequence, plain, false_fail_rate=alpha_chi2, min_expected=min_expected,
                                 name=f"plain_sequence_law[{label}]")[0]]
    V = laws.sequence.vocab_size
    a, p = encode_sequences(spec, V), encode_sequences(plain, V)
    support, inv = np.unique(np.concatenate([a, p]), return_inverse=True)
    checks.append(chisquare_homogeneity(np.bincount(inv[: len(a)], minlength=len(support)),
                                        np.bincount(inv[len(a):], minlength=len(support)),
                                        false_fail_rate=alpha_chi2, min_expected=min_expected,
                                        name=f"sequences_vs_plain[{label}]", outcome_codes=support))
    if case.acceptance_checked(c):
        counts = [x for row in first_round for x in row]
        if any(x is None for x in counts):
            raise AuditInternalError(f"case {case.name!r} checks acceptance but the engine reported no "
                                     "first_round_accepted (its capabilities say reports_acceptance)")
        checks.append(accepted_length_check(np.asarray(counts, dtype=np.int64), laws.acceptance,
                                            scheme=caps.acceptance_scheme, false_fail_rate=alpha_chi2,
                                            min_expected=min_expected, name=f"accepted_length[{label}]"))
    return checks
