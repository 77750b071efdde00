"""Property tests of the logits pipeline against an independent float64 reference.

The reference (numpy, float64, one row at a time) implements the documented kept set of
``specexact.decoders.pipeline``: penalties, temperature (0 = greedy: lowest id among tied
maxima), min-p (``prob >= min_p * max``), top-k (every token ``>=`` the k-th largest
logit), top-p on the law renormalised after min-p and top-k (the smallest set of most
probable tokens, ranked by logit with ties by lower id, whose mass is ``>= top_p``; the
most probable token always kept).

The pipeline computes in float32 (float64 for float64 logits), so a token whose criterion
lies within rounding of its threshold may go either way: the reference returns the tokens
*surely* kept and those *maybe* kept, and a test demands ``sure <= kept <= maybe``. For the
families built on exact values (``top_k_tie``, ``top_p_exact``, ``greedy_tie``) the
tolerance is zero and the two sets coincide.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pytest
import torch
from hypothesis import assume, given, note, settings
from hypothesis import strategies as st

from specexact.decoders import SamplingParams, batch_params, process_logits
from specexact.strategies import (
    PIPELINE_FAMILIES,
    REAL_VOCAB_SIZES,
    PipelineCase,
    pipeline_cases,
    vocab_sizes,
)

SIZES = vocab_sizes(max_size=8193)


@dataclass(frozen=True)
class Tolerance:
    logit: float  # relative band on logits (top-k, ordering, greedy)
    prob: float  # relative band on probabilities (min-p), relative to the max
    mass: float  # absolute band on cumulative masses (top-p)
    visible: float  # smallest reference probability the pipeline must show as > 0
    rtol: float
    atol: float
    sum_tol: float


EXACT = {
    torch.float32: Tolerance(0.0, 0.0, 0.0, 1e-30, 1e-4, 1e-7, 1e-5),
    torch.float64: Tolerance(0.0, 0.0, 0.0, 1e-300, 1e-10, 1e-14, 1e-12),
}
ROUNDED = {
    torch.float32: Tolerance(4e-6, 1e-4, 1e-4, 1e-30, 2e-3, 1e-6, 1e-4),
    torch.float64: Tolerance(1e-12, 1e-10, 1e-10, 1e-300, 1e-9, 1e-13, 1e-12),
}


@dataclass
class RowReference:
    sure: np.ndarray  # bool [V]
    maybe: np.ndarray  # bool [V]
    law: np.ndarray  # float64 [V]: the renormalised law over `sure` (meaningful if sure == maybe)
    greedy: bool
    overflow: bool  # the pipeline's arithmetic overflows this row (a known defect, see below)
    rtol: float = 0.0  # relative tolerance of the law's values


def _bands(delta: np.ndarray, band: np.ndarray | float, exact: bool):
    """(surely >= 0, maybe >= 0) for a criterion ``delta >= 0`` known to within ``band``."""
    if exact:
        hit = delta >= 0
        return hit, hit
    return delta > band, delta >= -band


def _scaled(tol: Tolerance, z: np.ndarray, dtype: torch.dtype) -> Tolerance:
    """Widen the probability and mass bands by the rounding of large logits: a logit z
    is known to about an ulp of |z|, so exp(z - max) to a relative 4 * eps * max|z|."""
    zmag = float(np.max(np.abs(z[np.isfinite(z)]), initial=0.0))
    extra = 4 * torch.finfo(dtype).eps * zmag
    return replace(tol, prob=tol.prob + extra, mass=tol.mass + extra, rtol=tol.rtol + extra)


def penalise(x: np.ndarray, params: SamplingParams, history: np.ndarray | None) -> np.ndarray:
    """Repetition (divide positive / multiply negative), then frequency, then presence."""
    if history is None or history.size == 0:
        return x
    ids = history[history >= 0]
    counts = np.bincount(ids, minlength=x.size).astype(np.float64)
    seen = counts > 0
    rep = params.repetition_penalty
    with np.errstate(invalid="ignore", over="ignore"):
        y = np.where(seen, np.where(x > 0, x / rep, x * rep), x)
        y = y - params.frequency_penalty * counts
        y = y - params.presence_penalty * seen
    return y


def reference_row(logits: np.ndarray, params: SamplingParams, history: np.ndarray | None,
                  pipe_dtype: torch.dtype, exact: bool) -> RowReference:
    tol = (EXACT if exact else ROUNDED)[pipe_dtype]
    V = logits.size
    big = torch.finfo(pipe_dtype).max
    finite_in = np.isfinite(logits)
    y = penalise(logits, params, history)
    if params.temperature == 0:
        overflow = bool((np.abs(y[finite_in]) > big * (1 - 1e-6)).any())
        top = np.max(y)
        sure, maybe = _bands(y - top, tol.logit * (abs(top) + 1), exact)
        # maybe: every token within the band of the max; sure: the argmax if it is alone.
        maybe = maybe & np.isfinite(y) if np.isfinite(top) else maybe
        first = int(np.flatnonzero(y == top)[0])
        sure = np.zeros(V, bool)
        if exact or maybe.sum() == 1:
            sure[first] = True
            maybe = sure.copy()
        law = sure / max(sure.sum(), 1)
        return RowReference(sure, maybe, law.astype(np.float64), True, overflow)

    T = params.temperature
    t_pipe = float(torch.tensor(T, dtype=pipe_dtype))
    with np.errstate(over="ignore"):
        z = y / T
    overflow = bool(t_pipe == 0 or (np.abs(z[finite_in]) > big * (1 - 1e-6)).any()
                    or (np.abs(y[finite_in]) > big * (1 - 1e-6)).any())
    finite = np.isfinite(z)
    if overflow or not finite.any():
        empty = np.zeros(V, bool)
        return RowReference(empty, ~empty, np.zeros(V), False, True)
    if not exact:
        tol = _scaled(tol, z, pipe_dtype)
    m = np.max(z[finite])
    with np.errstate(over="ignore"):  # float64 logits near the maximum: z - m -> -inf
        e = np.where(finite, np.exp(np.where(finite, z - m, 0.0)), 0.0)
    probs = e / e.sum()
    sure = finite.copy()
    maybe = finite.copy()

    if params.min_p > 0:
        top = probs.max()
        s, mb = _bands(probs - params.min_p * top, tol.prob * top, exact)
        sure &= s
        maybe &= mb
    k = params.top_k
    if 0 < k < V:
        kth = np.sort(z)[::-1][k - 1]
        if np.isfinite(kth):
            with np.errstate(over="ignore", invalid="ignore"):  # huge float64 logits
                s, mb = _bands(z - kth, tol.logit * (abs(kth) + np.abs(z) + 1), exact)
            sure &= s
            maybe &= mb
    if params.top_p < 1:
        s, mb = _nucleus(z, probs, sure, maybe, params.top_p, tol, exact)
        sure &= s
        maybe &= mb
    law = np.where(sure, probs, 0.0)
    law = law / law.sum() if law.sum() > 0 else law
    return RowReference(sure, maybe, law, False, overflow, tol.rtol)


def _nucleus(z, probs, keep_sure, keep_maybe, top_p, tol, exact):
    """Tokens surely / maybe in the top-p nucleus (ranked by logit, ties by lower id)."""
    V = z.size
    if exact:
        kept = np.where(keep_sure, probs, 0.0)
        kept = kept / kept.sum()
        order = np.lexsort((np.arange(V), -z))  # by -z, then id
        sorted_mass = kept[order]
        before = np.cumsum(sorted_mass) - sorted_mass
        inside = before < top_p
        inside[0] = True
        nucleus = np.zeros(V, bool)
        nucleus[order] = inside
        return nucleus, nucleus
    lo_total = np.where(keep_maybe, probs, 0.0).sum()
    hi_total = np.where(keep_sure, probs, 0.0).sum()
    kp_lo = np.where(keep_sure, probs, 0.0) / lo_total * (1 - tol.mass)
    kp_hi = (np.where(keep_maybe, probs, 0.0) / hi_total * (1 + tol.mass)
             if hi_total > 0 else keep_maybe.astype(np.float64))
    finite = np.isfinite(z)
    zf = z[finite]
    asc = np.sort(zf)
    n = asc.size
    order_desc = np.argsort(-zf, kind="stable")
    prefix_lo = np.concatenate([[0.0], np.cumsum(kp_lo[finite][order_desc])])
    prefix_hi = np.concatenate([[0.0], np.cumsum(kp_hi[finite][order_desc])])
    with np.errstate(over="ignore"):  # huge float64 logits: the band may reach inf
        band = tol.logit * (np.abs(zf) + 1)
        n_surely_before = n - np.searchsorted(asc, zf + band, side="right")
        n_maybe_before = n - np.searchsorted(asc, zf - band, side="left")  # includes itself
    lo_before = prefix_lo[n_surely_before]
    hi_before = prefix_hi[n_maybe_before] - kp_hi[finite]
    surely_first = n_maybe_before == 1
    maybe_first = n_surely_before == 0
    sure = np.zeros(V, bool)
    maybe = np.zeros(V, bool)
    sure[finite] = (hi_before < top_p - tol.mass) | surely_first
    maybe[finite] = (lo_before < top_p + tol.mass) | maybe_first
    return sure, maybe


def pipeline_dtype(case: PipelineCase) -> torch.dtype:
    return torch.float64 if case.dtype == "float64" else torch.float32


def references(case: PipelineCase) -> list[RowReference]:
    x = case.logits.to(torch.float64).numpy()
    h = case.history_tensor
    hist = h.numpy() if h is not None else None
    return [reference_row(x[b], case.params[b], hist[b] if hist is not None else None,
                          pipeline_dtype(case), case.exact) for b in range(case.batch_size)]


def check_against_reference(case: PipelineCase, out: torch.Tensor, refs: list[RowReference]) -> None:
    dtype = pipeline_dtype(case)
    tol = (EXACT if case.exact else ROUNDED)[dtype]
    assert out.shape == (case.batch_size, case.vocab_size) and out.dtype == dtype
    probs = out.to(torch.float64).numpy()
    for b, ref in enumerate(refs):
        row = probs[b]
        assert np.isfinite(row).all(), f"row {b}: NaN or inf in the law"
        assert (row >= 0).all(), f"row {b}: negative probability"
        assert abs(row.sum() - 1) <= tol.sum_tol, f"row {b}: sums to {row.sum()!r}"
        support = row > 0
        extra = np.flatnonzero(support & ~ref.maybe)
        assert extra.size == 0, f"row {b}: tokens {extra[:10].tolist()} kept outside the documented set"
        must = ref.sure & (ref.law > tol.visible) if not ref.greedy else ref.sure
        missing = np.flatnonzero(must & ~support)
        assert missing.size == 0, f"row {b}: tokens {missing[:10].tolist()} of the documented set dropped"
        if ref.greedy:
            assert support.sum() == 1 and row.max() == 1.0, f"row {b}: greedy law is not one-hot"
        elif (ref.sure == ref.maybe).all():
            assert np.allclose(row, ref.law, rtol=max(tol.rtol, ref.rtol), atol=tol.atol), (
                f"row {b}: max abs error {np.abs(row - ref.law).max():.3g}")


def run_property(case: PipelineCase) -> None:
    note(case.repro())
    refs = references(case)
    # Known defect (see the xfail tests below): finite logits that the pipeline's own
    # penalty or temperature arithmetic overflows give a NaN law. Such rows are excluded
    # here and pinned separately.
    assume(not any(r.overflow for r in refs))
    out = process_logits(case.logits, case.batched_params, case.history_tensor)
    check_against_reference(case, out, refs)


@pytest.mark.parametrize("family", PIPELINE_FAMILIES)
@given(data=st.data())
def test_pipeline_keeps_the_documented_set(family, data):
    run_property(data.draw(pipeline_cases(vocab_size=SIZES, families=[family])))


@settings(max_examples=max(1, settings.default.max_examples // 3))
@given(case=pipeline_cases(vocab_size=st.sampled_from(REAL_VOCAB_SIZES), batch_size=1,
                           families=["top_p_one_large_vocab", "top_k_tie", "top_p_tiny",
                                     "min_p", "combined"],
                           dtypes=["float32", "bfloat16"]))
def test_pipeline_keeps_the_documented_set_at_real_vocab_sizes(case):
    run_property(case)


@given(case=pipeline_cases(vocab_size=st.integers(1, 40)))
def test_pipeline_is_deterministic_and_row_independent(case):
    """Same input, same output; and each row's law does not depend on the other rows."""
    refs = references(case)
    assume(not any(r.overflow for r in refs))
    out = process_logits(case.logits, case.batched_params, case.history_tensor)
    assert torch.equal(out, process_logits(case.logits, case.batched_params, case.history_tensor))
    h = case.history_tensor
    for b in range(case.batch_size):
        alone = process_logits(case.logits[b:b + 1], batch_params(case.params[b], 1),
                               None if h is None else h[b:b + 1])
        assert torch.allclose(alone[0], out[b], rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------ the reference itself
def test_reference_on_hand_computed_rows():
    ref = reference_row(np.array([1.0, 2.0, 2.0, 0.0]), SamplingParams(top_k=1), None,
                        torch.float32, exact=True)
    assert ref.sure.tolist() == [False, True, True, False]
    ref = reference_row(np.zeros(4), SamplingParams(top_p=0.5), None, torch.float32, exact=True)
    assert ref.sure.tolist() == [True, True, False, False]
    ref = reference_row(np.zeros(4), SamplingParams(top_p=0.5), None, torch.float32, exact=False)
    assert not ref.sure.any()  # within rounding, any of the tied tokens can rank first
    assert ref.maybe.tolist() == [True, True, True, True]
    ref = reference_row(np.array([2.0, -2.0, 0.0]), SamplingParams(repetition_penalty=2.0),
                        np.array([0, 1, -1]), torch.float64, exact=True)
    assert np.allclose(ref.law, np.exp([1.0, -4.0, 0.0]) / np.exp([1.0, -4.0, 0.0]).sum())


# ---------------------------------------------------------------- pinned edge values
def run(logits, history=None, **kw):
    logits = torch.as_tensor(logits)
    if logits.dim() == 1:
        logits = logits[None]
    h = None if history is None else torch.as_tensor(history, dtype=torch.int64).reshape(logits.shape[0], -1)
    return process_logits(logits, batch_params(SamplingParams(**kw), logits.shape[0]), h)


def test_pinned_top_k_keeps_all_ties_at_the_kth_value():
    for k in (1, 2):
        assert run([1.0, 2.0, 2.0, 0.0], top_k=k).tolist() == [[0.0, 0.5, 0.5, 0.0]]
    out = run([3.0, 1.0, 1.0, 1.0, 0.0], top_k=2)[0]
    assert (out > 0).tolist() == [True, True, True, True, False]


@pytest.mark.parametrize("k", [4, 5, 2**31 - 1])
def test_pinned_top_k_at_or_past_vocab_is_no_truncation(k):
    x = torch.tensor([0.5, -1.0, 2.0, 0.0])
    assert torch.allclose(run(x, top_k=k)[0], torch.softmax(x, -1))


@pytest.mark.parametrize("top_p, kept", [(0.25, 1), (0.5, 2), (0.75, 3), (0.625, 3)])
def test_pinned_top_p_cumulative_mass_equal_to_top_p(top_p, kept):
    out = run(torch.zeros(4, dtype=torch.float64), top_p=top_p)[0]
    assert out.tolist() == [1 / kept] * kept + [0.0] * (4 - kept)
    assert (run(torch.zeros(4), top_p=top_p)[0] > 0).sum() == kept


def test_pinned_top_p_exact_tier_with_masked_tokens():
    case = PipelineCase(family="top_p_exact", vocab_size=8, batch_size=1, seed=0, dtype="float32",
                        logits_family="flat", params=(SamplingParams(top_p=0.5),), edge=4)
    tier = torch.isfinite(case.logits[0]).nonzero().flatten().tolist()
    out = process_logits(case.logits, case.batched_params)[0]
    assert (out > 0).nonzero().flatten().tolist() == tier[:2]
    assert out[tier[:2]].tolist() == [0.5, 0.5]


@pytest.mark.parametrize("top_p", [1e-7, 1e-12, 5e-324])
def test_pinned_tiny_top_p_keeps_the_most_probable_token(top_p):
    assert run([0.0, 1.0, 1.0], top_p=top_p).tolist() == [[0.0, 1.0, 0.0]]
    flat = run(torch.zeros(256000), top_p=top_p)[0]
    assert flat[0] == 1.0 and (flat[1:] == 0).all()


@pytest.mark.parametrize("top_p", [1.0, math.nextafter(1.0, 0.0)])
def test_pinned_top_p_one_keeps_every_token_of_a_large_vocab(top_p):
    flat = run(torch.zeros(2**17), top_p=top_p)[0]
    assert (flat == 2.0**-17).all()
    case = PipelineCase(family="top_p_one_large_vocab", vocab_size=256000, batch_size=1, seed=3,
                        dtype="float32", logits_family="zipf", params=(SamplingParams(top_p=top_p),))
    out = process_logits(case.logits, case.batched_params)[0]
    assert (out > 0).all()


def test_pinned_min_p_one_keeps_exactly_the_tied_maxima():
    assert run([2.0, 2.0, 1.0], min_p=1.0).tolist() == [[0.5, 0.5, 0.0]]
    assert run([2.0, 1.0, 1.0], min_p=math.exp(-1) * 0.999).tolist()[0][1] > 0


def test_pinned_penalties_on_positive_negative_and_zero_logits():
    out = run(torch.tensor([2.0, -2.0, 0.0, 1.0], dtype=torch.float64), history=[0, 1, 2],
              repetition_penalty=2.0)[0]
    expect = torch.softmax(torch.tensor([1.0, -4.0, 0.0, 1.0], dtype=torch.float64), -1)
    assert torch.allclose(out, expect, rtol=0, atol=1e-15)
    out = run(torch.zeros(4, dtype=torch.float64), history=[3, 3, -1], frequency_penalty=0.5,
              presence_penalty=1.0)[0]
    expect = torch.softmax(torch.tensor([0.0, 0.0, 0.0, -2.0], dtype=torch.float64), -1)
    assert torch.allclose(out, expect, rtol=0, atol=1e-15)


def test_pinned_drafted_history_counts_repeated_drafts():
    # Three candidate prefixes: generated [1], then drafts 1 and 1 (repeats).
    logits = torch.zeros(3, 3, dtype=torch.float64)
    history = torch.tensor([[1, -1, -1], [1, 1, -1], [1, 1, 1]])
    out = process_logits(logits, batch_params(SamplingParams(frequency_penalty=1.0), 3), history)
    for j in range(3):
        expect = torch.softmax(torch.tensor([0.0, -(j + 1.0), 0.0], dtype=torch.float64), -1)
        assert torch.allclose(out[j], expect, rtol=0, atol=1e-15)


def test_pinned_greedy_ties_and_penalty_made_ties_pick_the_lowest_id():
    assert run([1.0, 3.0, 3.0, 0.0], temperature=0.0).tolist() == [[0.0, 1.0, 0.0, 0.0]]
    # repetition 2 turns logit 2 into 1, tying token 1: the lower id (0) wins.
    assert run([2.0, 1.0], history=[0], repetition_penalty=2.0, temperature=0.0).tolist() == [[1.0, 0.0]]


def test_pinned_huge_logits_at_temperature_one():
    assert run([3e38, -3e38, 0.0]).tolist() == [[1.0, 0.0, 0.0]]
    assert run([3e38, 3e38, -1.0]).tolist() == [[0.5, 0.5, 0.0]]


def test_pinned_half_precision_logits_give_float32_laws():
    for dtype in (torch.float16, torch.bfloat16):
        out = run(torch.tensor([60000.0, 0.0]).to(dtype), top_k=1)
        assert out.dtype == torch.float32 and out.tolist() == [[1.0, 0.0]]


# ------------------------------------------------ regressions: float32 overflow
# Found by these properties: dividing finite logits by the temperature (or applying a
# penalty) in float32 could pass the float32 range and turn the row into NaN. The pipeline
# now computes such rows in float64 (decoders/pipeline.py, _widen_if_overflow).


def test_huge_logit_at_temperature_below_one_gives_a_point_mass():
    # exact law at T = 0.5: exp(6e38) dominates -> (1, 0, 0); got NaN everywhere
    assert run([3e38, 0.0, -1.0], temperature=0.5).tolist() == [[1.0, 0.0, 0.0]]


def test_tied_huge_negative_logits_at_temperature_below_one_stay_uniform():
    # both logits become -inf: softmax(-inf, -inf) is NaN; exact law is (1/2, 1/2)
    assert run([-3e38, -3e38], temperature=0.5).tolist() == [[0.5, 0.5]]


def test_tiny_temperature_gives_the_argmax():
    # T = 1e-40 is a valid SamplingParams (finite, > 0); 1 / 1e-40 overflows float32
    assert run([1.0, 0.5], temperature=1e-40).tolist() == [[1.0, 0.0]]


def test_repetition_penalty_on_huge_negative_logits_keeps_a_law():
    # -3e38 * 2 overflows to -inf for both tokens: NaN; exact law is (1/2, 1/2)
    assert run([-3e38, -3e38], history=[0, 1], repetition_penalty=2.0).tolist() == [[0.5, 0.5]]


def test_greedy_argmax_survives_a_penalty_overflow():
    # penalised logits are -6e38 and -4e38 (token 1 is the argmax); both overflow to -inf
    assert run([-3e38, -2e38], history=[0, 1], repetition_penalty=2.0,
               temperature=0.0).tolist() == [[0.0, 1.0]]
