"""``verify_with_uniforms``: given the uniforms ``verify`` draws, it returns what ``verify`` returns."""

import pytest
import torch

from specexact.decoders import verify, verify_reference, verify_with_uniforms
from specexact.decoders.adapters import takes_uniforms, uniforms_dtype_of


def _inputs(B, K, V, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.rand(B, K, V, generator=g, dtype=torch.float64) ** 3
    q[..., : V // 3] = 0.0  # some zeros: drafts land only where q > 0
    q = (q + 1e-3 * (torch.arange(V) >= V // 3)) / 1.0
    q = (q / q.sum(-1, keepdim=True)).to(dtype)
    p = torch.rand(B, K + 1, V, generator=g, dtype=torch.float64) ** 2
    p[..., V // 2:] *= (torch.rand(B, K + 1, 1, generator=g) < 0.5)  # zeroed tails on some rows
    p = (p / p.sum(-1, keepdim=True)).to(dtype)
    ids = torch.multinomial(q.reshape(-1, V).double(), 1, generator=g).reshape(B, K)
    return ids, q, p


# Both paths of verify: the reference (B * V <= SMALL_ELEMENTS) and the fast path (V > 4 * BLOCK).
@pytest.mark.parametrize("B,K,V", [(3, 1, 7), (64, 4, 50), (8, 3, 8193), (4, 2, 40000)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_uniforms_verify_draws_give_verify_s_output(B, K, V, seed):
    ids, q, p = _inputs(B, K, V, seed)
    g = torch.Generator().manual_seed(100 + seed)
    h = torch.Generator().set_state(g.get_state())
    expected = verify(ids, q, p, g)
    u = torch.rand((B, K), generator=h, dtype=torch.float64)  # what verify draws first
    got = verify_with_uniforms(ids, q, p, u, h)
    assert torch.equal(got, expected)
    assert torch.equal(g.get_state(), h.get_state()), "the same draws afterwards"


def test_boundary_uniforms_decide_by_u_q_below_p():
    # p/q = 0.5 exactly: u = 0.5 rejects (u q < p is false), the float below accepts; p = 0
    # rejects at u = 0; q = p accepts at the largest double below 1.
    V = 4
    q = torch.tensor([[[0.5, 0.5, 0.0, 0.0]]]).expand(5, 1, V).contiguous()
    p = torch.tensor([[[0.25, 0.0, 0.75, 0.0], [0.25, 0.25, 0.25, 0.25]]]).expand(5, 2, V).contiguous()
    ids = torch.tensor([[0], [0], [1], [0], [0]])
    below = torch.nextafter(torch.tensor(0.5, dtype=torch.float64), torch.tensor(0.0, dtype=torch.float64))
    u = torch.tensor([[0.5], [float(below)], [0.0], [0.0], [0.49]], dtype=torch.float64)
    out = verify_with_uniforms(ids, q, p, u, torch.Generator().manual_seed(0))
    accepted = (out >= 0).sum(1) == 2
    assert accepted.tolist() == [False, True, False, True, True]
    same = verify_with_uniforms(ids[:1], q[:1], torch.cat([q[:1], q[:1]], 1),
                                torch.tensor([[1 - 2**-53]], dtype=torch.float64), torch.Generator().manual_seed(0))
    assert int((same >= 0).sum()) == 2


def test_verify_declares_the_protocol_and_refuses_bad_uniforms():
    assert takes_uniforms(verify) and uniforms_dtype_of(verify) == torch.float64
    ids, q, p = _inputs(2, 2, 5, 0)
    with pytest.raises(ValueError, match="shape"):
        verify_with_uniforms(ids, q, p, torch.zeros(2, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        verify_with_uniforms(ids, q, p, torch.ones(2, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        verify_with_uniforms(ids, q, p, torch.full((2, 2), float("nan"), dtype=torch.float64))
    with pytest.raises(TypeError, match="floating"):
        verify_with_uniforms(ids, q, p, torch.zeros(2, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match="draft_token_ids must lie"):
        verify_with_uniforms(ids + 10, q, p, torch.zeros(2, 2, dtype=torch.float64))


def test_reference_and_fast_path_still_agree_after_the_split():
    ids, q, p = _inputs(16, 3, 9000, 5)
    a = verify(ids, q, p, torch.Generator().manual_seed(3))
    b = verify_reference(ids, q, p, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
