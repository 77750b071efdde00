"""SGLang's CUDA ``tree_speculative_sampling_target_only`` driven through a one-path tree (CUDA only).

What runs
---------
``tree_speculative_sampling_target_only(predicts, accept_index, accept_token_num, candidates,
retrive_index, retrive_next_token, retrive_next_sibling, uniform_samples,
uniform_samples_for_final_sampling, target_probs, draft_probs, threshold_single=1.0,
threshold_acc=1.0, deterministic=True)``: SGLang's tree verification kernel (used when
``speculative_use_rejection_sampling`` is off; in SGLang 0.5.23 JIT-compiled from
``speculative/sampling.cuh`` through ``sglang.kernels.ops.speculative.sampling``, earlier in
the ``sgl_kernel`` wheel). It is resolved from ``sglang.kernels.ops.speculative.verify_sampling``
(``None`` without CUDA), else from ``sgl_kernel``. With both thresholds at 1 it is the
lossless rule; below 1 it is lossy (not audited here).

A chain of ``K`` drafts is driven as a tree with one path (``retrive_next_token[b, i] =
i + 1``, no siblings), in SGLang's layout (see :mod:`.sglang`); SGLang's caller passes
``draft_probs = zeros_like(target_probs)`` on this path (its EAGLE drafts are treated as
point masses): the adapter passes the real draft law, ``[B, K+1, V]`` with a zero last row,
which the kernel's target-only rule does not read. A tree protocol (several paths) is the
tree / block verification issue's; this adapter will take it when it lands.

Randomness: float32 coins drawn from the passed generator (as SGLang's ``_verify_coins``
draws them); ``verify_with_uniforms`` injects the acceptance coins.
"""

from __future__ import annotations

import torch

from specexact.decoders.rejection_sampling import PLACEHOLDER_ID

from .protocol import Capabilities

__all__ = ["SglangTreeSampling", "verify", "load_tree_kernel"]


def load_tree_kernel():
    """``(kernel, where, version)``: SGLang's tree kernel.

    Raises
    ------
    ImportError
        No CUDA device, or neither SGLang nor sgl-kernel provides the kernel.
    """
    if not torch.cuda.is_available():
        raise ImportError("SGLang's tree_speculative_sampling_target_only is CUDA only")
    version = "unknown"
    try:
        import sglang

        version = sglang.__version__
        from sglang.kernels.ops.speculative.verify_sampling import tree_speculative_sampling_target_only as kernel

        if kernel is not None:
            return kernel, "sglang.kernels.ops.speculative.verify_sampling", version
    except ImportError:
        pass
    from sgl_kernel import tree_speculative_sampling_target_only as kernel  # raises ImportError when missing

    return kernel, "sgl_kernel", version


