"""Boundary-uniform probes: the built-in passes, every acceptance-rule bug is caught exactly."""

import pytest
import torch

from specexact.decoders import verify, verify_with_uniforms
from specexact.fuzz.examples import NearEqualPair, ProbExample, ProbInputs
from specexact.fuzz.probes import all_probe_rows, grid_values, probe_example, stack_rows
from specexact.fuzz.rules import RuleBroken
from specexact.fuzz.subject import Subject
from specexact.strategies import VerifyCase

EXAMPLES = [
    VerifyCase(family="independent", vocab_size=7, batch_size=2, num_draft_tokens=3, seed=3),
    VerifyCase(family="target_removed", vocab_size=33, batch_size=2, num_draft_tokens=2, seed=8),
    VerifyCase(family="rounding", vocab_size=5, batch_size=1, num_draft_tokens=2, seed=1, dtype="bfloat16"),
    VerifyCase(family="zero_draft_prob", vocab_size=4, batch_size=2, num_draft_tokens=1, seed=2),
    NearEqualPair(family="draft_above", vocab_size=3, batch_size=2, num_draft_tokens=2, seed=6),
]


class Scaled:
    """verify with the acceptance threshold scaled (0.97: the zoo's under-acceptance)."""

    uniforms_dtype = torch.float64

    def __init__(self, scale: float) -> None:
        self.scale = scale

    def __call__(self, ids, q, p, g=None):
        return verify(ids, q, p, g)

    def verify_with_uniforms(self, ids, q, p, u, g=None):
        return verify_with_uniforms(ids, q, p, (u / self.scale).clamp(max=1 - 2**-53), g)


@pytest.mark.parametrize("pair", EXAMPLES, ids=lambda p: p.family)
def test_the_builtin_verifier_passes_every_probe(pair):
    counts = probe_example(Subject.of(verify, "builtin"), ProbExample(pair).inputs, source="x")
    rows = pair.batch_size * pair.num_draft_tokens
    assert rows <= counts["probes"] <= 2 * rows and counts["calls"] >= 6


def test_a_threshold_scaled_by_097_or_1_001_is_caught_by_the_bisection():
    x = ProbExample(EXAMPLES[0]).inputs
    for scale in (0.97, 1.001):
        with pytest.raises(RuleBroken) as info:
            probe_example(Subject.of(Scaled(scale), "scaled"), x, source="x")
        assert info.value.rule == "acceptance_rule"
        assert ("rejected" if scale < 1 else "accepted") in info.value.message
    probe_example(Subject.of(Scaled(1.0), "exact"), x, source="x")  # the control


def test_every_example_probes_u_0_on_a_zero_target_probability_draft():
    x = ProbExample(EXAMPLES[0]).inputs
    rows = all_probe_rows(x)
    zeroed = rows[len(rows) // 2:]
    assert len(zeroed) == 6
    for r in zeroed:
        d = int(r.draft_token_ids[0, 0])
        assert float(r.target_probs[0, 0, d]) == 0.0 and float(r.draft_probs[0, 0, d]) > 0
    stacked = stack_rows(rows)
    assert isinstance(stacked, ProbInputs) and stacked.shape == (12, 1, 7)


def test_grid_values():
    assert grid_values(torch.float32) == (2.0**-149, 1 - 2**-24)
    assert grid_values(torch.float64)[1] == 1 - 2**-53
