"""Declared per-operation semantics of LogitsProcessing: each variant's law computed exactly
on small hand-checked cases (ties at the k-th value, masses exactly at top_p), the
equivalences that define them, their validation, and that the defaults are the built-in."""

import math

import pytest
import torch

from specexact.decoders import LogitsProcessing, SamplingParams, batch_params, process_logits, process_logits_in_order
from specexact.decoders.processing import BUILTIN_PROCESSING, SEMANTICS_FIELDS

F64 = torch.float64


def law(logits, processing=BUILTIN_PROCESSING, history=None, prompt=None, **params):
    x = torch.as_tensor(logits, dtype=F64)
    x = x[None] if x.dim() == 1 else x
    p = batch_params(SamplingParams(**params), x.shape[0])
    return process_logits_in_order(x, p, history, prompt_ids=prompt, processing=processing)[0]


def uniform_on(kept, V):
    out = torch.zeros(V, dtype=F64)
    out[list(kept)] = 1.0 / len(kept)
    return out


def exact_probs(probs):
    """Logits whose float64 softmax is ``probs`` exactly (checked: the examples rely on it)."""
    x = torch.log(torch.tensor(probs, dtype=F64))
    assert torch.softmax(x, -1).tolist() == list(probs), "precondition: an exactly representable law"
    return x


# --------------------------------------------------------------------------- top-k ties

@pytest.mark.parametrize("ties, kept", [("keep_ties", {1, 2, 3}), ("lower_id", {1, 2}), ("exactly_k", {1, 2}),
                                        ("higher_id", {2, 3})])
def test_top_k_ties_at_the_kth_value(ties, kept):
    # logits 1, 2, 2, 2, 0 and k = 2: the 2nd largest value (2) is held by tokens 1, 2, 3.
    p = law([1.0, 2.0, 2.0, 2.0, 0.0], LogitsProcessing(top_k_ties=ties), top_k=2)
    assert torch.equal(p, uniform_on(kept, 5))


def test_top_k_variants_agree_without_ties():
    x = [0.3, 2.0, -1.0, 1.5, 0.7]
    ref = law(x, top_k=3)
    assert (ref > 0).tolist() == [False, True, False, True, True]
    for ties in ("lower_id", "higher_id"):
        torch.testing.assert_close(law(x, LogitsProcessing(top_k_ties=ties), top_k=3), ref, rtol=0, atol=0)


def test_exactly_k_ignores_ties_below_the_kth_value_and_masked_tokens():
    # -inf tokens never come back; ties below the k-th value are cut by every variant.
    x = [float("-inf"), 3.0, 1.0, 1.0, 2.0]
    for ties in ("keep_ties", "lower_id", "higher_id"):
        assert (law(x, LogitsProcessing(top_k_ties=ties), top_k=2) > 0).tolist() == [False, True, False, False, True]
    assert (law(x, LogitsProcessing(top_k_ties="lower_id"), top_k=3) > 0).tolist() == [False, True, True, False, True]
    assert (law(x, LogitsProcessing(top_k_ties="higher_id"), top_k=3) > 0).tolist() == [False, True, False, True, True]


# --------------------------------------------------------------------------- top-p

def test_top_p_boundary_when_the_mass_is_exactly_top_p():
    # probs 0.75, 0.125, 0.0625, 0.0625 (exact in float64); top_p = 0.875 = 0.75 + 0.125 exactly.
    x = exact_probs([0.75, 0.125, 0.0625, 0.0625])
    inclusive = law(x, top_p=0.875)  # mass >= 0.875 reached with two tokens
    exclusive = law(x, LogitsProcessing(top_p_boundary="exclusive"), top_p=0.875)  # > 0.875 needs three
    assert (inclusive > 0).tolist() == [True, True, False, False]
    assert (exclusive > 0).tolist() == [True, True, True, False]
    torch.testing.assert_close(inclusive, torch.tensor([0.75, 0.125, 0.0, 0.0], dtype=F64) / 0.875,
                               rtol=1e-15, atol=0)
    torch.testing.assert_close(exclusive, torch.tensor([0.75, 0.125, 0.0625, 0.0], dtype=F64) / 0.9375,
                               rtol=1e-15, atol=0)
    # Off the boundary the two agree.
    for top_p in (0.8, 0.9):
        assert torch.equal(law(x, top_p=top_p) > 0,
                           law(x, LogitsProcessing(top_p_boundary="exclusive"), top_p=top_p) > 0)


