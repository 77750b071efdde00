"""benchmarks/proposed_verify.py returns what specexact.decoders.verify returns, on the same
generator state, and leaves the generator in the same state; it raises what it raises."""

import pytest
import torch

from benchmarks.proposed_verify import verify as proposed
from specexact.decoders import verify as reference


def _inputs(B, K, V, seed, *, sparse=False, equal=False, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (B, K), generator=g)
    q = torch.rand(B, K, V, generator=g, dtype=torch.float64) ** 4
    p = torch.rand(B, K + 1, V, generator=g, dtype=torch.float64) ** 4
    if sparse:  # exact zeros on both sides
        q[:, :, : V // 2] = 0
        p[:, :, V // 3:] = 0
        p[:, :, 0] += 1e-3
    if equal:  # target == draft: every rejection leaves an empty residual (fallback)
        p[:, :K] = q
        ids[:, 0] = 1  # with q[.., 1] = 0 below, the first draft is always rejected
        q[:, 0, 1] = 0
        p[:, 0, 1] = 0
    return ids, q.to(dtype), p.to(dtype)


def _same(args, seed, **kw):
    g1, g2 = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
    a = reference(*args, g1, **kw)
    b = proposed(*args, g2, **kw)
    assert torch.equal(a, b)
    assert torch.equal(g1.get_state(), g2.get_state())


@pytest.mark.parametrize("V", [3, 100, 4096, 4097, 5000, 9216, 32000])
@pytest.mark.parametrize("kind", ["dense", "sparse", "equal"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_same_tokens_and_generator_state(V, kind, dtype):
    for seed, (B, K) in enumerate([(1, 1), (7, 3), (33, 2)]):
        args = _inputs(B, K, V, seed, sparse=kind == "sparse", equal=kind == "equal", dtype=dtype)
        _same(args, seed)
        _same(args, seed, validate=False)


def test_small_chunks_and_non_contiguous_inputs():
    ids, q, p = _inputs(20, 3, 6000, 5)
    q_nc = q.transpose(0, 1).contiguous().transpose(0, 1)  # same values, other strides
    for seed in range(5):
        g1, g2 = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        assert torch.equal(reference(ids, q, p, g1), proposed(ids, q_nc, p, g2, chunk_elements=7000))


@pytest.mark.parametrize("corrupt", ["nan", "inf", "negative", "empty_row", "bad_id", "bad_shape"])
def test_raises_what_the_reference_raises(corrupt):
    ids, q, p = _inputs(4, 2, 5000, 0)
    if corrupt == "nan":
        q[1, 0, 7] = float("nan")
    elif corrupt == "inf":
        p[2, 1, 3] = float("inf")
    elif corrupt == "negative":
        p[0, 2, 9] = -1e-3
    elif corrupt == "empty_row":
        q[3, 1] = 0
    elif corrupt == "bad_id":
        ids[0, 0] = 5000
    else:
        p = p[:, :2]
    with pytest.raises(Exception) as ref_err:
        reference(ids, q, p, torch.Generator().manual_seed(0))
    with pytest.raises(type(ref_err.value)) as new_err:
        proposed(ids, q, p, torch.Generator().manual_seed(0))
    assert str(new_err.value) == str(ref_err.value)
