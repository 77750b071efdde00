"""``verify`` (the fast path) returns what ``verify_reference`` returns, bit for bit.

For every input: the same output tokens from the same generator state, the generator left
in the same state afterwards, and the same exception (type and message) on bad input.
Covered: vocabularies below, at and above the two-level threshold ``4 * BLOCK`` (and a
short last block), K in {1, 4, 8}, every draft/target family of
:func:`specexact.strategies.draft_target_pairs` (ties, zeros, truncated laws, rounding
pairs whose residual has no mass, one-hot, dishonest drafts), every dtype,
``validate=True`` and ``False``, odd layouts (expanded, sliced, non-contiguous), and tiny
chunks so that every chunk boundary of the fast path is crossed.
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

import specexact.decoders.residual_sampling as residual_sampling
import specexact.decoders.sampling as sampling
from specexact.decoders import (
    SamplingParams,
    ToyLM,
    ToyLMConfig,
    speculative_generate,
    validate_verify_inputs,
    verify,
)
from specexact.decoders.rejection_sampling import (
    PLACEHOLDER_ID,
    validate_verify_inputs_reference,
    verify_reference,
)
from specexact.decoders.sampling import BLOCK
from specexact.strategies import REAL_VOCAB_SIZES, draft_target_pairs, vocab_sizes

KS = st.sampled_from([1, 4, 8])


@pytest.fixture(autouse=True, scope="module")
def fast_path_at_every_size():
    """Run the fast code even on inputs small enough for the reference path (below
    ``SMALL_ELEMENTS`` ``verify`` calls ``verify_reference``), so that small examples test it."""
    with mock.patch.object(sampling, "SMALL_ELEMENTS", 0):
        yield


def assert_same(args, seed: int | None, **kw) -> torch.Tensor:
    """verify and verify_reference on the same generator state: same output, same state."""
    g_ref = torch.Generator().manual_seed(seed) if seed is not None else None
    g_fast = torch.Generator().manual_seed(seed) if seed is not None else None
    ref = verify_reference(*args, g_ref, **kw)
    fast = verify(*args, g_fast, **kw)
    assert fast.dtype == ref.dtype == torch.int64 and fast.shape == ref.shape
    assert torch.equal(fast, ref), (fast, ref)
    if seed is not None:
        assert torch.equal(g_fast.get_state(), g_ref.get_state()), "generator left in another state"
    return fast


@pytest.fixture(params=["default", "tiny"])
def chunks(request, monkeypatch):
    """Run with the default chunk size and with chunks of a few rows (every boundary)."""
    if request.param == "tiny":
        monkeypatch.setattr(sampling, "CHUNK_ELEMENTS", 3 * BLOCK + 5)
    return request.param


# ------------------------------------------------------------------- property tests


@given(case=draft_target_pairs(vocab_size=vocab_sizes(max_size=9000), batch_size=st.integers(1, 12),
                               num_draft_tokens=KS),
       seed=st.integers(0, 2**32 - 1), validate=st.booleans())
def test_same_as_reference_on_every_family(case, seed, validate):
    note(case.repro(seed))
    args = (case.draft_token_ids, case.draft_probs, case.target_probs)
    assert_same(args, seed, validate=validate)


@given(case=draft_target_pairs(vocab_size=st.sampled_from([4095, 4096, 4097, 5121, 8193]),
                               batch_size=st.integers(1, 40), num_draft_tokens=KS),
       seed=st.integers(0, 2**32 - 1), validate=st.booleans())
def test_same_as_reference_with_tiny_chunks(case, seed, validate):
    """Chunks of two rows: group splits (rejected / bonus), chunk edges and search chunks
    are all crossed at small B."""
    note(case.repro(seed))
    with mock.patch.object(sampling, "CHUNK_ELEMENTS", 2 * case.vocab_size + 1):
        assert_same((case.draft_token_ids, case.draft_probs, case.target_probs), seed, validate=validate)


@settings(max_examples=max(1, settings.default.max_examples // 3))
@given(case=draft_target_pairs(vocab_size=st.sampled_from(REAL_VOCAB_SIZES), batch_size=st.integers(1, 2),
                               num_draft_tokens=st.sampled_from([1, 4]), dtypes=("float32", "bfloat16")),
       seed=st.integers(0, 2**32 - 1))
def test_same_as_reference_on_real_vocabularies(case, seed):
    note(case.repro(seed))
    assert_same((case.draft_token_ids, case.draft_probs, case.target_probs), seed)


# ------------------------------------------------------------------- a fixed grid


def grid_inputs(B, K, V, seed, kind, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (B, K), generator=g)
    q = torch.rand(B, K, V, generator=g, dtype=torch.float64) ** 4
    p = torch.rand(B, K + 1, V, generator=g, dtype=torch.float64) ** 4
    if kind == "zeros":  # exact zeros on both sides, and in whole blocks
        q[:, :, : V // 2] = 0
        p[:, :, V // 3:] = 0
        p[:, :, 0] += 1e-3
    elif kind == "ties":  # few distinct values: equal probabilities everywhere
        q = (q * 4).ceil() / 4
        p = (p * 4).ceil() / 4
    elif kind == "no_mass":  # target == draft: every rejection leaves an empty residual
        p[:, :K] = q
        ids[:, 0] = 1  # q(d) = p(d) = 0: the first draft is always rejected
        q[:, 0, 1] = 0
        p[:, 0, 1] = 0
    elif kind == "last_block":  # all target mass in the short last block (V % BLOCK != 0)
        p[:, :, : V - V % BLOCK] = 0
        p[:, :, -1] += 1e-3
    elif kind == "accept_all":  # target = draft: every draft accepted, bonus rows only
        p[:, :K] = q
    return ids, q.to(dtype), p.to(dtype)


@pytest.mark.parametrize("V", [3, 1000, 4 * BLOCK, 4 * BLOCK + 1, 5000, 9216, 32000])
@pytest.mark.parametrize("K", [1, 4, 8])
@pytest.mark.parametrize("kind", ["dense", "zeros", "ties", "no_mass", "last_block", "accept_all"])
def test_same_as_reference_on_a_grid(V, K, kind, chunks):
    if V == 32000 and K == 8 and chunks == "tiny":
        pytest.skip("covered by K=4 at this V (too slow with tiny chunks)")
    B = 3 if V == 32000 else 33
    args = grid_inputs(B, K, V, seed=V + K, kind=kind)
    for seed in range(3):
        for validate in (True, False):
            assert_same(args, seed, validate=validate)


@pytest.mark.parametrize("dtypes", [(torch.float64, torch.float64), (torch.float16, torch.float16),
                                    (torch.bfloat16, torch.bfloat16), (torch.float16, torch.bfloat16),
                                    (torch.float64, torch.float32), (torch.float32, torch.float64)])
@pytest.mark.parametrize("V", [700, 6000])
def test_same_as_reference_on_mixed_dtypes(dtypes, V, chunks):
    ids, q, p = grid_inputs(17, 3, V, seed=1, kind="zeros")
    args = (ids.int(), q.to(dtypes[0]), p.to(dtypes[1]))  # int32 ids too
    for seed in range(4):
        assert_same(args, seed)


@pytest.mark.parametrize("u", [0.0, 0.5, 1 - 2**-53])
@pytest.mark.parametrize("V", [1000, 5000])
@pytest.mark.parametrize("kind", ["dense", "zeros", "last_block"])
def test_same_as_reference_at_extreme_uniforms(u, V, kind, chunks, monkeypatch):
    """The last draw pinned at 0 (first positive id) and at 1 - 2**-53, where the target
    rounds up to the row's (or block's) total and must map to its last positive id."""
    monkeypatch.setattr(sampling, "uniform", lambda shape, g, device: torch.full(shape, u, dtype=torch.float64))
    args = grid_inputs(33, 4, V, seed=7, kind=kind)
    assert_same(args, 0)


def test_same_as_reference_on_a_large_batch():
    """B = 600 > one search chunk (256 rows); ragged acceptance across chunks."""
    args = grid_inputs(600, 4, 5000, seed=3, kind="dense")
    out = assert_same(args, 0)
    assert len(set((out >= 0).sum(1).tolist())) > 2


@pytest.mark.parametrize("layout", ["expanded", "k_sliced", "v_sliced", "transposed"])
@pytest.mark.parametrize("V", [900, 6000])
def test_same_as_reference_on_odd_layouts(layout, V, chunks):
    """Layouts with no ``[B*N, V]`` view, stride-0 rows and non-unit vocabulary strides."""
    ids, q, p = grid_inputs(9, 3, V, seed=4, kind="zeros")
    if layout == "expanded":  # one row repeated (the statistical tests do this)
        ids, q, p = ids, q[:1].expand(9, -1, -1), p[:1].expand(9, -1, -1)
    elif layout == "k_sliced":  # a slice of a longer chain: no [B*(K+1), V] view
        q = torch.cat([q, q], 1)[:, :3]
        p = torch.cat([p, p], 1)[:, :4]
    elif layout == "v_sliced":  # rows with a stride larger than V
        q = torch.cat([q, q], 2)[..., :V]
        p = torch.cat([p, p], 2)[..., :V]
    else:  # vocabulary dimension not contiguous
        q = q.transpose(1, 2).contiguous().transpose(1, 2)
        p = p.transpose(0, 2).contiguous().transpose(0, 2)
    for seed in range(4):
        for validate in (True, False):
            assert_same((ids, q, p), seed, validate=validate)


@pytest.mark.parametrize("V", [1000, 5000])
def test_small_inputs_take_the_reference_path(V, monkeypatch):
    monkeypatch.setattr(sampling, "SMALL_ELEMENTS", 1 << 15)
    calls = []
    real = residual_sampling.sample_last_tokens
    monkeypatch.setattr("specexact.decoders.rejection_sampling.sample_last_tokens",
                        lambda *a: calls.append(a[0].shape) or real(*a))
    for B in (1, 6, 7, 40):
        args = grid_inputs(B, 3, V, seed=B, kind="zeros")
        assert_same(args, 0)
    big = [shape[0] * shape[2] > (1 << 15) for shape in calls]
    assert calls and all(big), calls  # only inputs above the threshold took the fast path


def test_default_generator_is_advanced_the_same_way():
    args = grid_inputs(5, 2, 5000, seed=2, kind="dense")
    torch.manual_seed(11)
    ref = verify_reference(*args)
    state = torch.get_rng_state()
    torch.manual_seed(11)
    assert torch.equal(verify(*args), ref)
    assert torch.equal(torch.get_rng_state(), state)


def test_inputs_are_not_modified():
    args = grid_inputs(6, 3, 5000, seed=5, kind="zeros")
    before = [a.clone() for a in args]
    verify(*args, torch.Generator().manual_seed(0))
    assert all(torch.equal(a, b) for a, b in zip(args, before))


def test_speculative_decoding_with_either_verifier_is_identical():
    """The decoder around verify vs verify_reference: same tokens, same generator state."""
    def run(verifier):
        target = ToyLM(ToyLMConfig(vocab_size=5000, seed=5, eos_token_id=4999, eos_logit=-1.0))
        draft = target.draft(0.6)
        prompts = torch.randint(0, 5000, (24, 2), generator=torch.Generator().manual_seed(1))
        g = torch.Generator().manual_seed(2)
        out = speculative_generate(target, draft, prompts, SamplingParams(temperature=0.9, top_p=0.95),
                                   num_draft_tokens=4, max_new_tokens=9, generator=g,
                                   eos_token_id=4999, verifier=verifier)
        return out, g.get_state()

    (fast, g_fast), (ref, g_ref) = run(verify), run(verify_reference)
    assert torch.equal(fast.tokens, ref.tokens) and torch.equal(fast.accepted_lengths, ref.accepted_lengths)
    assert torch.equal(g_fast, g_ref)


def reference_residual(ids, q, p, out):
    """The ``[B, V]`` rows the reference samples the last token from (its own formula)."""
    B, K = ids.shape
    stop = (out >= 0).sum(1) - 1
    dtype = torch.promote_types(p.dtype, torch.float32)
    rows = torch.arange(B)
    target_row = p[rows, stop].to(dtype)
    draft_row = q[rows, stop.clamp(max=K - 1)].to(dtype)
    residual = torch.where((stop < K)[:, None], (target_row - draft_row).clamp_min(0), target_row)
    no_mass = residual.amax(-1) <= 0
    return torch.where(no_mass[:, None], target_row, residual)


@pytest.mark.parametrize("kind", ["dense", "zeros", "no_mass", "last_block"])
@pytest.mark.parametrize("dtypes", [(torch.float32, torch.float32), (torch.float16, torch.float64),
                                    (torch.float64, torch.bfloat16)])
def test_block_masses_and_blocks_are_the_reference_ones(kind, dtypes, chunks, monkeypatch):
    """White box: the float64 block masses and the chosen blocks the fast path searches are
    bit for bit those of the reference's materialised residual rows (token equality alone
    would miss a rounding difference: it moves a token with probability ~1e-16)."""
    seen = {}
    real = residual_sampling.search_blocks

    def spy(block_mass, inner, generator):
        seen.update(mass=block_mass.clone(), inner=inner)
        return real(block_mass, inner, generator)

    monkeypatch.setattr(residual_sampling, "search_blocks", spy)
    V = 5 * BLOCK + 300
    ids, q, p = grid_inputs(21, 3, V, seed=6, kind=kind)
    q, p = q.to(dtypes[0]), p.to(dtypes[1])
    out = verify(ids, q, p, torch.Generator().manual_seed(0))
    residual = reference_residual(ids, q, p, out)
    blocks = torch.nn.functional.pad(residual, (0, (-V) % BLOCK)).view(21, -1, BLOCK)
    assert torch.equal(seen["mass"], blocks.sum(-1, dtype=torch.float64))
    for b in range(blocks.shape[1]):
        chosen = torch.full((21,), b)
        assert torch.equal(seen["inner"](0, 21, chosen), blocks[:, b]), b
        assert torch.equal(seen["inner"](5, 9, chosen[5:9]), blocks[5:9, b]), b


@pytest.fixture
def searches(monkeypatch):
    """Record the (rows, target) arguments of every inverse-CDF search, of the reference
    (``_inverse_cdf``) and of the fast path (``_inverse_cdf_fast``), in call order."""
    seen = {"reference": [], "fast": []}
    for name, key in (("_inverse_cdf", "reference"), ("_inverse_cdf_fast", "fast")):
        real = getattr(sampling, name)

        def spy(probs, target, _real=real, _key=key):
            seen[_key].append((probs.clone(), target.clone()))
            return _real(probs, target)

        monkeypatch.setattr(sampling, name, spy)
    return seen


@pytest.mark.parametrize("V", [1000, 4 * BLOCK, 4 * BLOCK + 1, 5 * BLOCK + 300])
@pytest.mark.parametrize("kind", ["dense", "zeros", "no_mass", "accept_all"])
@pytest.mark.parametrize("dtypes", [(torch.float32, torch.float32), (torch.float16, torch.float64)])
def test_searched_rows_and_targets_are_the_reference_ones(V, kind, dtypes, chunks, searches):
    """White box: the rows (or blocks) searched and the float64 targets located in them
    (``u * total``, or the offset inside the chosen block) are bit for bit the reference's;
    a rounding difference in a total would change a token only with probability ~1e-16."""
    ids, q, p = grid_inputs(40, 3, V, seed=8, kind=kind)
    args = (ids, q.to(dtypes[0]), p.to(dtypes[1]))
    verify_reference(*args, torch.Generator().manual_seed(0))
    verify(*args, torch.Generator().manual_seed(0))
    for i in (0, 1):
        ref = torch.cat([call[i] for call in searches["reference"]])
        fast = torch.cat([call[i] for call in searches["fast"]])
        assert ref.dtype == fast.dtype and torch.equal(ref, fast)


# ------------------------------------------------------------------- errors


def corrupt(kind: str):
    ids, q, p = grid_inputs(4, 2, 5000, seed=0, kind="dense")
    if kind == "nan":
        q[1, 0, 7] = float("nan")
    elif kind == "nan_last":  # in the last row (the last chunk)
        q[-1, -1, -1] = float("nan")
    elif kind == "negative_last":
        p[-1, -1, -1] = -1e-3
    elif kind == "inf":
        p[2, 1, 3] = float("inf")
    elif kind == "-inf":
        p[2, 1, 3] = -float("inf")
    elif kind == "negative":
        p[0, 2, 9] = -1e-3
    elif kind == "negative_zero_only_row":  # -0.0 passes (>= 0) but the row has no mass
        q[3, 1] = -0.0
    elif kind == "empty_row":
        q[3, 1] = 0
    elif kind == "bad_id":
        ids[0, 0] = 5000
    elif kind == "negative_id":
        ids[1, 1] = -1
    elif kind == "bool_ids":
        ids = ids > 0
    elif kind == "float_ids":
        ids = ids.float()
    elif kind == "int_probs":
        q = q.long()
    elif kind == "bad_shape":
        p = p[:, :2]
    elif kind == "bad_vocab":
        q = q[..., :4000]
    elif kind == "ids_1d":
        ids = ids[0]
    elif kind == "empty_batch":
        ids, q, p = ids[:0], q[:0], p[:0]
    elif kind == "k0":
        ids, q, p = ids[:, :0], q[:, :0], p[:, :1]
    elif kind == "v0":
        q, p = q[..., :0], p[..., :0]
    elif kind == "not_a_tensor":
        q = q.tolist()
    return ids, q, p


ERRORS = ["nan", "nan_last", "negative_last", "inf", "-inf", "negative", "negative_zero_only_row", "empty_row", "bad_id", "negative_id",
          "bool_ids", "float_ids", "int_probs", "bad_shape", "bad_vocab", "ids_1d", "empty_batch", "k0", "v0",
          "not_a_tensor"]


@pytest.mark.parametrize("kind", ERRORS)
def test_raises_what_the_reference_raises(kind, chunks):
    args = corrupt(kind)
    with pytest.raises((TypeError, ValueError)) as ref_err:
        validate_verify_inputs_reference(*args)
    with pytest.raises(type(ref_err.value)) as fast_err:
        validate_verify_inputs(*args)
    assert str(fast_err.value) == str(ref_err.value)
    g_ref, g_fast = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    with pytest.raises(type(ref_err.value)) as ref_verify_err:
        verify_reference(*args, g_ref)
    with pytest.raises(type(ref_err.value)) as fast_verify_err:
        verify(*args, g_fast)
    assert str(fast_verify_err.value) == str(ref_verify_err.value) == str(ref_err.value)
    assert torch.equal(g_fast.get_state(), g_ref.get_state())  # nothing drawn by either


@pytest.mark.parametrize("V", [1000, 5000])
def test_overflowing_float64_rows_raise_what_the_reference_raises(V):
    """Valid float64 input whose row sum overflows: validation passes, the draw refuses
    (after the acceptance draws, before the last one) in both."""
    ids, q, p = grid_inputs(3, 1, V, seed=0, kind="dense", dtype=torch.float64)
    p[1] = 1e308
    g_ref, g_fast = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    with pytest.raises(ValueError) as ref_err:
        verify_reference(ids, q, p, g_ref)
    with pytest.raises(ValueError) as fast_err:
        verify(ids, q, p, g_fast)
    assert str(fast_err.value) == str(ref_err.value) and "no positive finite mass" in str(ref_err.value)
    assert torch.equal(g_fast.get_state(), g_ref.get_state())


@pytest.mark.parametrize("layout", ["contiguous", "expanded", "k_sliced"])
def test_fast_validation_calls_the_reference_only_on_failure(layout, chunks, monkeypatch):
    import specexact.decoders.verify_inputs as verify_inputs

    calls = []
    real = verify_inputs.validate_verify_inputs_reference
    monkeypatch.setattr(verify_inputs, "validate_verify_inputs_reference",
                        lambda *a: calls.append(1) or real(*a))
    ids, q, p = grid_inputs(5, 3, 5000, seed=0, kind="zeros")
    if layout == "expanded":
        q, p = q[:1].expand(5, -1, -1), p[:1].expand(5, -1, -1)
    elif layout == "k_sliced":
        q, p = torch.cat([q, q], 1)[:, :3], torch.cat([p, p], 1)[:, :4]
    validate_verify_inputs(ids, q, p)
    assert calls == []
    p = p.clone()
    p[-1, -1, -1] = float("nan")
    with pytest.raises(ValueError, match="target_probs has a NaN"):
        validate_verify_inputs(ids, q, p)
    assert calls == [1]


def test_valid_inputs_pass_both_validations():
    ids, q, p = grid_inputs(4, 2, 5000, seed=0, kind="zeros")
    q[0, 0, 5] = -0.0  # -0.0 >= 0: allowed by both
    p[1, 1, :] = torch.finfo(torch.float32).max / 8000  # large but finite
    validate_verify_inputs_reference(ids, q, p)
    validate_verify_inputs(ids, q, p)
    assert verify(ids, q, p, torch.Generator().manual_seed(0)).shape == (4, 3)


def test_placeholder_id_is_importable_from_the_module():
    assert PLACEHOLDER_ID == -1


def test_laws_with_autograd_history_give_the_reference_tokens():
    """Laws from ``softmax`` outside ``no_grad`` carry autograd history; the fast path's
    ``out=`` kernels refuse such tensors, so ``verify`` detaches them (the ids do not depend
    on it)."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 32000, generator=g, requires_grad=True)
    target = logits.softmax(-1)
    draft = (logits[:, :2] * 0.5).softmax(-1)
    ids = torch.randint(0, 32000, (2, 2), generator=g)
    for validate in (True, False):
        a = verify(ids, draft, target, torch.Generator().manual_seed(1), validate=validate)
        b = verify_reference(ids, draft, target, torch.Generator().manual_seed(1), validate=validate)
        assert torch.equal(a, b)


def test_a_generator_of_the_wrong_type_is_named():
    q = torch.full((1, 1, 4), 0.25)
    p = torch.full((1, 2, 4), 0.25)
    for fn in (verify, verify_reference):
        with pytest.raises(TypeError, match="generator must be a torch.Generator or None, got int"):
            fn(torch.zeros(1, 1, dtype=torch.long), q, p, 5)