@pytest.mark.parametrize("ties, boundary, kept", [
    ("lower_id", "inclusive", {0, 1}),         # the built-in: mass 0.5 >= 0.5 after tokens 0, 1
    ("lower_id", "exclusive", {0, 1, 2}),      # mass > 0.5 needs a third token
    ("higher_id", "inclusive", {2, 3}),
    ("higher_id", "exclusive", {1, 2, 3}),
    ("keep_ties", "inclusive", {0, 1, 2, 3}),  # every token as probable as the last kept
    ("keep_ties", "exclusive", {0, 1, 2, 3}),
])
def test_top_p_ties_and_boundary_on_a_uniform_law(ties, boundary, kept):
    p = law([0.0, 0.0, 0.0, 0.0], LogitsProcessing(top_p_ties=ties, top_p_boundary=boundary), top_p=0.5)
    assert torch.equal(p, uniform_on(kept, 4))


def test_top_p_keep_ties_keeps_only_the_boundary_tie():
    # probs 0.5, 0.25, 0.25 (exact); top_p = 0.6: the built-in keeps tokens 0, 1; keep_ties adds
    # token 2 (tied with token 1); a tie above the boundary changes nothing.
    x = exact_probs([0.5, 0.25, 0.25])
    assert (law(x, top_p=0.6) > 0).tolist() == [True, True, False]
    assert (law(x, LogitsProcessing(top_p_ties="higher_id"), top_p=0.6) > 0).tolist() == [True, False, True]
    assert torch.equal(law(x, LogitsProcessing(top_p_ties="keep_ties"), top_p=0.6), torch.tensor([0.5, 0.25, 0.25],
                                                                                                 dtype=F64))
    assert (law(x, LogitsProcessing(top_p_ties="keep_ties"), top_p=0.4) > 0).tolist() == [True, False, False]


# --------------------------------------------------------------------------- untempered min-p / top-p

def test_min_p_reads_the_tempered_or_the_untempered_law():
    # logits 0, -1, -2 at T = 2, min_p = 0.5: tempered ratios exp(-0.5) = 0.61, exp(-1) = 0.37 keep
    # tokens 0, 1; untempered ratios exp(-1), exp(-2) keep token 0 only.
    x = [0.0, -1.0, -2.0]
    tempered = law(x, temperature=2.0, min_p=0.5)
    untempered = law(x, LogitsProcessing(min_p_law="untempered"), temperature=2.0, min_p=0.5)
    torch.testing.assert_close(tempered, torch.tensor([1.0, math.exp(-0.5), 0.0], dtype=F64) / (1 + math.exp(-0.5)))
    assert torch.equal(untempered, torch.tensor([1.0, 0.0, 0.0], dtype=F64))


def test_top_p_reads_the_tempered_or_the_untempered_law():
    # logits 0, -1, -3 at T = 3, top_p = 0.7: untempered probs 0.705, 0.259, 0.035 -> token 0
    # alone reaches 0.7; tempered probs 0.46, 0.33, 0.21 -> tokens 0, 1. The kept tokens get
    # their *tempered* probabilities either way.
    x = torch.tensor([0.0, -1.0, -3.0], dtype=F64)
    assert torch.softmax(x, -1)[0] > 0.7 > torch.softmax(x / 3, -1)[0]
    assert (law(x, temperature=3.0, top_p=0.7) > 0).tolist() == [True, True, False]
    assert torch.equal(law(x, LogitsProcessing(top_p_law="untempered"), temperature=3.0, top_p=0.7),
                       torch.tensor([1.0, 0.0, 0.0], dtype=F64))
    # top_p = 0.95: untempered 0.705 + 0.259 >= 0.95 keeps two; tempered, all three.
    assert (law(x, temperature=3.0, top_p=0.95) > 0).all()
    both = law(x, LogitsProcessing(top_p_law="untempered"), temperature=3.0, top_p=0.95)
    torch.testing.assert_close(both, torch.tensor([1.0, math.exp(-1 / 3), 0.0], dtype=F64) / (1 + math.exp(-1 / 3)))


def random_batch(seed, B=64, V=40, H=5):
    g = torch.Generator().manual_seed(seed)
    logits = (2.0 * torch.randn(B, V, generator=g)).to(F64)
    history = torch.randint(0, V, (B, H), generator=g)
    kinds = [SamplingParams(temperature=0.6, min_p=0.2, top_k=12, top_p=0.8),
             SamplingParams(temperature=1.7, min_p=0.05, top_p=0.9, presence_penalty=0.4),
             SamplingParams(temperature=0.8, top_p=0.7, repetition_penalty=1.3, frequency_penalty=0.2)]
    return logits, batch_params([kinds[i % 3] for i in range(B)], B), history


