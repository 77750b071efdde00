"""SGLang's target-only tree rule: coin semantics, thresholds, exactness and its limit."""

import functools

import pytest
import torch

from specexact.decoders.tree import verify_tree_rrs, verify_tree_target_only
from specexact.exactness.tree_laws import complete_with_target, round_law, target_sequence_law, total_variation

PARENTS = torch.tensor([[-1, -1, 0, 0, 1, 1]])
IDS = torch.tensor([[1, 0, 2, 0, 1, 2]])
P = torch.tensor([[[0.5, 0.3, 0.2], [0.6, 0.2, 0.2], [0.1, 0.1, 0.8],
                   [0.2, 0.2, 0.6], [0.3, 0.3, 0.4], [0.3, 0.3, 0.4], [0.3, 0.3, 0.4]]], dtype=torch.float64)
Q = torch.zeros(1, 6, 3, dtype=torch.float64) + 1 / 3  # ignored by the rule


def run(root_coin, node_coins=(0.99,) * 6, final=0.5, **kw):
    u = torch.tensor([[root_coin, *node_coins]], dtype=torch.float64)
    out = verify_tree_target_only(IDS, PARENTS, Q, P, uniforms=u, final_uniforms=torch.tensor([final]), **kw)
    return out.tokens.tolist()[0], out.accepted_nodes.tolist()[0]


def test_one_coin_per_node_against_cumulative_target_mass():
    # Root children: node 0 (token 1, t = 0.3), node 1 (token 0, t = 0.5).
    assert run(0.25)[1][0] == 0  # 0.25 <= 0.3
    assert run(0.30)[1][0] == 0  # <= (the kernel's comparison)
    assert run(0.5)[1][0] == 1  # 0.3 < 0.5 <= 0.8
    # Coin 0.85 misses both: the last token comes from p minus tokens 1 and 0 -> token 2.
    assert run(0.85, final=0.0) == ([2, -1, -1], [-1, -1])
    # After accepting node 0 its own coin decides among nodes 2 (token 2, t = 0.2) and 3 (token 0, t = 0.6).
    # 0.2 < 0.7 <= 0.8 accepts node 3; the bonus from row 4 = (0.3, 0.3, 0.4) at 0.5 is token 1.
    assert run(0.1, node_coins=(0.7, 0.99, 0, 0, 0, 0)) == ([1, 0, 1], [0, 3])
    assert run(0.1, node_coins=(0.95, 0.99, 0, 0, 0, 0), final=0.0) == ([1, 1, -1], [0, -1])  # p minus {2, 0}


def test_lossy_thresholds():
    assert run(0.85, threshold_single=0.45)[1][0] == 1  # t = 0.5 >= 0.45 whatever the coin
    assert run(0.55, threshold_acc=0.5)[1][0] == 0  # 0.55 <= 0.3 / 0.5
    assert run(0.55)[1][0] == 1
    with pytest.raises(ValueError, match="threshold_acc must be > 0"):
        run(0.5, threshold_acc=0.0)
    with pytest.raises(ValueError, match="threshold_single must be a finite number"):
        run(0.5, threshold_single=float("nan"))


def test_exact_with_distinct_siblings_but_not_with_repeated_ones(tiny_laws):
    L = 3
    target = target_sequence_law(tiny_laws, L)
    top_k = round_law(tiny_laws, "tree_target_only", branching=(2, 2), drafting="top_k")
    assert total_variation(complete_with_target(top_k, tiny_laws, L), target) < 1e-12
    # i.i.d. drafting repeats sibling tokens; the kernel then counts that token's mass twice.
    iid = round_law(tiny_laws, "tree_target_only", branching=(2, 2), drafting="iid")
    assert total_variation(complete_with_target(iid, tiny_laws, L), target) > 0.01
    # With point-mass drafts the rule has recursive rejection sampling's law.
    assert total_variation(top_k, round_law(tiny_laws, "tree", branching=(2, 2), drafting="top_k")) < 1e-12


# 30 000 first rounds on the deterministic top-2 tree of depth 2 over V = 3: detectable TV
# of the binned round law about 0.03 at the per-check rate and power 0.99 (both checks).
@pytest.mark.statistical(checks=3)
def test_samples_follow_the_exact_law_lossless_and_lossy(tiny_models, tiny_laws, alpha, round_outputs_fn,
                                                          law_check_fn):
    outs = round_outputs_fn(tiny_models, verify_tree_target_only, branching=(2, 2), drafting="top_k",
                            batch=30_000, seed=31)
    law = round_law(tiny_laws, "tree_target_only", branching=(2, 2), drafting="top_k")
    result = law_check_fn(outs, law, alpha=alpha, name="target-only")
    assert result.passed, result
    lossy = functools.partial(verify_tree_target_only, threshold_single=0.5, threshold_acc=0.8)
    outs = round_outputs_fn(tiny_models, lossy, branching=(2, 2), drafting="top_k", batch=30_000, seed=32)
    law = round_law(tiny_laws, "tree_target_only", branching=(2, 2), drafting="top_k",
                    threshold_single=0.5, threshold_acc=0.8)
    assert total_variation(complete_with_target(law, tiny_laws, 3), target_sequence_law(tiny_laws, 3)) > 0.01
    result = law_check_fn(outs, law, alpha=alpha, name="target-only lossy")
    assert result.passed, result
    # RRS with the same point-mass drafts samples the same law (one coin per child instead).
    outs = round_outputs_fn(tiny_models, verify_tree_rrs, branching=(2, 2), drafting="top_k", batch=30_000, seed=33)
    result = law_check_fn(outs, round_law(tiny_laws, "tree_target_only", branching=(2, 2), drafting="top_k"),
                          alpha=alpha, name="rrs point masses")
    assert result.passed, result