class SglangTreeSampling:
    """The adapter; call it like :func:`specexact.decoders.verify` with CUDA tensors."""

    name = "sglang-tree"
    uniforms_dtype = torch.float32

    def __init__(self) -> None:
        self.kernel, self.source, self.version = load_tree_kernel()
        self.capabilities = Capabilities(
            max_batch_size=None, dtypes=(torch.float32,), devices=("cuda",), randomness="uniforms",
            notes=f"{self.source}.tree_speculative_sampling_target_only on a one-path tree, thresholds 1.0; "
                  "float32 coins from the generator",
        )

    def metadata(self) -> dict:
        """Library, version, where the kernel came from, capabilities."""
        return {"adapter": f"{__name__}:{type(self).__name__}", "library": "sglang", "version": self.version,
                "function": f"{self.source}.tree_speculative_sampling_target_only",
                "thresholds": {"threshold_single": 1.0, "threshold_acc": 1.0},
                "capabilities": self.capabilities.to_dict()}

    def run_kernel(self, draft_token_ids, draft_probs, target_probs, coins, coin_final) -> torch.Tensor:
        """One kernel call with coins ``[B, K+1]`` and ``[B]`` (float32) -> ``[B, K+1]`` int64."""
        B, K = draft_token_ids.shape
        device = target_probs.device
        if device.type != "cuda":
            raise ValueError(f"SGLang's tree kernel needs CUDA tensors, got device {device}")
        V = target_probs.shape[-1]
        candidates = torch.cat([torch.zeros(B, 1, dtype=torch.int64, device=device), draft_token_ids.long()], 1)
        retrive_index = torch.arange(B * (K + 1), dtype=torch.int64, device=device).reshape(B, K + 1)
        cols = torch.arange(K + 1, device=device)
        retrive_next_token = torch.where(cols < K, cols + 1, -1).expand(B, K + 1).contiguous()
        retrive_next_sibling = torch.full((B, K + 1), -1, dtype=torch.int64, device=device)
        predicts = torch.full((B * (K + 1),), -1, dtype=torch.int32, device=device)
        accept_index = torch.full((B, K + 1), -1, dtype=torch.int32, device=device)
        accept_token_num = torch.zeros(B, dtype=torch.int32, device=device)
        q = torch.zeros(B, K + 1, V, dtype=torch.float32, device=device)
        q[:, :K] = draft_probs.to(torch.float32)
        self.kernel(predicts=predicts, accept_index=accept_index, accept_token_num=accept_token_num,
                    candidates=candidates, retrive_index=retrive_index, retrive_next_token=retrive_next_token,
                    retrive_next_sibling=retrive_next_sibling, uniform_samples=coins.contiguous(),
                    uniform_samples_for_final_sampling=coin_final.contiguous(),
                    target_probs=target_probs.to(torch.float32).contiguous(), draft_probs=q,
                    threshold_single=1.0, threshold_acc=1.0, deterministic=True)
        n = accept_token_num.long()
        out = predicts.long()[accept_index.long().clamp_min(0)]
        return torch.where(cols[None] <= n[:, None], out, PLACEHOLDER_ID)

    def __call__(self, draft_token_ids, draft_probs, target_probs, generator=None) -> torch.Tensor:
        """The ``verify`` protocol on CUDA tensors."""
        B, K = draft_token_ids.shape
        device = target_probs.device
        gen_device = generator.device if generator is not None else torch.device("cpu")
        coins = torch.rand((B, K + 1), dtype=torch.float32, generator=generator, device=gen_device).to(device)
        coin_final = torch.rand((B,), dtype=torch.float32, generator=generator, device=gen_device).to(device)
        return self.run_kernel(draft_token_ids, draft_probs, target_probs, coins, coin_final)

    def verify_with_uniforms(self, draft_token_ids, draft_probs, target_probs, uniforms, generator=None):
        """``uniforms [B, K]`` (float64 in ``[0, 1)``, cast to float32) as the acceptance coins.

        Raises
        ------
        ValueError
            ``uniforms`` has the wrong shape or lies outside ``[0, 1)``.
        """
        B, K = draft_token_ids.shape
        if tuple(uniforms.shape) != (B, K) or not bool(((uniforms >= 0) & (uniforms < 1)).all()):
            raise ValueError(f"uniforms must be [B, K] = {(B, K)} in [0, 1), got {tuple(uniforms.shape)}")
        device = target_probs.device
        coins = torch.zeros((B, K + 1), dtype=torch.float32, device=device)
        coins[:, :K] = uniforms.to(device=device, dtype=torch.float32)
        gen_device = generator.device if generator is not None else torch.device("cpu")
        coin_final = torch.rand((B,), dtype=torch.float32, generator=generator, device=gen_device).to(device)
        return self.run_kernel(draft_token_ids, draft_probs, target_probs, coins, coin_final)

    def __repr__(self) -> str:
        return f"<SglangTreeSampling {self.source} (sglang {self.version})>"


def __getattr__(attr: str):
    """``verify`` is built on first use (PEP 562), so this module imports without CUDA."""
    if attr == "verify":
        global verify
        verify = SglangTreeSampling()
        return verify
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