@pytest.mark.parametrize("seed", range(3))
def test_untempered_min_p_is_min_p_before_the_temperature(seed):
    """min-p's mask commutes with the division by the temperature, so reading the untempered
    law at its built-in place is the built-in order with min-p moved before the temperature."""
    logits, params, history = random_batch(seed)
    untempered = process_logits_in_order(logits, params, history,
                                         processing=LogitsProcessing(min_p_law="untempered"))
    moved = process_logits_in_order(logits, params, history, processing=LogitsProcessing(
        order=("penalties", "min_p", "temperature", "top_k", "top_p")))
    assert torch.equal(untempered > 0, moved > 0)
    torch.testing.assert_close(untempered, moved, rtol=1e-12, atol=1e-15)
    assert not torch.equal(untempered > 0, process_logits_in_order(logits, params, history) > 0), \
        "the batch must exercise the difference"


@pytest.mark.parametrize("seed", range(3))
def test_every_variant_at_its_default_is_the_builtin(seed):
    """Declaring each default explicitly is the built-in processing (process_logits, bit for bit)."""
    logits, params, history = random_batch(seed)
    explicit = LogitsProcessing(**{name: getattr(BUILTIN_PROCESSING, name) for name in SEMANTICS_FIELDS})
    assert explicit.is_builtin and explicit.semantics() == {}
    assert torch.equal(explicit(logits, params, history), process_logits(logits, params, history))


# --------------------------------------------------------------------------- penalty contexts

def test_penalty_scopes_and_windows_count_the_declared_tokens():
    # V = 5, logits 0; prompt [3, 0], output [1, 1, 2]: a presence penalty of 1 lowers the
    # tokens its context holds by 1; a frequency penalty of 1 by their count.
    zeros = torch.zeros(5, dtype=F64)
    prompt, output = torch.tensor([[3, 0]]), torch.tensor([[1, 1, 2]])

    def shifted(processing, **params):
        p = law(zeros, processing, history=output, prompt=prompt, **params)
        return (torch.log(p) - torch.log(p).max()).tolist()

    assert shifted(BUILTIN_PROCESSING, presence_penalty=1.0) == [0, -1, -1, 0, 0]
    assert shifted(LogitsProcessing(presence_penalty_scope="prompt_and_output"), presence_penalty=1.0) == \
        pytest.approx([-1, -1, -1, -1, 0])
    assert shifted(LogitsProcessing(presence_penalty_window=1), presence_penalty=1.0) == [0, 0, -1, 0, 0]
    assert shifted(LogitsProcessing(presence_penalty_scope="prompt_and_output", presence_penalty_window=4),
                   presence_penalty=1.0) == pytest.approx([-1, -1, -1, 0, 0])
    assert shifted(BUILTIN_PROCESSING, frequency_penalty=1.0) == [0, -2, -1, 0, 0]
    assert shifted(LogitsProcessing(frequency_penalty_window=2), frequency_penalty=1.0) == [0, -1, -1, 0, 0]
    assert shifted(LogitsProcessing(frequency_penalty_scope="prompt_and_output"), frequency_penalty=1.0) == \
        pytest.approx([-1, -2, -1, -1, 0])
    # A window over prompt and output reaches into the prompt only past the output.
    assert shifted(LogitsProcessing(frequency_penalty_scope="prompt_and_output", frequency_penalty_window=5),
                   frequency_penalty=1.0) == pytest.approx([-1, -2, -1, -1, 0])
    assert shifted(LogitsProcessing(frequency_penalty_scope="prompt_and_output", frequency_penalty_window=4),
                   frequency_penalty=1.0) == pytest.approx([-1, -2, -1, 0, 0])


def test_repetition_window_and_padding():
    # logits 2, 1, 0.5; output [0, -1, 1, -1] (padding anywhere): the last valid token is 1.
    x = torch.tensor([2.0, 1.0, 0.5], dtype=F64)
    hist = torch.tensor([[0, -1, 1, -1]])
    whole = law(x, history=hist, repetition_penalty=2.0)
    last = law(x, LogitsProcessing(repetition_penalty_window=1), history=hist, repetition_penalty=2.0)
    torch.testing.assert_close(whole, torch.softmax(torch.tensor([1.0, 0.5, 0.5], dtype=F64), -1))
    torch.testing.assert_close(last, torch.softmax(torch.tensor([2.0, 0.5, 0.5], dtype=F64), -1))


def test_old_repetition_scope_still_counts_the_prompt():
    x = torch.tensor([2.0, 1.0, 0.5], dtype=F64)
    p = law(x, LogitsProcessing(repetition_penalty_scope="prompt_and_output"), history=torch.empty(1, 0, dtype=torch.long),
            prompt=torch.tensor([[0]]), repetition_penalty=2.0)
    torch.testing.assert_close(p, torch.softmax(torch.tensor([1.0, 1.0, 0.5], dtype=F64), -1))
    assert LogitsProcessing(repetition_penalty_scope="prompt_and_output").penalty_context("repetition_penalty") == \
        ("prompt_and_output", None)


