"""The single-call rules: each catches its bug, and the built-in breaks none."""

import pytest
import torch

from specexact.decoders import verify
from specexact.fuzz.examples import ProbExample, ProbInputs
from specexact.fuzz.invariants import check_call_invariants, check_output
from specexact.fuzz.rules import RuleBroken
from specexact.fuzz.subject import Call, Subject
from specexact.strategies import VerifyCase

EXAMPLE = ProbExample(VerifyCase(family="independent", vocab_size=9, batch_size=3, num_draft_tokens=2, seed=5),
                      generator_seed=11)


def call_of(example=EXAMPLE):
    return Call("verify", example.inputs, generator_seed=example.generator_seed, source=repr(example))


def broken(sampler, example=EXAMPLE) -> str:
    with pytest.raises(RuleBroken) as info:
        check_call_invariants(Subject.of(sampler, "s"), call_of(example))
    return info.value.rule


def test_the_builtin_verifier_keeps_every_rule():
    out = check_call_invariants(Subject.of(verify, "builtin"), call_of())
    assert tuple(out.shape) == (3, 3)


def test_a_crash_a_bad_shape_and_a_zero_probability_token_are_findings():
    def crash(ids, q, p, g):
        raise IndexError("boom")

    def wide(ids, q, p, g):
        return torch.zeros(ids.shape[0], ids.shape[1] + 2, dtype=torch.int64)

    assert broken(crash) == "no_crash"
    assert broken(wide) == "output_protocol"
    x = ProbInputs(torch.tensor([[1]]), torch.tensor([[[0.5, 0.5]]]), torch.tensor([[[1.0, 0.0], [0.5, 0.5]]]))
    with pytest.raises(RuleBroken, match="token 1 at row 0, position 0") as info:
        check_output(Subject.of(verify), Call("verify", x), torch.tensor([[1, 0]]))
    assert info.value.rule == "zero_probability_token"


def test_writing_into_the_inputs_is_a_finding():
    def scribbles(ids, q, p, g):
        out = verify(ids, q, p, g)
        p[0, 0].copy_(p[0, 0].flip(-1))  # rewrites a target row in place
        return out

    assert broken(scribbles) == "inputs_unmodified"


def test_a_sampler_on_the_global_rng_or_on_its_own_generator_is_a_finding():
    def global_rng(ids, q, p, g):
        return verify(ids, q, p, None)  # torch's default generator

    def own_generator(ids, q, p, g):
        return verify(ids, q, p, torch.Generator().manual_seed(0))

    assert broken(global_rng) == "uses_generator"
    assert broken(own_generator) == "uses_generator"

    def touches_generator_but_uses_global(ids, q, p, g):
        torch.rand(1, generator=g)
        return verify(ids, q, p, None)

    assert broken(touches_generator_but_uses_global) == "same_generator_same_output"
