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

Scheduler axes (issue 33), drawn only with ``e2e_scenarios(scheduler=True)`` (the audit asks
for them where the engine declares a scheduler, ``EngineCapabilities.scheduler``; without
them the draws are those of earlier versions, seed for seed): per shape, the engine step at
which its requests arrive (:attr:`RequestShape.arrival`) and a prompt without a repeated
token (:attr:`RequestShape.distinct_prompt`: an n-gram proposer finds no match in it, so its
rows have no drafts beside rows that have); per scenario, a prompt prefix every shape shares
(:attr:`Scenario.shared_prefix`) and the scheduler's settings (:class:`SchedulerSettings`: a
KV cache small enough to force preemption, chunked prefill with a small token budget per
step, prefix caching, a batch limit). None of them changes a token's exact law: the per-token
checks judge every token against the same law as without them. Each shrinks toward off.
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

__all__ = ["RequestShape", "Scenario", "SchedulerSettings", "e2e_scenarios", "scenario_axes", "KV_BLOCK",
           "PARAM_RANGES", "SCHEDULER_RANGES"]

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


SCHEDULER_RANGES = {
    "arrival": (1, 24),
    "shared_prefix": (16, 40),
    "kv_cache_tokens": (64, 256),
    "chunk_tokens": (8, 48),
    "max_num_seqs": (1, 16),
}
"""The range each scheduler axis is drawn from when it is set (``e2e_scenarios(scheduler=True)``):
an arrival step after the first; a shared prefix of one to two and a half 16-token blocks; a KV cache
from one 64-token request (the tiny models' context) to four; a per-step token budget below
the longest prompt (its prefill then takes several steps); a batch limit."""


def _positive_or_none(name: str, value) -> None:
    if value is not None and (isinstance(value, bool) or int(value) != value or value < 1):
        raise InvalidArgument(f"{name} must be an integer >= 1 or None, got {value!r}")


