"""The reference samplers: declared protocol and scheme, and the entry points that name them."""

import pytest
import torch

from specexact.audit import resolve_sampler
from specexact.decoders.adapters import Capabilities, protocol_of, scheme_of
from specexact.decoders.tree import REFERENCE_SAMPLERS, TreeSampler, lossy_target_only
from specexact.decoders.tree.samplers import BLOCK, MULTI_DRAFT, TREE_RRS, TREE_TARGET_ONLY, TYPICAL, TYPICAL_CHAIN

DECLARED = {  # name: (protocol, scheme, tree drafting)
    "block": ("chain", "block", ()),
    "multi_draft": ("tree", "multi_draft", ()),
    "tree_rrs": ("tree", "tree", ()),
    "tree_target_only": ("tree", "tree", ("top_k",)),
    "typical": ("tree", "lossy", ()),
    "typical_chain": ("chain", "lossy", ()),
}


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_each_reference_declares_its_protocol_and_scheme(name):
    s = REFERENCE_SAMPLERS[name]
    protocol, scheme, drafting = DECLARED[name]
    assert (s.protocol, protocol_of(s), scheme_of(s), s.capabilities.tree_drafting) == (
        protocol, protocol, scheme, drafting)
    assert s.metadata()["protocol"] == protocol and s.metadata()["capabilities"]["protocol"] == protocol


@pytest.mark.parametrize("entry, obj", [("block", BLOCK), ("multi-draft", MULTI_DRAFT), ("tree-rrs", TREE_RRS),
                                        ("tree-target-only", TREE_TARGET_ONLY), ("typical", TYPICAL),
                                        ("typical-chain", TYPICAL_CHAIN)])
def test_entry_points_resolve_to_the_references(entry, obj):
    verifier, target = resolve_sampler(entry)
    assert verifier is obj and target.startswith("specexact.decoders.tree.samplers:")


def test_tree_sampler_validates_its_fields():
    caps = Capabilities(max_batch_size=None, dtypes=(torch.float64,), devices=("cpu",), randomness="generator")
    with pytest.raises(TypeError, match="capabilities must be a Capabilities"):
        TreeSampler("x", {"protocol": "tree"}, lambda *a: None)
    with pytest.raises(TypeError, match="fn must be callable"):
        TreeSampler("x", caps, None)
    lossy = lossy_target_only(0.5, 0.7)
    assert lossy.protocol == "tree" and scheme_of(lossy) == "lossy"
    assert dict(lossy.capabilities.scheme_params) == {"threshold_single": 0.5, "threshold_acc": 0.7}
