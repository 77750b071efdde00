"""The protocol of an end-to-end engine: requests in, generated token ids out.

An adapter translates layouts and nothing else: it maps a :class:`GenerationRequest` to the
engine's own request (its sampling-parameter object, its seed argument), calls the engine's
public generate entry point, and maps the engine's output back to a
:class:`GenerationResult`. It never repairs what the engine does (no re-sampling, no
truncating outputs beyond what the request asked, no filtering of tokens).

Layouts
-------
- token ids are Python ints in ``[0, vocab_size)``; prompts are token ids (no tokenizer);
- ``max_tokens`` is the number of new tokens requested; an engine returns at most that
  many, fewer only when it emitted ``eos_token_id`` (which it includes as the last token);
- ``min_tokens``: EOS is masked (probability 0) until that many tokens were generated;
- ``seed``: one per request, or ``None`` (an unseeded request: the engine's own randomness);
  the same call again with the same seeds must give the seeded requests the same outputs (a
  seeded engine that does not is a defect, found by the reproducibility check); what else an
  engine promises (another mix of requests, independent unseeded requests) it declares in
  :attr:`EngineCapabilities.seeds` (:class:`~specexact.decoders.engines.seeds.SeedPromise`);
- ``arrival``: the engine step at which the request is added (0: with the first); an engine
  with a scheduler that declares ``"arrival"`` (:attr:`EngineCapabilities.scheduler`) drives
  its own step loop and adds it then, any other engine ignores it (the law does not depend on it);
- ``logprobs``: asked per request; an engine that declares them
  (:attr:`EngineCapabilities.logprobs`) returns the natural log of each emitted token's
  probability, one per token, under the law it declares (the processed law the token was
  drawn from, or the raw model's); the audit compares them with the exact law at that prefix.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol, Sequence, runtime_checkable

from specexact.decoders.params import SamplingParams
from specexact.decoders.processing import BUILTIN_PROCESSING, LogitsProcessing

from .seeds import SeedPromise

__all__ = [
    "SPECULATIVE_METHODS",
    "SCHEDULER_AXES",
    "GenerationRequest",
    "GenerationResult",
    "EngineCapabilities",
    "SeedPromise",
    "EndToEndEngine",
    "check_generation_results",
    "is_engine",
]

SPECULATIVE_METHODS = ("draft_model", "draft_model_greedy", "ngram", "prompt_lookup", "eagle", "eagle3", "medusa",
                       "mtp", "suffix", "early_exit", "uag")
"""Drafting methods an engine may declare: a draft model sampled from its own (processed)
law (``draft_model``), a draft model's argmax (``draft_model_greedy``: point-mass drafts),
n-gram matching on the context (``ngram``, vLLM) and prompt lookup (``prompt_lookup``,
transformers), heads on the target's hidden states (``eagle``, ``eagle3``, ``medusa``, an
MTP layer ``mtp``: :mod:`specexact.decoders.tiny_models.heads`) and suffix trees over the
context (``suffix``, vLLM with ``arctic-inference``), the target's own first layers
(``early_exit``, transformers' self-speculative ``assistant_early_exit``) and a draft model
with another tokenizer (``uag``, transformers' universal assisted generation). The law of the output must be the target's under every method; only the
acceptance differs."""


SCHEDULER_AXES = ("arrival", "preemption", "chunked_prefill", "prefix_caching", "max_num_seqs")
"""Scheduler axes an engine may declare (:attr:`EngineCapabilities.scheduler`): requests added
at their own engine step (:attr:`GenerationRequest.arrival`), and the settings of
:class:`~specexact.strategies.SchedulerSettings` it maps to its own options (a KV cache small
enough to preempt, chunked prefill with a per-step token budget, prefix caching, a batch
limit), given to ``load(..., scheduler=settings)``."""


@dataclass(frozen=True)
class GenerationRequest:
    """One request: a prompt, its sampling parameters, its length limits and its seed.

    Parameters
    ----------
    prompt_token_ids : tuple of int
        The prompt, token ids in ``[0, vocab_size)``; not empty.
    params : SamplingParams
        Temperature, top-k / top-p / min-p and the three penalties of the *target* (the
        engine processes the draft as it does; specexact does not set the draft's law).
    max_tokens : int
        New tokens to generate, ``>= 1``.
    min_tokens : int, default 0
        EOS is masked until this many tokens were generated (``0 <= min_tokens <= max_tokens``).
    eos_token_id : int or None, default None
        The EOS token that stops the request (included in the output), or ``None``: nothing
        stops it before ``max_tokens``.
    seed : int or None, default 0
        The request's seed (``>= 0``), or ``None``: unseeded (the engine's own randomness;
        only sent to an engine that declares ``SeedPromise.unseeded_independent``).
    logprobs : bool, default False
        Return the emitted tokens' logprobs (:attr:`GenerationResult.logprobs`); only asked
        of an engine that declares them (:attr:`EngineCapabilities.logprobs`).
    arrival : int, default 0
        The engine step at which the request is added (module docstring); ignored by an
        engine that does not declare ``"arrival"``.

    Raises
    ------
    ValueError
        An empty prompt, a negative token id, ``max_tokens < 1``, ``min_tokens`` outside
        ``[0, max_tokens]``, a negative ``eos_token_id``, seed or arrival; the message names
        the field.
    """

    prompt_token_ids: tuple[int, ...]
    params: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int = 4
    min_tokens: int = 0
    eos_token_id: int | None = None
    seed: int | None = 0
    logprobs: bool = False
    arrival: int = 0

    def __post_init__(self) -> None:
        prompt = tuple(int(t) for t in self.prompt_token_ids)
        object.__setattr__(self, "prompt_token_ids", prompt)
        if not prompt or min(prompt) < 0:
            raise ValueError(f"prompt_token_ids must be non-empty token ids >= 0, got {self.prompt_token_ids!r}")
        if not isinstance(self.params, SamplingParams):
            raise TypeError(f"params must be a SamplingParams, got {type(self.params).__name__}")
        if int(self.max_tokens) < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens!r}")
        if not 0 <= int(self.min_tokens) <= int(self.max_tokens):
            raise ValueError(f"min_tokens must be in [0, max_tokens={self.max_tokens}], got {self.min_tokens!r}")
        if self.eos_token_id is not None and int(self.eos_token_id) < 0:
            raise ValueError(f"eos_token_id must be >= 0 or None, got {self.eos_token_id!r}")
        if self.seed is not None and int(self.seed) < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed!r}")
        if int(self.arrival) < 0:
            raise ValueError(f"arrival must be >= 0, got {self.arrival!r}")

    def to_dict(self) -> dict:
        """JSON-ready form (replays, reports); ``arrival`` only when set (earlier form otherwise)."""
        d = asdict(self)
        d["prompt_token_ids"] = list(self.prompt_token_ids)
        if not d["arrival"]:
            del d["arrival"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "GenerationRequest":
        """Inverse of :meth:`to_dict`."""
        d = dict(d)
        d["params"] = SamplingParams(**d["params"])
        d["prompt_token_ids"] = tuple(d["prompt_token_ids"])
        return cls(**d)


@dataclass(frozen=True)
class GenerationResult:
    """What the engine generated for one request.

    Parameters
    ----------
    token_ids : tuple of int
        The new tokens (the prompt not included), at most ``max_tokens``; ends at the first
        EOS when one was generated.
    num_draft_tokens : int or None
        Drafts the engine proposed for this request, from the engine's own metrics
        (``None``: the engine does not report it, or plain generation).
    num_accepted_tokens : int or None
        Drafts the engine accepted for this request, from its own metrics.
    first_round_accepted : int or None
        Drafts accepted in this request's *first* speculative round, from the engine's own
        metrics (``None``: not reported). The audit compares these counts with their exact
        law (:func:`~specexact.decoders.tiny_models.expected_acceptance`), whose context is
        the prompt, or the prompt and one target-sampled token when the engine declares
        ``first_round_after_token``.
    logprobs : tuple of float or None
        For a request that asked for them: the natural log of each token of ``token_ids``'s
        probability as the engine reports it (one per token; ``-inf`` for probability 0),
        under the law :attr:`EngineCapabilities.logprobs` declares; ``None`` otherwise.
    """

    token_ids: tuple[int, ...]
    num_draft_tokens: int | None = None
    num_accepted_tokens: int | None = None
    first_round_accepted: int | None = None
    logprobs: tuple[float, ...] | None = None


@dataclass(frozen=True)
class EngineCapabilities:
    """What an end-to-end engine implements, declared so the audit computes its reference
    laws with the engine's own semantics and skips (with the reason) what it lacks.

    Parameters
    ----------
    methods : tuple of str
        The drafting methods of :data:`SPECULATIVE_METHODS` the adapter runs.
    processing : LogitsProcessing
        The engine's order of operations and their semantics on the target's logits; the
        reference laws are computed with it. A parameter it does not implement is refused
        (:meth:`LogitsProcessing.unsupported`) and the row class skipped.
    max_batch_size : int or None
        Requests per generate call (``None``: any); the adapter loops internally beyond it.
    min_tokens : bool
        Whether ``min_tokens > 0`` is implemented.
    eos : bool
        Whether an EOS token id can be set per request.
    per_request_seed : bool
        True: every request is seeded on its own (vLLM); False: the adapter seeds the
        engine's global RNG before each request from the request's seed (transformers,
        mlx-lm), so requests run one at a time.
    reports_acceptance : bool
        Whether :class:`GenerationResult` carries the engine's acceptance counts.
    version : str
        The engine's version (reports).
    notes : str
        Anything else a reader needs (flags the adapter sets).
    acceptance_scheme : {"tokenwise", "sample_compare"}
        How the engine decides a draft: ``min(1, p/q)`` (Leviathan et al.), or sampling the
        target and keeping the draft while they agree (mlx-lm); fixes the exact expected
        acceptance the engine's counts are compared with.
    draft_sampling : {"request", "temperature", "greedy"}
        How the engine samples its draft model: with the request's parameters processed as
        the target's, with the request's temperature only, or its argmax.
    first_round_after_token : bool
        True when the first speculative round comes after one token that the target sampled
        alone (vLLM's prefill step), False when it drafts right after the prompt.
    logprobs : {None, "processed", "raw"}
        Whether the engine returns the emitted tokens' logprobs when a request asks, and of
        which law: the processed law the token was drawn from (temperature, truncation,
        penalties and the ``min_tokens`` mask as :attr:`processing` declares them), or the
        raw model's (``log_softmax`` of the unprocessed logits); ``None``: not returned.
    seeds : SeedPromise
        What the engine promises about seeds beyond the same call again
        (:class:`~specexact.decoders.engines.seeds.SeedPromise`: a seeded request in another
        mix of requests, independent unseeded requests); default: nothing more.
    max_context : int or None
        The most tokens a request may hold, prompt and output together (vLLM's
        ``max_model_len``: past it the engine ends the output without EOS, and a prompt of
        that length is refused); ``None``: no limit. The audit's cases keep their requests
        within it (:func:`~specexact.audit.cases.e2e.case.within_context`).
    stop_tokens : bool
        Whether the engine ends a request at any ``eos_token_id`` it is given (a stop token,
        which ``min_tokens`` masks as it masks the model's EOS), not only at the model's own
        EOS. Default False. Where True, the generated scenarios end each of their EOS shapes at
        the token its law makes most likely
        (:func:`~specexact.audit.cases.e2e.laws.likely_stop_token`), so that a stop inside a
        verify window happens often enough to be checked: the tiny models' own EOS has
        probability below 0.01 at most positions.
    scheduler : tuple of str
        The :data:`SCHEDULER_AXES` the engine implements: ``"arrival"`` (it adds each request
        at its :attr:`GenerationRequest.arrival` step of its own loop) and the settings its
        ``load(..., scheduler=...)`` maps to its options. ``()`` (default): the engine has no
        scheduler of its own (every generate call runs its requests together); arrival steps
        and scheduler settings do not apply to it, and its law does not depend on them.
    """

    methods: tuple[str, ...]
    processing: LogitsProcessing = BUILTIN_PROCESSING
    max_batch_size: int | None = None
    min_tokens: bool = True
    eos: bool = True
    per_request_seed: bool = True
    reports_acceptance: bool = False
    version: str = ""
    notes: str = ""
    acceptance_scheme: str = "tokenwise"
    draft_sampling: str = "request"
    first_round_after_token: bool = False
    logprobs: str | None = None
    seeds: SeedPromise = SeedPromise()
    max_context: int | None = None
    scheduler: tuple[str, ...] = ()
    stop_tokens: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.seeds, SeedPromise):
            raise TypeError(f"seeds must be a SeedPromise, got {type(self.seeds).__name__}")
        if self.max_context is not None and (isinstance(self.max_context, bool) or int(self.max_context) != self.max_context
                                             or self.max_context < 2):
            raise ValueError(f"max_context must be an integer >= 2 or None, got {self.max_context!r}")
        axes = tuple(self.scheduler)
        if any(a not in SCHEDULER_AXES for a in axes):
            raise ValueError(f"scheduler must be a tuple of {SCHEDULER_AXES}, got {self.scheduler!r}")
        object.__setattr__(self, "scheduler", axes)
        if self.logprobs not in (None, "processed", "raw"):
            raise ValueError(f"logprobs must be None, 'processed' or 'raw', got {self.logprobs!r}")
        if self.acceptance_scheme not in ("tokenwise", "sample_compare"):
            raise ValueError(f"acceptance_scheme must be 'tokenwise' or 'sample_compare', got {self.acceptance_scheme!r}")
        if self.draft_sampling not in ("request", "temperature", "greedy"):
            raise ValueError(f"draft_sampling must be 'request', 'temperature' or 'greedy', got {self.draft_sampling!r}")
        methods = tuple(self.methods)
        unknown = [m for m in methods if m not in SPECULATIVE_METHODS]
        if not methods or unknown:
            raise ValueError(f"methods must be a non-empty tuple of {SPECULATIVE_METHODS}, got {self.methods!r}")
        object.__setattr__(self, "methods", methods)
        if not isinstance(self.processing, LogitsProcessing):
            raise TypeError(f"processing must be a LogitsProcessing, got {type(self.processing).__name__}")
        if self.max_batch_size is not None and int(self.max_batch_size) < 1:
            raise ValueError(f"max_batch_size must be >= 1 or None, got {self.max_batch_size!r}")

    def to_dict(self) -> dict:
        """JSON-ready form, for reports."""
        d = asdict(self)
        d["methods"] = list(self.methods)
        d["processing"] = self.processing.to_dict()
        d["seeds"] = self.seeds.to_dict()
        d["scheduler"] = list(self.scheduler)
        return d


@runtime_checkable
class EndToEndEngine(Protocol):
    """An engine's own generate loop behind one interface.

    ``load`` starts the engine once per configuration (a target directory, a draft
    directory or ``None``, a method of :data:`SPECULATIVE_METHODS` and the number of
    speculative tokens per round); ``generate`` may then be called many times, with
    ``speculative=True`` (the configured speculative decoding) or ``False`` (the same
    engine's plain target-only sampling: the naive sampler of the two-sample check).
    ``close`` frees the engine. An adapter may declare ``requires`` (the modules it imports
    when loaded: :func:`~specexact.decoders.engines.registry.resolve_engine` refuses the
    engine up front where one is missing) and define ``reload()``: the audit calls it,
    instead of ``close`` then ``load``, to start the same configuration again after a
    ``generate`` call raised (it may keep the part that did not raise).

    Model directories hold a Hugging Face layout (``config.json``, ``model.safetensors``)
    made by :mod:`specexact.decoders.tiny_models`.
    """

    name: str

    def capabilities(self) -> EngineCapabilities: ...

    def load(self, target_dir: Path, draft_dir: Path | None, *, method: str, num_speculative_tokens: int) -> None: ...

    def generate(self, requests: Sequence[GenerationRequest], *, speculative: bool) -> list[GenerationResult]: ...

    def close(self) -> None: ...


def check_generation_results(requests: Sequence[GenerationRequest], results: Sequence[GenerationResult],
                             vocab_size: int) -> str | None:
    """Why ``results`` break the output protocol for ``requests``, or ``None``.

    Checked: one result per request; every token id an int in ``[0, vocab_size)``; at most
    ``max_tokens`` tokens; fewer only when the last one is the request's EOS; no EOS before
    the last token; no EOS before ``min_tokens`` tokens; for a request that asked for
    logprobs, one float per token (not NaN, at most 0). A violation is a defect on valid
    input (an engine's bookkeeping of EOS / ``max_tokens`` / ``min_tokens`` / logprobs).
    """
    if len(results) != len(requests):
        return f"{len(results)} results for {len(requests)} requests"
    for i, (req, res) in enumerate(zip(requests, results)):
        toks = tuple(res.token_ids)
        bad = [t for t in toks if not isinstance(t, int) or not 0 <= t < vocab_size]
        if bad:
            return f"request {i}: token ids {bad[:5]} outside [0, {vocab_size})"
        if len(toks) > req.max_tokens:
            return f"request {i}: {len(toks)} tokens for max_tokens={req.max_tokens}"
        eos = req.eos_token_id
        if eos is not None and eos in toks[:-1]:
            return f"request {i}: tokens continue after EOS {eos} at index {toks.index(eos)}"
        if len(toks) < req.max_tokens and (eos is None or not toks or toks[-1] != eos):
            return f"request {i}: {len(toks)} tokens for max_tokens={req.max_tokens} without EOS at the end"
        if eos is not None and eos in toks and toks.index(eos) < req.min_tokens:
            return f"request {i}: EOS at index {toks.index(eos)} before min_tokens={req.min_tokens}"
        if req.logprobs:
            lp = res.logprobs
            if lp is None or len(lp) != len(toks):
                return (f"request {i}: asked for logprobs, got "
                        f"{'none' if lp is None else f'{len(lp)} for {len(toks)} tokens'}")
            bad = [x for x in lp if not isinstance(x, float) or x != x or x > 0.0]
            if bad:
                return f"request {i}: logprobs {bad[:3]} are not floats <= 0"
    return None


def is_engine(obj: object) -> bool:
    """Whether ``obj`` is an end-to-end engine (:class:`EndToEndEngine`: ``name``,
    ``capabilities()``, ``load``, ``generate``, ``close``), which only end-to-end cases audit."""
    return isinstance(obj, EndToEndEngine) and callable(getattr(obj, "capabilities", None))


def installed_version(*dists: str) -> str:
    """The version of the first of ``dists`` installed here (an adapter's
    :attr:`EngineCapabilities.version`), or ``""`` when none is."""
    from importlib.metadata import PackageNotFoundError, version

    for dist in dists:
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return ""

