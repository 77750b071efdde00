"""Property tests of verify-protocol samplers over the draft/target edge families.

Every test is parametrised over ``VERIFIERS``: add a :class:`VerifierSpec` for a new
sampler (an adapter with the ``verify`` protocol) to ``AVAILABLE`` and select it with the
``SPECEXACT_VERIFIERS`` environment variable (default ``builtin``; e.g.
``SPECEXACT_VERIFIERS=builtin,transformers``) and it gets the same checks. The
statistical checks spend the suite's false-fail budget through the ``alpha`` fixture;
each example is one check, so a test declares ``STAT_EXAMPLES`` checks.
"""

from __future__ import annotations

import importlib
import math
import os
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Callable
from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from scipy import stats

from specexact.decoders import SamplingParams, batch_params, process_logits, sample_from_probs, verify
from specexact.strategies import (
    DISHONEST_PAIR_FAMILIES,
    HONEST_PAIR_FAMILIES,
    PAIR_FAMILIES,
    REAL_VOCAB_SIZES,
    VerifyCase,
    acceptance_probes,
    draft_target_pairs,
    first_token_law,
    vocab_sizes,
)

# ----------------------------------------------------------------------------- verifiers


@dataclass(frozen=True)
class VerifierSpec:
    """A sampler with the ``verify`` protocol, and how to reach its randomness.

    Attributes
    ----------
    name : str
    fn : callable
        ``fn(draft_token_ids, draft_probs, target_probs, generator) -> LongTensor[B, K+1]``.
    acceptance_uniform : (module, attribute) or None
        Where the acceptance uniforms ``u [B, K]`` come from, as ``attribute(shape,
        generator, device)``; None if they cannot be injected.
    sampling_uniform : (module, attribute) or None
        Same for the uniforms of the recovered / bonus draw.
    documented_guards : bool
        Follows the built-in float guards (``q(d) = 0`` accepted iff ``p(d) > 0``; an
        empty residual falls back to the target row), so its law is known exactly even
        for dishonest inputs.
    validates : bool
        Refuses invalid input with a ValueError / TypeError that names the argument.
    batched : bool
        Vectorised over rows, so the statistical tests (20 000 rows per example) are
        affordable; per-row samplers get the structural tests only.
    """

    name: str
    fn: Callable
    acceptance_uniform: tuple[ModuleType, str] | None = None
    sampling_uniform: tuple[ModuleType, str] | None = None
    documented_guards: bool = False
    validates: bool = True
    batched: bool = True


def _builtin() -> VerifierSpec:
    module = importlib.import_module(verify.__module__)
    sampling = importlib.import_module(sample_from_probs.__module__)
    return VerifierSpec("builtin", verify, (module, "uniform"), (sampling, "uniform"),
                        documented_guards=True)


def _reference() -> VerifierSpec:
    """``verify_reference``, the readable reference of the built-in ``verify`` (the same
    uniforms, guards and validation; ``tests/decoders/test_verify_fast.py`` shows the two
    return the same tokens)."""
    module = importlib.import_module(verify.__module__)
    sampling = importlib.import_module(sample_from_probs.__module__)
    return VerifierSpec("reference", module.verify_reference, (module, "uniform"), (sampling, "uniform"),
                        documented_guards=True)


def _transformers() -> VerifierSpec | None:
    """Hugging Face transformers' ``_speculative_sampling`` through the adapter in
    ``decoders/adapters`` (the optional ``thirdparty`` extra); None when not installed.
    It loops over rows in Python and draws from torch's seeded global RNG, and leaves
    input checking to its caller."""
    try:
        module = importlib.import_module("specexact.decoders.adapters.transformers")
    except (ImportError, TypeError):  # not installed, or a signature the adapter refuses
        return None
    return VerifierSpec("transformers", module.verify, validates=False, batched=False)


#: Verifiers by name. The built-in runs by default; others are opted into with e.g.
#: ``SPECEXACT_VERIFIERS=builtin,reference,transformers`` (transformers' per-row loop costs
#: about a second per test example at V = 8193, too slow for the CI budget).
AVAILABLE = {"builtin": _builtin, "reference": _reference, "transformers": _transformers}
_CHOSEN = [name.strip() for name in os.environ.get("SPECEXACT_VERIFIERS", "builtin").split(",") if name.strip()]
for _name in _CHOSEN:
    if _name not in AVAILABLE:
        raise ValueError(f"SPECEXACT_VERIFIERS names unknown verifier {_name!r}; known: {sorted(AVAILABLE)}")
