"""The tree package's reference samplers as auditable objects, each declaring its scheme.

Each entry of :data:`REFERENCE_SAMPLERS` is a :class:`TreeSampler`: callable with its
protocol (``protocol="chain"``: the ``verify`` protocol; ``"tree"``: :mod:`.protocol`), with
a :class:`~specexact.decoders.adapters.Capabilities` whose ``scheme`` / ``scheme_params`` tell
the audit which reference laws apply (the target's emitted law for every lossless scheme, the
scheme's own accepted-length law; a measured TV for ``"lossy"``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..adapters.protocol import Capabilities
from .block import verify_block
from .recursive import verify_tree_rrs
from .target_only import verify_tree_target_only
from .typical import MEDUSA_DEFAULTS, verify_chain_typical, verify_tree_typical

__all__ = ["TreeSampler", "REFERENCE_SAMPLERS", "PROTOCOLS", "lossy_target_only"]

PROTOCOLS = ("chain", "tree")
"""``"chain"``: ``verify(draft_token_ids [B, K], draft_probs, target_probs, generator) ->
[B, K+1]``; ``"tree"``: :mod:`.protocol` (``-> TreeVerifyOutput``)."""


@dataclass(frozen=True)
class TreeSampler:
    """A reference verifier with its protocol and declared capabilities.

    Attributes
    ----------
    name : str
    protocol : {"chain", "tree"}
    capabilities : Capabilities
    fn : callable
        The verifier (with its keyword parameters bound).
    paper : str
        Where the algorithm comes from.
    """

    name: str
    protocol: str
    capabilities: Capabilities
    fn: Callable = field(repr=False)
    paper: str = ""

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {self.protocol!r}")

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def metadata(self) -> dict:
        """JSON-ready facts for a report: name, protocol, paper, capabilities."""
        return {"adapter": f"{__name__}:{self.name}", "library": "specexact", "protocol": self.protocol,
                "paper": self.paper, "capabilities": self.capabilities.to_dict()}


def _caps(scheme: str, params: tuple = (), notes: str = "") -> Capabilities:
    return Capabilities(max_batch_size=None, dtypes=(torch.float64, torch.float32), devices=("cpu",),
                        randomness="generator", scheme=scheme, scheme_params=params, notes=notes)


_TYPICAL_PARAMS = (("posterior_threshold", MEDUSA_DEFAULTS["posterior_threshold"]),
                   ("posterior_alpha", MEDUSA_DEFAULTS["posterior_alpha"]), ("greedy_next_token", 1.0))

REFERENCE_SAMPLERS: dict[str, TreeSampler] = {
    s.name: s for s in (
        TreeSampler("block", "chain", _caps("block"), verify_block,
                    "Sun et al., arXiv:2403.10444, Algorithm 2"),
        TreeSampler("multi_draft", "tree", _caps("multi_draft", notes="C chains as a tree (branching (C, 1, ..., 1))"),
                    verify_tree_rrs, "Miao et al. (SpecInfer), arXiv:2305.09781"),
        TreeSampler("tree_rrs", "tree", _caps("tree"), verify_tree_rrs,
                    "Miao et al. (SpecInfer), arXiv:2305.09781"),
        TreeSampler("tree_target_only", "tree",
                    _caps("tree", (("threshold_single", 1.0), ("threshold_acc", 1.0)),
                          "SGLang's target-only rule; lossless for distinct sibling tokens"),
                    verify_tree_target_only, "sgl-kernel tree_speculative_sampling_target_only"),
        TreeSampler("typical", "tree", _caps("lossy", _TYPICAL_PARAMS), verify_tree_typical,
                    "Cai et al. (Medusa), arXiv:2401.10774, sec. 2.3.1"),
        TreeSampler("typical_chain", "chain", _caps("lossy", _TYPICAL_PARAMS), verify_chain_typical,
                    "Cai et al. (Medusa), arXiv:2401.10774, sec. 2.3.1"),
    )
}
"""Built-in reference samplers of each scheme, by name."""


def lossy_target_only(threshold_single: float, threshold_acc: float) -> TreeSampler:
    """SGLang's target-only rule with thresholds below 1: a lossy sampler that says so."""
    fn = functools.partial(verify_tree_target_only, threshold_single=threshold_single, threshold_acc=threshold_acc)
    return TreeSampler(f"tree_target_only_lossy_{threshold_single:g}_{threshold_acc:g}", "tree",
                       _caps("lossy", (("threshold_single", float(threshold_single)),
                                       ("threshold_acc", float(threshold_acc)))),
                       fn, "sgl-kernel tree_speculative_sampling_target_only")


