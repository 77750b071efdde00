"""The decoders' shared-law fast path against their every-row references, bit for bit.

``speculative_generate`` / ``naive_generate`` compute each distinct law of a call once
(``specexact.decoders.law_table``); ``speculative_generate_reference`` /
``naive_generate_reference`` run the models and the pipeline on every row. Same tokens,
accepted lengths, generator state afterwards, verifier inputs and observer records.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from specexact.audit.cases.decoder_case import default_cases
from specexact.decoders import (
    SamplingParams,
    ToyLM,
    ToyLMConfig,
    naive_generate,
    naive_generate_reference,
    sample_from_probs,
    sample_from_table,
    speculative_generate,
    speculative_generate_reference,
    verify,
)
from specexact.decoders.adapters.builtin_logits import LogitsLevelVerifier
from specexact.decoders import law_table
from specexact.decoders.law_table import MIN_ROWS, SHARE_MIN_VOCAB, distinct_rows, model_laws
from specexact.decoders.pipeline import process_logits
from specexact.decoders.params import batch_params
from specexact.strategies import pipeline_cases, sampling_params

# --------------------------------------------------------------------------- helpers


@pytest.fixture(autouse=True, scope="module")
def share_every_vocabulary():
    """Share laws at every vocabulary size here (the decoders share from SHARE_MIN_VOCAB
    on), so the small exact cases exercise the table too."""
    saved = law_table.SHARE_MIN_VOCAB
    law_table.SHARE_MIN_VOCAB = 1
    yield
    law_table.SHARE_MIN_VOCAB = saved


class Recorder:
    """A verifier that records copies of its inputs and delegates to ``inner``."""

    def __init__(self, inner=verify):
        self.inner, self.calls = inner, []

    def __call__(self, ids, draft_probs, target_probs, generator):
        self.calls.append((ids.clone(), draft_probs.clone(), target_probs.clone()))
        return self.inner(ids, draft_probs, target_probs, generator)


class PlainModel:
    """A ToyLM seen only through ``model(input_ids, positions)`` (no states exposed)."""

    def __init__(self, model):
        self.model, self.vocab_size, self.device = model, model.vocab_size, model.device

    def __call__(self, input_ids, positions=None):
        return self.model(input_ids, positions)


def _records():
    out = []

    def observer(r):
        out.append(tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in
                         (r.round_index, r.rows, r.num_generated, r.draft_token_ids, r.draft_probs,
                          r.target_probs, r.output, r.num_emitted, r.num_kept)))
    return out, observer


def _same(a, b) -> None:
    assert type(a) is type(b)
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape
        if a.is_floating_point():  # bit for bit (signed zeros and NaN payloads too)
            a, b = (t.contiguous().view(-1).view(torch.uint8) for t in (a, b))
        assert torch.equal(a, b)
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a == b


def run_both_speculative(target, draft, prompts, tp, dp, *, gamma, length, eos, seed, verifier_factory=Recorder,
                         models_fast=None):
    """Run the fast and the reference decoder from the same seed; return both sides' evidence."""
    sides = []
    for fn, models in ((speculative_generate, models_fast or (target, draft)),
                       (speculative_generate_reference, (target, draft))):
        g = torch.Generator().manual_seed(seed)
        rec, observer = _records()
        verifier = verifier_factory()
        out = fn(*models, prompts, tp, dp, num_draft_tokens=gamma, max_new_tokens=length, generator=g,
                 eos_token_id=eos, verifier=verifier, observer=observer)
        sides.append((out.tokens, out.num_tokens, out.accepted_lengths, out.target_calls, out.draft_calls,
                      g.get_state(), rec, getattr(verifier, "calls", None)))
    return sides


def assert_speculative_identical(*args, **kw) -> None:
    fast, ref = run_both_speculative(*args, **kw)
    _same(fast, ref)


def assert_naive_identical(target, prompts, params, *, length, eos, seed, processing=None) -> None:
    sides = []
    for fn in (naive_generate, naive_generate_reference):
        g = torch.Generator().manual_seed(seed)
        out = fn(target, prompts, params, max_new_tokens=length, generator=g, eos_token_id=eos,
                 processing=processing)
        sides.append((out.tokens, out.num_tokens, out.target_calls, g.get_state()))
    _same(*sides)


def case_inputs(case, batch_size):
    case = replace(case, batch_size=batch_size)
    target, draft = case.models()
    prompts, tp, dp = case.batch()
    return case, target, draft, prompts, tp, dp


# --------------------------------------------------------------------------- the building blocks


