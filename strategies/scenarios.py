"""End-to-end scenarios: one generate call of an engine's own loop, drawn by Hypothesis.

A :class:`Scenario` is what an end-to-end audit hands an engine in one configuration: γ (the
speculative tokens per round), one to several request shapes (:class:`RequestShape`: a
prompt, the target's sampling parameters, ``max_tokens``, ``min_tokens``, whether EOS stops
it) that share every generate call, and a seed that shifts the requests' seeds.
:func:`e2e_scenarios` draws them; every axis shrinks toward the simplest scenario (one request,
a one-token prompt, plain parameters, γ = 1, one new token, no EOS), so a failing scenario
shrinks to the fewest things that still make it fail.

Prompts are drawn as a length and a seed and built with a seeded generator
(:meth:`RequestShape.prompt`): a 48-token prompt is two numbers, not 48 (drawing and
shrinking token by token would cost one engine run per token).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import asdict, dataclass, field

import torch
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from specexact.decoders.params import SamplingParams

from ._validation import InvalidArgument

__all__ = ["RequestShape", "Scenario", "e2e_scenarios", "scenario_axes", "KV_BLOCK", "PARAM_RANGES"]

KV_BLOCK = 16
"""The KV-cache block size engines commonly use (vLLM's default): prompts and outputs are
drawn past two blocks so that positions crossing block edges are reached."""

PARAM_RANGES = {
    "temperature": (0.3, 2.0),
    "top_k": (1, 48),
    "top_p": (0.3, 0.99),
    "min_p": (0.01, 0.3),
    "repetition_penalty": (1.05, 2.0),
    "presence_penalty": (0.1, 2.0),
    "frequency_penalty": (0.1, 2.0),
}
"""The range each sampling parameter is drawn from when it is set (each is set or neutral
on its own, so any combination of the seven can occur in one request)."""


@dataclass(frozen=True)
class RequestShape:
    """One request shape of a scenario.

    Parameters
    ----------
    prompt_len : int
        Prompt length, ``>= 1``.
    prompt_seed : int
        Seed of the prompt's tokens (:meth:`prompt`).
    params : SamplingParams
        The target's sampling parameters.
    max_tokens : int
        New tokens, ``>= 1``.
    min_tokens : int, default 0
        EOS masked until this many tokens were generated, ``0 <= min_tokens <= max_tokens``.
    eos : bool, default False
        Whether EOS stops the request (``eos_token_id`` set).

    Raises
    ------
    InvalidArgument
        A field out of range (the message names it and its value).
    """

    prompt_len: int
    prompt_seed: int
    params: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int = 1
    min_tokens: int = 0
    eos: bool = False

    def __post_init__(self) -> None:
        if int(self.prompt_len) < 1:
            raise InvalidArgument(f"prompt_len must be >= 1, got {self.prompt_len!r}")
        if int(self.max_tokens) < 1:
            raise InvalidArgument(f"max_tokens must be >= 1, got {self.max_tokens!r}")
        if not 0 <= int(self.min_tokens) <= int(self.max_tokens):
            raise InvalidArgument(f"min_tokens must be in [0, max_tokens={self.max_tokens}], got {self.min_tokens!r}")
        if not isinstance(self.params, SamplingParams):
            raise InvalidArgument(f"params must be a SamplingParams, got {type(self.params).__name__}")

    def prompt(self, vocab_size: int, low: int = 2) -> tuple[int, ...]:
        """The prompt's ``prompt_len`` token ids in ``[low, vocab_size)``, from a generator
        seeded with ``prompt_seed`` (``low = 2`` keeps the tiny models' special ids 0 and 1,
        EOS, out of prompts)."""
        digest = hashlib.sha256(f"specexact-scenario-prompt/{int(self.prompt_seed)}".encode()).digest()
        g = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)
        return tuple(int(t) for t in torch.randint(low, vocab_size, (int(self.prompt_len),), generator=g))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "RequestShape":
        """Inverse of :meth:`to_dict`."""
        return cls(**{**d, "params": SamplingParams(**d["params"])})


@dataclass(frozen=True)
class Scenario:
    """One end-to-end scenario: γ, the request shapes sharing each generate call, a seed.

    Parameters
    ----------
    gamma : int
        Speculative tokens per round, ``>= 1``.
    shapes : tuple of RequestShape
        At least one.
    seed : int, default 0
        Added to every request's seed.

    Raises
    ------
    InvalidArgument
        ``gamma < 1``, no shapes, or a negative seed.
    """

    gamma: int
    shapes: tuple[RequestShape, ...]
    seed: int = 0

    def __post_init__(self) -> None:
        if int(self.gamma) < 1:
            raise InvalidArgument(f"gamma must be >= 1, got {self.gamma!r}")
        object.__setattr__(self, "shapes", tuple(self.shapes))
        if not self.shapes or not all(isinstance(s, RequestShape) for s in self.shapes):
            raise InvalidArgument(f"shapes must be a non-empty tuple of RequestShape, got {self.shapes!r}")
        if int(self.seed) < 0:
            raise InvalidArgument(f"seed must be >= 0, got {self.seed!r}")

    def to_dict(self) -> dict:
        """JSON-ready form (reports, replays)."""
        return {"gamma": int(self.gamma), "shapes": [s.to_dict() for s in self.shapes], "seed": int(self.seed)}

    @classmethod
    def from_dict(cls, d: dict) -> "Scenario":
        """Inverse of :meth:`to_dict`."""
        return cls(gamma=int(d["gamma"]), shapes=tuple(RequestShape.from_dict(s) for s in d["shapes"]),
                   seed=int(d.get("seed", 0)))

    def describe(self) -> str:
        """One line: γ and each shape's prompt length, parameters and limits."""
        parts = []
        for s in self.shapes:
            lim = f"max {s.max_tokens}" + (f" min {s.min_tokens}" if s.min_tokens else "") + (" eos" if s.eos else "")
            parts.append(f"prompt {s.prompt_len}, {s.params.describe() or 'plain'}, {lim}")
        return f"γ={self.gamma}; " + "; ".join(parts)


def _optional(name: str, strategy: SearchStrategy) -> SearchStrategy:
    """The parameter's neutral value (first: what it shrinks to) or a drawn one."""
    return st.one_of(st.just(getattr(SamplingParams(), name)), strategy)


@functools.lru_cache(maxsize=None)
def _params() -> SearchStrategy[SamplingParams]:
    """Built once: a strategy object is validated on its first draw, and building this one
    anew in every shape cost most of a scenario draw's time (the same draws either way)."""
    floats = {k: st.floats(lo, hi, allow_nan=False).map(lambda x: round(x, 3))
              for k, (lo, hi) in PARAM_RANGES.items() if k != "top_k"}
    fields = {k: _optional(k, s) for k, s in floats.items()}
    fields["top_k"] = _optional("top_k", st.integers(*PARAM_RANGES["top_k"]))
    return st.builds(SamplingParams, **fields)


@functools.lru_cache(maxsize=None)
def _shape_parts(max_prompt: int, max_tokens: int) -> tuple[SearchStrategy, ...]:
    """The strategies :func:`_shape` draws from, built once per bound (as :func:`_params`)."""
    # short prompts / outputs in one branch, any length in the other: a call mixes a few long
    # ones with short ones (what keeps a scenario's cost down without narrowing the range)
    prompt_len = st.one_of(st.integers(1, min(8, max_prompt)), st.integers(1, max_prompt))
    n = st.one_of(st.integers(1, min(8, max_tokens)), st.integers(1, max_tokens))
    return prompt_len, st.integers(0, 2**31 - 1), n, st.booleans()


@functools.lru_cache(maxsize=None)
def _min_tokens(n: int) -> SearchStrategy[int]:
    return st.one_of(st.just(0), st.integers(0, min(n, 8)), st.integers(0, n))


@st.composite
def _shape(draw, max_prompt: int, max_tokens: int) -> RequestShape:
    prompt_len_s, seed_s, n_s, eos_s = _shape_parts(max_prompt, max_tokens)
    prompt_len = draw(prompt_len_s)
    prompt_seed = draw(seed_s)
    params = draw(_params())
    n = draw(n_s)
    eos = draw(eos_s)
    min_tokens = draw(_min_tokens(n))
    return RequestShape(prompt_len=prompt_len, prompt_seed=prompt_seed, params=params, max_tokens=n,
                        min_tokens=min_tokens, eos=eos)


def e2e_scenarios(*, max_gamma: int = 8, max_shapes: int = 4, max_prompt: int = 48,
              max_tokens: int = 64) -> SearchStrategy[Scenario]:
    """Scenarios of end-to-end generate calls (module docstring).

    Parameters
    ----------
    max_gamma : int, keyword-only
        Largest γ (drawn from ``1..max_gamma``), ``>= 1``.
    max_shapes : int, keyword-only
        Most request shapes in one call, ``>= 1``.
    max_prompt : int, keyword-only
        Longest prompt, ``>= 1`` (the default, 48, is past two :data:`KV_BLOCK` blocks).
    max_tokens : int, keyword-only
        Most new tokens of a request, ``>= 1`` (64: positions past 32, four blocks).

    Returns
    -------
    SearchStrategy[Scenario]
        Per shape, each of the seven sampling parameters set or neutral on its own
        (:data:`PARAM_RANGES`), ``max_tokens`` from 1, ``min_tokens`` 0 or up to
        ``max_tokens``, EOS on or off; shrinks toward one shape, prompt length 1, plain
        parameters, γ = 1, one token.

    Raises
    ------
    InvalidArgument
        A bound below 1 (the message names it and its value).
    """
    for name, v in (("max_gamma", max_gamma), ("max_shapes", max_shapes), ("max_prompt", max_prompt),
                    ("max_tokens", max_tokens)):
        if int(v) != v or v < 1:
            raise InvalidArgument(f"{name} must be an integer >= 1, got {v!r}")
    return st.builds(Scenario, gamma=st.integers(1, int(max_gamma)),
                     shapes=st.lists(_shape(int(max_prompt), int(max_tokens)), min_size=1,
                                     max_size=int(max_shapes)).map(tuple),
                     seed=st.integers(0, 2**31 - 1))


def scenario_axes(scenario: Scenario) -> dict:
    """What a scenario reaches, per axis of the issue: ``gamma``; ``mixed_prompt_lengths``
    (shapes of different prompt lengths in one call); ``longest_prompt``;
    ``last_position`` (the largest output position, 0-based); ``min_tokens_with_eos``;
    ``eos``; ``penalties`` and ``truncations`` (set in some shape); ``combined`` (a shape
    with three or more parameters set); ``shapes``."""
    neutral = SamplingParams()
    set_in = [{k for k in PARAM_RANGES if getattr(s.params, k) != getattr(neutral, k)} for s in scenario.shapes]
    return {
        "gamma": int(scenario.gamma),
        "shapes": len(scenario.shapes),
        "mixed_prompt_lengths": len({s.prompt_len for s in scenario.shapes}) > 1,
        "longest_prompt": max(s.prompt_len for s in scenario.shapes),
        "last_position": max(s.max_tokens for s in scenario.shapes) - 1,
        "min_tokens_with_eos": any(s.eos and s.min_tokens > 0 for s in scenario.shapes),
        "eos": any(s.eos for s in scenario.shapes),
        "penalties": any(k.endswith("penalty") for ks in set_in for k in ks),
        "truncations": any(k in ("top_k", "top_p", "min_p") for ks in set_in for k in ks),
        "combined": any(len(ks) >= 3 for ks in set_in),
    }
