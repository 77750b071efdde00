"""Replay: vLLM's rejection sampler accepts a draft of target probability 0 when its uniform is 0.

Run in a vLLM environment (``tox -e vllm-cpu`` or ``tox -e vllm-triton``):
``python scripts/replays/vllm_zero_uniform.py``; exit status 1 when it reproduces.

Engine code path: ``rejection_random_sample_kernel`` (Triton; and the C++ CPU kernel behind
``vllm.utils.cpu_triton_utils._rejection_random_sample_kernel_impl``) accepts when
``draft_prob > 0 and target_prob / draft_prob >= uniform_prob``; ``generate_uniform_probs``
draws float64 uniforms with ``torch.rand``, which returns exactly 0.0 with probability
2**-53, and then a draft with target probability 0 (cut by top-k / top-p, banned) is
emitted. The uniform is supplied by replacing ``generate_uniform_probs`` for the call
(``specexact.decoders.adapters.vllm.injected_uniforms``); vLLM's own code does the rest.
"""

import sys

import torch

from specexact.decoders.adapters.vllm import verify

ids = torch.tensor([[1]])
dp = torch.tensor([[[0.5, 0.5, 0.0]]])
tp = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]])  # token 1 has target probability 0 at position 0
out = verify.verify_with_uniforms(ids, dp, tp, torch.zeros(1, 1, dtype=torch.float64), torch.Generator().manual_seed(0))
print(f"{verify!r}: output {out.tolist()} (token 1 at position 0 has target probability 0)")
bad = int(out[0, 0]) == 1
print("finding reproduced" if bad else "not reproduced")
sys.exit(1 if bad else 0)
