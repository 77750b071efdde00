"""mlx-lm's speculative_generate_step adapter, on the installed mlx-lm (no mocks; ``tox -e mlx``).
Skips when mlx-lm is not installed."""

import pytest
import torch

pytest.importorskip("mlx_lm")

from specexact.audit import quick_cases, resolve_sampler, run_audit  # noqa: E402
from specexact.audit.cases.dispatch import checks_per_case  # noqa: E402
from specexact.decoders import check_verifier_output  # noqa: E402
from specexact.decoders.adapters import scheme_of  # noqa: E402
from specexact.decoders.adapters.mlx import verify  # noqa: E402


def point(v, V):
    out = torch.zeros(V)
    out[v] = 1.0
    return out


def test_entry_point_declares_sample_and_compare():
    obj, target = resolve_sampler("mlx")
    assert obj is verify and target == "specexact.decoders.adapters.mlx:verify"
    assert scheme_of(obj) == "sample_compare"
    assert obj.capabilities.max_batch_size == 1
    assert obj.metadata()["function"] == "mlx_lm.generate.speculative_generate_step"


def test_point_mass_target_keeps_matching_drafts_then_the_targets_own_token():
    V = 5
    ids = torch.tensor([[1, 2], [1, 3], [4, 4]])
    dp = torch.stack([torch.stack([point(int(t), V) for t in row]) for row in ids])
    tp = torch.stack([torch.stack([point(1, V), point(2, V), point(0, V)])] * 3)
    out = verify(ids, dp, tp, torch.Generator().manual_seed(0))
    # row 0: both match, bonus 0; row 1: 1 matches, then the target's 2; row 2: mismatch, target's 1.
    assert out.tolist() == [[1, 2, 0], [1, 2, -1], [1, -1, -1]]
    check_verifier_output(out, ids, V)


def test_same_generator_same_output_other_generator_other_output():
    g = torch.Generator().manual_seed(1)
    B, K, V = 24, 2, 6
    tp = torch.softmax(torch.randn(B, K + 1, V, generator=g), -1)
    dp = torch.softmax(torch.randn(B, K, V, generator=g), -1)
    ids = torch.multinomial(dp.reshape(-1, V), 1, generator=g).reshape(B, K)
    a = verify(ids, dp, tp, torch.Generator().manual_seed(3))
    assert torch.equal(a, verify(ids, dp, tp, torch.Generator().manual_seed(3)))
    assert not torch.equal(a, verify(ids, dp, tp, torch.Generator().manual_seed(4)))


QUICK = [c for c in quick_cases() if c.name in ("v12-eos-cut",)]
QUICK_CHECKS = sum(checks_per_case(c) for c in QUICK)


@pytest.mark.statistical(checks=QUICK_CHECKS)
def test_mlx_emits_the_target_law_in_the_quick_audit(alpha):
    # The accepted-length reference of the audit is the sample-and-compare law once the lead wires
    # scheme_of() in; until then only the emitted laws are asserted here.
    report = run_audit(verify, sampler_name="mlx", sampler_target="specexact.decoders.adapters.mlx:verify",
                       cases=QUICK, false_fail_rate=alpha * QUICK_CHECKS, num_batches=1, budget_s=None, seed=0)
    laws = [c for case in report["cases"] for c in case["checks"] if "law" in c["name"]]
    assert laws and all(c["passed"] for c in laws), [c for c in laws if not c["passed"]]
