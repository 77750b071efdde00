"""Fuzz example recipes: what they build, and that their repr rebuilds them."""

import torch

from specexact.decoders import SamplingParams
from specexact.fuzz.examples import REPLAY_IMPORTS, LogitsExample, NearEqualPair, ProbExample, ProbInputs
from specexact.strategies import LogitsCase, ProbsCase, VerifyCase


def _rebuild(text: str):
    scope: dict = {}
    exec(REPLAY_IMPORTS, scope)
    return eval(text, scope)


def test_near_equal_pairs_differ_only_at_the_drafted_tokens():
    for family in ("draft_above", "target_below"):
        pair = NearEqualPair(family=family, vocab_size=7, batch_size=2, num_draft_tokens=3, seed=4, num_ulps=2)
        x = pair.inputs
        ids = x.draft_token_ids
        p, q = x.target_probs[:, :3], x.draft_probs
        moved = torch.zeros_like(q, dtype=torch.bool).scatter_(2, ids[:, :, None], True)
        assert torch.equal(p[~moved], q[~moved])
        d_p, d_q = p[moved], q[moved]
        if family == "draft_above":
            assert bool((d_q > d_p).all())
            assert torch.equal(torch.nextafter(torch.nextafter(d_p, torch.tensor(1.0)), torch.tensor(1.0)), d_q)
        else:
            assert bool((d_p < d_q).all())
        assert bool((q.gather(2, ids[:, :, None]) > 0).all()), "drafts have draft mass"
        again = _rebuild(repr(ProbExample(pair, generator_seed=9)))
        assert torch.equal(again.inputs.draft_probs, q) and again.generator_seed == 9


def test_prob_example_inputs_are_fresh_copies_and_positions_slice():
    ex = ProbExample(VerifyCase(family="independent", vocab_size=5, batch_size=2, num_draft_tokens=3, seed=1))
    a, b = ex.pair.draft_probs, ex.inputs.draft_probs
    assert torch.equal(a, b) and a.data_ptr() != b.data_ptr()
    one = ex.inputs.position(1)
    assert one.shape == (2, 1, 5)
    assert torch.equal(one.target_probs, ex.inputs.target_probs[:, 1:3])


def test_logits_example_least_likely_first_puts_the_draft_on_a_removed_token():
    ex = LogitsExample(logits=LogitsCase(family="one_hot", vocab_size=6, batch_size=4, seed=2),
                       draft=ProbsCase(family="flat", vocab_size=6, batch_size=2, seed=3),
                       num_draft_tokens=1, target_params=(SamplingParams(),) * 2,
                       prompt=((1,), (2,)), output=((3, 4), ()), least_likely_first=True)
    x = ex.inputs
    assert tuple(x.target_logits.shape) == (2, 2, 6) and x.target_logits.dtype == torch.float32
    for b in range(2):
        assert torch.isneginf(x.target_logits[b, 0, int(x.draft_token_ids[b, 0])])
    assert x.output_token_ids.tolist() == [[3, 4], [-1, -1]]
    again = _rebuild(repr(ex))
    assert torch.equal(again.inputs.draft_token_ids, x.draft_token_ids)
    assert isinstance(ProbExample(VerifyCase(family="identical", vocab_size=1)).inputs, ProbInputs)
