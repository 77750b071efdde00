"""Running tree-level cases: one decoder call, the reference laws, the checks and the kind.

The cases, the samplers they serve and the checks they get:
:mod:`~specexact.audit.cases.tree_case`. Here :func:`tree_call` makes one call of the tree
decoder (or, for a chain case, the chain decoder), :func:`reference_accepted_length_law` gives
a class's first-round accepted-length law under a scheme, :func:`run_tree_case` samples a case
and checks it, and :data:`CASE_KIND` is the tree-level
:class:`~specexact.audit.cases.protocol.CaseKind`.
"""

from __future__ import annotations

import functools
import time
from typing import Callable

import numpy as np
import torch

from specexact.audit.cases.base import RowClass
from specexact.audit.cases.planning import PLAN_MAX_BINS, support_size
from specexact.audit.cases.result import CaseResult, case_seed
from specexact.audit.cases.sampling import RunSettings, sample_calls
from specexact.audit.cases.tree_case import TREE_CHECKS_PER_CLASS, TreeCase, restrict_tree_case
from specexact.audit.checks.acceptance import accepted_length_check
from specexact.audit.checks.lossy import lossy_tv_check
from specexact.audit.checks.pair_checks import pair_checks
from specexact.audit.checks.sequence_checks import sequence_counts
from specexact.audit.core.levels import CHI2_TAIL_INFLATION
from specexact.decoders import ToyLMConfig, speculative_generate, verify
from specexact.decoders.adapters.protocol import scheme_of
from specexact.decoders.tree import tree_speculative_generate, verify_block, verify_tree_rrs
from specexact.exactness.enumeration import sequence_law
from specexact.exactness.goodness_of_fit import chisquare_gof
from specexact.exactness.results import CheckResult
from specexact.exactness.tree_laws import (
    PrefixLaws,
    block_accepted_length_law,
    rrs_accepted_length_law,
    tokenwise_accepted_length_law,
)

__all__ = ["TreeKind", "CASE_KIND", "run_tree_case", "tree_call", "reference_verifier",
           "reference_accepted_length_law"]


# --- one decoder call ---------------------------------------------------------------------

def reference_verifier(case: TreeCase) -> Callable:
    """The built-in reference the pilot times a case with when the sampler raises (or is
    isolated): recursive rejection sampling on trees, block verification on chains."""
    return verify_block if case.protocol == "chain" else verify_tree_rrs


def tree_call(case: TreeCase, prepared, verifier: Callable, generator: torch.Generator | None,
              rows: int | None = None):
    """One decoder call of ``case``: ``prepared = (case.models(d), case.batch(d))``; the first
    ``rows`` rows only when given. Returns the decoder's
    :class:`~specexact.decoders.GenerationOutput`; raises what the sampler raises."""
    (target, draft), (prompts, t_params, d_params) = prepared
    if rows is not None:
        prompts, t_params, d_params = prompts[:rows], t_params[:rows], d_params[:rows]
    if case.protocol == "chain":
        return speculative_generate(target, draft, prompts, t_params, d_params, num_draft_tokens=case.depth,
                                    max_new_tokens=case.length, generator=generator,
                                    eos_token_id=case.eos_token_id, verifier=verifier)
    return tree_speculative_generate(target, draft, prompts, t_params, d_params, branching=case.branching,
                                     max_new_tokens=case.length, drafting=case.drafting, generator=generator,
                                     eos_token_id=case.eos_token_id, verifier=verifier)


# --- reference laws -----------------------------------------------------------------------

def _laws(case: TreeCase, c: int) -> PrefixLaws:
    rc = case.row_classes[c]
    target, draft = case.models("cpu")
    return PrefixLaws.from_models(target, draft, torch.tensor(rc.prompt, dtype=torch.int64), rc.target_params,
                                  rc.draft_params)


@functools.lru_cache(maxsize=64)
def _accepted_laws(model: ToyLMConfig, mismatch: float, rc: RowClass, branching: tuple, drafting: str,
                   protocol: str, scheme: str) -> tuple:
    case = TreeCase(name="reference", model=model, mismatch=mismatch, row_classes=(rc,), branching=branching,
                    length=len(branching) + 2, drafting=drafting, protocol=protocol,
                    schemes=(scheme,), batch_size=4)
    laws = _laws(case, 0)
    D = len(branching)
    tokenwise = tokenwise_accepted_length_law(laws, D) if protocol == "chain" else None
    if scheme == "lossy":
        law = None
    elif scheme == "block":
        law = block_accepted_length_law(laws, D)
    elif scheme == "tokenwise":
        law = tokenwise
    elif scheme in ("tree", "multi_draft"):
        law = rrs_accepted_length_law(laws, branching, drafting)
    else:
        raise ValueError(f"no accepted-length reference for scheme {scheme!r} in a {protocol} case")
    freeze = (lambda a: None if a is None else tuple(float(x) for x in a))
    return freeze(law), freeze(tokenwise)


def reference_accepted_length_law(case: TreeCase, c: int, scheme: str) -> tuple[np.ndarray | None,
                                                                               np.ndarray | None]:
    """Class ``c``'s first-round accepted-length law under ``scheme`` and, for a chain case,
    the token-wise optimum (:mod:`~specexact.audit.cases.tree_case`): ``([D + 1] or None, [D + 1] or None)``,
    enumerated once per process (cached). ``None`` law for ``"lossy"``."""
    key = "tree" if scheme == "multi_draft" else scheme  # one law: recursive rejection sampling
    law, tokenwise = _accepted_laws(case.model, case.mismatch, case.row_classes[c], tuple(case.branching),
                                    case.drafting, case.protocol, key)
    return (None if law is None else np.array(law)), (None if tokenwise is None else np.array(tokenwise))


