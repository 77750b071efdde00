"""mlx-lm's ``speculative_generate_step`` behind the probability-level ``verify`` protocol.

What runs
---------
``mlx_lm.generate.speculative_generate_step(prompt, model, draft_model, *,
num_draft_tokens=K, max_tokens=K+1, sampler=make_sampler(temp=1.0))`` (tested: mlx-lm
0.32.2 with ``mlx[cpu]`` 0.32.4). mlx-lm does not verify by rejection: it runs the target
on the prompt plus the drafts, *samples the target's own token at every position* with
``sampler`` and keeps the drafts while they equal the target's samples; at the first
mismatch it emits the target's sample, after ``K`` matches the target's sample at
position ``K`` (the bonus). The emitted law is the target's; a draft ``d ~ q`` is kept
with probability ``p(d)``, so acceptance is ``sum_v p(v) q(v)`` per draft instead of
``sum_v min(p, q)``: the adapter declares ``scheme="sample_compare"``.

What the adapter translates
---------------------------
Two stub ``mlx.nn.Module`` models stand for one row's laws: the target stub returns
``log(target_probs[b, i])`` as the logits after ``i`` drafts, the draft stub returns
``log`` of a point mass on ``draft_token_ids[b, i]`` (mlx-lm's draft step then proposes
exactly the audit's draft, which was sampled from ``draft_probs``; mlx-lm never looks at the
draft law itself). Both keep a trimmable cache with an offset, as mlx-lm requires. One row
per call of ``speculative_generate_step`` (batch size 1: mlx-lm's API); the adapter reads
the first round's tokens (up to and including the first one not from the draft) and closes
the generator.

Randomness: MLX's global RNG, seeded once per call from the passed generator
(``mx.random.seed``); MLX offers no public way to save and restore that state, so it is
left seeded.
"""

from __future__ import annotations

import torch

from specexact.decoders.rejection_sampling import PLACEHOLDER_ID

from .protocol import Capabilities

__all__ = ["MlxSpeculativeGenerate", "verify", "TESTED_VERSIONS"]

TESTED_VERSIONS = ("0.32.2",)
"""mlx-lm versions this adapter was run against (with mlx 0.32.4, CPU build)."""


def _stub_classes():
    import mlx.core as mx
    import mlx.nn as nn

    class StubCache:
        """A trimmable cache that only counts positions (mlx-lm trims it after a round)."""

        def __init__(self):
            self.offset = 0

        def is_trimmable(self):
            return True

        def trim(self, n):
            n = min(self.offset, n)
            self.offset -= n
            return n

        @property
        def state(self):
            return mx.array([self.offset])

    class StubLM(nn.Module):
        """Logits ``rows[offset + j]`` for the ``j``-th input token of a call."""

        def __init__(self, rows):
            super().__init__()
            self.rows = rows  # mx.array [T, V]
            self.layers = [None]

        def make_cache(self):
            return [StubCache()]

        def __call__(self, y, cache):
            n = y.shape[-1]
            start = cache[0].offset
            cache[0].offset += n
            idx = mx.minimum(mx.arange(start, start + n), self.rows.shape[0] - 1)
            return self.rows[idx][None]

    return StubLM


class MlxSpeculativeGenerate:
    """The adapter; call it like :func:`specexact.decoders.verify`.

    Raises
    ------
    ImportError
        mlx or mlx-lm is not installed.
    """

    name = "mlx"

    def __init__(self) -> None:
        import mlx.core as mx
        import mlx_lm
        from mlx_lm.generate import speculative_generate_step
        from mlx_lm.sample_utils import make_sampler

        self.mx = mx
        self.version = getattr(mlx_lm, "__version__", "unknown")
        self.mlx_version = mx.__version__
        self.function = speculative_generate_step
        self.sampler = make_sampler(temp=1.0)
        self.StubLM = _stub_classes()
        self.capabilities = Capabilities(
            max_batch_size=1,
            dtypes=(torch.float32,),
            devices=("cpu",),
            randomness="global_rng",
            scheme="sample_compare",
            notes="mlx_lm.generate.speculative_generate_step with stub target / draft models (the draft stub "
                  "proposes the audit's drafts); samples the target and keeps matching drafts; rows one by one; "
                  "MLX's global RNG seeded from the generator per call",
        )

    def metadata(self) -> dict:
        """Library versions, wrapped function, scheme, capabilities."""
        return {
            "adapter": f"{__name__}:{type(self).__name__}",
            "library": "mlx-lm",
            "version": self.version,
            "mlx_version": self.mlx_version,
            "version_tested": self.version in TESTED_VERSIONS,
            "tested_versions": list(TESTED_VERSIONS),
            "function": "mlx_lm.generate.speculative_generate_step",
            "sampler": "mlx_lm.sample_utils.make_sampler(temp=1.0)",
            "scheme": self.capabilities.scheme,
            "capabilities": self.capabilities.to_dict(),
        }

    def row(self, draft_token_ids: list[int], target_logits, draft_logits) -> list[int]:
        """One row through mlx-lm on MLX's RNG as it stands: the first round's emitted tokens."""
        mx = self.mx
        K = len(draft_token_ids)
        target = self.StubLM(target_logits)
        draft = self.StubLM(draft_logits)
        gen = self.function(mx.array([0], mx.uint32), target, draft, num_draft_tokens=K, max_tokens=K + 1,
                            sampler=self.sampler)
        out = []
        try:
            for token, _, from_draft in gen:
                out.append(int(token))
                if not from_draft or len(out) == K + 1:
                    break
        finally:
            gen.close()
        return out

    def verify_rows(self, draft_token_ids: torch.Tensor, draft_probs: torch.Tensor,
                    target_probs: torch.Tensor) -> torch.Tensor:
        """All rows on MLX's RNG as it stands (replay: ``mx.random.seed(s); verify_rows(...)``)."""
        mx = self.mx
        B, K = draft_token_ids.shape
        V = target_probs.shape[-1]
        logp = torch.log(target_probs.detach().to(torch.float32).cpu()).numpy()
        ids = draft_token_ids.detach().cpu().long()
        one_hot = torch.full((B, K, V), float("-inf"))
        one_hot.scatter_(2, ids[:, :, None], 0.0)
        out = torch.full((B, K + 1), PLACEHOLDER_ID, dtype=torch.int64)
        for b in range(B):
            tokens = self.row(ids[b].tolist(), mx.array(logp[b]), mx.array(one_hot[b].numpy()))
            out[b, : len(tokens)] = torch.tensor(tokens)
        return out.to(draft_token_ids.device)

    def __call__(self, draft_token_ids: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor,
                 generator: torch.Generator | None = None) -> torch.Tensor:
        """The ``verify`` protocol: ``[B, K], [B, K, V], [B, K+1, V], generator -> [B, K+1]``."""
        gen_device = generator.device if generator is not None else torch.device("cpu")
        seed = int(torch.randint(0, 2**31, (1,), generator=generator, device=gen_device).item())
        self.mx.random.seed(seed)
        return self.verify_rows(draft_token_ids, draft_probs, target_probs)

    def __repr__(self) -> str:
        return f"<MlxSpeculativeGenerate mlx-lm {self.version} (mlx {self.mlx_version})>"


def __getattr__(attr: str):
    """``verify`` is built on first use (PEP 562), so this module imports without mlx."""
    if attr == "verify":
        global verify
        verify = MlxSpeculativeGenerate()
        return verify
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
