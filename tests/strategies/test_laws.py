"""logit_tensors / probability_tensors: every family generates what it claims."""

import math

import pytest
import torch
from hypothesis import given, note
from hypothesis import strategies as st

from specexact.strategies import (
    DTYPES,
    LOGIT_FAMILIES,
    PROB_FAMILIES,
    InvalidArgument,
    LogitsCase,
    ProbsCase,
    logit_tensors,
    probability_tensors,
    vocab_sizes,
)

SIZES = vocab_sizes(max_size=8193)
SMALL = vocab_sizes(max_size=300)  # frequency measurements: cheap to build


def smallest_subnormal(dtype):
    return float(torch.nextafter(torch.zeros((), dtype=dtype), torch.ones((), dtype=dtype)))


def roundtrips(x: torch.Tensor, half: torch.dtype) -> bool:
    return bool(torch.equal(x.to(half).to(x.dtype), x))


def check_logits_claims(case: LogitsCase) -> None:
    x = case.logits
    B, V = case.batch_size, case.vocab_size
    dtype = getattr(torch, case.dtype)
    assert x.shape == (B, V) and x.dtype == dtype
    assert not torch.isnan(x).any() and not torch.isposinf(x).any()
    assert torch.isfinite(x).any(dim=-1).all(), "a row is all -inf"
    if case.family not in ("one_hot", "masked"):
        assert torch.isfinite(x).all()
    x64 = x.to(torch.float64)
    top2 = torch.sort(x64, dim=-1, descending=True).values[:, :2]
    fam = case.family
    if fam == "zipf":
        assert (x64.max(-1).values == 0).all() and (x64 <= 0).all()
    elif fam == "flat":
        assert (x64 == 0).all()
    elif fam == "one_hot":
        assert (torch.isfinite(x).sum(-1) == 1).all()
    elif fam == "near_tie" and V >= 2:
        assert (top2[:, 0] == 1.0).all()
        below = torch.nextafter(torch.ones((), dtype=dtype), torch.tensor(-math.inf, dtype=dtype))
        assert (top2[:, 1] == float(below)).all()
        assert ((x64 == 1.0).sum(-1) == 1).all()
    elif fam == "exact_tie":
        ties = (x64 == x64.max(-1, keepdim=True).values).sum(-1)
        assert (ties >= min(case.num_spikes + 1, V)).all()
    elif fam == "masked":
        expected = min(V - 1, int(case.masked_fraction * V))
        assert (torch.isneginf(x).sum(-1) == expected).all()
    elif fam == "huge":
        finite_max = torch.finfo(dtype).max
        assert (x64.abs().max(-1).values >= 0.98 * case.magnitude * finite_max).all()
    elif fam == "spikes":
        assert ((x64 >= 5).sum(-1) == min(case.num_spikes, V)).all()
    elif fam == "fp16_roundtrip" and dtype != torch.bfloat16:
        assert roundtrips(x, torch.float16)
    elif fam == "bf16_roundtrip" and dtype != torch.float16:
        assert roundtrips(x, torch.bfloat16)


SUM_TOL = {"float64": 1e-12, "float32": 1e-5, "float16": 2e-2, "bfloat16": 2e-2}