# --- running a case -----------------------------------------------------------------------

def run_tree_case(case: TreeCase, verifier: Callable, **run) -> CaseResult:
    """Sample ``case`` with ``verifier`` in its decoder and check its laws (the checks:
    :mod:`~specexact.audit.cases.tree_case`).

    ``run`` holds the settings of :func:`~specexact.audit.cases.dispatch.run_case`, which
    dispatches here (:class:`~specexact.audit.cases.sampling.RunSettings`); the result is
    ``run_case``'s. A crash or protocol violation is a ``defect``.

    Raises
    ------
    ValueError
        Both or neither of ``num_batches`` / ``time_budget_s``, or a sampler the case does
        not serve (:func:`~specexact.audit.cases.tree_case.restrict_tree_case`).
    """
    settings = RunSettings(**run)
    runnable, reason = restrict_tree_case(case, verifier)
    if runnable is None:
        raise ValueError(f"case {case.name!r} cannot audit this sampler: {reason}")
    scheme = scheme_of(verifier)
    start = time.perf_counter()
    result = CaseResult(case=case, seed=case_seed(settings.seed, case))
    gen = torch.Generator(device=settings.device).manual_seed(result.seed)
    prepared = (case.models(settings.device), case.batch(settings.device))
    tokens, first_round = [], []

    def keep(out) -> None:
        tokens.append(out.tokens.cpu())
        first_round.append(out.accepted_lengths[:, 0].cpu())

    sample_calls(settings, result, start, lambda: tree_call(case, prepared, verifier, gen), keep,
                 rows=case.batch_size, what="decoder call")
    if result.defect is None:
        all_tokens, accepted = torch.stack(tokens), torch.stack(first_round)  # [nb, B, L], [nb, B]
        for c in range(len(case.row_classes)):
            result.checks.extend(_class_checks(case, c, all_tokens, accepted, scheme, settings.false_fail_rate,
                                               settings.min_expected, seed=result.seed))
    result.wall_time_s = time.perf_counter() - start
    return result


def _sequence_counts(case: TreeCase, c: int, flat: torch.Tensor):
    """Counts of the sampled sequences over the target's law, observed zero-probability
    sequences appended with probability 0 (so the support check fails them): ``(counts,
    probs, labels, codes)``."""
    rc = case.row_classes[c]
    target, _ = case.models("cpu")
    law = sequence_law(target, torch.tensor(rc.prompt, dtype=torch.int64), rc.target_params, length=case.length,
                       eos_token_id=case.eos_token_id)
    return sequence_counts(law, flat)


def _class_checks(case: TreeCase, c: int, all_tokens: torch.Tensor, accepted: torch.Tensor, scheme: str,
                  alpha: float, min_expected: float, *, seed: int) -> list[CheckResult]:
    C = len(case.row_classes)
    label = f"class {case.class_id(c)}"
    toks = all_tokens[:, c::C]  # [nb, R, L]
    nb, R, L = toks.shape
    flat = toks.reshape(nb * R, L)
    acc = accepted[:, c::C].reshape(-1).numpy()
    alpha_chi2 = alpha / CHI2_TAIL_INFLATION
    counts, probs, labels, codes = _sequence_counts(case, c, flat)
    checks: list[CheckResult] = []
    if scheme == "lossy":
        checks.append(lossy_tv_check(counts, probs, false_fail_rate=alpha, min_expected=min_expected,
                                     name=f"lossy_tv[{label}]", split_seed=(seed + c) % (2**32)))
    else:
        checks.append(chisquare_gof(counts, probs, false_fail_rate=alpha_chi2, labels=labels,
                                    min_expected=min_expected, name=f"sequence_law[{label}]"))
    law, tokenwise = reference_accepted_length_law(case, c, scheme)
    checks.append(accepted_length_check(acc, law, scheme=scheme, false_fail_rate=alpha if law is None else alpha_chi2,
                                        min_expected=min_expected, name=f"accepted_length[{label}]",
                                        tokenwise_law=tokenwise, max_accepted=case.depth))
    checks.extend(pair_checks(codes.reshape(nb, R), alpha, label))
    return checks


# --- the kind -----------------------------------------------------------------------------

class TreeKind:
    """The :class:`~specexact.audit.cases.protocol.CaseKind` of tree-level cases."""

    name = "tree"

    def handles(self, case) -> bool:
        return isinstance(case, TreeCase)

    def checks(self, case: TreeCase) -> int:
        return TREE_CHECKS_PER_CLASS * len(case.row_classes)

    def restrict(self, case: TreeCase, verifier):
        return restrict_tree_case(case, verifier)

    def fixed_calls(self, case) -> int:
        return 0

    def planning_checks(self, case: TreeCase) -> list[tuple[int, bool]]:
        return [(min(support_size(case.model.vocab_size, case.length), PLAN_MAX_BINS), False),
                (case.depth + 1, False)]

    def prepare(self, case: TreeCase, device, sampler):
        return case.models(device), case.batch(device)

    def call(self, case: TreeCase, prepared, sampler, *, rows: int | None, device, full: bool) -> None:
        tree_call(case, prepared, reference_verifier(case) if sampler is verify else sampler,
                  torch.Generator(device=device).manual_seed(0), rows)

    def run(self, case, sampler, **kwargs) -> CaseResult:
        return run_tree_case(case, sampler, **kwargs)

    def event_inputs(self, case, event: dict, sampler) -> dict:
        raise ValueError(f"case {case.name!r} is a tree-level case: its checks record no per-event replays")


CASE_KIND = TreeKind()
"""Tree-level cases' kind (:mod:`~specexact.audit.cases.protocol`)."""
