"""The decoders' fused path (laws straight from the models' states) against the references, bit for bit.

:func:`~specexact.decoders.law_engine.fused_laws` must write, for every row, the law the
reference writes (the model's logits of every row through
:func:`~specexact.decoders.pipeline.process_logits_reference`) and draw what
:func:`~specexact.decoders.sample_from_probs` draws from those rows, leaving the generator
in the same state. The whole decoders (which take the fused path for a
:class:`~specexact.decoders.ToyLM`) must give the reference decoders' tokens, accepted
lengths, verifier inputs and observer records. Every test here runs with
``poisoned_storage`` (tests/decoders/conftest.py): storage reused or allocated
uninitialised holds NaN / garbage, so a read of an entry the fast path did not write
changes the output deterministically.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specexact.audit.cases.decoder_case import default_cases
from specexact.decoders import (
    SamplingParams,
    ToyLM,
    ToyLMConfig,
    naive_generate,
    naive_generate_reference,
    sample_from_probs,
    speculative_generate,
    speculative_generate_reference,
    verify,
)
from specexact.decoders import law_engine
from specexact.decoders.law_engine import fused_laws, fused_model
from specexact.decoders.law_table import MIN_ROWS
from specexact.decoders.params import batch_params
from specexact.decoders.pipeline import process_logits_reference
from specexact.strategies import sampling_params

pytestmark = pytest.mark.usefixtures("poisoned_storage")


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


def _inputs(V, B, n, classes, seed, params, *, T=6, hist_len=5):
    """input_ids ``[B, T]`` (rows repeat in ``classes`` groups: shared laws), positions
    ``[B, n]``, ``BatchedParams`` of ``B * n`` rows and a ``[B * n, H]`` history."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randint(0, V, (classes, T), generator=g)
    ids = base[torch.arange(B) % classes]
    positions = torch.randint(0, T, (B, n), generator=g)
    rows = [params[(b % classes) % len(params)] for b in range(B) for _ in range(n)]
    bp = batch_params(rows, B * n)
    hist = torch.randint(-1, min(V, 40), (classes, n, hist_len), generator=g)  # -1: padding, repeats of a head
    hist = hist[torch.arange(B) % classes].reshape(B * n, hist_len)
    return ids, positions, bp, hist


def _reference_rows(model, ids, positions, bp, hist):
    N = positions.numel()
    return process_logits_reference(model(ids, positions).reshape(N, -1), bp, hist)


VOCABS = [256, 300, 4097, 8193, 32001]