def check_probs_claims(case: ProbsCase) -> None:
    p = case.probs
    B, V = case.batch_size, case.vocab_size
    dtype = getattr(torch, case.dtype)
    eps = torch.finfo(dtype).eps
    assert p.shape == (B, V) and p.dtype == dtype
    assert torch.isfinite(p).all() and (p >= 0).all()
    p64 = p.to(torch.float64)
    sums = p64.sum(-1)
    assert (sums > 0).all()
    fam = case.family
    if fam not in ("fp16_roundtrip", "bf16_roundtrip", "off_by_rounding"):
        assert ((sums - 1).abs() <= SUM_TOL[case.dtype]).all(), sums
    if fam == "flat":
        assert (p64 == p64[:, :1]).all()
    elif fam == "one_hot":
        assert ((p64 > 0).sum(-1) == 1).all() and (p64.max(-1).values == 1).all()
    elif fam == "near_tie" and V >= 2:
        top2 = torch.sort(p64, dim=-1, descending=True).values[:, :2]
        below = torch.nextafter(top2[:, 0].to(dtype), torch.zeros((), dtype=dtype)).to(torch.float64)
        assert (top2[:, 1] == below).all()
    elif fam == "exact_tie":
        ties = (p64 == p64.max(-1, keepdim=True).values).sum(-1)
        assert (ties >= min(case.num_spikes + 1, V)).all()
    elif fam == "masked":
        assert ((p64 == 0).sum(-1) >= min(V - 1, int(case.masked_fraction * V))).all()
    elif fam == "subnormal" and V >= 2:
        tiny = torch.finfo(dtype).smallest_normal
        assert (p64 == smallest_subnormal(dtype)).any(-1).all()
        assert (((p64 > 0) & (p64 < tiny)).sum(-1) >= min(case.num_spikes, V - 1)).all()
    elif fam == "fp16_roundtrip" and dtype != torch.bfloat16:
        assert roundtrips(p, torch.float16)
    elif fam == "bf16_roundtrip" and dtype != torch.float16:
        assert roundtrips(p, torch.bfloat16)
    elif fam == "off_by_rounding":
        base = (p64 / sums[:, None]).to(dtype).to(torch.float64).sum(-1)
        assert ((sums - 1).abs() <= 6 * eps + (base - 1).abs() + SUM_TOL[case.dtype]).all()


@pytest.mark.parametrize("family", LOGIT_FAMILIES)
@given(data=st.data())
def test_logit_families_generate_what_they_claim(family, data):
    case = data.draw(logit_tensors(vocab_size=SIZES, batch_size=st.integers(1, 3),
                                   families=[family]))
    note(case.repro())
    check_logits_claims(case)


@pytest.mark.parametrize("family", PROB_FAMILIES)
@given(data=st.data())
def test_probability_families_generate_what_they_claim(family, data):
    case = data.draw(probability_tensors(vocab_size=SIZES, batch_size=st.integers(1, 3),
                                         families=[family]))
    note(case.repro())
    check_probs_claims(case)


@given(case=logit_tensors(vocab_size=st.sampled_from([32000, 256000]), batch_size=1))
def test_logits_at_real_vocab_sizes(case):
    check_logits_claims(case)


def test_cases_rebuild_bit_for_bit_from_their_repr():
    for case in (LogitsCase(family="huge", vocab_size=257, batch_size=2, seed=9, dtype="bfloat16",
                            magnitude=0.5),
                 ProbsCase(family="subnormal", vocab_size=33, batch_size=3, seed=1, dtype="float64",
                           num_spikes=4)):
        again = eval(repr(case), {"LogitsCase": LogitsCase, "ProbsCase": ProbsCase})
        assert again == case
        t1 = case.logits if isinstance(case, LogitsCase) else case.probs
        t2 = again.logits if isinstance(again, LogitsCase) else again.probs
        assert torch.equal(t1, t2)


def test_seed_changes_the_tensor():
    a = LogitsCase(family="zipf", vocab_size=100, seed=1).logits
    b = LogitsCase(family="zipf", vocab_size=100, seed=2).logits
    assert not torch.equal(a, b)


def test_every_logit_family_and_dtype_is_reachable(reach):
    reach(logit_tensors(vocab_size=SMALL), lambda c: c.family, LOGIT_FAMILIES)
    reach(logit_tensors(vocab_size=SMALL), lambda c: c.dtype, DTYPES)


def test_every_probability_family_is_reachable(reach):
    reach(probability_tensors(vocab_size=SMALL), lambda c: c.family, PROB_FAMILIES)


# ---------------------------------------------------------------- pinned edge values
def test_pinned_near_tie_logits_one_ulp_apart():
    for dtype, below in (("float32", 0.9999999403953552), ("float16", 0.99951171875),
                         ("bfloat16", 0.99609375), ("float64", 1 - 2**-53)):
        x = LogitsCase(family="near_tie", vocab_size=5, seed=0, dtype=dtype).logits[0]
        top = torch.sort(x.double(), descending=True).values[:2].tolist()
        assert top == [1.0, below], dtype


