"""The fast paths of the decoders return what their readable references return, bit for bit.

- ``process_logits`` vs ``process_logits_reference`` (every family of the pipeline
  strategies, large vocabularies, mixed rows, and the same errors);
- ``ToyLM`` with its state cache vs recomputing the states from scratch;
- the naive and speculative decoders with all fast paths vs with the references patched in:
  the same tokens and the same generator state afterwards.
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import specexact.decoders.naive as naive_module
import specexact.decoders.speculative as speculative_module
from specexact.decoders import (
    SamplingParams,
    ToyLM,
    ToyLMConfig,
    batch_params,
    naive_generate,
    process_logits,
    speculative_generate,
)
from specexact.decoders.pipeline import process_logits_reference
from specexact.strategies import REAL_VOCAB_SIZES, pipeline_cases


def assert_same(fast: torch.Tensor, ref: torch.Tensor) -> None:
    assert fast.dtype == ref.dtype and fast.shape == ref.shape
    # torch.equal treats NaN as unequal: compare NaN masks, then the rest bit for bit.
    assert torch.equal(torch.isnan(fast), torch.isnan(ref))
    assert torch.equal(torch.nan_to_num(fast, nan=0.0), torch.nan_to_num(ref, nan=0.0))


@given(case=pipeline_cases())
def test_process_logits_equals_reference_on_every_family(case):
    fast = process_logits(case.logits, case.batched_params, case.history_tensor)
    ref = process_logits_reference(case.logits, case.batched_params, case.history_tensor)
    assert_same(fast, ref)


@settings(max_examples=max(1, settings.default.max_examples // 3))
@given(case=pipeline_cases(vocab_size=st.sampled_from(REAL_VOCAB_SIZES), batch_size=st.integers(1, 3)))
def test_process_logits_equals_reference_on_real_vocabularies(case):
    fast = process_logits(case.logits, case.batched_params, case.history_tensor)
    ref = process_logits_reference(case.logits, case.batched_params, case.history_tensor)
    assert_same(fast, ref)


ROW_PARAMS = [
    SamplingParams(),
    SamplingParams(temperature=0),
    SamplingParams(temperature=0.7, top_k=5),
    SamplingParams(top_p=0.9),
    SamplingParams(temperature=1.3, min_p=0.05, top_k=40, top_p=0.8),
    SamplingParams(repetition_penalty=1.4, frequency_penalty=-0.3, presence_penalty=0.6),
    SamplingParams(temperature=0.5, repetition_penalty=0.7, top_k=3),
    SamplingParams(temperature=2.0, frequency_penalty=0.5),
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("rows", [[0], [0, 1], [2, 2, 2], [3, 3], list(range(8)), [5, 0, 7, 1]])
@pytest.mark.parametrize("masked", [False, True])
def test_process_logits_equals_reference_on_mixed_rows(dtype, rows, masked):
    g = torch.Generator().manual_seed(len(rows) * 7 + masked)
    B, V = len(rows), 3000
    logits = (torch.randn(B, V, generator=g, dtype=torch.float64) * 3).to(dtype)
    if masked:
        logits[:, ::3] = -torch.inf
        logits[:, 1] = 0.0  # an exact zero logit, both signs below
        logits[:, 2] = -0.0
    history = torch.randint(-1, V, (B, 9), generator=g)
    history[:, :3] = torch.tensor([1, 2, 1])  # repeats and the zero logits
    bp = batch_params([ROW_PARAMS[r] for r in rows], B)
    for h in (None, history, history[:, :0]):
        assert_same(process_logits(logits, bp, h), process_logits_reference(logits, bp, h))


@pytest.mark.parametrize("make", [
    lambda: (torch.tensor([[0.0, float("nan")]]), 1, None),
    lambda: (torch.tensor([[0.0, float("inf")]]), 1, None),
    lambda: (torch.tensor([[1.0, 2.0], [-float("inf"), -float("inf")]]), 2, None),
    lambda: (torch.tensor([[float("nan"), float("inf")]]), 1, None),
    lambda: (torch.zeros(2, 3, 4), 2, None),
    lambda: (torch.zeros(2, 0), 2, None),
    lambda: (torch.zeros(2, 3, dtype=torch.int64), 2, None),
    lambda: (torch.zeros(2, 3), 3, None),
    lambda: (torch.zeros(2, 3), 2, torch.zeros(3, 1, dtype=torch.int64)),
    lambda: (torch.zeros(2, 3), 2, torch.tensor([[0], [3]])),
    lambda: (torch.zeros(2, 3), 2, torch.tensor([[0], [-2]])),
])
def test_process_logits_raises_what_the_reference_raises(make):
    logits, B, history = make()
    bp = batch_params(SamplingParams(repetition_penalty=1.2), B)
    with pytest.raises(Exception) as ref_err:
        process_logits_reference(logits, bp, history)
    with pytest.raises(type(ref_err.value)) as fast_err:
        process_logits(logits, bp, history)
    assert str(fast_err.value) == str(ref_err.value)


def test_process_logits_does_not_modify_its_input():
    logits = torch.randn(3, 50)
    before = logits.clone()
    history = torch.tensor([[1, 2, 2], [3, -1, -1], [4, 4, 4]])
    process_logits(logits, batch_params(SamplingParams(repetition_penalty=2.0, top_k=4), 3), history)
    assert torch.equal(logits, before)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_toylm_state_cache_equals_recomputation(dtype):
    cached = ToyLM(ToyLMConfig(vocab_size=40, seed=3), dtype=dtype)
    fresh = ToyLM(ToyLMConfig(vocab_size=40, seed=3), dtype=dtype)
    fresh.cache_states = False
    g = torch.Generator().manual_seed(0)
    base = torch.randint(-1, 40, (33, 25), generator=g)
    for step in range(120):
        B = 33 if step % 5 else 6  # batch size changes now and then
        T = int(torch.randint(1, 26, (1,), generator=g))
        ids = base[:B, :T].clone()
        if step % 3 == 0:  # one row differs somewhere
            ids[int(torch.randint(0, B, (1,), generator=g)), int(torch.randint(0, T, (1,), generator=g))] = 7
        positions = torch.randint(0, T, (B, 3), generator=g) if step % 2 else None
        assert torch.equal(cached(ids, positions), fresh(ids, positions))
        if step % 4 == 0:  # the shared prefix changes from some column on
            base[:, int(torch.randint(0, 25, (1,), generator=g))] = torch.randint(0, 40, (33,), generator=g)


@pytest.fixture
def reference_paths(monkeypatch):
    """Patch the decoders back onto the reference pipeline and state recomputation."""
    def use_reference():
        monkeypatch.setattr(naive_module, "process_logits", process_logits_reference)
        monkeypatch.setattr(speculative_module, "process_logits", process_logits_reference)
        monkeypatch.setattr(ToyLM, "cache_states", False)
    return use_reference


CASES = [
    # (V, eos, params per row, gamma)
    (12, 0, [SamplingParams(temperature=0.9), SamplingParams(top_k=6, repetition_penalty=1.3)], 3),
    (6, 5, [SamplingParams(temperature=0.8, top_p=0.85, repetition_penalty=1.5),
            SamplingParams(temperature=0, frequency_penalty=0.4)], 2),
    (5000, 4999, [SamplingParams(temperature=0.9, top_p=0.95),
                  SamplingParams(min_p=0.01, presence_penalty=0.5)], 4),
]


@pytest.mark.parametrize("V,eos,params,gamma", CASES)
def test_decoders_with_fast_paths_equal_the_reference_paths(reference_paths, V, eos, params, gamma):
    def run():
        target = ToyLM(ToyLMConfig(vocab_size=V, seed=5, eos_token_id=eos, eos_logit=-1.0))
        draft = target.draft(0.6)
        B = 64
        rows = [params[r % len(params)] for r in range(B)]
        drafts = [SamplingParams(temperature=1.2, top_k=min(V, 8)) if r % 3 == 0 else rows[r] for r in range(B)]
        prompts = torch.randint(0, V, (B, 2), generator=torch.Generator().manual_seed(1))
        g = torch.Generator().manual_seed(2)
        spec = speculative_generate(target, draft, prompts, rows, drafts, num_draft_tokens=gamma,
                                    max_new_tokens=9, generator=g, eos_token_id=eos)
        naive = naive_generate(target, prompts, rows, max_new_tokens=9, generator=g, eos_token_id=eos)
        return spec, naive, g.get_state()

    fast = run()
    reference_paths()
    ref = run()
    for a, b in zip(fast[:2], ref[:2]):
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.num_tokens, b.num_tokens)
        assert a.target_calls == b.target_calls
    assert torch.equal(fast[0].accepted_lengths, ref[0].accepted_lengths)
    assert torch.equal(fast[2], ref[2])


def test_reference_pipeline_is_exported():
    logits = torch.randn(2, 10)
    bp = batch_params(SamplingParams(top_p=0.5), 2)
    assert torch.equal(process_logits(logits, bp), process_logits_reference(logits, bp))


def _laws(kind: str, R: int, V: int, g: torch.Generator) -> torch.Tensor:
    if kind == "zipf":
        x = torch.randn(R, V, generator=g, dtype=torch.float64) * 0.3 - 1.2 * torch.log1p(
            torch.randperm(V, generator=g).to(torch.float64))
        p = torch.softmax(x, -1)
    elif kind == "flat":
        p = torch.rand(R, V, generator=g, dtype=torch.float64)
    elif kind == "dyadic":  # equal tiers of power-of-two masses: cumulative sums hit top_p exactly
        p = torch.zeros(R, V, dtype=torch.float64)
        for r in range(R):
            ids = torch.randperm(V, generator=g)
            p[r, ids[:8]] = 1 / 16
            p[r, ids[8:24]] = 1 / 64
            p[r, ids[24:280]] = 1 / 1024
    elif kind == "sparse":  # most tokens cut (probability 0), ties among the rest
        p = torch.rand(R, V, generator=g, dtype=torch.float64).round(decimals=2)
        p[:, torch.randperm(V, generator=g)[: V - 300]] = 0
        p[:, 0] += 1e-3
    else:
        raise ValueError(kind)
    return p / p.sum(-1, keepdim=True)


@pytest.mark.parametrize("kind", ["zipf", "flat", "dyadic", "sparse"])
@pytest.mark.parametrize("V", [256, 1000, 4096, 32000])
def test_nucleus_fast_equals_reference_on_positive_tokens(kind, V):
    from specexact.decoders.pipeline import _nucleus_fast, _nucleus_reference

    g = torch.Generator().manual_seed(V)
    p = _laws(kind, 6, V, g)
    for top_p in (1e-9, 0.05, 0.5, 0.75, 0.8125, 0.9, 0.95, 0.999, 1 - 2**-52):
        tp = torch.full((6,), top_p, dtype=torch.float64)
        tp[1] = 0.5  # mixed rows
        fast, ref = _nucleus_fast(p, tp), _nucleus_reference(p, tp)
        positive = p > 0
        assert torch.equal(fast & positive, ref & positive), (kind, V, top_p)


def test_nucleus_fast_falls_back_on_nan_rows():
    from specexact.decoders.pipeline import _nucleus_fast, _nucleus_reference

    p = _laws("zipf", 3, 5000, torch.Generator().manual_seed(0))
    p[1] = torch.nan
    tp = torch.full((3,), 0.9, dtype=torch.float64)
    assert torch.equal(_nucleus_fast(p, tp), _nucleus_reference(p, tp))


@pytest.mark.parametrize("scale", [1.0, 1e30, 3e37, 3e38])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("params", [SamplingParams(), SamplingParams(temperature=0.05),
                                    SamplingParams(repetition_penalty=20.0, top_p=0.9),
                                    SamplingParams(frequency_penalty=1e36, top_k=3)])
def test_process_logits_overflow_guard_equals_reference(scale, masked, params):
    g = torch.Generator().manual_seed(3)
    logits = (torch.randn(3, 700, generator=g, dtype=torch.float64).clamp(-1, 1) * scale).to(torch.float32)
    if masked:
        logits[:, 5::4] = -torch.inf
    history = torch.tensor([[1, 2, 2], [3, -1, -1], [0, 0, 4]])
    bp = batch_params(params, 3)
    for h in (None, history):
        assert_same(process_logits(logits, bp, h), process_logits_reference(logits, bp, h))
