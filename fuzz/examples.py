"""Fuzz examples: small frozen recipes that build a sampler's inputs from a seed.

- probability level: a :class:`~specexact.strategies.VerifyCase` (the strategies' pair
  families) or a :class:`NearEqualPair` (draft and target equal but for a few ulps at the
  drafted token: the empty-residual edge), wrapped with a generator seed in
  :class:`ProbExample`;
- logits level: :class:`LogitsExample` (raw target logits of a
  :class:`~specexact.strategies.LogitsCase`, a draft law of a
  :class:`~specexact.strategies.ProbsCase`, per-row parameters, prompt and history).

Every recipe's ``repr`` is a valid expression that rebuilds it (with the names of
:data:`REPLAY_IMPORTS` imported), so a finding stays replayable when its tensors are too
large to print.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from specexact.decoders.adapters.protocol import LogitsVerifyInputs
from specexact.decoders.params import SamplingParams
from specexact.strategies import LogitsCase, ProbsCase, VerifyCase, params_repr

__all__ = ["NEAR_EQUAL_FAMILIES", "NearEqualPair", "ProbExample", "ProbInputs", "LogitsExample", "REPLAY_IMPORTS"]

NEAR_EQUAL_FAMILIES = ("draft_above", "target_below")
"""``draft_above``: ``q = p`` but ``num_ulps`` ulps higher at each drafted token;
``target_below``: ``p = q`` but ``num_ulps`` ulps lower there."""

_HANDED_DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
                  "bfloat16": torch.bfloat16}

REPLAY_IMPORTS = ("from specexact.decoders import SamplingParams\n"
                  "from specexact.fuzz.examples import LogitsExample, NearEqualPair, ProbExample\n"
                  "from specexact.strategies import LogitsCase, ProbsCase, VerifyCase\n")
"""The imports under which every recipe's ``repr`` evaluates."""


@dataclass(frozen=True)
class ProbInputs:
    """The three tensors of a ``verify`` call: ``draft_token_ids [B, K]`` (int64),
    ``draft_probs [B, K, V]`` and ``target_probs [B, K+1, V]`` (floating)."""

    draft_token_ids: torch.Tensor
    draft_probs: torch.Tensor
    target_probs: torch.Tensor

    @property
    def shape(self) -> tuple[int, int, int]:
        B, K = self.draft_token_ids.shape
        return int(B), int(K), int(self.target_probs.shape[-1])

    def clone(self) -> "ProbInputs":
        return ProbInputs(self.draft_token_ids.clone(), self.draft_probs.clone(), self.target_probs.clone())

    def position(self, i: int) -> "ProbInputs":
        """The K=1 call of draft position ``i``: ``[B, 1]``, ``[B, 1, V]``, ``[B, 2, V]``."""
        return ProbInputs(self.draft_token_ids[:, i:i + 1].contiguous(), self.draft_probs[:, i:i + 1].contiguous(),
                          self.target_probs[:, i:i + 2].contiguous())