def test_a_prompt_scope_without_a_prompt_is_refused_by_name():
    with pytest.raises(ValueError, match="prompt_ids is required.*frequency_penalty_scope"):
        law([1.0, 0.0], LogitsProcessing(frequency_penalty_scope="prompt_and_output"),
            history=torch.tensor([[0]]), frequency_penalty=0.5)
    # not applied (neutral parameter): no prompt needed
    law([1.0, 0.0], LogitsProcessing(frequency_penalty_scope="prompt_and_output"), history=torch.tensor([[0]]))


# --------------------------------------------------------------------------- min_tokens

def test_min_tokens_mask_before_or_after_truncation():
    # EOS = token 0 is the most probable; top_k = 2. Masked first, top-k picks tokens 1, 2;
    # masked last, top-k keeps 0, 1 and EOS is removed: token 1 alone.
    x = torch.tensor([[3.0, 2.0, 1.0, 0.0]], dtype=F64)
    mask = torch.tensor([[True, False, False, False]])
    params = batch_params(SamplingParams(top_k=2), 1)
    before = process_logits_in_order(x, params, min_tokens_masked=mask)
    after = process_logits_in_order(x, params, min_tokens_masked=mask,
                                    processing=LogitsProcessing(min_tokens_mask="after_processing"))
    torch.testing.assert_close(before[0], torch.tensor([0.0, math.e, 1.0, 0.0], dtype=F64) / (1 + math.e))
    assert torch.equal(after[0], torch.tensor([0.0, 1.0, 0.0, 0.0], dtype=F64))
    # the built-in processing's own path (process_logits) takes the mask the same way
    torch.testing.assert_close(BUILTIN_PROCESSING(x, params, min_tokens_masked=mask), before, rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="leaves row 0 no token"):
        process_logits_in_order(x, batch_params(SamplingParams(top_k=1), 1), min_tokens_masked=mask,
                                processing=LogitsProcessing(min_tokens_mask="after_processing"))
    with pytest.raises(ValueError, match="min_tokens_masked must be a bool tensor"):
        process_logits_in_order(x, params, min_tokens_masked=mask[:, :3])


# --------------------------------------------------------------------------- declaration

def test_defaults_are_the_builtin_and_every_variant_is_not():
    assert BUILTIN_PROCESSING.is_builtin and BUILTIN_PROCESSING.semantics() == {}
    others = {"top_k_ties": "lower_id", "top_p_boundary": "exclusive", "top_p_ties": "keep_ties",
              "min_p_law": "untempered", "top_p_law": "untempered", "frequency_penalty_scope": "prompt_and_output",
              "presence_penalty_scope": "prompt_and_output", "repetition_penalty_window": 3,
              "frequency_penalty_window": 4, "presence_penalty_window": 5, "min_tokens_mask": "after_processing"}
    assert set(others) == set(SEMANTICS_FIELDS)
    for name, value in others.items():
        p = LogitsProcessing(**{name: value})
        assert not p.is_builtin and p.semantics() == {name: value}
        assert p.to_dict()[name] == value
    d = BUILTIN_PROCESSING.to_dict()
    assert set(d) == {"order", "repetition_penalty_scope", "greedy", *SEMANTICS_FIELDS}
    assert LogitsProcessing(top_k_ties="exactly_k").top_k_ties == "lower_id"


@pytest.mark.parametrize("kw, match", [
    ({"top_k_ties": "random"}, r"top_k_ties='random' cannot be declared: a random tie-break"),
    ({"top_p_ties": "unspecified"}, r"top_p_ties='unspecified' cannot be declared"),
    ({"top_k_ties": "first"}, r"top_k_ties must be one of"),
    ({"top_p_boundary": "open"}, r"top_p_boundary must be one of"),
    ({"min_p_law": "before"}, r"min_p_law must be one of"),
    ({"top_p_law": "raw"}, r"top_p_law must be one of"),
    ({"presence_penalty_scope": "prompt"}, r"presence_penalty_scope must be one of"),
    ({"frequency_penalty_window": 0}, r"frequency_penalty_window must be None .* got 0"),
    ({"repetition_penalty_window": 2.5}, r"repetition_penalty_window must be None"),
    ({"presence_penalty_window": True}, r"presence_penalty_window must be None"),
    ({"min_tokens_mask": "never"}, r"min_tokens_mask must be one of"),
])
def test_what_cannot_be_declared_is_refused_with_the_reason(kw, match):
    with pytest.raises(ValueError, match=match):
        LogitsProcessing(**kw)
