"""The axes the fuzz phase's examples reach (issue 33): γ up to 8 and 15 (a block drafter's
block) at both levels with ``B (γ+1) V`` bounded as before; float16 and bfloat16 laws for
every sampler that declares them (the ``verify`` protocol, the built-in logits-level
verifier: logits and draft laws handed over in half precision), never for one that does
not; order-sensitive rows at the logits level. Each test draws a seeded (derandomised)
sample of examples and fails naming the axis that stopped being generated."""

from collections import Counter

import torch
from hypothesis import HealthCheck, Phase, find, settings
from hypothesis.errors import NoSuchExample

from specexact.decoders import verify
from specexact.decoders.adapters.builtin_logits import LogitsLevelVerifier, verify_logits_level
from specexact.decoders.processing import BUILTIN_PROCESSING
from specexact.fuzz.generation import CELLS_PER_DRAFT_ROW, logits_examples, prob_examples
from specexact.fuzz.subject import Subject
from specexact.strategies import MIN_ORDER_TV, order_pairs, order_tv

#: Most examples a reach search draws (derandomised, the same every run).
REACH = 400
_SEARCH = settings(max_examples=REACH, derandomize=True, database=None, deadline=None, phases=[Phase.generate],
                   suppress_health_check=list(HealthCheck))


def reach(strategy, tag, wanted, check=lambda x: None) -> Counter:
    """Draw until every label of ``wanted`` was the tag of an example; ``check`` each one."""
    seen: Counter = Counter()

    def done(x) -> bool:
        check(x)
        seen.update(tag(x))
        return set(wanted) <= set(seen)

    try:
        find(strategy, done, settings=_SEARCH)
    except NoSuchExample:
        pass
    missing = sorted(set(wanted) - set(seen), key=str)
    assert not missing, f"never generated in {REACH} examples: {missing}; seen {dict(seen)}"
    return seen


def gamma_tags(K: int) -> list:
    return [t for t, hit in (("γ=1", K == 1), ("γ>=8", K >= 8), ("γ=15", K == 15)) if hit]


def _bounded(B, K, V, max_vocab=262145, max_batch=3):
    assert B * (K + 1) * V <= max_batch * CELLS_PER_DRAFT_ROW * max_vocab or V <= 8, (B, K, V)


def test_probability_level_reaches_long_gamma_and_half_precision():
    subject = Subject.of(verify, "verify")

    def tag(ex):
        return gamma_tags(ex.pair.num_draft_tokens) + [ex.pair.dtype]

    def check(ex):
        _bounded(ex.pair.batch_size, ex.pair.num_draft_tokens, ex.pair.vocab_size)

    reach(prob_examples(subject), tag, ["γ=1", "γ>=8", "γ=15", "float16", "bfloat16"], check)


def test_the_probe_family_keeps_its_vocabulary_budget():
    subject = Subject.of(verify, "verify")
    reach(prob_examples(subject, max_vocab=8193), lambda ex: gamma_tags(ex.pair.num_draft_tokens), ["γ=15"],
          lambda ex: _bounded(ex.pair.batch_size, ex.pair.num_draft_tokens, ex.pair.vocab_size, 8193))


def _logits_tags(ex):
    tags = gamma_tags(ex.num_draft_tokens) + [f"logits:{ex.logits_dtype}", f"draft:{ex.draft_dtype}"]
    x = ex.inputs
    assert str(x.target_logits.dtype) == f"torch.{ex.logits_dtype}" and str(x.draft_probs.dtype) == f"torch.{ex.draft_dtype}"
    _bounded(ex.batch_size, ex.num_draft_tokens, ex.vocab_size)
    return tags


def test_logits_level_reaches_long_gamma_and_half_precision_logits_and_drafts():
    subject = Subject.of(verify_logits_level, "builtin-logits")
    reach(logits_examples(subject), _logits_tags,
          ["γ=1", "γ>=8", "γ=15", "logits:float16", "logits:bfloat16", "draft:float16", "draft:bfloat16"])


def test_a_sampler_that_declares_no_half_precision_gets_none():
    v = LogitsLevelVerifier(BUILTIN_PROCESSING, name="f32")
    v.capabilities = v.capabilities.__class__(**{**v.capabilities.__dict__, "dtypes": (torch.float32,)})
    subject = Subject.of(v, "f32")
    seen = reach(logits_examples(subject), _logits_tags, ["γ>=8"])
    assert set(k for k in seen if ":" in k) == {"logits:float32", "draft:float32"}


def test_logits_level_reaches_order_sensitive_rows():
    subject = Subject.of(verify_logits_level, "builtin-logits")
    pairs = order_pairs(BUILTIN_PROCESSING)

    def tag(ex):  # every row of the example order-sensitive at its first position (the order branch)
        x = ex.inputs
        for b in range(ex.batch_size):
            history = [t for t in ex.output[b]]
            tvs = [order_tv(x.target_logits[b, 0].float(), ex.target_params[b], BUILTIN_PROCESSING, p,
                            history=history, prompt=ex.prompt[b]) for p in pairs]
            if max(tvs) < MIN_ORDER_TV:
                return []
        return [f"B={ex.batch_size} order-sensitive", "γ>=8 order-sensitive" if ex.num_draft_tokens >= 8 else "short"]

    reach(logits_examples(subject, max_vocab=512), tag, ["B=3 order-sensitive", "γ>=8 order-sensitive"])