@dataclass(frozen=True)
class NearEqualPair:
    """``verify`` inputs whose draft and target laws agree except at the drafted tokens.

    Parameters
    ----------
    family : {"draft_above", "target_below"}
    vocab_size, batch_size, num_draft_tokens : int
        V, B, K (>= 1).
    seed : int
        Seeds the base law (:class:`~specexact.strategies.ProbsCase`) and the drafts.
    dtype : str
        dtype of both tensors (``laws.DTYPES``).
    base_family : str
        Probability family of the base law (``laws.PROB_FAMILIES``).
    num_ulps : int
        How many ulps of the dtype the drafted token's entry moves (>= 1).

    Notes
    -----
    Drafts are drawn from the base law; ``q`` at the drafted token is then raised (or ``p``
    lowered), so ``p(d)/q(d)`` is just below 1 and ``max(p - q, 0)`` is empty or nearly so:
    a rejection there needs the float guard of the residual.
    """

    family: str
    vocab_size: int
    batch_size: int = 1
    num_draft_tokens: int = 1
    seed: int = 0
    dtype: str = "float32"
    base_family: str = "zipf"
    num_ulps: int = 1

    def __post_init__(self) -> None:
        if self.family not in NEAR_EQUAL_FAMILIES:
            raise ValueError(f"family must be one of {NEAR_EQUAL_FAMILIES}, got {self.family!r}")
        for name in ("vocab_size", "batch_size", "num_draft_tokens", "num_ulps"):
            if int(getattr(self, name)) != getattr(self, name) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {getattr(self, name)!r}")

    @cached_property
    def inputs(self) -> ProbInputs:
        B, K, V = self.batch_size, self.num_draft_tokens, self.vocab_size
        dt = getattr(torch, self.dtype)
        base = ProbsCase(family=self.base_family, vocab_size=V, batch_size=B * (K + 1), seed=self.seed,
                         dtype=self.dtype).probs.reshape(B, K + 1, V)
        target = base.clone()
        draft = base[:, :K].clone()
        law = draft.to(torch.float64).numpy()
        rng = np.random.default_rng(self.seed)
        ids = np.empty((B, K), dtype=np.int64)
        for b in range(B):
            for i in range(K):
                row = law[b, i] / law[b, i].sum()
                ids[b, i] = rng.choice(V, p=row)
        ids_t = torch.from_numpy(ids)
        moved = draft if self.family == "draft_above" else target[:, :K]
        towards = torch.tensor(float("inf") if self.family == "draft_above" else 0.0, dtype=dt)
        for b in range(B):
            for i in range(K):
                v = moved[b, i, ids[b, i]]
                for _ in range(self.num_ulps):
                    v = torch.nextafter(v, towards)
                moved[b, i, ids[b, i]] = v
        return ProbInputs(ids_t, draft.to(dt), target.to(dt))

    @property
    def draft_token_ids(self) -> torch.Tensor:
        return self.inputs.draft_token_ids

    @property
    def draft_probs(self) -> torch.Tensor:
        return self.inputs.draft_probs

    @property
    def target_probs(self) -> torch.Tensor:
        return self.inputs.target_probs


@dataclass(frozen=True)
class ProbExample:
    """One probability-level fuzz example: a pair recipe and the seed of the call's generator."""

    pair: VerifyCase | NearEqualPair
    generator_seed: int = 0

    @cached_property
    def inputs(self) -> ProbInputs:
        """Fresh tensors of the pair (a copy: a call may not touch the recipe's cache)."""
        p = self.pair
        return ProbInputs(p.draft_token_ids.clone(), p.draft_probs.clone(), p.target_probs.clone())

    @property
    def vocab_size(self) -> int:
        return int(self.pair.vocab_size)

    def describe(self) -> dict:
        """Sizes and family, for reports."""
        return {"family": getattr(self.pair, "family", "?"), "vocab_size": self.vocab_size,
                "batch_size": int(self.pair.batch_size), "num_draft_tokens": int(self.pair.num_draft_tokens),
                "dtype": self.pair.dtype}

    def __repr__(self) -> str:
        return f"ProbExample(pair={self.pair!r}, generator_seed={self.generator_seed!r})"

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(repr(self))


