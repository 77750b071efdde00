"""Named tiny target / draft pairs, with their measured entropy and draft closeness.

Each entry is a :class:`~specexact.decoders.tiny_models.ModelSpec` and a draft noise; its
figures are what :func:`measure` prints for it (mean over the 16 seeded prompts of
:func:`measure_prompts`, laws at temperature 1 with no truncation):

- ``entropy``: mean entropy (nats) of the target's next-token law after a prompt;
- ``closeness``: mean ``sum_v min(p, q)`` of the target's and the draft's next-token laws
  after a prompt, the first draft's acceptance probability (aimed at 0.5-0.8: neither
  almost never nor almost always accepted);
- ``eos_mass``: mean probability of EOS (token 1) after a prompt.

===================  ======  ===========  =======  =========  ========
name                 arch    draft noise  entropy  closeness  eos_mass
===================  ======  ===========  =======  =========  ========
``llama-v64``        Llama   0.08         2.98     0.70       0.008
``llama-v64-far``    Llama   0.16         2.98     0.52       0.008
``qwen2-v64``        Qwen2   0.08         3.02     0.72       0.010
``qwen2-v64-h2``     Qwen2   0.08         2.96     0.75       0.013
===================  ======  ===========  =======  =========  ========

All: V=64, hidden 64, 2 layers, 4 heads of width 32, 2 key-value heads (grouped-query
attention), MLP width 128, ``initializer_range`` 0.2, seed 0, EOS 1 (the ``ModelSpec``
defaults), except ``qwen2-v64-h2``: 2 attention heads of width 32 (2 key-value heads), so
that ``head_dim`` is ``hidden_size / num_attention_heads``, which vLLM's Qwen2 assumes (it
does not read ``head_dim``; ``qwen2-v64`` has it 16 there, which vLLM's CPU attention
refuses): the target of vLLM's MTP method (:mod:`~specexact.decoders.tiny_models.heads`).
``llama-v64-far`` shares ``llama-v64``'s target. Over 4 tokens EOS is reached with
probability about 3 % (``tests/decoders/tiny_models/test_catalog.py`` recomputes the
figures).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from .architectures import load_model
from .make import ModelSpec, make_pair

__all__ = ["TinyPair", "CATALOG", "catalog_pair", "measure", "measure_prompts"]


@dataclass(frozen=True)
class TinyPair:
    """A named target spec and the noise of its draft, with the measured figures.

    Attributes
    ----------
    name : str
    spec : ModelSpec
    draft_noise : float
    entropy, closeness, eos_mass : float
        As :func:`measure` gives them, rounded as in the module docstring's table.
    """

    name: str
    spec: ModelSpec
    draft_noise: float
    entropy: float
    closeness: float
    eos_mass: float

    def make(self, cache_dir: str | Path | None = None) -> tuple[Path, Path]:
        """``(target_dir, draft_dir)``, made on first use (:func:`~specexact.decoders.tiny_models.make_pair`)."""
        return make_pair(self.spec, self.draft_noise, cache_dir)


CATALOG: dict[str, TinyPair] = {
    p.name: p for p in (
        TinyPair("llama-v64", ModelSpec(architecture="llama"), 0.08, entropy=2.98, closeness=0.70, eos_mass=0.008),
        TinyPair("llama-v64-far", ModelSpec(architecture="llama"), 0.16, entropy=2.98, closeness=0.52,
                 eos_mass=0.008),
        TinyPair("qwen2-v64", ModelSpec(architecture="qwen2"), 0.08, entropy=3.02, closeness=0.72, eos_mass=0.010),
        TinyPair("qwen2-v64-h2", ModelSpec(architecture="qwen2", num_attention_heads=2, num_key_value_heads=2), 0.08,
                 entropy=2.96, closeness=0.75, eos_mass=0.013),
    )
}
"""The named pairs (module docstring)."""


def catalog_pair(name: str, cache_dir: str | Path | None = None) -> tuple[Path, Path]:
    """``(target_dir, draft_dir)`` of a named pair, made on first use.

    Raises
    ------
    KeyError
        An unknown name (the message lists the known ones).
    """
    if name not in CATALOG:
        raise KeyError(f"unknown tiny model {name!r}; known: {sorted(CATALOG)}")
    return CATALOG[name].make(cache_dir)


def measure_prompts(vocab_size: int, count: int = 16, length: int = 4, seed: int = 0) -> torch.Tensor:
    """The prompts :func:`measure` averages over: ``torch.randint(0, V, (count, length))``
    from a generator seeded with ``seed``. Shape ``[count, length]`` int64."""
    return torch.randint(0, vocab_size, (count, length), generator=torch.Generator().manual_seed(seed))


def measure(pair: TinyPair, cache_dir: str | Path | None = None) -> dict[str, float]:
    """The figures of a pair: ``{"entropy", "closeness", "eos_mass"}`` (module docstring),
    computed in float64 on the pair's files."""
    target_dir, draft_dir = pair.make(cache_dir)
    target, draft = load_model(target_dir), load_model(draft_dir)
    prompts = measure_prompts(pair.spec.vocab_size)
    last = torch.full((prompts.shape[0], 1), prompts.shape[1] - 1)
    p = torch.softmax(target(prompts, last)[:, 0], -1)  # [n, V]
    q = torch.softmax(draft(prompts, last)[:, 0], -1)
    entropy = -(p * torch.log(p)).sum(-1)
    return {"entropy": float(entropy.mean()), "closeness": float(torch.minimum(p, q).sum(-1).mean()),
            "eos_mass": float(p[:, pair.spec.eos_token_id].mean())}
