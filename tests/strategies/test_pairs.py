"""draft_target_pairs: every draft/target family generates what it claims."""


import numpy as np
import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

from specexact.decoders import SamplingParams, batch_params, process_logits
from specexact.strategies import (
    HONEST_PAIR_FAMILIES,
    PAIR_FAMILIES,
    REAL_VOCAB_SIZES,
    InvalidArgument,
    VerifyCase,
    draft_target_pairs,
    first_token_law,
    vocab_sizes,
)
from specexact.strategies.laws import zipf_logits

SIZES = vocab_sizes(max_size=8193)
SMALL = vocab_sizes(max_size=300)  # frequency measurements: cheap to build


def one_hot_rows(t: torch.Tensor) -> bool:
    t = t.to(torch.float64)
    return bool(((t > 0).sum(-1) == 1).all())


def check_pair_claims(case: VerifyCase) -> None:
    B, K, V = case.batch_size, case.num_draft_tokens, case.vocab_size
    ids, q, p, r = case.draft_token_ids, case.draft_probs, case.target_probs, case.sampled_probs
    dtype = getattr(torch, case.dtype)
    assert ids.shape == (B, K) and ids.dtype == torch.int64
    assert q.shape == (B, K, V) and p.shape == (B, K + 1, V) and r.shape == (B, K, V)
    assert q.dtype == dtype and p.dtype == dtype and r.dtype == torch.float64
    assert ((ids >= 0) & (ids < V)).all()
    for t in (q, p, r):
        assert torch.isfinite(t).all() and (t >= 0).all()
        assert (t.to(torch.float64).sum(-1) > 0).all()
    assert torch.allclose(r.sum(-1), torch.ones(B, K, dtype=torch.float64))
    # Every drafted id is a possible outcome of the law it was drawn from.
    assert (r.gather(2, ids[:, :, None]) > 0).all()
    q64, p64 = q.to(torch.float64), p.to(torch.float64)
    q_d = q64.gather(2, ids[:, :, None]).squeeze(2)
    p_d = p64[:, :K].gather(2, ids[:, :, None]).squeeze(2)
    if case.honest:
        assert torch.equal(r, q64 / q64.sum(-1, keepdim=True))
    fam = case.family
    if fam == "identical":
        assert torch.equal(q, p[:, :K])
    elif fam == "rounding":
        assert (p64[:, :K][q64 > 0] < q64[q64 > 0]).all()
        assert (p64[:, :K][q64 == 0] == 0).all()
        assert ((p64[:, :K] - q64).clamp_min(0) == 0).all(), "residual must be exactly zero"
        lowered = q.clone()
        for _ in range(case.num_ulps):
            lowered = torch.where(lowered > 0, torch.nextafter(lowered, torch.zeros_like(lowered)), lowered)
        assert torch.equal(p[:, :K], lowered)
    elif fam == "disjoint":
        assert not ((q64 > 0) & (p64[:, :K] > 0)).any()
    elif fam == "target_removed":
        assert (p_d[:, 0] == 0).all() and (q_d[:, 0] > 0).all()
    elif fam == "zero_draft_prob":
        assert (q_d == 0).all()
    elif fam == "one_hot_draft":
        assert one_hot_rows(q) and torch.equal(ids, q64.argmax(-1))
    elif fam == "one_hot_target":
        assert one_hot_rows(p)
    elif fam == "greedy":
        assert one_hot_rows(p) and one_hot_rows(q) and torch.equal(ids, q64.argmax(-1))
    elif fam == "truncated":
        tp, dp = case.target_params or SamplingParams(), case.draft_params or SamplingParams()
        rows = B * (K + 1)
        logits = zipf_logits(V, rows, seed=case.seed, zipf_exponent=1.0 + case.mismatch)
        g = torch.Generator().manual_seed((case.seed * 7_919 + 8) % (2**63))
        noise = torch.randn(rows, V, generator=g, dtype=torch.float64)
        t_law = process_logits(logits, batch_params(tp, rows)).to(dtype)
        d_law = process_logits(logits + case.mismatch * noise, batch_params(dp, rows)).to(dtype)
        assert torch.equal(p, t_law.reshape(B, K + 1, V))
        assert torch.equal(q, d_law.reshape(B, K + 1, V)[:, :K])
        if 0 < tp.top_k < V:
            assert ((p64 > 0).sum(-1) <= tp.top_k).all()
    elif fam == "misreported":
        q_norm = q64 / q64.sum(-1, keepdim=True)
        assert ((q_norm - r).abs().amax(-1) > 1e-3).all(), "reported law equals the sampled one"
        assert not case.honest


@pytest.mark.parametrize("family", PAIR_FAMILIES)
@given(data=st.data())
def test_pair_families_generate_what_they_claim(family, data):
    case = data.draw(draft_target_pairs(vocab_size=SIZES, families=[family]))
    note(case.repro())
    check_pair_claims(case)


