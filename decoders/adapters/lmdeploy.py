"""LMDeploy's portable rejection sampler behind the probability-level ``verify`` protocol.

What runs
---------
``lmdeploy.pytorch.backends.default.rejection_sampling.DefaultRejectionSamplingImpl().forward(
target_logits [B, K, V], draft_token_ids [B, K], bonus_token_ids [B], *, is_greedy=None,
draft_probs [B, K, V]) -> (output_token_ids [B, K+1], num_rejected_tokens [B],
last_token_ids [B])`` (LMDeploy's PyTorch engine, default backend; tested 0.18.0). Pure
torch: ``softmax`` of the target logits in float32, float64 uniforms from
``torch.rand`` (global RNG), acceptance ``q(d) > 0 and p(d) / q(d) >= u``, recovered
tokens ``argmax(max(p - q, 0) / E)`` with one exponential noise row per request.
LMDeploy's backend selector (``get_backend``) refuses the ``cpu`` device type, so the
adapter instantiates the default implementation directly, as the default backend's
``build_op`` does.

What the adapter translates
---------------------------
- ``target_logits = log(target_probs[:, :K])`` in float32 (``softmax`` gives the law back,
  zeros stay zeros), ``draft_probs`` in float32.
- The bonus token as LMDeploy's caller draws it (``RejectionSampler.forward`` in
  ``lmdeploy/pytorch/spec_decode/reject_sampler.py``: ``FusedLogitsProcessor.sampling``
  on the bonus logits, before the rejection step): logits sorted in descending order,
  ``softmax``, then the default backend's ``DefaultMultinomialSamplingImpl.forward``
  (``torch.multinomial`` on the global RNG) and the sort's indices.
- Randomness: torch's global RNG, seeded once per call from the passed generator and
  restored afterwards (:func:`~specexact.decoders.adapters.protocol.seeded_global_rng`).

Production note: LMDeploy 0.18's speculative agent (``spec_agent.py``) calls the rejection
sampler *without* ``draft_probs`` (drafts treated as point masses), which matches its
proposers (EAGLE-3, DeepSeek MTP, DFlash), which all draft by ``argmax``. This adapter
audits the implementation with the draft law passed, the general rule. No uniform
injection: the uniforms are drawn inside ``forward`` by ``torch.rand``.
"""

from __future__ import annotations

import inspect

import torch

from .protocol import Capabilities, probs_to_logits, seeded_global_rng

__all__ = ["LmdeployRejectionSampling", "verify", "TESTED_VERSIONS"]

TESTED_VERSIONS = ("0.18.0",)

FORWARD_PARAMETERS = ("target_logits", "draft_token_ids", "bonus_token_ids", "is_greedy", "draft_probs")


class LmdeployRejectionSampling:
    """The adapter; call it like :func:`specexact.decoders.verify`.

    Raises
    ------
    ImportError
        LMDeploy is not installed.
    TypeError
        ``DefaultRejectionSamplingImpl.forward`` has another signature than the tested one.
    """

    name = "lmdeploy"

    def __init__(self) -> None:
        import lmdeploy
        from lmdeploy.pytorch.backends.default.multinomial_sampling import DefaultMultinomialSamplingImpl
        from lmdeploy.pytorch.backends.default.rejection_sampling import DefaultRejectionSamplingImpl

        self.version = lmdeploy.__version__
        self.impl = DefaultRejectionSamplingImpl()
        self.multinomial = DefaultMultinomialSamplingImpl()
        params = tuple(inspect.signature(self.impl.forward).parameters)
        if params != FORWARD_PARAMETERS:
            raise TypeError(f"unsupported signature of LMDeploy's DefaultRejectionSamplingImpl.forward {params} "
                            f"(LMDeploy {self.version}); supported: {FORWARD_PARAMETERS}")
        self.capabilities = Capabilities(
            max_batch_size=None,
            dtypes=(torch.float32,),
            devices=("cpu",),
            randomness="global_rng",
            notes="DefaultRejectionSamplingImpl.forward (pure torch) with draft_probs; bonus token from the default "
                  "backend's multinomial sampling on the sorted bonus law, drawn first as in RejectionSampler.forward",
        )

    def metadata(self) -> dict:
        """Library, version, wrapped functions, tested versions, capabilities."""
        return {
            "adapter": f"{__name__}:{type(self).__name__}",
            "library": "lmdeploy",
            "version": self.version,
            "version_tested": self.version in TESTED_VERSIONS,
            "tested_versions": list(TESTED_VERSIONS),
            "function": "lmdeploy.pytorch.backends.default.rejection_sampling.DefaultRejectionSamplingImpl.forward",
            "bonus_token": "lmdeploy.pytorch.backends.default.multinomial_sampling.DefaultMultinomialSamplingImpl",
            "capabilities": self.capabilities.to_dict(),
        }

    def verify_rows(self, draft_token_ids: torch.Tensor, draft_probs: torch.Tensor,
                    target_probs: torch.Tensor) -> torch.Tensor:
        """One call on torch's global RNG as it stands (for replays:
        ``torch.manual_seed(s); verify_rows(...)``): ``-> [B, K+1]`` int64."""
        K = draft_token_ids.shape[1]
        logits = probs_to_logits(target_probs, torch.float32)
        with torch.inference_mode():
            scores, indices = logits[:, K].sort(1, descending=True)
            bonus = self.multinomial.forward(scores.softmax(1), None, None, indices)
            out, _, _ = self.impl.forward(logits[:, :K].contiguous(), draft_token_ids.long(), bonus,
                                          is_greedy=None, draft_probs=draft_probs.to(torch.float32).contiguous())
        return out.to(torch.int64)

    def __call__(self, draft_token_ids: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor,
                 generator: torch.Generator | None = None) -> torch.Tensor:
        """The ``verify`` protocol: ``[B, K], [B, K, V], [B, K+1, V], generator -> [B, K+1]``."""
        with seeded_global_rng(generator, target_probs.device):
            return self.verify_rows(draft_token_ids, draft_probs, target_probs)

    def __repr__(self) -> str:
        return f"<LmdeployRejectionSampling lmdeploy {self.version}>"



def __getattr__(attr: str):
    """``verify`` is built on first use (PEP 562), so this module imports without the
    engine installed; using it then raises ``ImportError``."""
    if attr == "verify":
        global verify
        verify = LmdeployRejectionSampling()
        return verify
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
