"""Tree-level audit cases: tree, multi-draft, block and lossy samplers in their own decoders.

A :class:`TreeCase` drives a *tree-protocol* sampler with the tree decoder
(:func:`~specexact.decoders.tree.tree_speculative_generate`: a full draft tree of the given
branching per round, drafted i.i.d., without replacement or top-k, one target call on every
node's prefix) or, with ``protocol="chain"``, a chain sampler of a non-token-wise scheme (block
verification) with the chain decoder (:func:`~specexact.decoders.speculative_generate`). It
runs only for samplers whose declared protocol and scheme it serves
(:func:`restrict_tree_case`); chain samplers keep the chain cases
(:mod:`specexact.audit.cases`).

Checks per row class ``c`` (exact reference laws; chi-square checks on bins of
``>= MIN_EXPECTED`` expected counts at ``alpha / CHI2_TAIL_INFLATION``, as in
:func:`~specexact.audit.runner.run_case`):

- ``sequence_law[c]``: the first ``length`` tokens against the *target's* law enumerated in
  float64 (every lossless scheme emits it); for a sampler declaring ``scheme="lossy"`` a
  measurement instead, ``lossy_tv[c]`` (:func:`~specexact.audit.lossy.lossy_tv_check`);
- ``accepted_length[c]``: drafts accepted in the first round against the scheme's own exact
  law: recursive rejection sampling's (SpecInfer) for ``"tree"`` / ``"multi_draft"``
  (:func:`~specexact.exactness.tree_laws.rrs_accepted_length_law`, a recursion over the
  tree's levels that equals the full enumeration of every draft tree and decision,
  :func:`~specexact.exactness.tree_laws.round_law`; on a deterministic top-k tree this is
  SGLang's target-only rule too), block verification's ``P(tau >= i) = E[w_i]`` for
  ``"block"`` (with the token-wise optimum beside it); measured for ``"lossy"``;
- ``independent_rows[c]`` / ``independent_calls[c]``: as in the chain cases.
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
    speculative_generate,
)
from specexact.decoders.adapters.protocol import (
    TREE_DRAFTING,
    is_logits_level,
    protocol_of,
    scheme_of,
    tree_drafting_of,
)
from specexact.decoders.engines.protocol import is_engine
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

from .acceptance import CHAIN_SCHEMES, accepted_length_check
from .case_result import CaseResult, case_seed, enough_calls, sampler_failure
from .cases import RowClass, checked_keep
from .levels import CHI2_TAIL_INFLATION, MIN_EXPECTED
from .lossy import lossy_tv_check
from .pairs import pair_checks
from .sequence_checks import sequence_counts

__all__ = ["TreeCase", "TREE_CHECKS_PER_CLASS", "tree_cases", "restrict_tree_case", "chain_case_reason",
           "run_tree_case", "tree_call", "reference_verifier", "reference_accepted_length_law"]

TREE_CHECKS_PER_CLASS = 4
"""Checks per row class of a :class:`TreeCase` (module docstring)."""

_TREE_SCHEMES = ("tree", "multi_draft", "lossy")


@dataclass(frozen=True)
class TreeCase:
    """One tree-level audit case (module docstring).

    Parameters
    ----------
    name : str
        Unique, short, file-name safe.
    model : ToyLMConfig
        The target; the draft is ``ToyLM(model).draft(mismatch)``.
    mismatch : float
    row_classes : tuple of RowClass
        Interleaved batch rows (``C`` classes), as in :class:`~specexact.audit.cases.AuditCase`.
    branching : tuple of int
        Children per node at each level (``protocol="chain"``: all 1, a chain of ``K``).
    length : int
        Generated tokens whose joint law is checked; > depth + 1 (sequences span rounds).
    drafting : {"iid", "without_replacement", "top_k"}
        How the tree decoder draws siblings (``"iid"`` for chain cases).
    protocol : {"tree", "chain"}
        Which decoder drives the sampler, i.e. which samplers the case serves.
    schemes : tuple of str
        The declared schemes the case serves (its reference laws exist for them).
    batch_size : int
        Rows per decoder call; a multiple of ``4 * C``.

    Raises
    ------
    ValueError
        On an empty or inconsistent layout (batch size, prompts, branching, length, drafting,
        protocol, schemes).
    """

    name: str
    model: ToyLMConfig
    mismatch: float
    row_classes: tuple[RowClass, ...]
    branching: tuple[int, ...]
    length: int
    drafting: str = "iid"
    protocol: str = "tree"
    schemes: tuple[str, ...] = ("tree", "lossy")
    batch_size: int = 2048
    description: str = ""
    weight: float = 1.0
    tags: tuple[str, ...] = field(default_factory=tuple)
    class_ids: tuple[int, ...] | None = None
    kind: str = "tree"

    def __post_init__(self) -> None:
        C = len(self.row_classes)
        if self.kind != "tree":
            raise ValueError(f"case {self.name!r}: kind must be 'tree', got {self.kind!r}")
        if C == 0:
            raise ValueError(f"case {self.name!r}: row_classes is empty")
        if self.batch_size < 4 * C or self.batch_size % (4 * C):
            raise ValueError(f"case {self.name!r}: batch_size={self.batch_size} is not a positive multiple of "
                             f"4*C={4 * C} (the independence checks compare rows in groups of four per class)")
        if len({len(rc.prompt) for rc in self.row_classes}) != 1:
            raise ValueError(f"case {self.name!r}: prompts must have one length")
        if not self.branching or any(int(k) != k or k < 1 for k in self.branching):
            raise ValueError(f"case {self.name!r}: branching must be a non-empty tuple of ints >= 1, "
                             f"got {self.branching!r}")
        if self.length <= len(self.branching) + 1:
            raise ValueError(f"case {self.name!r}: length={self.length} must exceed depth + 1 = "
                             f"{len(self.branching) + 1} (sequences must span rounds)")
        if self.drafting not in TREE_DRAFTING:
            raise ValueError(f"case {self.name!r}: drafting must be one of {TREE_DRAFTING}, got {self.drafting!r}")
        if self.protocol not in ("tree", "chain"):
            raise ValueError(f"case {self.name!r}: protocol must be 'tree' or 'chain', got {self.protocol!r}")
        if self.protocol == "chain" and (set(self.branching) != {1} or self.drafting != "iid"):
            raise ValueError(f"case {self.name!r}: a chain case has branching (1, ..., 1) and iid drafting")
        allowed = CHAIN_SCHEMES if self.protocol == "chain" else _TREE_SCHEMES
        if not self.schemes or any(s not in allowed for s in self.schemes):
            raise ValueError(f"case {self.name!r}: schemes must be drawn from {allowed} for a {self.protocol} "
                             f"case, got {self.schemes!r}")
        if self.class_ids is not None and len(self.class_ids) != C:
            raise ValueError(f"case {self.name!r}: class_ids has {len(self.class_ids)} entries for {C} classes")

    # --- what the audit's planner and runner read (as of an AuditCase) -------------------
    @property
    def exact(self) -> bool:
        return True  # every reference law is enumerated

    @property
    def depth(self) -> int:
        """``D``: drafts on a root path (the most a round accepts)."""
        return len(self.branching)

    @property
    def num_draft_tokens(self) -> int:
        """The depth ``D`` (the planner's accepted-length bins are ``D + 1``)."""
        return self.depth

    @property
    def eos_token_id(self) -> int | None:
        return self.model.eos_token_id

    def class_id(self, c: int) -> int:
        return c if self.class_ids is None else self.class_ids[c]

    def restricted(self, keep: Sequence[int]) -> "TreeCase":
        """The case with only the classes ``keep`` (see :meth:`AuditCase.restricted`)."""
        keep = checked_keep(keep, len(self.row_classes))
        C = len(self.row_classes)
        if len(keep) == C:
            return self
        step = 4 * len(keep)
        return replace(self, row_classes=tuple(self.row_classes[c] for c in keep),
                       class_ids=tuple(self.class_id(c) for c in keep),
                       batch_size=max(step, self.batch_size // step * step))

    def models(self, device: torch.device | str = "cpu") -> tuple[ToyLM, ToyLM]:
        target = ToyLM(self.model, device=device)
        return target, target.draft(self.mismatch)

    def batch(self, device: torch.device | str = "cpu"):
        """Prompt ``[B, T0]`` and per-row target / draft parameters for one decoder call."""
        C = len(self.row_classes)
        classes = [self.row_classes[r % C] for r in range(self.batch_size)]
        prompts = torch.tensor([rc.prompt for rc in classes], dtype=torch.int64, device=device)
        return prompts, [rc.target_params for rc in classes], [rc.draft_params for rc in classes]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["row_classes"] = [rc.describe() for rc in self.row_classes]
        d["exact"] = True
        d["num_draft_tokens"] = self.depth
        return d


# --- which samplers a case serves ---------------------------------------------------------

_ENGINE_REASON = ("an end-to-end engine runs its own generate loop; it is audited by end-to-end cases "
                  "(specexact audit --engine), not inside specexact's decoder")

def restrict_tree_case(case: TreeCase, verifier) -> tuple[TreeCase | None, str | None]:
    """``(case, None)`` when ``verifier`` can be audited by ``case``, else ``(None, reason)``:
    its declared protocol, scheme and (tree) drafting rules must be the case's."""
    if is_engine(verifier):
        return None, _ENGINE_REASON
    if is_logits_level(verifier):
        return None, "a tree-level case hands the verifier probabilities; a logits-level sampler takes logits"
    protocol, scheme = protocol_of(verifier), scheme_of(verifier)
    if protocol != case.protocol:
        return None, (f"a {case.protocol}-protocol case (the {'tree' if case.protocol == 'tree' else 'chain'} "
                      f"decoder); the sampler declares protocol {protocol!r}")
    if scheme not in case.schemes:
        return None, f"the case judges schemes {', '.join(case.schemes)}; the sampler declares {scheme!r}"
    if case.protocol == "tree" and case.drafting not in tree_drafting_of(verifier):
        return None, (f"{case.drafting} drafting; the sampler is audited under "
                      f"{', '.join(tree_drafting_of(verifier))} only (Capabilities.tree_drafting)")
    return case, None


def chain_case_reason(case, verifier) -> str | None:
    """Why a chain case (:class:`~specexact.audit.cases.AuditCase` or a verify-level case)
    cannot audit ``verifier`` for its protocol or scheme, or ``None``: a tree-protocol
    sampler has no chain call; tree schemes have no chain reference; a lossy sampler is
    measured against an exact law, which two-sample and verify-level cases lack; the
    verify-level laws are the token-wise scheme's."""
    if is_engine(verifier):
        return _ENGINE_REASON
    protocol, scheme = protocol_of(verifier), scheme_of(verifier)
    if protocol != "chain":
        return f"a chain-protocol case; the sampler declares protocol {protocol!r} (it runs the tree cases)"
    if scheme not in CHAIN_SCHEMES:
        return f"the chain decoder has no reference for scheme {scheme!r} (tree cases judge it)"
    if scheme == "lossy" and (getattr(case, "kind", None) == "verify" or not case.exact):
        return "a lossy sampler is measured against an exact emitted law; this case has none at the decoder level"
    if getattr(case, "kind", None) == "verify" and scheme != "tokenwise":
        return (f"the verify-level laws (accepted length, recovered token after rejecting draft 0) are the "
                f"token-wise scheme's; the sampler declares {scheme!r} (the decoder-level cases judge it)")
    return None


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
    the token-wise optimum (module docstring): ``([D + 1] or None, [D + 1] or None)``,
    enumerated once per process (cached). ``None`` law for ``"lossy"``."""
    key = "tree" if scheme == "multi_draft" else scheme  # one law: recursive rejection sampling
    law, tokenwise = _accepted_laws(case.model, case.mismatch, case.row_classes[c], tuple(case.branching),
                                    case.drafting, case.protocol, key)
    return (None if law is None else np.array(law)), (None if tokenwise is None else np.array(tokenwise))


# --- running a case -----------------------------------------------------------------------

def run_tree_case(
    case: TreeCase,
    verifier: Callable,
    *,
    false_fail_rate: float,
    seed: int = 0,
    num_batches: int | None = None,
    time_budget_s: float | None = None,
    min_batches: int = 2,
    device: torch.device | str = "cpu",
    progress: Callable[[int, int], None] | None = None,
    min_expected: float = MIN_EXPECTED,
) -> CaseResult:
    """Sample ``case`` with ``verifier`` in its decoder and check its laws (module docstring).

    The arguments and the result are those of :func:`~specexact.audit.runner.run_case`
    (which dispatches here); a crash or protocol violation is a ``defect``.

    Raises
    ------
    ValueError
        Both or neither of ``num_batches`` / ``time_budget_s``, or a sampler the case does
        not serve (:func:`restrict_tree_case`).
    """
    if (num_batches is None) == (time_budget_s is None):
        raise ValueError("give exactly one of num_batches and time_budget_s")
    runnable, reason = restrict_tree_case(case, verifier)
    if runnable is None:
        raise ValueError(f"case {case.name!r} cannot audit this sampler: {reason}")
    scheme = scheme_of(verifier)
    start = time.perf_counter()
    result = CaseResult(case=case, seed=case_seed(seed, case))
    gen = torch.Generator(device=device).manual_seed(result.seed)
    prepared = (case.models(device), case.batch(device))
    tokens, first_round = [], []
    b = 0
    while True:
        try:
            out = tree_call(case, prepared, verifier, gen)
        except Exception as exc:  # noqa: BLE001 - a crash of the sampler is a finding
            result.defect, chk = sampler_failure(exc, f"decoder call {b}", false_fail_rate)
            result.checks.append(chk)
            break
        tokens.append(out.tokens.cpu())
        first_round.append(out.accepted_lengths[:, 0].cpu())
        b += 1
        result.num_batches = b
        result.num_sequences = b * case.batch_size
        if progress is not None:
            progress(result.num_sequences, b)
        if enough_calls(b, num_batches, time_budget_s, time.perf_counter() - start, min_batches):
            break
    if result.defect is None:
        all_tokens, accepted = torch.stack(tokens), torch.stack(first_round)  # [nb, B, L], [nb, B]
        for c in range(len(case.row_classes)):
            result.checks.extend(_class_checks(case, c, all_tokens, accepted, scheme, false_fail_rate,
                                               min_expected, seed=result.seed))
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


# --- the built-in tree-level cases ----------------------------------------------------------

def _sp(**kw) -> SamplingParams:
    return SamplingParams(**kw)


def tree_cases(quick: bool = False) -> list[TreeCase]:
    """The built-in tree-level cases (``quick``: a quarter of the batch).

    Every case has V <= 8, penalties on the target side (so per-node processing with each
    node's own history matters) and a mismatched draft; every reference law is computed in
    well under a second and cached per process.
    """
    v4 = ToyLMConfig(vocab_size=4, seed=5, zipf_exponent=1.0, context_strength=2.0)
    tree_classes = (
        RowClass((0, 1), _sp(repetition_penalty=1.3, frequency_penalty=0.2), _sp(temperature=0.8)),
        RowClass((2, 3), _sp(temperature=0.9, top_k=3, presence_penalty=0.4), _sp(temperature=1.2)),
    )
    cases = [
        TreeCase(
            name="tree-rrs-v4",
            description="full binary tree of depth 2, siblings drawn i.i.d. (SpecInfer's multi-step speculative "
                        "sampling); target penalties re-applied per node",
            model=v4, mismatch=1.5, row_classes=tree_classes, branching=(2, 2), drafting="iid", length=5,
        ),
        TreeCase(
            name="tree-wor-v4",
            description="full binary tree of depth 2, siblings drawn without replacement",
            model=v4, mismatch=1.5, row_classes=tree_classes, branching=(2, 2), drafting="without_replacement",
            length=5,
        ),
        TreeCase(
            name="multi-draft-v4",
            description="three draft chains of two tokens per row (multi-draft as a tree)",
            model=v4, mismatch=1.5, row_classes=tree_classes, branching=(3, 1), drafting="iid", length=5,
            schemes=("tree", "multi_draft", "lossy"),
        ),
        TreeCase(
            name="tree-topk-v8",
            description="deterministic top-k tree (EAGLE / Medusa style, where SGLang's target-only rule "
                        "applies), EOS likely",
            model=ToyLMConfig(vocab_size=8, seed=13, zipf_exponent=0.9, context_strength=2.0, eos_token_id=7,
                              eos_logit=-1.0),
            mismatch=1.0,
            row_classes=(
                RowClass((1, 2), _sp(temperature=1.1, repetition_penalty=1.4), _sp(temperature=0.9)),
                RowClass((3, 0), _sp(top_p=0.9, frequency_penalty=0.3), _sp(temperature=1.3, top_k=5)),
            ),
            branching=(3, 2), drafting="top_k", length=4,
        ),
        TreeCase(
            name="block-v3",
            description="block verification through the chain decoder (K=3), judged by the block scheme's "
                        "accepted-length law",
            model=ToyLMConfig(vocab_size=3, seed=5, zipf_exponent=1.0, context_strength=2.0),
            mismatch=1.5,
            row_classes=(
                # Chosen for the planted token-wise-residual bug: its sequence law is 0.030 / 0.048
                # (TV) from the target's here (exact, by enumeration), 0.0006 .. 0.036 elsewhere.
                RowClass((0, 1), _sp(repetition_penalty=1.3, frequency_penalty=0.2), _sp(temperature=0.8)),
                RowClass((2, 0), _sp(repetition_penalty=1.3, frequency_penalty=0.2), _sp(temperature=0.8)),
            ),
            branching=(1, 1, 1), protocol="chain", schemes=("block",), length=5,
        ),
        TreeCase(
            name="typical-v3",
            description="small tree whose lossy emitted law is enumerable (typical acceptance: measured TV "
                        "against an exactly known one)",
            model=ToyLMConfig(vocab_size=3, seed=5, zipf_exponent=1.0, context_strength=2.0),
            # A close draft: even so typical acceptance (Medusa's defaults) is far from the
            # target here (exact TV 0.40 with a sampled next token, 0.67 greedy).
            mismatch=0.2,
            row_classes=(RowClass((0, 1), _sp(repetition_penalty=1.3, frequency_penalty=0.2), _sp(temperature=0.8)),),
            branching=(2, 1), drafting="iid", length=4, schemes=("lossy",), batch_size=2048,
        ),
    ]
    if quick:
        cases = [replace(c, batch_size=c.batch_size // 4) for c in cases]
    return cases


class TreeKind:
    """The :class:`~specexact.audit.case_kind.CaseKind` of tree-level cases."""

    name = "tree"

    def handles(self, case) -> bool:
        return isinstance(case, TreeCase)

    def checks(self, case: TreeCase) -> int:
        return TREE_CHECKS_PER_CLASS * len(case.row_classes)

    def restrict(self, case: TreeCase, verifier):
        return restrict_tree_case(case, verifier)

    def planning_checks(self, case: TreeCase) -> list[tuple[int, bool]]:
        from .plan import PLAN_MAX_BINS, support_size

        return [(min(support_size(case.model.vocab_size, case.length), PLAN_MAX_BINS), False),
                (case.depth + 1, False)]

    def prepare(self, case: TreeCase, device, sampler):
        return case.models(device), case.batch(device)

    def call(self, case: TreeCase, prepared, sampler, *, rows: int | None, device, full: bool) -> None:
        from specexact.decoders import verify

        tree_call(case, prepared, reference_verifier(case) if sampler is verify else sampler,
                  torch.Generator(device=device).manual_seed(0), rows)

    def run(self, case, sampler, **kwargs) -> CaseResult:
        return run_tree_case(case, sampler, **kwargs)

    def event_inputs(self, case, event: dict, sampler) -> dict:
        raise ValueError(f"case {case.name!r} is a tree-level case: its checks record no per-event replays")


CASE_KIND = TreeKind()
"""Tree-level cases' kind (:mod:`~specexact.audit.case_kind`)."""
