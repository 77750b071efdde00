"""SGLang's chain verification kernel behind the probability-level ``verify`` protocol.

What runs
---------
``sglang.kernels.ops.speculative.reject_sampling.chain_speculative_sampling_triton(predicts,
accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs,
draft_probs, threshold_single, threshold_acc, deterministic, *, block_verification=False)``
(tested: SGLang 0.5.23), the kernel SGLang's EAGLE verify step calls when
``speculative_use_rejection_sampling`` is on (``srt/speculative/eagle_utils.py``). It is
Triton; on a CPU it runs under Triton's interpreter (``TRITON_INTERPRET=1`` set before
Triton is imported; no sgl-kernel needed). It accepts draft ``i`` when ``q > 0``,
``q <= 1`` and ``coin * q < p`` (``coin = uniform_samples[b, i]``), then draws the
recovered or bonus token by inverse CDF with ``coin_final`` over ``max(p - q, 0)`` (or
``p`` after full acceptance). With ``block_verification=True`` it runs block verification
(Sun et al., arXiv:2403.10444, Algorithm 2) instead: :data:`verify_block`,
``scheme="block"``.

What the adapter translates
---------------------------
- Layout: ``candidates [B, K+1]`` (column 0 the last verified token, which the kernel does
  not read as a draft; then the drafts), ``retrive_index = arange(B*(K+1))`` as a
  ``[B, K+1]`` chain, output buffers as SGLang allocates them (``predicts`` int32 flat,
  ``accept_index`` int32 ``-1``, ``accept_token_num`` int32); the emitted tokens are
  ``predicts[accept_index[b, :n+1]]``, ``n = accept_token_num[b]``, as SGLang reads them.
- Thresholds ``1.0`` / ``1.0`` (the lossless setting; below 1 SGLang's tree kernel is lossy).
- Randomness: SGLang's caller draws the coins (``_verify_coins``: ``torch.rand_like(candidates,
  dtype=float32)`` and ``torch.rand(B, float32)``); the adapter draws the same shapes and
  dtype from the passed generator (``randomness="uniforms"``).

Injected uniforms: :meth:`SglangChainSampling.verify_with_uniforms` passes ``uniforms [B,
K]`` (cast to float32, SGLang's coin dtype) as ``uniform_samples[:, :K]``; the final coin
comes from the generator.
"""

from __future__ import annotations

import inspect
import os

import torch

from specexact.decoders.rejection_sampling import PLACEHOLDER_ID

from .protocol import Capabilities, check_supplied_uniforms

__all__ = ["SglangChainSampling", "verify", "verify_block", "TESTED_VERSIONS"]

TESTED_VERSIONS = ("0.5.23",)

KERNEL_PARAMETERS = ("predicts", "accept_index", "accept_token_num", "candidates", "retrive_index",
                     "retrive_next_token", "retrive_next_sibling", "uniform_samples",
                     "uniform_samples_for_final_sampling", "target_probs", "draft_probs", "threshold_single",
                     "threshold_acc", "deterministic")


def load_chain_kernel():
    """``chain_speculative_sampling_triton`` and SGLang's version.

    Raises
    ------
    ImportError
        SGLang or Triton is missing, or no CUDA device and ``TRITON_INTERPRET`` is not ``1``.
    TypeError
        The kernel's parameters are not the tested ones.
    """
    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        raise ImportError("SGLang's chain kernel is Triton: without CUDA it runs only under the interpreter; "
                          "set TRITON_INTERPRET=1 before importing triton")
    import sglang
    from sglang.kernels.ops.speculative.reject_sampling import chain_speculative_sampling_triton as kernel

    params = tuple(inspect.signature(kernel).parameters)
    if params[: len(KERNEL_PARAMETERS)] != KERNEL_PARAMETERS:
        raise TypeError(f"unsupported signature of SGLang's chain_speculative_sampling_triton {params} "
                        f"(SGLang {sglang.__version__}); supported: {KERNEL_PARAMETERS}")
    return kernel, sglang.__version__, "block_verification" in params


