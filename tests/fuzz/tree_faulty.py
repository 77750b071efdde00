"""Planted tree-protocol samplers for the tree fuzz families' tests: recursive rejection
sampling (the reference, :func:`~specexact.decoders.tree.verify_tree_rrs`) with one
defect each, declaring the reference's capabilities (lossless scheme ``"tree"``,
randomness from the generator). Resolvable by name (``tree_faulty:GLOBAL_RNG``) for the
replay scripts."""

import torch

from specexact.decoders.tree import REFERENCE_SAMPLERS, TreeSampler, TreeVerifyOutput, verify_tree_rrs

_CAPS = REFERENCE_SAMPLERS["tree_rrs"].capabilities


def _global_rng(ids, parents, q, p, generator=None):
    """Draws its uniforms from torch's global RNG."""
    B, N = ids.shape
    return verify_tree_rrs(ids, parents, q, p, None, uniforms=torch.rand(B, N, dtype=torch.float64),
                           final_uniforms=torch.rand(B, dtype=torch.float64))


def _own_generator(ids, parents, q, p, generator=None):
    """Ignores the generator it is passed: a fixed one of its own."""
    return verify_tree_rrs(ids, parents, q, p, torch.Generator().manual_seed(1234))


def _modifies_inputs(ids, parents, q, p, generator=None):
    """Normalises the draft laws in place before verifying."""
    q /= q.sum(-1, keepdim=True)
    return verify_tree_rrs(ids, parents, q, p, generator)


def _zero_probability_bonus(ids, parents, q, p, generator=None):
    """Emits the least probable target token of the root's row as the last token where a
    row accepts nothing (a token of probability 0 when the row has one)."""
    tokens, nodes = verify_tree_rrs(ids, parents, q, p, generator)
    tokens = tokens.clone()
    none = tokens[:, 1:2] < 0 if tokens.shape[1] > 1 else torch.ones(tokens.shape[0], 1, dtype=torch.bool)
    least = torch.argmin(p[:, 0].to(torch.float64), dim=-1)
    tokens[:, 0] = torch.where(none[:, 0], least, tokens[:, 0])
    return TreeVerifyOutput(tokens, nodes)


GLOBAL_RNG = TreeSampler("global_rng", _CAPS, _global_rng)
OWN_GENERATOR = TreeSampler("own_generator", _CAPS, _own_generator)
MODIFIES_INPUTS = TreeSampler("modifies_inputs", _CAPS, _modifies_inputs)
ZERO_PROBABILITY_BONUS = TreeSampler("zero_probability_bonus", _CAPS, _zero_probability_bonus)