@settings(max_examples=max(1, settings.default.max_examples // 3), deadline=None)
@given(V=st.sampled_from(VOCABS), B=st.integers(1, 24), n=st.integers(1, 4), classes=st.integers(1, 4),
       seed=st.integers(0, 2**31 - 1), data=st.data())
def test_fused_laws_write_and_sample_what_the_reference_gives(V, B, n, classes, seed, data):
    params = [data.draw(sampling_params(vocab_size=V)) for _ in range(data.draw(st.integers(1, 3)))]
    model = ToyLM(ToyLMConfig(vocab_size=V, seed=seed % 97, eos_token_id=data.draw(st.none() | st.just(V - 1))))
    ids, positions, bp, hist = _inputs(V, B, n, classes, seed, params)
    N = B * n
    dest = torch.full((N, V), float("nan"))
    g = torch.Generator().manual_seed(seed)
    try:
        ref = _reference_rows(model, ids, positions, bp, hist)
    except ValueError:  # a row without mass: the reference raises; so must the sampling
        return
    g_ref = torch.Generator().manual_seed(seed)
    ref_tokens = sample_from_probs(ref, g_ref)
    done = fused_laws(model, ids, positions, bp, hist, dest=dest, sample=True, generator=g)
    if done is None:  # the reference's turn: nothing written, nothing drawn
        assert N < MIN_ROWS or law_engine._widens(model.logit_bound(), bp, V)
        assert bool(dest.isnan().all())
        _same(g.get_state(), torch.Generator().manual_seed(seed).get_state())
        return
    _same(dest, ref)
    _same(done, ref_tokens)
    _same(g.get_state(), g_ref.get_state())
    # the table path (no dest: the naive decoder's) draws the same tokens
    g2 = torch.Generator().manual_seed(seed)
    _same(fused_laws(model, ids, positions, bp, hist, sample=True, generator=g2), ref_tokens)
    _same(g2.get_state(), g_ref.get_state())


@pytest.mark.parametrize("V", [256, 8193, 32000])
def test_fused_laws_fill_strided_destinations_row_by_row(V):
    """The verifier's ``[A, γ, V]`` draft tensor is filled one ``[:, i]`` slice at a time."""
    model = ToyLM(ToyLMConfig(vocab_size=V, seed=5))
    params = [SamplingParams(temperature=0.9, top_k=20, top_p=0.95, min_p=0.01, repetition_penalty=1.3,
                             presence_penalty=0.4), SamplingParams(temperature=0), SamplingParams(top_p=0.8)]
    ids, positions, bp, hist = _inputs(V, 40, 1, 5, V, params)
    dest = torch.full((40, 3, V), float("nan"))
    assert fused_laws(model, ids, positions, bp, hist, dest=dest[:, 1]) is True
    _same(dest[:, 1].contiguous(), _reference_rows(model, ids, positions, bp, hist))
    assert bool(dest[:, 0].isnan().all()) and bool(dest[:, 2].isnan().all())  # nothing written beside


@pytest.mark.parametrize("N", [1, MIN_ROWS - 1])
def test_fewer_rows_than_min_rows_are_left_to_the_reference(N):
    model = ToyLM(ToyLMConfig(vocab_size=512, seed=1))
    ids, positions, bp, hist = _inputs(512, N, 1, 1, 0, [SamplingParams(top_p=0.9)])
    g = torch.Generator().manual_seed(0)
    dest = torch.full((N, 512), float("nan"))
    assert fused_laws(model, ids, positions, bp, hist, dest=dest, sample=True, generator=g) is None
    assert bool(dest.isnan().all())
    _same(g.get_state(), torch.Generator().manual_seed(0).get_state())


def test_parameters_the_overflow_guard_might_widen_are_left_to_the_reference():
    model = ToyLM(ToyLMConfig(vocab_size=512, seed=1))
    ids, positions, bp, hist = _inputs(512, 16, 1, 2, 0, [SamplingParams(temperature=1e-37)])
    assert law_engine._widens(model.logit_bound(), bp, 512)
    assert fused_laws(model, ids, positions, bp, hist, dest=torch.empty(16, 512)) is None
    _, _, calm, _ = _inputs(512, 16, 1, 2, 0, [SamplingParams(temperature=0.5, repetition_penalty=2.0)])
    assert not law_engine._widens(model.logit_bound(), calm, 512)


def test_the_logit_bound_bounds_every_logit():
    model = ToyLM(ToyLMConfig(vocab_size=3000, seed=2, context_strength=3.0))
    ids = torch.randint(0, 3000, (64, 12), generator=torch.Generator().manual_seed(0))
    assert float(model(ids).abs().max()) <= model.logit_bound()


def test_which_models_take_the_fused_path():
    assert fused_model(ToyLM(ToyLMConfig(vocab_size=law_engine.MIN_VOCAB, seed=0)))
    assert not fused_model(ToyLM(ToyLMConfig(vocab_size=law_engine.MIN_VOCAB - 1, seed=0)))
    assert not fused_model(ToyLM(ToyLMConfig(vocab_size=40000, seed=0)))  # rows split across threads
    assert not fused_model(ToyLM(ToyLMConfig(vocab_size=1000, seed=0), dtype=torch.float64))

    class Plain:  # a callable model without states
        vocab_size, device, dtype = 1000, torch.device("cpu"), torch.float32

        def __call__(self, ids, positions=None):
            raise AssertionError("not called")

    assert not fused_model(Plain())


def test_a_projection_whose_bits_depend_on_the_rows_beside_it_is_not_fused():
    model = ToyLM(ToyLMConfig(vocab_size=1000, seed=0))

    def shaky(states):  # row bits depend on how many rows are projected together
        out = model.__class__.project(model, states)
        return out + (states.shape[0] % 3) * 1e-3

    model.project = shaky
    assert law_engine._projection(model) is None and not fused_model(model)


def test_fused_path_off_gives_the_same_decoders(monkeypatch):
    case = replace(next(c for c in default_cases() if c.name.startswith("v8193")), batch_size=48)
    target, draft = case.models()
    prompts, tp, dp = case.batch()
    outs = []
    for flag in (True, False):
        monkeypatch.setattr(law_engine, "FUSED", flag)
        g = torch.Generator().manual_seed(3)
        o = speculative_generate(target, draft, prompts, tp, dp, num_draft_tokens=3, max_new_tokens=3, generator=g,
                                 eos_token_id=case.eos_token_id)
        outs.append((o.tokens, o.accepted_lengths, g.get_state()))
    _same(*outs)


# --------------------------------------------------------------------------- whole decoders


class Recorder:
    """A verifier that records copies of its inputs and delegates to ``verify``."""

    def __init__(self):
        self.calls = []

    def __call__(self, ids, draft_probs, target_probs, generator):
        self.calls.append((ids.clone(), draft_probs.clone(), target_probs.clone()))
        return verify(ids, draft_probs, target_probs, generator)


def _run_speculative(fn, target, draft, prompts, tp, dp, *, gamma, length, eos, seed, keep_records=False):
    g = torch.Generator().manual_seed(seed)
    records = []

    def observer(r):  # keep_records: hold the record's tensors themselves, not copies
        fields = (r.round_index, r.rows, r.num_generated, r.draft_token_ids, r.draft_probs, r.target_probs,
                  r.output, r.num_emitted, r.num_kept)
        records.append(fields if keep_records else
                       tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in fields))

    rec = Recorder()
    out = fn(target, draft, prompts, tp, dp, num_draft_tokens=gamma, max_new_tokens=length, generator=g,
             eos_token_id=eos, verifier=rec, observer=observer)
    return (out.tokens, out.num_tokens, out.accepted_lengths, out.target_calls, out.draft_calls, g.get_state(),
            rec.calls, records)


class Spy:
    """Counts the fused path's calls that did the work (not None)."""

    def __init__(self, monkeypatch, module):
        self.taken = 0
        inner = module.fused_laws

        def spy(*a, **k):
            out = inner(*a, **k)
            self.taken += out is not None
            return out

        monkeypatch.setattr(module, "fused_laws", spy)


def _case(name, B, **changes):
    """A default case with ``B`` rows (any ``B``: the first rows of a batch the case takes)."""
    case = next(c for c in default_cases() if c.name.startswith(name))
    C4 = 4 * len(case.row_classes)
    case = replace(case, batch_size=-(-B // C4) * C4, **changes)
    target, draft = case.models()
    prompts, tp, dp = case.batch()
    return case, target, draft, prompts[:B], tp[:B], dp[:B]


def _assert_decoders_identical(case, target, draft, prompts, tp, dp, *, seeds=(0, 1), keep_records=False):
    for seed in seeds:  # consecutive calls: the second reuses the first one's storage
        kw = dict(gamma=case.num_draft_tokens, length=case.length, eos=case.eos_token_id, seed=seed)
        _same(_run_speculative(speculative_generate, target, draft, prompts, tp, dp, keep_records=keep_records, **kw),
              _run_speculative(speculative_generate_reference, target, draft, prompts, tp, dp,
                               keep_records=keep_records, **kw))
        sides = []
        for fn in (naive_generate, naive_generate_reference):
            g = torch.Generator().manual_seed(seed)
            o = fn(target, prompts, tp, max_new_tokens=case.length, generator=g, eos_token_id=case.eos_token_id)
            sides.append((o.tokens, o.num_tokens, o.target_calls, g.get_state()))
        _same(*sides)


@pytest.mark.parametrize("name", [c.name for c in default_cases()])
def test_decoders_match_the_references_on_the_default_cases(name, monkeypatch):
    from specexact.decoders import naive, speculative

    case, *rest = _case(name, 64)
    spec_spy, naive_spy = Spy(monkeypatch, speculative), Spy(monkeypatch, naive)
    _assert_decoders_identical(case, *rest)
    if case.model.vocab_size >= law_engine.MIN_VOCAB:  # the fused path did the work
        assert spec_spy.taken > 0 and naive_spy.taken > 0


def test_the_naive_decoder_takes_the_fused_path_with_the_builtin_processing_as_the_audit_passes_it(monkeypatch):
    """The audit hands the naive decoder ``processing=BUILTIN_PROCESSING`` for the built-in
    sampler; it took the every-row path that way (a third of a v8193 audit call), not the
    fused one. Same tokens and generator state as with no processing and as the reference."""
    from specexact.decoders import naive
    from specexact.decoders.processing import BUILTIN_PROCESSING

    case, target, _draft, prompts, tp, _dp = _case("v8193", 64)
    spy = Spy(monkeypatch, naive)
    sides = []
    for fn, processing in ((naive_generate, BUILTIN_PROCESSING), (naive_generate, None),
                           (naive_generate_reference, None)):
        g = torch.Generator().manual_seed(3)
        o = fn(target, prompts, tp, max_new_tokens=case.length, generator=g, eos_token_id=case.eos_token_id,
               **({"processing": processing} if processing is not None else {}))
        sides.append((o.tokens, o.num_tokens, o.target_calls, g.get_state()))
        if fn is naive_generate and processing is not None:
            assert spy.taken == case.length  # every step fused
    _same(sides[0], sides[1])
    _same(sides[0], sides[2])


def test_tile_edge_case_at_its_audit_batch_shape_matches_the_references():
    """The audit's v8193 case (penalties per candidate prefix, a top-k draft, EOS at the
    short last block) with more rows, three calls in a row (reused storage)."""
    _assert_decoders_identical(*_case("v8193", 384), seeds=(0, 1, 2))


def test_headline_vocabulary_matches_the_references():
    from benchmarks.decoder_audit import headline_case

    case = headline_case(32000, 96)
    target, draft = case.models()
    prompts, tp, dp = case.batch()
    _assert_decoders_identical(case, target, draft, prompts, tp, dp, seeds=(0,))


@pytest.mark.parametrize("V", [256, 8193, 32001])
def test_eos_cuts_and_length_cuts_and_finished_rows(V):
    """An EOS of high probability ends most rows in the first rounds (later rounds have few
    active rows, some below MIN_ROWS), and max_new_tokens cuts the last round."""
    target = ToyLM(ToyLMConfig(vocab_size=V, seed=11, eos_token_id=V - 1, eos_logit=3.0))
    draft = target.draft(0.7)
    B = 40
    prompts = torch.randint(0, V - 1, (4, 3), generator=torch.Generator().manual_seed(V))[torch.arange(B) % 4]
    tp = [SamplingParams(temperature=0.8, top_k=30, presence_penalty=0.5), SamplingParams(top_p=0.9),
          SamplingParams(temperature=0), SamplingParams(min_p=0.05, repetition_penalty=1.2)]
    tp = [tp[b % 4] for b in range(B)]
    dp = [SamplingParams(top_k=10)] * B
    for length in (1, 4, 7):
        kw = dict(gamma=3, length=length, eos=V - 1, seed=length)
        _same(_run_speculative(speculative_generate, target, draft, prompts, tp, dp, **kw),
              _run_speculative(speculative_generate_reference, target, draft, prompts, tp, dp, **kw))


@pytest.mark.parametrize("B", [1, 2, MIN_ROWS - 1, MIN_ROWS, MIN_ROWS + 1])
def test_tiny_batches_match_the_references(B):
    case, target, draft, prompts, tp, dp = _case("v8193", B)
    _assert_decoders_identical(case, target, draft, prompts, tp, dp, seeds=(B,))


def test_an_observer_that_keeps_the_verifier_inputs_gets_fresh_storage_each_round():
    """An observer holding the round's tensors (no copies) must find them unchanged after
    the call: the workspace hands out storage only while nothing else holds it."""
    case, target, draft, prompts, tp, dp = _case("v8193", 64, length=6)
    _assert_decoders_identical(case, target, draft, prompts, tp, dp, seeds=(4,), keep_records=True)


@settings(max_examples=max(1, settings.default.max_examples // 4), deadline=None)
@given(V=st.sampled_from([256, 300, 4097, 8193, 32001]), B=st.integers(1, 40), gamma=st.integers(1, 4),
       length=st.integers(1, 6), classes=st.integers(1, 3), seed=st.integers(0, 2**31 - 1), data=st.data())
def test_decoders_match_the_references_on_random_configurations(V, B, gamma, length, classes, seed, data):
    params = [data.draw(sampling_params(vocab_size=V)) for _ in range(classes)]
    d_params = [data.draw(sampling_params(vocab_size=V)) for _ in range(classes)]
    eos = data.draw(st.none() | st.integers(0, V - 1))
    target = ToyLM(ToyLMConfig(vocab_size=V, seed=seed % 1000, eos_token_id=eos, eos_logit=0.5))
    draft = target.draft(data.draw(st.sampled_from([0.0, 0.3, 1.5])))
    prompts = torch.randint(0, V, (classes, 2), generator=torch.Generator().manual_seed(seed))[torch.arange(B) % classes]
    tp = [params[b % classes] for b in range(B)]
    dp = [d_params[b % classes] for b in range(B)]
    kw = dict(gamma=gamma, length=length, eos=eos, seed=seed)
    try:
        ref = _run_speculative(speculative_generate_reference, target, draft, prompts, tp, dp, **kw)
    except ValueError as e:  # the fast path must raise the same
        with pytest.raises(ValueError, match=str(e)[:40]):
            _run_speculative(speculative_generate, target, draft, prompts, tp, dp, **kw)
        return
    _same(_run_speculative(speculative_generate, target, draft, prompts, tp, dp, **kw), ref)


def test_two_torch_threads_give_the_reference_bits(monkeypatch):
    """The fused chunks on one thread (ONE_THREAD) and on the caller's two, against the
    reference decoders on two threads (run once per case: they take no fused path, so
    ONE_THREAD does not reach them); the caller's thread count is restored."""
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for name, B, seed in (("v8193", 96, 5), ("v4096", 48, 6)):
            case, target, draft, prompts, tp, dp = _case(name, B)
            kw = dict(gamma=case.num_draft_tokens, length=case.length, eos=case.eos_token_id, seed=seed)
            spec_ref = _run_speculative(speculative_generate_reference, target, draft, prompts, tp, dp, **kw)
            g = torch.Generator().manual_seed(seed)
            o = naive_generate_reference(target, prompts, tp, max_new_tokens=case.length, generator=g,
                                         eos_token_id=case.eos_token_id)
            naive_ref = (o.tokens, o.num_tokens, o.target_calls, g.get_state())
            for one_thread in (True, False):
                monkeypatch.setattr(law_engine, "ONE_THREAD", one_thread)
                _same(_run_speculative(speculative_generate, target, draft, prompts, tp, dp, **kw), spec_ref)
                g = torch.Generator().manual_seed(seed)
                o = naive_generate(target, prompts, tp, max_new_tokens=case.length, generator=g,
                                   eos_token_id=case.eos_token_id)
                _same((o.tokens, o.num_tokens, o.target_calls, g.get_state()), naive_ref)
                assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(saved)