def test_pinned_zipf_logits():
    x = LogitsCase(family="zipf", vocab_size=5, seed=0).logits[0].double()
    expected = [-1.1 * math.log(1 + r) for r in (3, 4, 0, 1, 2)]
    assert torch.allclose(x, torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-6)


def test_pinned_one_hot_and_masked_logits():
    assert LogitsCase(family="one_hot", vocab_size=5, seed=0).logits[0].tolist() == [
        -math.inf, -math.inf, -math.inf, 0.0, -math.inf]
    x = LogitsCase(family="masked", vocab_size=5, seed=0, masked_fraction=0.5).logits[0]
    assert torch.isneginf(x).tolist() == [False, False, False, True, True]


def test_pinned_exact_tie_logits():
    x = LogitsCase(family="exact_tie", vocab_size=5, seed=0, num_spikes=2).logits[0]
    assert (x == 0).tolist() == [False, False, True, True, True]


def test_pinned_huge_logits_reach_the_dtype_maximum():
    x = LogitsCase(family="huge", vocab_size=5, seed=0).logits[0]
    assert float(x.max()) == pytest.approx(0.99 * torch.finfo(torch.float32).max, rel=1e-6)
    assert float(x.min()) == pytest.approx(-0.99 * torch.finfo(torch.float32).max, rel=1e-6)
    assert not torch.isfinite(torch.exp(x)).all()  # naive softmax overflows


def test_pinned_flat_and_subnormal_probs():
    assert ProbsCase(family="flat", vocab_size=4).probs.tolist() == [[0.25] * 4]
    p = ProbsCase(family="subnormal", vocab_size=4, seed=0, dtype="float32").probs[0]
    assert float(p.min()) == 1.401298464324817e-45
    p = ProbsCase(family="subnormal", vocab_size=4, seed=0, dtype="float64").probs[0]
    assert float(p.min()) == 5e-324


def test_pinned_half_roundtrip_flushes_tiny_probabilities():
    # Zipf over 262145 tokens in float16: the tail is below fp16's smallest subnormal
    # (6e-8) and flushes to exact zeros; the sum drifts from 1.
    p = ProbsCase(family="fp16_roundtrip", vocab_size=262145, seed=0, zipf_exponent=2.0).probs
    assert (p == 0).sum() > 0 and abs(float(p.double().sum()) - 1) > 1e-6


def test_pinned_off_by_rounding_sums():
    p = ProbsCase(family="off_by_rounding", vocab_size=4, batch_size=8, seed=3, dtype="bfloat16").probs
    sums = p.double().sum(-1)
    assert (sums != 1).any()
    assert ((sums - 1).abs() <= 8 * 2**-7).all()


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: logit_tensors(batch_size=0), "batch_size=0 must be >= 1"),
        (lambda: logit_tensors(vocab_size=0), "vocab_size=0 must be >= 1"),
        (lambda: logit_tensors(vocab_size=2.0), "vocab_size=2.0 must be an integer"),
        (lambda: logit_tensors(families=["gaussian"]), "unknown family 'gaussian'"),
        (lambda: logit_tensors(dtypes=["int8"]), "unknown family 'int8'"),
        (lambda: probability_tensors(families=["huge"]), "unknown family 'huge'"),
        (lambda: probability_tensors(families=()), "at least one family"),
        (lambda: LogitsCase(family="zipf", vocab_size=0), "vocab_size=0 must be >= 1"),
        (lambda: LogitsCase(family="zipf", vocab_size=3, masked_fraction=1.0),
         "masked_fraction=1.0 must be < 1.0"),
        (lambda: LogitsCase(family="zipf", vocab_size=3, seed=-1), "seed=-1 must be >= 0"),
        (lambda: LogitsCase(family="subnormal", vocab_size=3), "family='subnormal' must be one of"),
        (lambda: ProbsCase(family="zipf", vocab_size=3, dtype="int8"), "dtype='int8' must be one of"),
        (lambda: ProbsCase(family="zipf", vocab_size=3, temperature=0.0),
         "temperature=0.0 must be > 0.0"),
    ],
)
def test_bad_arguments_raise_eagerly(call, match):
    with pytest.raises(InvalidArgument, match=match):
        call()
