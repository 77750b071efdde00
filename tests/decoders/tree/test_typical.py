"""Medusa's typical acceptance: the threshold, the best-candidate rule, the chain form."""

import math

import numpy as np
import pytest
import torch

from specexact.decoders.tree import (
    chain_parents,
    full_tree_parents,
    typical_thresholds,
    verify_chain_typical,
    verify_tree_typical,
)
from specexact.exactness.program_law import GeneratorRNG
from specexact.exactness.tree_laws import TreeRow, typical_program


def test_threshold_is_min_of_epsilon_and_scaled_exp_minus_entropy():
    p = torch.tensor([[0.7, 0.2, 0.1], [1 / 3, 1 / 3, 1 / 3]], dtype=torch.float64)
    entropy = -(p * torch.log(p + 1e-5)).sum(-1)
    got = typical_thresholds(p, posterior_threshold=0.09, posterior_alpha=0.3)
    assert torch.allclose(got, torch.minimum(torch.full((2,), 0.09, dtype=torch.float64), 0.3 * torch.exp(-entropy)))
    h0 = -(0.7 * math.log(0.7 + 1e-5) + 0.2 * math.log(0.2 + 1e-5) + 0.1 * math.log(0.1 + 1e-5))
    assert got[0].item() == pytest.approx(min(0.09, 0.3 * math.exp(-h0)), rel=1e-12)  # 0.3 e^-0.80 = 0.135 -> 0.09
    loose = typical_thresholds(p, posterior_threshold=0.5, posterior_alpha=0.3)
    assert loose[1].item() == pytest.approx(0.3 * (1 / 3 + 1e-5), rel=1e-12)  # exp(-H) = 1/3 + 1e-5 here


def random_trees(B, branching, V, seed):
    g = torch.Generator().manual_seed(seed)
    parents = full_tree_parents(branching)[None].expand(B, -1).clone()
    N = parents.shape[1]
    p = torch.softmax(3 * torch.randn(B, N + 1, V, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(torch.randn(B, N, V, generator=g, dtype=torch.float64), -1)
    ids = torch.multinomial(q.reshape(-1, V), 1, generator=g).reshape(B, N)
    return ids, parents, q, p


@pytest.mark.parametrize("branching", [(2, 2), (3, 1, 1), (1, 3)])
@pytest.mark.parametrize("params", [{}, {"posterior_threshold": 0.3, "posterior_alpha": 0.9}])
def test_reference_equals_the_per_row_rule(branching, params):
    """Deterministic given the tree: the batched reference and tree_laws' program agree on
    every row (longest accepted prefix, then likelihood, then lowest node; greedy next token)."""
    ids, parents, q, p = random_trees(400, branching, 5, seed=len(branching))
    out = verify_tree_typical(ids, parents, q, p, **params)
    rng = GeneratorRNG(None)  # unused by the greedy rule
    accepted = 0
    for b in range(ids.shape[0]):
        row = TreeRow.from_tensors(ids, parents, q, p, b)
        want = typical_program(row, rng, **params)
        got = [t for t in out.tokens[b].tolist() if t >= 0]
        assert tuple(got) == want.tokens, b
        assert tuple(n for n in out.accepted_nodes[b].tolist() if n >= 0) == want.nodes, b
        accepted += len(want.nodes)
    assert 0 < accepted < ids.shape[0] * len(branching)  # some rows accept, not all fully


def test_chain_form_and_errors():
    ids, parents, q, p = random_trees(50, (1, 1, 1), 4, seed=7)
    assert torch.equal(parents, chain_parents(3)[None].expand(50, -1))
    assert torch.equal(verify_chain_typical(ids, q, p), verify_tree_typical(ids, parents, q, p).tokens)
    with pytest.raises(ValueError, match="posterior_alpha must be a finite number >= 0"):
        verify_chain_typical(ids, q, p, posterior_alpha=-1.0)
    with pytest.raises(ValueError, match="next_token must be 'greedy' or 'sample'"):
        verify_chain_typical(ids, q, p, next_token="top")


def test_sample_next_token_draws_from_the_target_after_the_prefix():
    ids, parents, q, p = random_trees(64, (2, 2), 4, seed=8)
    greedy = verify_tree_typical(ids, parents, q, p)
    u = torch.rand(64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    sampled = verify_tree_typical(ids, parents, q, p, next_token="sample", final_uniforms=u)
    depth = (greedy.accepted_nodes >= 0).sum(1)
    assert torch.equal(greedy.accepted_nodes, sampled.accepted_nodes)
    for b in range(64):
        node = int(greedy.accepted_nodes[b, depth[b] - 1]) if depth[b] else -1
        cdf = np.cumsum(p[b, node + 1].numpy())
        assert int(sampled.tokens[b, depth[b]]) == min(int(np.searchsorted(cdf, u[b].item() * cdf[-1], "right")), 3)