@given(case=pipeline_cases(batch_size=st.integers(1, 3)), copies=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_pipeline_rows_do_not_depend_on_the_rows_beside_them(case, copies, seed):
    """What sharing relies on: a row's processed law is the same whether it is processed
    among all rows of a batch or among the distinct ones (at least MIN_ROWS rows)."""
    g = torch.Generator().manual_seed(seed)
    B = case.batch_size
    rows = torch.randint(0, B, (B * copies + MIN_ROWS,), generator=g)  # a batch with repeats
    hist = case.history_tensor
    full = process_logits(case.logits[rows], case.batched_params.select(rows),
                          None if hist is None else hist[rows])
    rep = torch.cat([torch.arange(B), torch.zeros(MIN_ROWS, dtype=torch.int64)])  # distinct rows, padded
    alone = process_logits(case.logits[rep], case.batched_params.select(rep), None if hist is None else hist[rep])
    present = torch.unique(rows)
    for r in present.tolist():
        _same(full[(rows == r).nonzero()[0, 0]], alone[r])


def test_rows_that_differ_beyond_the_probed_logits_do_not_share_a_law():
    V = 5000
    logits = torch.randn(1, V, generator=torch.Generator().manual_seed(0)).repeat(12, 1)
    logits[5, 1] = torch.nextafter(logits[5, 1], torch.tensor(torch.inf))  # one ulp, not a probed column
    logits[7, 2] = -logits[7, 2]
    params = batch_params(SamplingParams(top_p=0.9), 12)
    hist = torch.zeros(12, 0, dtype=torch.int64)

    class Fixed:
        vocab_size, device = V, torch.device("cpu")

        def __call__(self, input_ids, positions):
            return logits[:, None]

    ids, pos = torch.zeros(12, 1, dtype=torch.int64), torch.zeros(12, 1, dtype=torch.int64)
    table = model_laws(Fixed(), ids, pos, params, hist, process=process_logits)
    assert table.inverse is not None
    assert len(set(table.inverse.tolist())) == 3
    assert table.inverse[5] != table.inverse[0] and table.inverse[7] != table.inverse[0]
    _same(table.rows(), model_laws(Fixed(), ids, pos, params, hist, process=process_logits, share=False).rows())


@given(st.lists(st.integers(0, 3), min_size=0, max_size=40), st.integers(1, 3))
def test_distinct_rows_are_first_occurrences_in_order_and_cover_every_row(values, width):
    key = torch.tensor(values, dtype=torch.int64).repeat_interleave(width).reshape(-1, width)
    key[:, -1] *= 7
    rep, inverse = distinct_rows(key)
    N = key.shape[0]
    assert inverse.shape == (N,)
    if N < MIN_ROWS:
        assert torch.equal(rep, torch.arange(N)) and torch.equal(inverse, torch.arange(N))
        return
    assert torch.equal(key[rep[inverse]], key)
    seen = []
    for v in values:
        if v not in seen:
            seen.append(v)
    U = len(seen)
    assert [values[i] for i in rep[:U].tolist()] == seen  # first rows, in order of appearance
    assert [values.index(v) for v in seen] == rep[:U].tolist()
    assert rep.numel() == max(U, MIN_ROWS) and bool((rep[U:] == rep[0]).all())
    assert int(inverse.max()) == U - 1


@given(V=st.sampled_from([3, 100, 4096, 4097, 5121, 8193, 32000, 32001]), U=st.integers(1, 12),
       N=st.integers(1, 40), seed=st.integers(0, 2**31 - 1), sparse=st.booleans())
def test_sample_from_table_matches_sampling_the_built_rows(V, U, N, seed, sparse):
    g = torch.Generator().manual_seed(seed)
    table = torch.rand(U, V, generator=g) ** 4
    if sparse:  # laws with holes, as truncation leaves them (whole blocks of zeros too)
        table = torch.where(torch.rand(U, V, generator=g) < 0.97, 0.0, table)
        table[:, 0] += 1e-3
    table = table / table.sum(-1, keepdim=True)
    index = torch.randint(0, U, (N,), generator=g)
    g1 = torch.Generator().manual_seed(seed + 1)
    g2 = torch.Generator().manual_seed(seed + 1)
    _same(sample_from_table(table, index, g1), sample_from_probs(table[index], g2))
    _same(g1.get_state(), g2.get_state())


def test_sample_from_table_raises_as_the_built_rows_do():
    table = torch.rand(3, 9000)
    table[1] = 0
    index = torch.tensor([0, 2, 2, 1, 0])
    with pytest.raises(ValueError) as fast:
        sample_from_table(table, index, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError) as ref:
        sample_from_probs(table[index], torch.Generator().manual_seed(0))
    assert str(fast.value) == str(ref.value) and "row 3" in str(fast.value)


def test_model_laws_shares_first_position_laws_and_matches_every_row():
    V = 4097
    model = ToyLM(ToyLMConfig(vocab_size=V, seed=3))
    prompts = torch.tensor([[1, 2]] * 20 + [[3, 4]] * 20)
    params = batch_params([SamplingParams(top_p=0.9)] * 20 + [SamplingParams(min_p=0.05, presence_penalty=0.3)] * 20,
                          40)
    hist = torch.zeros(40, 0, dtype=torch.int64)
    pos = torch.full((40, 1), 1)
    shared = model_laws(model, prompts, pos, params, hist, process=process_logits)
    ref = model_laws(model, prompts, pos, params, hist, process=process_logits, share=False)
    assert shared.probs.shape[0] == MIN_ROWS  # two distinct laws, padded
    assert int(shared.inverse.max()) == 1
    _same(shared.rows(), ref.rows())


# --------------------------------------------------------------------------- whole decoders


@pytest.mark.parametrize("case", [c for c in default_cases()], ids=lambda c: c.name)
def test_speculative_matches_reference_on_the_default_cases(case):
    case, target, draft, prompts, tp, dp = case_inputs(case, 16 * len(case.row_classes) * 4)
    for seed in (0, 1):
        assert_speculative_identical(target, draft, prompts, tp, dp, gamma=case.num_draft_tokens,
                                     length=case.length, eos=case.eos_token_id, seed=seed)


@pytest.mark.parametrize("case", [c for c in default_cases()], ids=lambda c: c.name)
def test_naive_matches_reference_on_the_default_cases(case):
    case, target, _, prompts, tp, _ = case_inputs(case, 16 * len(case.row_classes) * 4)
    for seed in (0, 1):
        assert_naive_identical(target, prompts, tp, length=case.length, eos=case.eos_token_id, seed=seed)


@pytest.mark.parametrize("V", [4097, 8193, 32001])
def test_speculative_and_naive_match_reference_at_tile_edge_vocabularies(V):
    """Large laws (the two-level sampler, the top-p candidate path) with truncation,
    penalties and EOS, several rounds."""
    base = next(c for c in default_cases() if c.name == "v4096-zipf")
    case = replace(base, model=replace(base.model, vocab_size=V, eos_token_id=V - 1), length=5)
    case, target, draft, prompts, tp, dp = case_inputs(case, 96)
    assert_speculative_identical(target, draft, prompts, tp, dp, gamma=3, length=5, eos=V - 1, seed=V)
    assert_naive_identical(target, prompts, tp, length=5, eos=V - 1, seed=V)


def test_speculative_matches_reference_with_a_logits_level_verifier():
    case = next(c for c in default_cases() if c.name == "v6-trunc-penalties")
    case, target, draft, prompts, tp, dp = case_inputs(case, 48)

    class Logits(LogitsLevelVerifier):
        def __init__(self):
            super().__init__()
            self.calls = []

        def verify_logits(self, inputs, generator):
            self.calls.append((inputs.target_logits.clone(), inputs.draft_probs.clone(),
                               inputs.output_token_ids.clone()))
            return super().verify_logits(inputs, generator)

    assert_speculative_identical(target, draft, prompts, tp, dp, gamma=3, length=6, eos=case.eos_token_id, seed=5,
                                 verifier_factory=Logits)


def test_naive_matches_reference_with_a_declared_processing():
    from specexact.decoders import LogitsProcessing

    case = next(c for c in default_cases() if c.name == "v7-rep-order")
    case, target, _, prompts, tp, _ = case_inputs(case, 48)
    hf = LogitsProcessing(order=("repetition_penalty", "temperature", "top_k", "top_p", "min_p"),
                          repetition_penalty_scope="prompt_and_output", greedy=False)
    assert_naive_identical(target, prompts, tp, length=5, eos=None, seed=2, processing=hf)


def test_models_without_states_take_the_every_row_path_with_the_same_output():
    case = next(c for c in default_cases() if c.name == "v4096-zipf")
    case, target, draft, prompts, tp, dp = case_inputs(case, 32)
    fast, ref = run_both_speculative(target, draft, prompts, tp, dp, gamma=3, length=3, eos=case.eos_token_id,
                                     seed=4, models_fast=(PlainModel(target), PlainModel(draft)))
    _same(fast, ref)


@pytest.mark.parametrize("B", [1, 2, MIN_ROWS - 1, MIN_ROWS, MIN_ROWS + 1])
def test_small_batches_and_rounds_with_few_active_rows(B):
    """Below MIN_ROWS rows the reference path runs; later rounds shrink to a few rows."""
    target = ToyLM(ToyLMConfig(vocab_size=5000, seed=9, eos_token_id=4999, eos_logit=1.0))
    draft = target.draft(0.9)
    prompts = torch.tensor([[1, 2]] * B)
    params = [SamplingParams(temperature=1.1, top_k=40, presence_penalty=0.4) if b % 2 else SamplingParams(top_p=0.8)
              for b in range(B)]
    assert_speculative_identical(target, draft, prompts, params, None, gamma=2, length=7, eos=4999, seed=B)
    assert_naive_identical(target, prompts, params, length=7, eos=4999, seed=B)


@given(V=st.sampled_from([2, 7, 64, 300, 4096, 4097, 8193]), B=st.integers(1, 40), gamma=st.integers(1, 4),
       length=st.integers(1, 6), classes=st.integers(1, 3), seed=st.integers(0, 2**31 - 1), data=st.data())
def test_speculative_and_naive_match_reference_on_random_configurations(V, B, gamma, length, classes, seed, data):
    params = [data.draw(sampling_params(vocab_size=V)) for _ in range(classes)]
    d_params = [data.draw(sampling_params(vocab_size=V)) for _ in range(classes)]
    eos = data.draw(st.none() | st.integers(0, V - 1))
    target = ToyLM(ToyLMConfig(vocab_size=V, seed=seed % 1000, eos_token_id=eos, eos_logit=0.5))
    draft = target.draft(data.draw(st.sampled_from([0.0, 0.3, 1.5])))
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(0, V, (classes, 2), generator=g)[torch.arange(B) % classes]
    tp = [params[b % classes] for b in range(B)]
    dp = [d_params[b % classes] for b in range(B)]
    assert_speculative_identical(target, draft, prompts, tp, dp, gamma=gamma, length=length, eos=eos, seed=seed)
    assert_naive_identical(target, prompts, tp, length=length, eos=eos, seed=seed)


def test_classes_that_share_a_prompt_but_not_their_parameters_do_not_share_laws():
    target = ToyLM(ToyLMConfig(vocab_size=3000, seed=4))
    draft = target.draft(0.5)
    prompts = torch.tensor([[5, 6]] * 32)
    tp = [SamplingParams(top_p=0.7) if b % 2 else SamplingParams(temperature=1.4, top_k=30) for b in range(32)]
    dp = [SamplingParams(min_p=0.02) if b % 2 else SamplingParams() for b in range(32)]
    assert_speculative_identical(target, draft, prompts, tp, dp, gamma=2, length=4, eos=None, seed=8)
    assert_naive_identical(target, prompts, tp, length=4, eos=None, seed=8)


def test_rows_longer_than_a_serial_reduction_match_reference():
    """V > 32768: the pipeline's batched path, one shared law padded to MIN_ROWS rows."""
    target = ToyLM(ToyLMConfig(vocab_size=40000, seed=2))
    draft = target.draft(0.4)
    prompts = torch.tensor([[1, 2]] * 12)
    params = [SamplingParams(top_p=0.9, presence_penalty=0.2)] * 12
    assert_speculative_identical(target, draft, prompts, params, None, gamma=2, length=3, eos=None, seed=1)
    assert_naive_identical(target, prompts, params, length=3, eos=None, seed=1)


def test_rows_with_equal_logits_but_other_histories_do_not_share_a_penalised_law():
    """A model whose law ignores the prefix (context_strength=0): every row has the same
    logits, so only the penalty history tells the laws apart."""
    target = ToyLM(ToyLMConfig(vocab_size=3000, seed=6, context_strength=0.0))
    draft = target.draft(0.3)
    prompts = torch.tensor([[1, 2]] * 24)
    params = [SamplingParams(top_p=0.9, repetition_penalty=2.0, presence_penalty=1.0)] * 24
    assert_speculative_identical(target, draft, prompts, params, None, gamma=3, length=5, eos=None, seed=3)
    assert_naive_identical(target, prompts, params, length=5, eos=None, seed=3)


def test_small_vocabularies_are_not_shared_by_default(monkeypatch):
    monkeypatch.setattr(law_table, "SHARE_MIN_VOCAB", SHARE_MIN_VOCAB)
    V = SHARE_MIN_VOCAB - 1
    model = ToyLM(ToyLMConfig(vocab_size=V, seed=1))
    prompts = torch.tensor([[1, 2]] * 16)
    params = batch_params(SamplingParams(top_p=0.9), 16)
    args = (model, prompts, torch.full((16, 1), 1), params, torch.zeros(16, 0, dtype=torch.int64))
    assert model_laws(*args, process=process_logits).inverse is None
    big = ToyLM(ToyLMConfig(vocab_size=SHARE_MIN_VOCAB, seed=1))
    assert model_laws(big, *args[1:], process=process_logits).inverse is not None