@settings(max_examples=max(1, settings.default.max_examples // 3))
@given(case=draft_target_pairs(vocab_size=st.sampled_from(REAL_VOCAB_SIZES), batch_size=1,
                               num_draft_tokens=st.integers(1, 2)))
def test_pairs_at_real_vocab_sizes(case):
    note(case.repro())
    check_pair_claims(case)


@given(case=draft_target_pairs(vocab_size=st.integers(1, 64), families=HONEST_PAIR_FAMILIES))
def test_first_token_law_is_the_target_for_honest_pairs(case):
    # Theorem 1 of Leviathan et al. (2023) with unnormalised rows: TV <= |P - Q| / Q.
    for b in range(case.batch_size):
        law = case.first_token_law(b)
        p = case.target_probs[b, 0].double().numpy()
        q = case.draft_probs[b, 0].double().numpy()
        P, Q = p.sum(), q.sum()
        assert law.shape == (case.vocab_size,) and abs(law.sum() - 1) < 1e-12
        assert (law[p == 0] == 0).all()
        tv = 0.5 * np.abs(law - p / P).sum()
        assert tv <= abs(P - Q) / Q + 1e-9, (tv, P, Q)


def test_first_token_law_of_a_misreported_draft_is_not_the_target():
    # Drafts always token 0 (sampled law (1, 0)), reported q = (1/2, 1/2), target (1/2, 1/2):
    # token 0 is accepted with probability min(1, p/q) = 1, so the emitted law is (1, 0).
    law = first_token_law([0.5, 0.5], [0.5, 0.5], [1.0, 0.0])
    assert law.tolist() == [1.0, 0.0]
    # q(d) = 0 with p(d) > 0: the guard accepts d always.
    assert first_token_law([0.5, 0.5], [0.0, 1.0], [1.0, 0.0]).tolist() == [1.0, 0.0]


def test_sample_drafts_never_draws_zero_probability_ids():
    case = VerifyCase(family="target_removed", vocab_size=6, batch_size=1, num_draft_tokens=2, seed=3)
    drafts = case.sample_drafts(5000, seed=1)
    assert drafts.shape == (5000, 2)
    for i in range(2):
        support = case.sampled_probs[0, i] > 0
        assert support[drafts[:, i]].all()


def test_repr_and_repro_rebuild_the_case():
    case = VerifyCase(family="truncated", vocab_size=50, batch_size=2, num_draft_tokens=3, seed=11,
                      mismatch=0.25, target_params=SamplingParams(top_k=3),
                      draft_params=SamplingParams(top_p=0.5))
    again = eval(repr(case), {"VerifyCase": VerifyCase, "SamplingParams": SamplingParams})
    assert again == case and torch.equal(again.target_probs, case.target_probs)
    scope: dict = {}
    exec(case.repro(generator_seed=7), scope)
    assert scope["out"].shape == (2, 4)


def test_every_pair_family_is_reachable(reach):
    reach(draft_target_pairs(vocab_size=SMALL), lambda c: c.family, PAIR_FAMILIES)


def test_two_token_families_fall_back_at_vocab_one(every_example):
    cases = every_example(draft_target_pairs(vocab_size=1, families=["disjoint", "identical"]),
                          n=30)
    assert {c.family for c in cases} == {"identical"}


# ---------------------------------------------------------------- pinned edge values
def test_pinned_rounding_pair_is_two_ulps_below():
    case = VerifyCase(family="rounding", vocab_size=3, num_draft_tokens=1, seed=0, num_ulps=2,
                      target_family="flat")
    q = case.draft_probs[0, 0]
    assert q.tolist() == [torch.tensor(1 / 3, dtype=torch.float32).item()] * 3
    below = torch.nextafter(torch.nextafter(q, torch.zeros_like(q)), torch.zeros_like(q))
    assert torch.equal(case.target_probs[0, 0], below)


def test_pinned_zero_draft_prob_pair():
    case = VerifyCase(family="zero_draft_prob", vocab_size=4, num_draft_tokens=2, seed=5)
    d = case.draft_token_ids[0]
    assert case.draft_probs[0, 0, d[0]] == 0 and case.draft_probs[0, 1, d[1]] == 0
    assert case.sampled_probs[0, 0, d[0]] > 0 and not case.honest


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: draft_target_pairs(batch_size=0), "batch_size=0 must be >= 1"),
        (lambda: draft_target_pairs(num_draft_tokens=0), "num_draft_tokens=0 must be >= 1"),
        (lambda: draft_target_pairs(families=["swapped"]), "unknown family 'swapped'"),
        (lambda: draft_target_pairs(dtypes=["float8"]), "unknown family 'float8'"),
        (lambda: draft_target_pairs(target_families=["huge"]), "unknown family 'huge'"),
        (lambda: draft_target_pairs(vocab_size=1, families=["disjoint"]), "need vocab_size >= 2"),
        (lambda: VerifyCase(family="disjoint", vocab_size=1), "needs vocab_size >= 2"),
        (lambda: VerifyCase(family="identical", vocab_size=3, mismatch=1.5), "mismatch=1.5 must be <= 1.0"),
        (lambda: VerifyCase(family="identical", vocab_size=3, num_ulps=0), "num_ulps=0 must be >= 1"),
        (lambda: VerifyCase(family="identical", vocab_size=3, target_family="huge"),
         "target_family='huge' must be one of"),
        (lambda: VerifyCase(family="truncated", vocab_size=3, target_params={"top_k": 2}),
         "target_params=.* must be a SamplingParams"),
    ],
)
def test_bad_arguments_raise_eagerly(call, match):
    with pytest.raises(InvalidArgument, match=match):
        call()
