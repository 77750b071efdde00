"""FlashInfer's ``chain_speculative_sampling`` behind the probability-level ``verify`` protocol (CUDA only).

What runs
---------
``flashinfer.sampling.chain_speculative_sampling(draft_probs [B, K, V], draft_token_ids
[B, K] int32, target_probs [B, K+1, V], maybe_output_accepted_token_num=None,
maybe_output_emitted_draft_token_num=None, deterministic=True, generator=None, seed=None,
offset=None) -> (output_token_ids [B, K+1] int32 -1 padded, accepted_token_num [B],
emitted_draft_token_num [B])`` (written against FlashInfer 0.7.x; before 0.2.3 it took
``uniform_samples`` and is not supported). One fused CUDA kernel (sm75+) draws its own
uniforms with Philox from ``(seed, offset)``, which FlashInfer takes from ``generator``
(``get_seed_and_offset``); the acceptance test is ``u * q < p`` (its docstring: ``r < p/q``)
and the bonus token is sampled inside. On a CPU it raises at call time.

What the adapter translates: the layout (int32 draft ids, float32 laws on the laws' CUDA
device) and the generator: a CUDA ``torch.Generator`` seeded from one draw of the passed
generator, handed to FlashInfer, so the output is a function of the passed generator.
Output int32 -> int64. Nothing else.
"""

from __future__ import annotations

import inspect

import torch

from .protocol import Capabilities

__all__ = ["FlashinferChainSampling", "verify", "SUPPORTED"]

SUPPORTED = ">=0.2.3 (generator/seed/offset signature); written for 0.7.x"

PARAMETERS = ("draft_probs", "draft_token_ids", "target_probs", "maybe_output_accepted_token_num",
              "maybe_output_emitted_draft_token_num", "deterministic", "generator")


class FlashinferChainSampling:
    """The adapter; call it like :func:`specexact.decoders.verify` with CUDA tensors.

    Raises
    ------
    ImportError
        FlashInfer is not installed.
    TypeError
        ``chain_speculative_sampling`` has another signature (e.g. the pre-0.2.3
        ``uniform_samples`` one).
    """

    name = "flashinfer"

    def __init__(self) -> None:
        import flashinfer
        from flashinfer.sampling import chain_speculative_sampling

        self.version = getattr(flashinfer, "__version__", "unknown")
        self.function = chain_speculative_sampling
        params = tuple(inspect.signature(chain_speculative_sampling).parameters)
        if params[: len(PARAMETERS)] != PARAMETERS:
            raise TypeError(f"unsupported signature of flashinfer.sampling.chain_speculative_sampling {params} "
                            f"(FlashInfer {self.version}); supported: {SUPPORTED}")
        self.capabilities = Capabilities(
            max_batch_size=None, dtypes=(torch.float32,), devices=("cuda",), randomness="generator",
            notes="flashinfer.sampling.chain_speculative_sampling (fused CUDA kernel, Philox uniforms from a CUDA "
                  "generator seeded from the passed one, deterministic=True); CUDA only",
        )

    def metadata(self) -> dict:
        """Library, version, wrapped function, capabilities."""
        return {
            "adapter": f"{__name__}:{type(self).__name__}",
            "library": "flashinfer-python",
            "version": self.version,
            "supported": SUPPORTED,
            "function": "flashinfer.sampling.chain_speculative_sampling",
            "capabilities": self.capabilities.to_dict(),
        }

    def __call__(self, draft_token_ids: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor,
                 generator: torch.Generator | None = None) -> torch.Tensor:
        """The ``verify`` protocol on CUDA tensors: ``-> [B, K+1]`` int64, ``-1`` padded.

        Raises
        ------
        ValueError
            The tensors are not on a CUDA device (FlashInfer has no CPU kernel).
        """
        device = target_probs.device
        if device.type != "cuda":
            raise ValueError(f"FlashInfer's chain_speculative_sampling needs CUDA tensors, got device {device}")
        gen_device = generator.device if generator is not None else torch.device("cpu")
        seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=gen_device).item())
        cuda_gen = torch.Generator(device=device).manual_seed(seed)
        out, _, _ = self.function(draft_probs.to(torch.float32).contiguous(),
                                  draft_token_ids.to(torch.int32).contiguous(),
                                  target_probs.to(torch.float32).contiguous(), deterministic=True,
                                  generator=cuda_gen)
        return out.to(torch.int64)

    def __repr__(self) -> str:
        return f"<FlashinferChainSampling flashinfer {self.version}>"


def __getattr__(attr: str):
    """``verify`` is built on first use (PEP 562), so this module imports without FlashInfer."""
    if attr == "verify":
        global verify
        verify = FlashinferChainSampling()
        return verify
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
