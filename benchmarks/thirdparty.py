"""Third-party verifiers run on the same inputs as specexact's: transformers and vLLM."""

from __future__ import annotations

import importlib.util
import inspect
from typing import Callable

import torch


def transformers_rows() -> tuple[Callable | None, dict]:
    """transformers' ``_speculative_sampling`` as ``run(ids [R, K], q_logits [R, K, V],
    p_logits [R, K+1, V])``, called row by row (it takes batch size 1), or None.

    The logits are ``log(probs)`` (``softmax(log p) = p``), computed by the caller outside
    the timed region: transformers takes logits where specexact takes probabilities, and
    each side gets the form it consumes. Randomness comes from torch's global RNG.
    """
    if importlib.util.find_spec("transformers") is None:
        return None, {"status": "not installed"}
    try:
        import transformers
        from transformers.generation.utils import _speculative_sampling as fn
    except Exception as exc:  # noqa: BLE001 - report why it is unavailable
        return None, {"status": f"unavailable ({type(exc).__name__}: {exc})"}
    params = inspect.signature(fn).parameters
    # 4.x: is_done_candidate=True drops the bonus token; pass False to keep the full protocol.
    extra = {"is_done_candidate": False} if "is_done_candidate" in params else {}

    def run(ids: torch.Tensor, q_logits: torch.Tensor, p_logits: torch.Tensor) -> None:
        K = ids.shape[1]
        for b in range(ids.shape[0]):
            fn(ids[b:b + 1], q_logits[b:b + 1], K, p_logits[b:b + 1], **extra)

    info = {"status": "ok", "version": transformers.__version__,
            "function": "transformers.generation.utils._speculative_sampling",
            "signature": str(inspect.signature(fn)), "fixed_arguments": extra,
            "calling": "row by row (batch 1); logits = log(probs) in float32, prepared outside the timing"}
    return run, info


def vllm_status() -> dict:
    """Whether vLLM is importable; its rejection sampler is not driven by this benchmark yet."""
    if importlib.util.find_spec("vllm") is None:
        return {"status": "not installed"}
    try:
        import vllm

        version = getattr(vllm, "__version__", "unknown")
    except Exception as exc:  # noqa: BLE001
        return {"status": f"installed but not importable ({type(exc).__name__}: {exc})"}
    return {"status": f"installed ({version}) but not measured: specexact has no vLLM adapter yet "
                      "(its v1 rejection sampler takes logits plus sampling metadata and needs CUDA/Triton)",
            "version": version}
