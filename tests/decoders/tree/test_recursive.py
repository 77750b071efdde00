"""SpecInfer's recursive rejection sampling on trees and multi-draft chains."""

import pytest
import torch

from specexact.decoders.tree import chains_to_tree, verify_multi_draft, verify_tree_rrs
from specexact.exactness.tree_laws import round_law

PARENTS = torch.tensor([[-1, -1, 0, 0, 1, 1]])


def hand_tree():
    ids = torch.tensor([[2, 2, 0, 1, 0, 0]])
    q_root = torch.tensor([0.2, 0.2, 0.6], dtype=torch.float64)
    q1 = torch.tensor([0.6, 0.2, 0.2], dtype=torch.float64)
    q = torch.stack([q_root, q_root, q1, q1, q1, q1])[None]
    p = torch.tensor([[0.5, 0.3, 0.2], [1 / 3, 1 / 3, 1 / 3], [0.2, 0.4, 0.4],
                      [0.1, 0.1, 0.8], [0.0, 0.5, 0.5], [0.3, 0.3, 0.4], [0.3, 0.3, 0.4]], dtype=torch.float64)[None]
    return ids, PARENTS, q, p


def test_residual_is_updated_between_siblings():
    ids, par, q, p = hand_tree()
    # Node 0 (token 2): accepted iff u q(2) < p(2), i.e. u < 1/3; u = 0.5 rejects and the residual
    # becomes (0.3, 0.1, 0) / 0.4. Node 1 (token 2 again) has residual 0 there: rejected whatever
    # its uniform; residual max(r - q, 0) = (0.55, 0.05, 0) / 0.6; the final u = 0.95 lands on id 1.
    u = torch.tensor([[0.5, 0.0, 0.5, 0.5, 0.5, 0.5]], dtype=torch.float64)
    out = verify_tree_rrs(ids, par, q, p, uniforms=u, final_uniforms=torch.tensor([0.95]))
    assert out.tokens.tolist() == [[1, -1, -1]] and out.accepted_nodes.tolist() == [[-1, -1]]
    # Same uniforms without the update (residual (0.75, 0.25, 0)) would give id 1 only above 0.75:
    out = verify_tree_rrs(ids, par, q, p, uniforms=u, final_uniforms=torch.tensor([0.9]))
    assert out.tokens.tolist() == [[0, -1, -1]]  # 0.9 < 0.55 / 0.6 = 0.917


def test_walks_down_to_an_accepted_childs_children():
    ids, par, q, p = hand_tree()
    # u0 = 0.1 < 1/3 accepts node 0; its children (nodes 2, 3) are verified against row 1 = uniform:
    # node 2 (token 0, q 0.6) needs u < 0.556: 0.9 rejects, residual (0, 1/2, 1/2); node 3 (token 1,
    # q 0.2 < r 0.5) is always accepted; the bonus comes from row 4 = (0, 1/2, 1/2) at u = 0 -> id 1.
    u = torch.tensor([[0.1, 0.0, 0.9, 0.999, 0.0, 0.0]], dtype=torch.float64)
    out = verify_tree_rrs(ids, par, q, p, uniforms=u, final_uniforms=torch.tensor([0.0]))
    assert out.tokens.tolist() == [[2, 1, 1]] and out.accepted_nodes.tolist() == [[0, 3]]


def test_multi_draft_is_the_chains_tree():
    g = torch.Generator().manual_seed(4)
    B, C, K, V = 32, 3, 2, 5
    ids = torch.randint(0, V, (B, C, K), generator=g)
    q = torch.rand(B, C, K, V, generator=g)
    p = torch.rand(B, C, K + 1, V, generator=g)
    p[:, :, 0] = p[:, :1, 0]
    a = verify_multi_draft(ids, q, p, torch.Generator().manual_seed(9))
    b = verify_tree_rrs(*chains_to_tree(ids, q, p), torch.Generator().manual_seed(9))
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.accepted_nodes, b.accepted_nodes)


def test_errors_name_the_argument():
    ids, par, q, p = hand_tree()
    with pytest.raises(ValueError, match=r"uniforms must have shape \[1, 6\]"):
        verify_tree_rrs(ids, par, q, p, uniforms=torch.zeros(1, 5))
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        verify_tree_rrs(ids, par, q, p, "seed")
    with pytest.raises(ValueError, match=r"parent_ids\[0, 2\]"):
        verify_tree_rrs(ids, torch.tensor([[-1, -1, 2, 0, 1, 1]]), q, p)


# 30 000 first rounds per case on V = 3 (at most 39 outcomes, bins of >= 50 expected):
# detectable TV of the binned round law about 0.035 at the per-check rate and power 0.99.
CASES = [((2, 2), "iid"), ((2, 2), "without_replacement"), ((3, 1), "iid")]


@pytest.mark.statistical(checks=len(CASES))
def test_samples_follow_the_exact_round_law(tiny_models, tiny_laws, alpha, round_outputs_fn, law_check_fn):
    for seed, (branching, drafting) in enumerate(CASES):
        outs = round_outputs_fn(tiny_models, verify_tree_rrs, branching=branching, drafting=drafting,
                                batch=30_000, seed=20 + seed)
        law = round_law(tiny_laws, "tree", branching=branching, drafting=drafting)
        result = law_check_fn(outs, law, alpha=alpha, name=f"rrs {branching} {drafting}")
        assert result.passed, result
