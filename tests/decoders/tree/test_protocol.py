"""The tree protocol: validation messages, tree shapes, chains as a tree, the output check."""

import pytest
import torch

from specexact.decoders import VerifierProtocolError
from specexact.decoders.tree import (
    TreeVerifyOutput,
    chain_parents,
    chains_to_tree,
    check_tree_output,
    full_tree_parents,
    max_depth,
    tree_depths,
    validate_tree_inputs,
)

V = 4


def inputs(B=2, parents=(-1, -1, 0, 0, 1, 1)):
    N = len(parents)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, V, (B, N), generator=g)
    par = torch.tensor(parents)[None].expand(B, -1).clone()
    q = torch.rand(B, N, V, generator=g) + 0.1
    p = torch.rand(B, N + 1, V, generator=g) + 0.1
    return ids, par, q, p


def test_full_tree_and_chain_shapes():
    assert full_tree_parents((2, 2)).tolist() == [-1, -1, 0, 0, 1, 1]
    assert full_tree_parents((3, 1)).tolist() == [-1, -1, -1, 0, 1, 2]
    assert full_tree_parents((1, 2)).tolist() == [-1, 0, 0]
    assert chain_parents(3).tolist() == [-1, 0, 1]
    assert tree_depths(full_tree_parents((2, 2))[None]).tolist() == [[1, 1, 2, 2, 2, 2]]
    assert max_depth(full_tree_parents((2, 1, 3))[None]) == 3
    for bad in [(), (0,), (2, -1), (1.5,), (True,)]:
        with pytest.raises(ValueError, match="branching"):
            full_tree_parents(bad)


def test_valid_inputs_pass_and_each_defect_is_named():
    ids, par, q, p = inputs()
    validate_tree_inputs(ids, par, q, p)
    cases = [
        ((ids.float(), par, q, p), TypeError, "draft_token_ids must be an integer"),
        ((ids, par.float(), q, p), TypeError, "parent_ids must be an integer"),
        ((ids, par, q.long(), p), TypeError, "draft_probs must be floating"),
        ((ids, par[:, :-1], q, p), ValueError, "parent_ids must have shape"),
        ((ids, par, q, p[:, :-1]), ValueError, "target_probs must have shape"),
        ((ids, par, q[..., :-1], p), ValueError, "target_probs has V"),
        ((ids + V, par, q, p), ValueError, r"draft_token_ids must lie in \[0, 4\)"),
        ((ids[:, :0], par[:, :0], q[:, :0], p[:, :1]), ValueError, "N=0"),
        ((ids[:0], par[:0], q[:0], p[:0]), ValueError, "empty batch"),
        (("x", par, q, p), TypeError, "draft_token_ids must be a torch.Tensor"),
    ]
    for args, err, msg in cases:
        with pytest.raises(err, match=msg):
            validate_tree_inputs(*args)
    bad_par = par.clone()
    bad_par[1, 3] = 3  # its own index: not an earlier node
    with pytest.raises(ValueError, match=r"parent_ids\[1, 3\] must be -1 \(the root\) or an earlier node in \[0, 3\), got 3"):
        validate_tree_inputs(ids, bad_par, q, p)
    for fill, msg in ((-0.5, "negative probability"), (float("nan"), "NaN or infinite")):
        q2 = q.clone()
        q2[0, 2, 1] = fill
        with pytest.raises(ValueError, match=msg):
            validate_tree_inputs(ids, par, q2, p)
    p2 = p.clone()
    p2[1, 4] = 0.0
    with pytest.raises(ValueError, match=r"target_probs row \[1, 4\] has no positive mass"):
        validate_tree_inputs(ids, par, q, p2)


def test_chains_to_tree_numbers_chain_major_and_shares_the_root_row():
    B, C, K = 2, 3, 2
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, V, (B, C, K), generator=g)
    q = torch.rand(B, C, K, V, generator=g)
    p = torch.rand(B, C, K + 1, V, generator=g)
    p[:, :, 0] = p[:, :1, 0]
    tree = chains_to_tree(ids, q, p)
    assert tree.parent_ids[0].tolist() == [-1, 0, -1, 2, -1, 4]
    assert torch.equal(tree.draft_token_ids[:, 3], ids[:, 1, 1])
    assert torch.equal(tree.draft_probs[:, 4], q[:, 2, 0])
    assert torch.equal(tree.target_probs[:, 0], p[:, 0, 0])
    assert torch.equal(tree.target_probs[:, 4], p[:, 1, 2])  # after node 3 = chain 1's two drafts
    validate_tree_inputs(*tree)
    p[1, 2, 0] += 0.1
    with pytest.raises(ValueError, match=r"target_probs\[:, 2, 0\] differs"):
        chains_to_tree(ids, q, p)
    with pytest.raises(ValueError, match="draft_token_ids must have shape"):
        chains_to_tree(ids[0], q, p)


def test_output_check_accepts_a_root_path_and_names_each_violation():
    ids, par, q, p = inputs(B=1)
    ids[0] = torch.tensor([1, 2, 3, 0, 1, 2])
    good = TreeVerifyOutput(torch.tensor([[2, 1, 3]]), torch.tensor([[1, 4]]))  # node 1, then its child 4
    assert check_tree_output(good, ids, par, V).tolist() == [3]
    short = TreeVerifyOutput(torch.tensor([[3, -1, -1]]), torch.tensor([[-1, -1]]))
    assert check_tree_output(short, ids, par, V).tolist() == [1]
    bad = [
        (torch.tensor([[2, 1, 3]]), "must return TreeVerifyOutput"),
        (TreeVerifyOutput(torch.tensor([[2, 1]]), torch.tensor([[1, 4]])), "must have shapes"),
        (TreeVerifyOutput(torch.tensor([[2.0, 1, 3]]), torch.tensor([[1, 4]])), "tokens must be integer"),
        (TreeVerifyOutput(torch.tensor([[2, 1, 9]]), torch.tensor([[1, 4]])), "outside"),
        (TreeVerifyOutput(torch.tensor([[2, -1, 3]]), torch.tensor([[1, -1]])), "not left-aligned"),
        (TreeVerifyOutput(torch.tensor([[-1, -1, -1]]), torch.tensor([[-1, -1]])), "no token"),
        (TreeVerifyOutput(torch.tensor([[2, 1, 3]]), torch.tensor([[1, -1]])), "does not list exactly"),
        (TreeVerifyOutput(torch.tensor([[2, 0, 3]]), torch.tensor([[1, 3]])), "not a child"),  # 3 is node 0's child
        (TreeVerifyOutput(torch.tensor([[1, 1, 3]]), torch.tensor([[1, 4]])), "node 1 holds 2"),
    ]
    for out, msg in bad:
        with pytest.raises(VerifierProtocolError, match=msg):
            check_tree_output(out, ids, par, V)
