"""Beyond one chain: tree, multi-draft and block verification, and a lossy reference.

- :mod:`.protocol`: the tree / multi-draft protocol (:class:`TreeVerifyOutput`,
  :func:`validate_tree_inputs`, :func:`chains_to_tree`, :func:`check_tree_output`);
- :mod:`.block`: block verification (Sun et al., arXiv:2403.10444), a chain verifier;
- :mod:`.recursive`: recursive rejection sampling on trees and multi-draft chains
  (SpecInfer, arXiv:2305.09781);
- :mod:`.target_only`: SGLang's target-only tree verification (and its lossy thresholds);
- :mod:`.typical`: Medusa's typical acceptance (arXiv:2401.10774), lossy;
- :mod:`.drafting`: :func:`tree_speculative_generate`, a tree-drafting decoder around any
  tree verifier, on the toy models;
- :mod:`.samplers`: the references as auditable objects with declared schemes.
"""

from .block import BlockWeights, block_verification_weights, verify_block
from .drafting import DRAFTING, TreeRoundRecord, chain_as_tree_verifier, draft_children, tree_speculative_generate
from .protocol import (
    TreeInputs,
    TreeVerifyOutput,
    chain_parents,
    chains_to_tree,
    check_tree_output,
    full_tree_parents,
    max_depth,
    tree_depths,
    validate_tree_inputs,
)
from .recursive import verify_multi_draft, verify_tree_rrs
from .samplers import PROTOCOLS, REFERENCE_SAMPLERS, TreeSampler, lossy_target_only
from .target_only import verify_tree_target_only
from .typical import MEDUSA_DEFAULTS, typical_thresholds, verify_chain_typical, verify_tree_typical

__all__ = [
    "BlockWeights",
    "DRAFTING",
    "MEDUSA_DEFAULTS",
    "PROTOCOLS",
    "REFERENCE_SAMPLERS",
    "TreeInputs",
    "TreeRoundRecord",
    "TreeSampler",
    "TreeVerifyOutput",
    "block_verification_weights",
    "chain_as_tree_verifier",
    "chain_parents",
    "chains_to_tree",
    "check_tree_output",
    "draft_children",
    "full_tree_parents",
    "lossy_target_only",
    "max_depth",
    "tree_depths",
    "tree_speculative_generate",
    "typical_thresholds",
    "validate_tree_inputs",
    "verify_block",
    "verify_chain_typical",
    "verify_multi_draft",
    "verify_tree_rrs",
    "verify_tree_target_only",
    "verify_tree_typical",
]