VERIFIERS = [pytest.param(spec, id=spec.name) for spec in (AVAILABLE[n]() for n in _CHOSEN) if spec]
INJECTABLE = [p for p in VERIFIERS if p.values[0].acceptance_uniform is not None]
GUARDED = [p for p in VERIFIERS if p.values[0].documented_guards]
VALIDATING = [p for p in VERIFIERS if p.values[0].validates]
BATCHED = [p for p in VERIFIERS if p.values[0].batched]


@contextmanager
def injected(spec: VerifierSpec, acceptance=None, sampling=None):
    """Replace the acceptance / sampling uniforms by fixed float64 values (queues)."""
    patches = []
    for where, values in ((spec.acceptance_uniform, acceptance), (spec.sampling_uniform, sampling)):
        if values is None:
            continue
        queue = [torch.as_tensor(v, dtype=torch.float64) for v in values]

        def fake(shape, generator, device, _queue=queue):
            return _queue.pop(0).reshape(shape).to(device)

        patches.append(mock.patch.object(where[0], where[1], fake))
    for p in patches:
        p.start()
    try:
        yield
    finally:
        for p in reversed(patches):
            p.stop()


# ------------------------------------------------------------------------ structure


SIZES = vocab_sizes(max_size=8193)
STAT_EXAMPLES = max(1, settings.default.max_examples // 3)
STAT_ROWS = 20_000


def emitted_counts(out: torch.Tensor) -> torch.Tensor:
    return (out >= 0).sum(1)


def check_structure(case: VerifyCase, out: object) -> None:
    """Protocol form plus: no emitted token has zero probability under its position's law."""
    B, K, V = case.batch_size, case.num_draft_tokens, case.vocab_size
    assert isinstance(out, torch.Tensor), type(out)
    assert tuple(out.shape) == (B, K + 1), out.shape
    assert not out.dtype.is_floating_point and out.dtype != torch.bool
    out = out.long()
    assert ((out == -1) | ((out >= 0) & (out < V))).all(), "id outside [0, V) other than -1"
    n = emitted_counts(out)
    assert ((n >= 1) & (n <= K + 1)).all(), n
    positions = torch.arange(K + 1)[None]
    assert torch.equal(out >= 0, positions < n[:, None]), "-1 padding is not a right tail"
    p = case.target_probs.to(torch.float64)
    q = case.draft_probs.to(torch.float64)
    for b in range(B):
        stop = int(n[b]) - 1
        for i in range(stop):
            d = int(out[b, i])
            assert d == int(case.draft_token_ids[b, i]), f"row {b}: position {i} is not the draft"
            assert p[b, i, d] > 0, f"row {b}: accepted draft {d} at position {i} has p = 0"
        last = int(out[b, stop])
        if stop == K:
            assert p[b, K, last] > 0, f"row {b}: bonus token {last} has p = 0"
        else:
            residual = (p[b, stop] - q[b, stop]).clamp_min(0)
            if residual.sum() > 0:
                assert residual[last] > 0, f"row {b}: recovered token {last} has no residual mass"
            else:  # documented fallback: the target row itself
                assert p[b, stop, last] > 0, f"row {b}: fallback token {last} has p = 0"


def argmax_path(case: VerifyCase, b: int) -> list[int]:
    """Expected output row when the target is one-hot at every position."""
    hot = case.target_probs[b].to(torch.float64).argmax(-1).tolist()
    path = []
    for i, d in enumerate(case.draft_token_ids[b].tolist()):
        path.append(hot[i])
        if d != hot[i]:
            return path + [-1] * (case.num_draft_tokens + 1 - len(path))
    return path + [hot[-1]]


@pytest.mark.parametrize("spec", VERIFIERS)
@pytest.mark.parametrize("family", PAIR_FAMILIES)
@given(data=st.data(), generator_seed=st.integers(0, 2**32 - 1))
def test_output_follows_the_protocol_and_target_support(spec, family, data, generator_seed):
    case = data.draw(draft_target_pairs(vocab_size=SIZES, families=[family]))
    note(case.repro(generator_seed))
    out = spec.fn(case.draft_token_ids, case.draft_probs, case.target_probs,
                  torch.Generator().manual_seed(generator_seed))
    check_structure(case, out)
    n = emitted_counts(out)
    if family in ("disjoint", "target_removed"):
        # p(d_1) = 0: the first draft is rejected whatever the uniform.
        assert (n == 1).all()
    if family == "identical":
        # p(d) = q(d) > 0 (normal floats): accepted with probability 1.
        q_d = case.draft_probs.to(torch.float64).gather(2, case.draft_token_ids[:, :, None])
        if (q_d >= 2.2250738585072014e-308).all():
            assert (n == case.num_draft_tokens + 1).all()
    if family in ("greedy", "one_hot_target"):
        for b in range(case.batch_size):
            assert out[b].tolist() == argmax_path(case, b)


def test_structure_check_catches_broken_verifiers():
    """Mutants: the checks above must reject a verifier that accepts every draft, one that
    emits a zero-probability recovered token, and one that pads on the left."""
    case = VerifyCase(family="target_removed", vocab_size=6, batch_size=2, num_draft_tokens=2, seed=4)
    ids = case.draft_token_ids
    accept_all = torch.cat([ids, ids[:, :1]], dim=1)
    with pytest.raises(AssertionError, match="has p = 0"):
        check_structure(case, accept_all)
    removed = int(ids[0, 0])  # p(removed) = 0 at position 0
    zero_recovered = torch.full((2, 3), -1)
    zero_recovered[:, 0] = removed
    with pytest.raises(AssertionError, match="residual mass"):
        check_structure(case, zero_recovered)
    good = verify(ids, case.draft_probs, case.target_probs, torch.Generator().manual_seed(0))
    check_structure(case, good)
    with pytest.raises(AssertionError, match="padding"):
        check_structure(case, good.flip(1))


@pytest.mark.parametrize("spec", VERIFIERS)
@settings(max_examples=max(1, settings.default.max_examples // 3))
@given(case=draft_target_pairs(vocab_size=st.sampled_from(REAL_VOCAB_SIZES), batch_size=1,
                               num_draft_tokens=st.integers(1, 2)),
       generator_seed=st.integers(0, 2**32 - 1))
def test_protocol_at_real_vocab_sizes(spec, case, generator_seed):
    note(case.repro(generator_seed))
    out = spec.fn(case.draft_token_ids, case.draft_probs, case.target_probs,
                  torch.Generator().manual_seed(generator_seed))
    check_structure(case, out)


@pytest.mark.parametrize("spec", VERIFIERS)
@given(case=draft_target_pairs(vocab_size=st.integers(1, 50)), generator_seed=st.integers(0, 2**32 - 1))
def test_same_generator_seed_same_output(spec, case, generator_seed):
    note(case.repro(generator_seed))
    args = (case.draft_token_ids, case.draft_probs, case.target_probs)
    first = spec.fn(*args, torch.Generator().manual_seed(generator_seed))
    again = spec.fn(*args, torch.Generator().manual_seed(generator_seed))
    assert torch.equal(first, again)


# -------------------------------------------------------------------- invalid input


def _corrupt(case: VerifyCase, kind: str):
    ids = case.draft_token_ids.clone()
    q = case.draft_probs.clone()
    p = case.target_probs.clone()
    B, K, V = case.batch_size, case.num_draft_tokens, case.vocab_size
    if kind == "nan_target":
        p[0, 0, 0] = math.nan
    elif kind == "inf_target":
        p[-1, -1, -1] = math.inf
    elif kind == "nan_draft":
        q[0, -1, 0] = math.nan
    elif kind == "negative_target":
        p[0, 0, -1] = -0.25
    elif kind == "negative_draft":
        q[-1, 0, 0] = -1e-3
    elif kind == "zero_mass_target":
        p[0, -1] = 0
    elif kind == "batch_mismatch":
        p = torch.cat([p, p[:1]])
    elif kind == "k_mismatch":
        q = torch.cat([q, q[:, :1]], dim=1)
    elif kind == "vocab_mismatch":
        p = torch.cat([p, p[:, :, :1]], dim=2)
    elif kind == "empty_batch":
        ids, q, p = ids[:0], q[:0], p[:0]
    elif kind == "k_zero":
        ids, q, p = ids[:, :0], q[:, :0], p[:, :1]
    elif kind == "id_too_large":
        ids[0, 0] = V
    elif kind == "id_negative":
        ids[-1, -1] = -1
    elif kind == "float_ids":
        ids = ids.to(torch.float32)
    elif kind == "integer_probs":
        p = (p > 0).to(torch.int64)
    return ids, q, p


# (corruption, argument the message must name)
CORRUPTIONS = [
    ("nan_target", "target_probs"), ("inf_target", "target_probs"), ("nan_draft", "draft_probs"),
    ("negative_target", "target_probs"), ("negative_draft", "draft_probs"),
    ("zero_mass_target", "target_probs"), ("batch_mismatch", "target_probs"),
    ("k_mismatch", "draft_probs"), ("vocab_mismatch", "target_probs"),
    ("empty_batch", "draft_token_ids"), ("k_zero", "draft_token_ids"),
    ("id_too_large", "draft_token_ids"), ("id_negative", "draft_token_ids"),
    ("float_ids", "draft_token_ids"), ("integer_probs", "target_probs"),
]


@pytest.mark.parametrize("spec", VALIDATING)
@pytest.mark.parametrize("kind, argument", CORRUPTIONS)
@settings(max_examples=max(1, settings.default.max_examples // 3))
@given(case=draft_target_pairs(vocab_size=st.integers(1, 20), dtypes=["float32", "float64"],
                               families=HONEST_PAIR_FAMILIES))
def test_invalid_input_raises_naming_the_argument(spec, kind, argument, case):
    note(case.repro() + f"\n# corrupted: {kind}")
    ids, q, p = _corrupt(case, kind)
    with pytest.raises((ValueError, TypeError), match=argument):
        spec.fn(ids, q, p, torch.Generator().manual_seed(0))


# ----------------------------------------------------------------- first-token law


def _binomial_check():
    """The exact binomial test of ``specexact.exactness`` when it is available."""
    for where in ("specexact.exactness", "specexact.exactness.exact_tests"):
        try:
            return getattr(importlib.import_module(where), "binomial_check")
        except (ImportError, AttributeError):
            continue
    return None


def law_check(counts: np.ndarray, law: np.ndarray, alpha: float) -> tuple[bool, str]:
    """Exact goodness of fit of ``counts`` to ``law`` at false-fail rate ``alpha``.

    An outcome of probability 0 that occurs fails at once (exact). Otherwise every outcome
    of positive probability gets an exact two-sided binomial test at ``alpha / M`` (M such
    outcomes; the p-value doubles the smaller exact binomial tail, and the record of
    ``exactness.binomial_check`` is attached to a failure): by Bonferroni the whole check
    fails a correct sampler with probability at most ``alpha`` at every sample size. (A Pearson chi-square with 50 expected counts per
    bin over-rejects by about 36x at alpha = 5e-10 in the two-bin case, so it is not used
    at this suite's per-check rates.)
    """
    n = int(counts.sum())
    bad = np.flatnonzero((law == 0) & (counts > 0))
    if bad.size:
        return False, f"{int(counts[bad].sum())} of {n} draws on zero-probability ids {bad[:10].tolist()}"
    support = np.flatnonzero(law > 0)
    if support.size <= 1:
        return True, "point mass"
    level = alpha / support.size
    k, prob = counts[support], np.minimum(1.0, law[support])
    # Two-sided p-value by doubling the smaller exact tail (vectorised; valid: each tail
    # is super-uniform under the null, so P(2 min(tails) <= a) <= a).
    tails = np.minimum(stats.binom.cdf(k, n, prob), stats.binom.sf(k - 1, n, prob))
    pvalues = np.minimum(1.0, 2 * tails)
    worst = int(np.argmin(pvalues))
    pvalue, t = float(pvalues[worst]), int(support[worst])
    detail = (f"smallest p-value {pvalue:.3g} (level {level:.3g}) at id {t}: "
              f"{int(counts[t])} of {n}, expected {n * law[t]:.1f}")
    check = _binomial_check()
    if pvalue <= level and check is not None:  # the suite's calibrated record of the failure
        detail += "\n" + str(check(int(counts[t]), n, float(min(1.0, law[t])), false_fail_rate=level))
    return pvalue > level, detail


def first_token_counts(spec: VerifierSpec, case: VerifyCase, draft_seed: int,
                       generator_seed: int) -> np.ndarray:
    """Counts of the first emitted id over STAT_ROWS copies of batch row 0, with fresh
    drafts from the law the drafts are sampled from."""
    rows = STAT_ROWS
    drafts = case.sample_drafts(rows, row=0, seed=draft_seed)
    q = case.draft_probs[:1].expand(rows, -1, -1)
    p = case.target_probs[:1].expand(rows, -1, -1)
    out = spec.fn(drafts, q, p, torch.Generator().manual_seed(generator_seed))
    return np.bincount(out[:, 0].numpy(), minlength=case.vocab_size)


STAT_SETTINGS = settings(
    max_examples=STAT_EXAMPLES,
    suppress_health_check=[*settings.default.suppress_health_check, HealthCheck.function_scoped_fixture],
)


@pytest.mark.parametrize("spec", BATCHED)
@pytest.mark.parametrize("family", HONEST_PAIR_FAMILIES)
@pytest.mark.statistical(checks=STAT_EXAMPLES)
@STAT_SETTINGS
@given(data=st.data(), draft_seed=st.integers(0, 2**32 - 1), generator_seed=st.integers(0, 2**32 - 1))
def test_first_emitted_token_follows_the_target(spec, family, data, draft_seed, generator_seed, alpha):
    case = data.draw(draft_target_pairs(vocab_size=st.integers(1, 12), batch_size=1,
                                        num_draft_tokens=st.integers(1, 3), families=[family]))
    note(case.repro(generator_seed) + f"\n# drafts: case.sample_drafts({STAT_ROWS}, seed={draft_seed})")
    law = case.first_token_law(0)  # the target row, up to the inputs' own rounding
    p = case.target_probs[0, 0].double().numpy()
    q = case.draft_probs[0, 0].double().numpy()
    assert 0.5 * np.abs(law - p / p.sum()).sum() <= abs(p.sum() - q.sum()) / q.sum() + 1e-9
    counts = first_token_counts(spec, case, draft_seed, generator_seed)
    passed, detail = law_check(counts, law, alpha)
    assert passed, f"first emitted token does not follow the target: {detail}"


BLOCKED_ROWS = 500
BLOCKED_EXAMPLES = max(1, STAT_EXAMPLES // 2)


@pytest.mark.parametrize("spec", BATCHED)
@pytest.mark.statistical(checks=BLOCKED_EXAMPLES)
@settings(STAT_SETTINGS, max_examples=BLOCKED_EXAMPLES)
@given(case=draft_target_pairs(vocab_size=st.sampled_from([4097, 8193]), batch_size=1,
                               num_draft_tokens=1, dtypes=["float32", "bfloat16"],
                               families=["independent", "disjoint", "one_hot_draft", "target_removed"],
                               target_families=["masked", "one_hot", "subnormal"]),
       draft_seed=st.integers(0, 2**32 - 1), generator_seed=st.integers(0, 2**32 - 1))
def test_first_emitted_token_follows_the_target_past_tile_sizes(spec, case, draft_seed,
                                                                 generator_seed, alpha):
    """Vocabularies just past a tile size (4097, 8193), where samplers switch to blocked
    searches; sparse targets put the support on scattered ids (fewer rows: [rows, V]))."""
    note(case.repro(generator_seed) + f"\n# drafts: case.sample_drafts({BLOCKED_ROWS}, seed={draft_seed})")
    rows = BLOCKED_ROWS
    drafts = case.sample_drafts(rows, row=0, seed=draft_seed)
    out = spec.fn(drafts, case.draft_probs[:1].expand(rows, -1, -1),
                  case.target_probs[:1].expand(rows, -1, -1),
                  torch.Generator().manual_seed(generator_seed))
    counts = np.bincount(out[:, 0].numpy(), minlength=case.vocab_size)
    passed, detail = law_check(counts, case.first_token_law(0), alpha)
    assert passed, f"first emitted token does not follow the target: {detail}"


@pytest.mark.parametrize("spec", GUARDED)
@pytest.mark.parametrize("family", DISHONEST_PAIR_FAMILIES)
@pytest.mark.statistical(checks=STAT_EXAMPLES)
@STAT_SETTINGS
@given(data=st.data(), draft_seed=st.integers(0, 2**32 - 1), generator_seed=st.integers(0, 2**32 - 1))
def test_first_emitted_token_law_under_dishonest_drafts(spec, family, data, draft_seed,
                                                        generator_seed, alpha):
    """With a misreported draft law the output is not the target's, but it is still the
    law the documented algorithm (and its guards) gives: checked exactly the same way."""
    case = data.draw(draft_target_pairs(vocab_size=st.integers(2, 12), batch_size=1,
                                        num_draft_tokens=st.integers(1, 3), families=[family]))
    note(case.repro(generator_seed) + f"\n# drafts: case.sample_drafts({STAT_ROWS}, seed={draft_seed})")
    if family == "zero_draft_prob":
        # q(d) = 0 for the case's drafted id only; pin that id in every row.
        d = int(case.draft_token_ids[0, 0])
        sampled = torch.zeros_like(case.sampled_probs[0, 0])
        sampled[d] = 1
        law = first_token_law(case.target_probs[0, 0], case.draft_probs[0, 0], sampled)
        drafts = case.draft_token_ids[:1].expand(STAT_ROWS, -1)
        out = spec.fn(drafts, case.draft_probs[:1].expand(STAT_ROWS, -1, -1),
                      case.target_probs[:1].expand(STAT_ROWS, -1, -1),
                      torch.Generator().manual_seed(generator_seed))
        counts = np.bincount(out[:, 0].numpy(), minlength=case.vocab_size)
    else:
        law = case.first_token_law(0)
        counts = first_token_counts(spec, case, draft_seed, generator_seed)
    passed, detail = law_check(counts, law, alpha)
    assert passed, f"first emitted token does not follow the algorithm's law: {detail}"


@pytest.mark.parametrize("spec", BATCHED)
@pytest.mark.statistical(checks=1)
def test_negative_control_misreported_draft_is_detected(spec, alpha):
    # Drafts are always token 0 but reported as drawn from (1/2, 1/2); target (1/2, 1/2).
    # min(1, p/q) = 1 accepts every draft: the first token is always 0, not the target.
    # A check that passed here would have no power.
    rows = STAT_ROWS
    drafts = torch.zeros(rows, 1, dtype=torch.int64)
    q = torch.full((rows, 1, 2), 0.5, dtype=torch.float64)
    p = torch.full((rows, 2, 2), 0.5, dtype=torch.float64)
    out = spec.fn(drafts, q, p, torch.Generator().manual_seed(0))
    counts = np.bincount(out[:, 0].numpy(), minlength=2)
    passed, _ = law_check(counts, np.array([0.5, 0.5]), alpha)
    assert not passed
    assert law_check(counts, first_token_law([0.5, 0.5], [0.5, 0.5], [1.0, 0.0]), alpha)[0]


# ------------------------------------------------------------------ uniform probes


def probe_inputs(p: float, q: float):
    ids = torch.zeros(1, 1, dtype=torch.int64)
    draft = torch.tensor([[[q, 1.0 - q if q < 1 else 0.0]]], dtype=torch.float64)
    if draft.sum() <= 0:  # pragma: no cover - q in [0, 1] always leaves mass
        draft[0, 0, 1] = 1.0
    target = torch.tensor([[[p, 1.0 - p if p < 1 else 0.0], [0.5, 0.5]]], dtype=torch.float64)
    return ids, draft, target


@pytest.mark.parametrize("spec", INJECTABLE)
@given(probe=acceptance_probes())
def test_acceptance_decision_on_boundary_uniforms(spec, probe):
    note(f"{probe!r}")
    ids, draft, target = probe_inputs(probe.target_prob, probe.draft_prob)
    with injected(spec, acceptance=[[[probe.uniform]]]):
        out = spec.fn(ids, draft, target, torch.Generator().manual_seed(0))
    accepted = bool(out[0, 1] >= 0)
    # The documented rule is the float64 comparison u * q < p ...
    assert accepted == probe.float_accept, f"accepted={accepted}, documented rule says {probe.float_accept}"
    # ... which is the exact rule u < p / q except within one ulp of the boundary.
    if not probe.in_rounding_band:
        assert accepted == probe.exact_accept


# one case per boundary kind: (p, q, u, expected output row) with the recovered / bonus
# uniform fixed at 0.25 (target bonus row (1/2, 1/2) -> id 0; residual (0, 0.3) -> id 1)
BOUNDARY_PINS = [
    ("zero", 0.3, 0.6, 0.0, [0, 0]),
    ("smallest", 0.3, 0.6, 5e-324, [0, 0]),
    ("below_ratio", 0.3, 0.6, 0.5 - 2**-54, [0, 0]),
    ("ratio", 0.3, 0.6, 0.5, [1, -1]),            # 0.5 * 0.6 == 0.3 exactly: not < 0.3
    ("above_ratio", 0.3, 0.6, 0.5 + 2**-53, [1, -1]),
    ("one_minus_ulp", 0.3, 0.6, 1 - 2**-53, [1, -1]),
    ("one_minus_ulp_equal", 0.5, 0.5, 1 - 2**-53, [0, 0]),
    ("draft_zero", 0.2, 0.0, 1 - 2**-53, [0, 0]),   # q(d) = 0 < p(d): the guard accepts
    ("both_zero", 0.0, 0.0, 0.0, [1, -1]),          # 0 < 0 is false: rejected
    ("target_zero_u_zero", 0.0, 0.6, 0.0, [1, -1]),
    # p = q = smallest subnormal: u * q rounds up to q for u > 1/2, so the float rule
    # rejects an acceptance of exact probability 1; residual (0, 0) falls back to the
    # target (5e-324, 1) -> id 1. Law impact <= q(d) = 5e-324 (documented float rule).
    ("subnormal_equal", 5e-324, 5e-324, 0.75, [1, -1]),
]


@pytest.mark.parametrize("spec", INJECTABLE)
@pytest.mark.parametrize("name, p, q, u, expected", BOUNDARY_PINS, ids=[b[0] for b in BOUNDARY_PINS])
def test_pinned_boundary_uniforms(spec, name, p, q, u, expected):
    ids, draft, target = probe_inputs(p, q)
    with injected(spec, acceptance=[[[u]]], sampling=[[[0.25]]]):
        out = spec.fn(ids, draft, target, None)
    assert out.tolist() == [expected]


# --------------------------------------------------------- pinned family regressions


def run_pinned(spec, ids, draft, target, acceptance, sampling):
    with injected(spec, acceptance=[acceptance], sampling=[sampling]):
        return spec.fn(torch.tensor(ids), draft, target, None).tolist()


@pytest.mark.parametrize("spec", INJECTABLE)
def test_pinned_identical_pair_accepts_everything(spec):
    law = torch.tensor([[[0.2, 0.8], [0.6, 0.4], [0.5, 0.5]]], dtype=torch.float32)
    out = run_pinned(spec, [[1, 0]], law[:, :2], law, [[1 - 2**-53, 1 - 2**-53]], [[0.75]])
    assert out == [[1, 0, 1]]


@pytest.mark.parametrize("spec", INJECTABLE)
def test_pinned_rounding_pair_falls_back_to_the_target(spec):
    q = torch.tensor([[[0.25, 0.75]]], dtype=torch.float32)
    below = torch.nextafter(q, torch.zeros_like(q))
    target = torch.cat([below, torch.tensor([[[0.5, 0.5]]])], dim=1)
    # u * 0.75 > 0.75 - 1 ulp: rejected; the residual is exactly 0 -> sample the target row
    out = run_pinned(spec, [[1]], q, target, [[1 - 2**-53]], [[0.5]])
    assert out == [[1, -1]]


@pytest.mark.parametrize("spec", INJECTABLE)
def test_pinned_disjoint_pair_emits_from_the_target(spec):
    target = torch.tensor([[[1.0, 0.0], [0.5, 0.5]]])
    draft = torch.tensor([[[0.0, 1.0]]])
    assert run_pinned(spec, [[1]], draft, target, [[0.0]], [[0.99]]) == [[0, -1]]


@pytest.mark.parametrize("spec", INJECTABLE)
def test_pinned_target_removed_draft_is_rejected(spec):
    target = torch.tensor([[[0.5, 0.5, 0.0], [1 / 3, 1 / 3, 1 / 3]]], dtype=torch.float64)
    draft = torch.tensor([[[0.2, 0.2, 0.6]]], dtype=torch.float64)
    # residual (0.3, 0.3, 0): u = 0.75 -> 0.45 of 0.6 -> id 1
    assert run_pinned(spec, [[2]], draft, target, [[0.0]], [[0.75]]) == [[1, -1]]


@pytest.mark.parametrize("spec", GUARDED)
def test_pinned_zero_draft_probability_guards(spec):
    target = torch.tensor([[[0.5, 0.5], [0.5, 0.5]]], dtype=torch.float64)
    draft = torch.tensor([[[0.0, 1.0]]], dtype=torch.float64)
    # q(d) = 0 < p(d): accepted even at u = 1 - ulp, then the bonus
    assert run_pinned(spec, [[0]], draft, target, [[1 - 2**-53]], [[0.75]]) == [[0, 1]]
    # q(d) = 0 = p(d): rejected; residual (0, 0) -> fallback to the target (0, 1)
    target0 = torch.tensor([[[0.0, 1.0], [0.5, 0.5]]], dtype=torch.float64)
    assert run_pinned(spec, [[0]], draft, target0, [[0.0]], [[0.1]]) == [[1, -1]]


@pytest.mark.parametrize("spec", INJECTABLE)
def test_pinned_one_hot_draft(spec):
    target = torch.tensor([[[0.2, 0.3, 0.5], [1.0, 0.0, 0.0]]], dtype=torch.float64)
    draft = torch.tensor([[[0.0, 1.0, 0.0]]], dtype=torch.float64)
    assert run_pinned(spec, [[1]], draft, target, [[0.2999]], [[0.0]]) == [[1, 0]]
    # rejected at u = 0.3 (0.3 * 1 < 0.3 is false): residual (0.2, 0, 0.5) -> u = 0.5 -> id 2
    assert run_pinned(spec, [[1]], draft, target, [[0.3]], [[0.5]]) == [[2, -1]]


@pytest.mark.parametrize("spec", VERIFIERS)
def test_pinned_greedy_argmax_path(spec):
    hot = torch.eye(4, dtype=torch.float64)
    target = hot[[2, 0, 3]][None]  # argmax path 2, 0, 3
    for drafts, expected in (([2, 0], [2, 0, 3]), ([2, 1], [2, 0, -1]), ([1, 0], [2, -1, -1])):
        draft = hot[drafts][None]
        out = spec.fn(torch.tensor([drafts]), draft, target, torch.Generator().manual_seed(1))
        assert out.tolist() == [expected]


@pytest.mark.parametrize("spec", INJECTABLE)
def test_pinned_truncated_pair(spec):
    logits = torch.tensor([[2.0, 1.0, 0.0]] * 2, dtype=torch.float64)
    target = process_logits(logits, batch_params(SamplingParams(top_k=1), 2))[None]
    draft = process_logits(logits[:1], batch_params(SamplingParams(top_p=0.9), 1))[None]
    assert target[0, 0].tolist() == [1.0, 0.0, 0.0] and draft[0, 0, 1] > 0
    # draft 1 was truncated away by the target's top-k: rejected; residual is (1 - q0, 0, 0)
    assert run_pinned(spec, [[1]], draft, target, [[0.0]], [[0.9]]) == [[0, -1]]


@pytest.mark.parametrize("spec", INJECTABLE)
def test_pinned_half_precision_mixed_dtypes(spec):
    target = torch.tensor([[[0.5, 0.5], [0.25, 0.75]]], dtype=torch.bfloat16)
    draft = torch.tensor([[[0.25, 0.75]]], dtype=torch.float16)
    # u * 0.75 = 0.45 < 0.5: accepted; bonus row (0.25, 0.75) with u = 0.5 -> id 1
    assert run_pinned(spec, [[1]], draft, target, [[0.6]], [[0.5]]) == [[1, 1]]


@pytest.mark.parametrize("spec", INJECTABLE)
def test_pinned_real_vocab_flat_target_one_hot_draft(spec):
    V = 256000
    target = torch.full((1, 2, V), 1.0 / V)
    draft = torch.zeros(1, 1, V)
    draft[0, 0, V - 1] = 1.0
    # accept iff u * 1 < 1/V; u = 0 accepts, then the bonus at u = 1/2 + 0.4/V -> id V/2
    u = 0.5 + 0.4 / V
    assert run_pinned(spec, [[V - 1]], draft, target, [[0.0]], [[u]]) == [[V - 1, V // 2]]
    out = run_pinned(spec, [[V - 1]], draft, target, [[0.5]], [[u]])
    assert out[0][1] == -1 and out[0][0] != V - 1


# ------------------------------------------------------------- budget bookkeeping


def test_statistical_tests_declare_the_checks_they_run():
    """Each example of a statistical test is one check: the declared count must equal the
    examples Hypothesis runs (max_examples plus explicit @example cases)."""
    tests = [obj for name, obj in globals().items() if name.startswith("test_") and callable(obj)]
    found = 0
    for fn in tests:
        marks = [m for m in getattr(fn, "pytestmark", []) if m.name == "statistical"]
        given_settings = getattr(fn, "_hypothesis_internal_use_settings", None)
        if not marks or given_settings is None or not hasattr(fn, "hypothesis"):
            continue
        explicit = len(getattr(fn, "hypothesis_explicit_examples", []))
        assert marks[0].kwargs["checks"] == given_settings.max_examples + explicit, fn.__name__
        found += 1
    assert found >= 3
