"""FlashInfer's chain_speculative_sampling adapter (CUDA only; skips without CUDA or FlashInfer)."""

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("FlashInfer's sampling kernels need CUDA", allow_module_level=True)
pytest.importorskip("flashinfer")

from specexact.audit import quick_cases, run_audit  # noqa: E402
from specexact.audit.cases.dispatch import checks_per_case  # noqa: E402
from specexact.decoders import check_verifier_output  # noqa: E402
from specexact.decoders.adapters.flashinfer import verify  # noqa: E402

DEV = torch.device("cuda")


def point(v, V):
    out = torch.zeros(V, device=DEV)
    out[v] = 1.0
    return out


def test_layouts_full_acceptance_and_rejection():
    V = 5
    ids = torch.tensor([[1, 2], [1, 1]], device=DEV)
    dp = torch.stack([torch.stack([point(1, V), point(2, V)]), torch.stack([point(1, V), point(1, V)])])
    tp = torch.stack([torch.stack([point(1, V), point(2, V), point(4, V)]),
                      torch.stack([point(1, V), point(3, V), point(0, V)])])
    out = verify(ids, dp, tp, torch.Generator().manual_seed(0))
    assert out.tolist() == [[1, 2, 4], [1, 3, -1]]
    check_verifier_output(out, ids, V)


def test_generator_determinism():
    g = torch.Generator().manual_seed(2)
    B, K, V = 64, 3, 50
    tp = torch.softmax(torch.randn(B, K + 1, V, generator=g), -1).to(DEV)
    dp = torch.softmax(torch.randn(B, K, V, generator=g), -1).to(DEV)
    ids = torch.multinomial(dp.reshape(-1, V).cpu(), 1, generator=g).reshape(B, K).to(DEV)
    a = verify(ids, dp, tp, torch.Generator().manual_seed(3))
    assert torch.equal(a, verify(ids, dp, tp, torch.Generator().manual_seed(3)))
    assert not torch.equal(a, verify(ids, dp, tp, torch.Generator().manual_seed(4)))


def test_cpu_tensors_are_refused():
    with pytest.raises(ValueError, match="CUDA"):
        verify(torch.zeros(1, 1, dtype=torch.long), torch.ones(1, 1, 2) / 2, torch.ones(1, 2, 2) / 2, None)


QUICK = [c for c in quick_cases() if c.name in ("v6-trunc-penalties", "v12-eos-cut")]
QUICK_CHECKS = sum(checks_per_case(c) for c in QUICK)


@pytest.mark.statistical(checks=QUICK_CHECKS)
def test_flashinfer_passes_the_quick_audit(alpha):
    report = run_audit(verify, sampler_name="flashinfer", sampler_target="specexact.decoders.adapters.flashinfer:verify",
                       cases=QUICK, false_fail_rate=alpha * QUICK_CHECKS, num_batches=2, budget_s=None, seed=0,
                       device="cuda")
    assert report["verdict"] == "pass", report["findings"]
