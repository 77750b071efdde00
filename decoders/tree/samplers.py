"""The tree package's reference samplers as auditable objects, each declaring its scheme.

Each entry of :data:`REFERENCE_SAMPLERS` is a :class:`TreeSampler`: callable with its
protocol (``capabilities.protocol``: ``"chain"``, the ``verify`` protocol, or ``"tree"``,
:mod:`.protocol`), with a :class:`~specexact.decoders.adapters.Capabilities` whose ``scheme`` /
``scheme_params`` tell the audit which reference laws apply (the target's emitted law for every
lossless scheme, the scheme's own accepted-length law; a measured TV for ``"lossy"``).
Each is also a module attribute (:data:`BLOCK`, :data:`MULTI_DRAFT`, :data:`TREE_RRS`,
:data:`TREE_TARGET_ONLY`, :data:`TYPICAL`, :data:`TYPICAL_CHAIN`), which is what the
``specexact.samplers`` entry points name (``specexact audit --sampler tree-rrs``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..adapters.protocol import PROTOCOLS, Capabilities
from .block import verify_block
from .recursive import verify_tree_rrs
from .target_only import verify_tree_target_only
from .typical import MEDUSA_DEFAULTS, verify_chain_typical, verify_tree_typical

__all__ = ["TreeSampler", "REFERENCE_SAMPLERS", "PROTOCOLS", "lossy_target_only", "BLOCK", "MULTI_DRAFT",
           "TREE_RRS", "TREE_TARGET_ONLY", "TYPICAL", "TYPICAL_CHAIN"]


@dataclass(frozen=True)
class TreeSampler:
    """A reference verifier with its protocol and declared capabilities.

    Attributes
    ----------
    name : str
    capabilities : Capabilities
        With the sampler's ``protocol`` (:data:`PROTOCOLS`) and ``scheme``.
    fn : callable
        The verifier (with its keyword parameters bound).
    paper : str
        Where the algorithm comes from.

    Raises
    ------
    TypeError
        If ``capabilities`` is not a :class:`Capabilities` or ``fn`` is not callable.
    """

    name: str
    capabilities: Capabilities
    fn: Callable = field(repr=False)
    paper: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.capabilities, Capabilities):
            raise TypeError(f"capabilities must be a Capabilities, got {type(self.capabilities).__name__}")
        if not callable(self.fn):
            raise TypeError(f"fn must be callable, got {self.fn!r}")

    @property
    def protocol(self) -> str:
        """``"chain"`` or ``"tree"`` (:attr:`Capabilities.protocol`)."""
        return self.capabilities.protocol

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def metadata(self) -> dict:
        """JSON-ready facts for a report: name, protocol, paper, capabilities."""
        return {"adapter": f"{__name__}:{self.name}", "library": "specexact", "protocol": self.protocol,
                "paper": self.paper, "capabilities": self.capabilities.to_dict()}


def _caps(scheme: str, protocol: str, params: tuple = (), notes: str = "",
          tree_drafting: tuple = ()) -> Capabilities:
    return Capabilities(max_batch_size=None, dtypes=(torch.float64, torch.float32), devices=("cpu",),
                        randomness="generator", scheme=scheme, scheme_params=params, notes=notes,
                        protocol=protocol, tree_drafting=tree_drafting)


_TYPICAL_PARAMS = (("posterior_threshold", MEDUSA_DEFAULTS["posterior_threshold"]),
                   ("posterior_alpha", MEDUSA_DEFAULTS["posterior_alpha"]), ("greedy_next_token", 1.0))

BLOCK = TreeSampler("block", _caps("block", "chain"), verify_block, "Sun et al., arXiv:2403.10444, Algorithm 2")
MULTI_DRAFT = TreeSampler("multi_draft", _caps("multi_draft", "tree",
                                               notes="C chains as a tree (branching (C, 1, ..., 1))"),
                          verify_tree_rrs, "Miao et al. (SpecInfer), arXiv:2305.09781")
TREE_RRS = TreeSampler("tree_rrs", _caps("tree", "tree"), verify_tree_rrs, "Miao et al. (SpecInfer), arXiv:2305.09781")
TREE_TARGET_ONLY = TreeSampler(
    "tree_target_only",
    _caps("tree", "tree", (("threshold_single", 1.0), ("threshold_acc", 1.0)),
          "SGLang's target-only rule; lossless for distinct sibling tokens; on deterministic (top-k) trees "
          "its accepted length is recursive rejection sampling's", tree_drafting=("top_k",)),
    verify_tree_target_only, "sgl-kernel tree_speculative_sampling_target_only")
TYPICAL = TreeSampler("typical", _caps("lossy", "tree", _TYPICAL_PARAMS), verify_tree_typical,
                      "Cai et al. (Medusa), arXiv:2401.10774, sec. 2.3.1")
TYPICAL_CHAIN = TreeSampler("typical_chain", _caps("lossy", "chain", _TYPICAL_PARAMS), verify_chain_typical,
                            "Cai et al. (Medusa), arXiv:2401.10774, sec. 2.3.1")

REFERENCE_SAMPLERS: dict[str, TreeSampler] = {
    s.name: s for s in (BLOCK, MULTI_DRAFT, TREE_RRS, TREE_TARGET_ONLY, TYPICAL, TYPICAL_CHAIN)
}
"""Built-in reference samplers of each scheme, by name."""


def lossy_target_only(threshold_single: float, threshold_acc: float) -> TreeSampler:
    """SGLang's target-only rule with thresholds below 1: a lossy sampler that says so."""
    fn = functools.partial(verify_tree_target_only, threshold_single=threshold_single, threshold_acc=threshold_acc)
    return TreeSampler(f"tree_target_only_lossy_{threshold_single:g}_{threshold_acc:g}",
                       _caps("lossy", "tree", (("threshold_single", float(threshold_single)),
                                               ("threshold_acc", float(threshold_acc))), tree_drafting=("top_k",)),
                       fn, "sgl-kernel tree_speculative_sampling_target_only")