@dataclass(frozen=True)
class LogitsExample:
    """One logits-level fuzz example (a :class:`LogitsVerifyInputs` recipe).

    Parameters
    ----------
    logits : LogitsCase
        ``B * (K+1)`` rows: the raw target logits after each candidate prefix (their
        values rounded to ``logits.dtype``), handed over in ``logits_dtype``.
    draft : ProbsCase
        ``B * K`` rows: the law each draft was sampled from (values rounded to
        ``draft.dtype``), handed over in ``draft_dtype``.
    num_draft_tokens : int
        K.
    target_params : tuple of SamplingParams
        One per row (``B`` entries).
    prompt, output : tuple of tuple of int
        Per row: prompt ids (``T0`` each) and generated ids, ``-1`` padded on the right.
    seed : int
        Seeds the drafts (from ``draft``'s rows).
    generator_seed : int
        Seeds the call's generator.
    least_likely_first : bool
        Replace each row's first draft by the token of smallest raw target logit at
        position 0 (lowest id among ties; only where the draft law gives it mass): a token
        the target's truncation or mask removes, whatever V.
    logits_dtype, draft_dtype : {"float32", "float64", "float16", "bfloat16"}
        dtypes of ``target_logits`` and ``draft_probs`` as the sampler receives them
        (default float32, the protocol's; float16 / bfloat16 as GPU engines hand logits
        and draft laws over, for a sampler that declares them). The reference law is
        computed from these same tensors.
    """

    logits: LogitsCase
    draft: ProbsCase
    num_draft_tokens: int
    target_params: tuple[SamplingParams, ...]
    prompt: tuple[tuple[int, ...], ...]
    output: tuple[tuple[int, ...], ...]
    seed: int = 0
    generator_seed: int = 0
    least_likely_first: bool = False
    logits_dtype: str = "float32"
    draft_dtype: str = "float32"

    def __post_init__(self) -> None:
        for name in ("logits_dtype", "draft_dtype"):
            if getattr(self, name) not in _HANDED_DTYPES:
                raise ValueError(f"{name} must be one of {tuple(_HANDED_DTYPES)}, got {getattr(self, name)!r}")

    @property
    def batch_size(self) -> int:
        return len(self.target_params)

    @property
    def vocab_size(self) -> int:
        return int(self.logits.vocab_size)

    @cached_property
    def _built(self) -> dict:
        B, K, V = self.batch_size, self.num_draft_tokens, self.vocab_size
        logits = self.logits.logits.to(_HANDED_DTYPES[self.logits_dtype]).reshape(B, K + 1, V)
        q = self.draft.probs.to(_HANDED_DTYPES[self.draft_dtype]).reshape(B, K, V)
        law = q.to(torch.float64).numpy()
        rng = np.random.default_rng(self.seed)
        ids = np.array([[rng.choice(V, p=law[b, i] / law[b, i].sum()) for i in range(K)] for b in range(B)],
                       dtype=np.int64).reshape(B, K)
        if self.least_likely_first:
            for b in range(B):
                least = int(torch.argmin(logits[b, 0]))  # first index of the minimum
                if law[b, 0, least] > 0:
                    ids[b, 0] = least
        return {"ids": torch.from_numpy(ids), "q": q, "logits": logits}

    @property
    def inputs(self) -> LogitsVerifyInputs:
        """Fresh :class:`LogitsVerifyInputs` (copies of the cached tensors)."""
        b = self._built
        width = max((len(r) for r in self.output), default=0)
        out = torch.tensor([list(r) + [-1] * (width - len(r)) for r in self.output], dtype=torch.int64)
        return LogitsVerifyInputs(
            draft_token_ids=b["ids"].clone(), draft_probs=b["q"].clone(), target_logits=b["logits"].clone(),
            target_params=tuple(self.target_params),
            prompt_token_ids=torch.tensor([list(r) for r in self.prompt], dtype=torch.int64),
            output_token_ids=out.reshape(self.batch_size, width))

    def describe(self) -> dict:
        return {"family": f"logits:{self.logits.family}", "vocab_size": self.vocab_size,
                "batch_size": self.batch_size, "num_draft_tokens": int(self.num_draft_tokens),
                "dtype": self.logits_dtype, "draft_dtype": self.draft_dtype}

    def __repr__(self) -> str:
        params = ", ".join(params_repr(p) for p in self.target_params)
        return (f"LogitsExample(logits={self.logits!r}, draft={self.draft!r}, "
                f"num_draft_tokens={self.num_draft_tokens!r}, target_params=({params},), prompt={self.prompt!r}, "
                f"output={self.output!r}, seed={self.seed!r}, generator_seed={self.generator_seed!r}, "
                f"least_likely_first={self.least_likely_first!r}{self._dtypes_repr()})")

    def _dtypes_repr(self) -> str:
        return "".join(f", {name}={getattr(self, name)!r}" for name in ("logits_dtype", "draft_dtype")
                       if getattr(self, name) != "float32")

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(repr(self))