class SglangChainSampling:
    """The adapter; call it like :func:`specexact.decoders.verify`.

    Parameters
    ----------
    block_verification : bool
        Run the kernel's block-verification branch (``scheme="block"``).

    Raises
    ------
    ImportError, TypeError
        As :func:`load_chain_kernel`; ``TypeError`` also when ``block_verification`` is asked
        of a kernel without the flag.
    """

    uniforms_dtype = torch.float32

    def __init__(self, *, block_verification: bool = False) -> None:
        self.kernel, self.version, has_block = load_chain_kernel()
        if block_verification and not has_block:
            raise TypeError(f"SGLang {self.version}'s chain kernel has no block_verification flag")
        self.block_verification = block_verification
        self.name = "sglang-block" if block_verification else "sglang"
        self.route = "cuda" if torch.cuda.is_available() else "triton-interpreter"
        self.capabilities = Capabilities(
            max_batch_size=None,
            dtypes=(torch.float32,),
            devices=("cuda",) if self.route == "cuda" else ("cpu",),
            randomness="uniforms",
            scheme="block" if block_verification else "tokenwise",
            notes=f"route {self.route}: chain_speculative_sampling_triton(block_verification={block_verification}), "
                  "thresholds 1.0; float32 coins drawn from the generator as SGLang's _verify_coins draws them",
        )

    def metadata(self) -> dict:
        """Library, version, route, wrapped function, capabilities."""
        return {
            "adapter": f"{__name__}:{type(self).__name__}",
            "library": "sglang",
            "version": self.version,
            "version_tested": self.version in TESTED_VERSIONS,
            "tested_versions": list(TESTED_VERSIONS),
            "route": self.route,
            "function": "sglang.kernels.ops.speculative.reject_sampling.chain_speculative_sampling_triton",
            "block_verification": self.block_verification,
            "thresholds": {"threshold_single": 1.0, "threshold_acc": 1.0},
            "uniforms_dtype": "float32",
            "capabilities": self.capabilities.to_dict(),
        }

    def run_kernel(self, draft_token_ids: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor,
                   coins: torch.Tensor, coin_final: torch.Tensor) -> torch.Tensor:
        """One kernel call with the given coins (``[B, K+1]`` and ``[B]``, float32):
        ``-> [B, K+1]`` int64, ``-1`` padded."""
        B, K = draft_token_ids.shape
        device = target_probs.device
        candidates = torch.cat([torch.zeros(B, 1, dtype=torch.int64, device=device), draft_token_ids.long()], 1)
        retrive_index = torch.arange(B * (K + 1), dtype=torch.int64, device=device).reshape(B, K + 1)
        next_token = torch.where(torch.arange(K + 1, device=device) < K, torch.arange(1, K + 2, device=device), -1)
        retrive_next_token = next_token.expand(B, K + 1).contiguous()
        retrive_next_sibling = torch.full((B, K + 1), -1, dtype=torch.int64, device=device)
        predicts = torch.full((B * (K + 1),), -1, dtype=torch.int32, device=device)
        accept_index = torch.full((B, K + 1), -1, dtype=torch.int32, device=device)
        accept_token_num = torch.zeros(B, dtype=torch.int32, device=device)
        kwargs = {"block_verification": True} if self.block_verification else {}
        self.kernel(predicts=predicts, accept_index=accept_index, accept_token_num=accept_token_num,
                    candidates=candidates, retrive_index=retrive_index, retrive_next_token=retrive_next_token,
                    retrive_next_sibling=retrive_next_sibling, uniform_samples=coins.contiguous(),
                    uniform_samples_for_final_sampling=coin_final.contiguous(),
                    target_probs=target_probs.to(torch.float32).contiguous(),
                    draft_probs=draft_probs.to(torch.float32).contiguous(), threshold_single=1.0, threshold_acc=1.0,
                    deterministic=True, **kwargs)
        n = accept_token_num.long()
        cols = torch.arange(K + 1, device=device)
        idx = accept_index.long().clamp_min(0)
        out = predicts.long()[idx]
        return torch.where(cols[None] <= n[:, None], out, PLACEHOLDER_ID)

    def __call__(self, draft_token_ids: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor,
                 generator: torch.Generator | None = None) -> torch.Tensor:
        """The ``verify`` protocol: ``[B, K], [B, K, V], [B, K+1, V], generator -> [B, K+1]``."""
        B, K = draft_token_ids.shape
        device = target_probs.device
        coins = torch.rand((B, K + 1), dtype=torch.float32, generator=generator, device=device)
        coin_final = torch.rand((B,), dtype=torch.float32, generator=generator, device=device)
        return self.run_kernel(draft_token_ids, draft_probs, target_probs, coins, coin_final)

    def verify_with_uniforms(self, draft_token_ids: torch.Tensor, draft_probs: torch.Tensor,
                             target_probs: torch.Tensor, uniforms: torch.Tensor,
                             generator: torch.Generator | None = None) -> torch.Tensor:
        """``uniforms [B, K]`` (float64 in ``[0, 1)``, cast to float32) as the acceptance coins;
        the final-sampling coin from ``generator``.

        Raises
        ------
        ValueError
            ``uniforms`` has the wrong shape or lies outside ``[0, 1)``.
        """
        B, K = draft_token_ids.shape
        check_supplied_uniforms(uniforms, B, K)
        device = target_probs.device
        coins = torch.zeros((B, K + 1), dtype=torch.float32, device=device)
        coins[:, :K] = uniforms.to(device=device, dtype=torch.float32)
        coin_final = torch.rand((B,), dtype=torch.float32, generator=generator, device=device)
        return self.run_kernel(draft_token_ids, draft_probs, target_probs, coins, coin_final)

    def __repr__(self) -> str:
        return f"<SglangChainSampling sglang {self.version} ({self.route}, block={self.block_verification})>"


class SglangBlockSampling(SglangChainSampling):
    """The chain kernel's block-verification branch (``scheme="block"``). Its coins are
    compared with prefix-acceptance probabilities, not per-draft ratios, so it offers no
    ``verify_with_uniforms`` (the fuzz probes' meaning of a uniform does not apply)."""

    verify_with_uniforms = None

    def __init__(self) -> None:
        super().__init__(block_verification=True)


def __getattr__(attr: str):
    """``verify`` / ``verify_block`` are built on first use (PEP 562), so this module imports
    without SGLang."""
    global verify, verify_block
    if attr == "verify":
        verify = SglangChainSampling()
        return verify
    if attr == "verify_block":
        verify_block = SglangBlockSampling()
        return verify_block
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
