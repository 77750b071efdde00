"""Tree-level audit cases: tree, multi-draft, block and lossy samplers in their own decoders.

A :class:`TreeCase` drives a *tree-protocol* sampler with the tree decoder
(:func:`~specexact.decoders.tree.tree_speculative_generate`: a full draft tree of the given
branching per round, drafted i.i.d., without replacement or top-k, one target call on every
node's prefix) or, with ``protocol="chain"``, a chain sampler of a non-token-wise scheme (block
verification) with the chain decoder (:func:`~specexact.decoders.speculative_generate`). It
runs only for samplers whose declared protocol and scheme it serves
(:func:`restrict_tree_case`); chain samplers keep the chain cases
(:mod:`specexact.audit.cases.decoder_case`; :func:`chain_case_reason` says which they serve).

Here: the case, the samplers it serves and the built-in cases (:func:`tree_cases`). One decoder
call, the reference laws, the run and the kind: :mod:`~specexact.audit.cases.tree_kind`.

Checks per row class ``c`` (exact reference laws; chi-square checks on bins of
``>= MIN_EXPECTED`` expected counts at ``alpha / CHI2_TAIL_INFLATION``, as in
:func:`~specexact.audit.cases.dispatch.run_case`):

- ``sequence_law[c]``: the first ``length`` tokens against the *target's* law enumerated in
  float64 (every lossless scheme emits it); for a sampler declaring ``scheme="lossy"`` a
  measurement instead, ``lossy_tv[c]`` (:func:`~specexact.audit.checks.lossy.lossy_tv_check`);
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

from dataclasses import dataclass, field, replace

from specexact.audit.cases.base import InterleavedCase, RowClass
from specexact.audit.checks.acceptance import CHAIN_SCHEMES
from specexact.decoders import SamplingParams, ToyLMConfig
from specexact.decoders.adapters.protocol import (
    TREE_DRAFTING,
    is_logits_level,
    protocol_of,
    scheme_of,
    tree_drafting_of,
)
from specexact.decoders.engines.protocol import is_engine

__all__ = ["TreeCase", "TREE_CHECKS_PER_CLASS", "tree_cases", "restrict_tree_case", "chain_case_reason"]

TREE_CHECKS_PER_CLASS = 4
"""Checks per row class of a :class:`TreeCase` (module docstring)."""

_TREE_SCHEMES = ("tree", "multi_draft", "lossy")


@dataclass(frozen=True)
class TreeCase(InterleavedCase):
    """One tree-level audit case (module docstring).

    Parameters
    ----------
    name, model, mismatch, row_classes
        As in :class:`~specexact.audit.cases.base.InterleavedCase` (and
        :class:`~specexact.audit.cases.decoder_case.AuditCase`).
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

    def to_dict(self) -> dict:
        d = super().to_dict()
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
    """Why a chain case (:class:`~specexact.audit.cases.decoder_case.AuditCase` or a verify-level case)
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
