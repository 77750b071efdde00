"""LMDeploy's DefaultRejectionSamplingImpl adapter, on the installed LMDeploy (no mocks;
``tox -e lmdeploy``). Skips when LMDeploy is not installed."""

import pytest
import torch

pytest.importorskip("lmdeploy")

from specexact.audit import quick_cases, resolve_sampler, run_audit  # noqa: E402
from specexact.audit.cases.dispatch import checks_per_case  # noqa: E402
from specexact.decoders import check_verifier_output  # noqa: E402
from specexact.decoders.adapters import SamplerAdapter, takes_uniforms  # noqa: E402
from specexact.decoders.adapters.lmdeploy import TESTED_VERSIONS, verify  # noqa: E402


def point(v, V):
    out = torch.zeros(V)
    out[v] = 1.0
    return out


def test_entry_point_and_metadata():
    import lmdeploy

    obj, target = resolve_sampler("lmdeploy")
    assert obj is verify and target == "specexact.decoders.adapters.lmdeploy:verify"
    assert isinstance(obj, SamplerAdapter) and not takes_uniforms(obj)
    meta = obj.metadata()
    assert meta["version"] == lmdeploy.__version__
    assert meta["version_tested"] == (lmdeploy.__version__ in TESTED_VERSIONS)
    assert obj.capabilities.randomness == "global_rng"


def test_full_acceptance_emits_the_bonus_token():
    V = 6
    ids = torch.tensor([[1, 2], [3, 3], [0, 5]])
    dp = torch.stack([torch.stack([point(int(t), V) for t in row]) for row in ids])
    bonus = [4, 0, 2]
    tp = torch.cat([dp, torch.stack([point(b, V) for b in bonus])[:, None]], 1)
    out = verify(ids, dp, tp, torch.Generator().manual_seed(0))
    assert out.dtype == torch.int64 and out.tolist() == [[1, 2, 4], [3, 3, 0], [0, 5, 2]]


def test_rejection_recovers_from_the_residual_and_pads():
    V = 4
    ids = torch.tensor([[1, 1], [2, 2]])
    dp = torch.stack([torch.stack([point(1, V)] * 2), torch.stack([point(2, V)] * 2)])
    tp = torch.stack([torch.stack([point(3, V), point(1, V), point(0, V)]),
                      torch.stack([point(2, V), point(2, V), point(0, V)])])
    out = verify(ids, dp, tp, torch.Generator().manual_seed(1))
    assert out.tolist() == [[3, -1, -1], [2, 2, 0]]
    check_verifier_output(out, ids, V)


def test_randomness_comes_from_the_generator_and_the_global_rng_is_restored():
    g = torch.Generator().manual_seed(3)
    B, K, V = 64, 3, 7
    dp = torch.rand(B, K, V, generator=g) + 0.05
    dp /= dp.sum(-1, keepdim=True)
    tp = torch.rand(B, K + 1, V, generator=g) + 0.05
    tp /= tp.sum(-1, keepdim=True)
    ids = torch.multinomial(dp.reshape(-1, V), 1, generator=g).reshape(B, K)
    torch.manual_seed(11)
    state = torch.get_rng_state()
    a = verify(ids, dp, tp, torch.Generator().manual_seed(5))
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(a, verify(ids, dp, tp, torch.Generator().manual_seed(5)))
    assert not torch.equal(a, verify(ids, dp, tp, torch.Generator().manual_seed(6)))
    check_verifier_output(a, ids, V)


QUICK = [c for c in quick_cases() if c.name in ("v6-trunc-penalties", "v12-eos-cut")]
QUICK_CHECKS = sum(checks_per_case(c) for c in QUICK)


@pytest.mark.statistical(checks=QUICK_CHECKS)
def test_lmdeploy_passes_the_quick_audit(alpha):
    report = run_audit(verify, sampler_name="lmdeploy", sampler_target="specexact.decoders.adapters.lmdeploy:verify",
                       cases=QUICK, false_fail_rate=alpha * QUICK_CHECKS, num_batches=2, budget_s=None, seed=0)
    assert report["verdict"] == "pass", report["findings"]