@dataclass(frozen=True)
class SchedulerSettings:
    """What one configuration of an engine's scheduler is given (an engine with a scheduler
    maps each to its own option; ``None`` / ``False``: the engine's default).

    Parameters
    ----------
    kv_cache_tokens : int or None
        Tokens the KV cache holds (the engine rounds up to its blocks); small enough, running
        requests that grow run out of blocks and are preempted and recomputed.
    chunk_tokens : int or None
        Chunked prefill with at most this many tokens scheduled per engine step (a longer
        prompt is prefilled over several steps).
    prefix_caching : bool
        Cache computed prompt blocks and reuse them for requests with the same prefix.
    max_num_seqs : int or None
        Most requests running at once.

    Raises
    ------
    InvalidArgument
        A size below 1 (the message names it and its value).
    """

    kv_cache_tokens: int | None = None
    chunk_tokens: int | None = None
    prefix_caching: bool = False
    max_num_seqs: int | None = None

    def __post_init__(self) -> None:
        for name in ("kv_cache_tokens", "chunk_tokens", "max_num_seqs"):
            _positive_or_none(name, getattr(self, name))
        if not isinstance(self.prefix_caching, bool):
            raise InvalidArgument(f"prefix_caching must be a bool, got {self.prefix_caching!r}")

    @property
    def is_default(self) -> bool:
        """Whether every setting is the engine's default."""
        return self == SchedulerSettings()

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        """The settings that are set, or ``"default scheduler"``."""
        parts = []
        if self.kv_cache_tokens is not None:
            parts.append(f"KV cache {self.kv_cache_tokens} tokens")
        if self.chunk_tokens is not None:
            parts.append(f"chunked prefill {self.chunk_tokens} tokens/step")
        if self.prefix_caching:
            parts.append("prefix caching")
        if self.max_num_seqs is not None:
            parts.append(f"max {self.max_num_seqs} running")
        return ", ".join(parts) or "default scheduler"


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
    arrival : int, default 0
        The engine step at which the shape's requests are added (0: with the first requests);
        engines without a scheduler ignore it (the law does not depend on it).
    distinct_prompt : bool, default False
        The prompt holds no token twice (an n-gram proposer finds no match in it).

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
    arrival: int = 0
    distinct_prompt: bool = False

    def __post_init__(self) -> None:
        if int(self.prompt_len) < 1:
            raise InvalidArgument(f"prompt_len must be >= 1, got {self.prompt_len!r}")
        if int(self.max_tokens) < 1:
            raise InvalidArgument(f"max_tokens must be >= 1, got {self.max_tokens!r}")
        if not 0 <= int(self.min_tokens) <= int(self.max_tokens):
            raise InvalidArgument(f"min_tokens must be in [0, max_tokens={self.max_tokens}], got {self.min_tokens!r}")
        if not isinstance(self.params, SamplingParams):
            raise InvalidArgument(f"params must be a SamplingParams, got {type(self.params).__name__}")
        if isinstance(self.arrival, bool) or int(self.arrival) != self.arrival or self.arrival < 0:
            raise InvalidArgument(f"arrival must be an integer >= 0, got {self.arrival!r}")

    def prompt(self, vocab_size: int, low: int = 2) -> tuple[int, ...]:
        """The prompt's ``prompt_len`` token ids in ``[low, vocab_size)``, from a generator
        seeded with ``prompt_seed`` (``low = 2`` keeps the tiny models' special ids 0 and 1,
        EOS, out of prompts); with :attr:`distinct_prompt`, ids without repetition (a seeded
        permutation's first ``prompt_len``).

        Raises
        ------
        InvalidArgument
            A distinct prompt longer than the ``vocab_size - low`` ids there are.
        """
        digest = hashlib.sha256(f"specexact-scenario-prompt/{int(self.prompt_seed)}".encode()).digest()
        g = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)
        if self.distinct_prompt:
            if self.prompt_len > vocab_size - low:
                raise InvalidArgument(f"distinct_prompt of prompt_len={self.prompt_len} needs more than the "
                                      f"{vocab_size - low} ids in [{low}, {vocab_size})")
            return tuple(int(t) + low for t in torch.randperm(vocab_size - low, generator=g)[: int(self.prompt_len)])
        return tuple(int(t) for t in torch.randint(low, vocab_size, (int(self.prompt_len),), generator=g))

    def to_dict(self) -> dict:
        """JSON-ready form; the scheduler fields only when set (earlier reports' form otherwise)."""
        d = asdict(self)
        for k in ("arrival", "distinct_prompt"):
            if not d[k]:
                del d[k]
        return d

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
    shared_prefix : int, default 0
        The first ``shared_prefix`` tokens of every shape's prompt are the same (a seeded
        prefix; a shorter prompt holds its first ``prompt_len``; a :attr:`RequestShape.distinct_prompt`
        shape keeps its own prompt): :meth:`prompt`.
    scheduler : SchedulerSettings, default the engine's defaults
        The scheduler's settings (an engine without a scheduler ignores them).

    Raises
    ------
    InvalidArgument
        ``gamma < 1``, no shapes, a negative seed or shared prefix.
    """

    gamma: int
    shapes: tuple[RequestShape, ...]
    seed: int = 0
    shared_prefix: int = 0
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)

    def __post_init__(self) -> None:
        if int(self.gamma) < 1:
            raise InvalidArgument(f"gamma must be >= 1, got {self.gamma!r}")
        object.__setattr__(self, "shapes", tuple(self.shapes))
        if not self.shapes or not all(isinstance(s, RequestShape) for s in self.shapes):
            raise InvalidArgument(f"shapes must be a non-empty tuple of RequestShape, got {self.shapes!r}")
        if int(self.seed) < 0:
            raise InvalidArgument(f"seed must be >= 0, got {self.seed!r}")
        if isinstance(self.shared_prefix, bool) or int(self.shared_prefix) != self.shared_prefix \
                or self.shared_prefix < 0:
            raise InvalidArgument(f"shared_prefix must be an integer >= 0, got {self.shared_prefix!r}")
        if not isinstance(self.scheduler, SchedulerSettings):
            raise InvalidArgument(f"scheduler must be a SchedulerSettings, got {self.scheduler!r}")

    @property
    def has_scheduler_axes(self) -> bool:
        """Whether any scheduler axis is set (arrivals, distinct prompts, a shared prefix,
        scheduler settings)."""
        return bool(self.shared_prefix or not self.scheduler.is_default
                    or any(s.arrival or s.distinct_prompt for s in self.shapes))

    def prompt(self, index: int, vocab_size: int, low: int = 2) -> tuple[int, ...]:
        """Shape ``index``'s prompt: :meth:`RequestShape.prompt` with its first
        ``min(shared_prefix, prompt_len)`` tokens replaced by the scenario's shared prefix
        (seeded from the scenario's seed), unless the shape has a distinct prompt."""
        shape = self.shapes[int(index)]
        own = shape.prompt(vocab_size, low)
        k = min(int(self.shared_prefix), shape.prompt_len)
        if not k or shape.distinct_prompt:
            return own
        # the prefix's own seed space (2**31 + seed) is disjoint from the shapes' (below 2**31)
        prefix = RequestShape(prompt_len=int(self.shared_prefix), prompt_seed=2**31 + int(self.seed)).prompt(
            vocab_size, low)
        return prefix[:k] + own[k:]

    def to_dict(self) -> dict:
        """JSON-ready form (reports, replays); the scheduler axes only when set (so a scenario
        without them has the form of earlier reports)."""
        d = {"gamma": int(self.gamma), "shapes": [s.to_dict() for s in self.shapes], "seed": int(self.seed)}
        if self.shared_prefix:
            d["shared_prefix"] = int(self.shared_prefix)
        if not self.scheduler.is_default:
            d["scheduler"] = self.scheduler.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Scenario":
        """Inverse of :meth:`to_dict` (a dict without the scheduler axes, as earlier reports
        wrote it, gives them off)."""
        return cls(gamma=int(d["gamma"]), shapes=tuple(RequestShape.from_dict(s) for s in d["shapes"]),
                   seed=int(d.get("seed", 0)), shared_prefix=int(d.get("shared_prefix", 0)),
                   scheduler=SchedulerSettings(**d.get("scheduler", {})))

    def describe(self) -> str:
        """One line: γ and each shape's prompt length, parameters and limits (and the
        scheduler axes where set)."""
        parts = []
        for s in self.shapes:
            lim = f"max {s.max_tokens}" + (f" min {s.min_tokens}" if s.min_tokens else "") + (" eos" if s.eos else "")
            extra = (f", arrives at step {s.arrival}" if s.arrival else "") + (", distinct" if s.distinct_prompt else "")
            parts.append(f"prompt {s.prompt_len}{extra}, {s.params.describe() or 'plain'}, {lim}")
        line = f"γ={self.gamma}; " + "; ".join(parts)
        if self.shared_prefix:
            line += f"; shared prefix {self.shared_prefix}"
        if not self.scheduler.is_default:
            line += f"; {self.scheduler.describe()}"
        return line


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


def _off_or(lo_hi: tuple[int, int], off=None) -> SearchStrategy:
    """``off`` (first: what it shrinks to) or an integer of the range."""
    return st.one_of(st.just(off), st.integers(*lo_hi))


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


@functools.lru_cache(maxsize=None)
def _arrival() -> SearchStrategy[int]:
    return _off_or(SCHEDULER_RANGES["arrival"], 0)


@st.composite
def _shape(draw, max_prompt: int, max_tokens: int, scheduler: bool = False) -> RequestShape:
    prompt_len_s, seed_s, n_s, eos_s = _shape_parts(max_prompt, max_tokens)
    prompt_len = draw(prompt_len_s)
    prompt_seed = draw(seed_s)
    params = draw(_params())
    n = draw(n_s)
    eos = draw(eos_s)
    min_tokens = draw(_min_tokens(n))
    arrival, distinct = 0, False
    if scheduler:  # drawn after the other fields: without the scheduler axes nothing more is drawn
        arrival = draw(_arrival())
        distinct = draw(st.booleans())
    return RequestShape(prompt_len=prompt_len, prompt_seed=prompt_seed, params=params, max_tokens=n,
                        min_tokens=min_tokens, eos=eos, arrival=arrival, distinct_prompt=distinct)


def _scheduler_settings() -> SearchStrategy[SchedulerSettings]:
    return st.builds(SchedulerSettings, kv_cache_tokens=_off_or(SCHEDULER_RANGES["kv_cache_tokens"]),
                     chunk_tokens=_off_or(SCHEDULER_RANGES["chunk_tokens"]), prefix_caching=st.booleans(),
                     max_num_seqs=_off_or(SCHEDULER_RANGES["max_num_seqs"]))


def e2e_scenarios(*, max_gamma: int = 8, max_shapes: int = 4, max_prompt: int = 48,
                  max_tokens: int = 64, scheduler: bool = False) -> SearchStrategy[Scenario]:
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
    scheduler : bool, keyword-only, default False
        Also draw the scheduler axes (module docstring; :data:`SCHEDULER_RANGES`): per shape
        an arrival step (0 or later) and a distinct prompt or not, per scenario a shared
        prompt prefix and :class:`SchedulerSettings`, each set or off on its own and
        shrinking toward off. Without them the draws are those of earlier versions.

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
    if not isinstance(scheduler, bool):
        raise InvalidArgument(f"scheduler must be a bool, got {scheduler!r}")
    base = dict(gamma=st.integers(1, int(max_gamma)),
                shapes=st.lists(_shape(int(max_prompt), int(max_tokens), scheduler), min_size=1,
                                max_size=int(max_shapes)).map(tuple),
                seed=st.integers(0, 2**31 - 1))
    if not scheduler:
        return st.builds(Scenario, **base)
    lo, hi = SCHEDULER_RANGES["shared_prefix"]
    return st.builds(Scenario, **base, shared_prefix=_off_or((lo, min(hi, int(max_prompt))), 0),
                     scheduler=_scheduler_settings())


def scenario_axes(scenario: Scenario) -> dict:
    """What a scenario reaches, per axis of the issue: ``gamma``; ``mixed_prompt_lengths``
    (shapes of different prompt lengths in one call); ``longest_prompt``;
    ``last_position`` (the largest output position, 0-based); ``min_tokens_with_eos``;
    ``eos``; ``penalties`` and ``truncations`` (set in some shape); ``combined`` (a shape
    with three or more parameters set); ``shapes``; and, where the scenario has scheduler
    axes (:attr:`Scenario.has_scheduler_axes`; absent otherwise, as in earlier reports):
    ``staggered_arrivals`` (shapes arriving at different steps), ``kv_pressure`` (a KV cache
    smaller than all requests of one call need: 16 per shape, prompt plus output),
    ``chunked_prefill`` (a prompt longer than the per-step token budget), ``shared_prefix``
    (prefix caching on, and two shapes sharing a prefix of at least a :data:`KV_BLOCK`; a
    shape's own 16 requests share their whole prompt anyway) and ``rows_without_drafts`` (a distinct prompt beside
    a prompt with a repeated token)."""
    neutral = SamplingParams()
    set_in = [{k for k in PARAM_RANGES if getattr(s.params, k) != getattr(neutral, k)} for s in scenario.shapes]
    sched = {}
    if scenario.has_scheduler_axes:
        st_ = scenario.scheduler
        prompts = [scenario.prompt(i, 64) for i in range(len(scenario.shapes))]
        need = 16 * sum(s.prompt_len + s.max_tokens for s in scenario.shapes)
        sched = {
            "staggered_arrivals": len({s.arrival for s in scenario.shapes}) > 1,
            "kv_pressure": st_.kv_cache_tokens is not None and st_.kv_cache_tokens < need,
            "chunked_prefill": st_.chunk_tokens is not None and max(len(p) for p in prompts) > st_.chunk_tokens,
            "shared_prefix": st_.prefix_caching and scenario.shared_prefix >= KV_BLOCK and sum(
                not s.distinct_prompt and s.prompt_len >= KV_BLOCK for s in scenario.shapes) > 1,
            "rows_without_drafts": any(s.distinct_prompt for s in scenario.shapes) and any(
                len(set(p)) < len(p) for p in prompts),
        }
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
        **sched,
    }
