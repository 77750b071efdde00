"""mlx-lm's own generation loop as an end-to-end engine (speculative decoding with a draft model).

What runs
---------
``mlx_lm.utils.load_model(Path(dir))`` loads the target and the draft from the tiny-model
folders (the same ``config.json`` + ``model.safetensors``, float32); every request is one
pass over the generator (tested: mlx-lm 0.32.2 with ``mlx[cpu]`` 0.32.4):

- ``draft_model`` (``speculative=True``): ``mlx_lm.generate.speculative_generate_step(prompt,
  target, draft, num_draft_tokens=γ, max_tokens=max_tokens, sampler=make_sampler(...),
  logits_processors=make_logits_processors(...))``. mlx-lm samples the target's own token at
  every position of a round and keeps the drafts while they equal those samples
  (``acceptance_scheme="sample_compare"``); the draft is sampled with the same sampler and
  processors as the target (``draft_sampling="request"``);
- plain (``speculative=False``): ``mlx_lm.generate.generate_step(prompt, target, ...)`` with
  the same sampler and processors.

``mx.random.seed(request.seed)`` seeds MLX's global RNG before each request
(``per_request_seed=False``; batch size 1). Seeds
(:class:`~specexact.decoders.engines.seeds.SeedPromise`): mlx-lm's samplers draw from MLX's
global key (``mx.random.categorical`` without a key) and promise nothing per request; the
adapter's seeding before each request makes a seeded request's output depend on its seed alone
(``other_mix``), and an unseeded request (``seed=None``) is not seeded: the global key goes
on, consecutive independent draws (``unseeded_independent``). EOS: the generator does not stop by itself; the
adapter stops reading at the first EOS token as ``mlx_lm.generate.stream_generate`` does (it
finishes reading the first round first, so that round's acceptance is known), and returns the
tokens up to and including it. There is no ``min_tokens`` in mlx-lm (``min_tokens=False``).
Stop tokens (``stop_tokens=True``): ``stream_generate`` ends at any id in
``tokenizer.eos_token_ids``, a set the caller sets (``TokenizerWrapper``'s ``eos_token_ids``
setter, ``add_eos_token``, ``load(..., tokenizer_config={"eos_token": ...})``), checked on every
token the generator yields, a draft accepted inside a round included; the rest of that round is
never read. The adapter's EOS is the request's ``eos_token_id``, whatever it is (the set
``{eos_token_id}``), read as ``stream_generate`` reads it.

Processing (``mlx_lm.sample_utils``, 0.32.2), declared in :data:`MLX_PROCESSING`, never
corrected: the logits processors (repetition, presence, frequency penalty, in that order:
the additive two commute) see the last ``context_size`` tokens (20, passed explicitly) of the
context that the generator hands them; then ``make_sampler`` applies top-p, min-p, top-k on
the *untempered* log-probabilities and divides by the temperature last
(``categorical_sampling``). ``apply_top_p`` keeps every token as probable as its threshold
(``top_p_ties="keep_ties"``). ``apply_top_k`` uses ``argpartition`` (ties at the k-th value
broken in an unspecified way; the declared ``keep_ties`` is exact when there are none) and
raises for ``top_k >= V``. ``temperature == 0`` is ``greedy_sampler`` (the argmax).

Penalty context: ``generate_step`` adds the prompt to the tokens its processors see, so the
declared scope is ``"prompt_and_output"``; ``speculative_generate_step`` starts its
processors' context at the *last* prompt token (its ``_prefill`` does not add the prompt to
``prev_tokens``), so with a penalty the speculative law is not the plain one
(``scripts/replays/mlx_speculative_penalty_context.py``).

Acceptance counts: every token the generator yields carries ``from_draft``; the adapter
reports ``num_accepted_tokens`` (drafted tokens among those returned) and
``first_round_accepted`` (drafted tokens before the first token the target sampled itself),
the latter ``None`` where ``max_tokens <= γ`` (the first round then drafts fewer than ``γ``).
``num_draft_tokens`` is ``None`` (the generator does not report it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from specexact.decoders.processing import LogitsProcessing

from .protocol import EngineCapabilities, GenerationRequest, GenerationResult
from .seeds import SeedPromise

__all__ = ["MLX_CONTEXT_SIZE", "MLX_PROCESSING", "MlxEngine", "sampler_kwargs", "processor_kwargs"]

MLX_CONTEXT_SIZE = 20
"""``repetition_context_size`` / ``presence_context_size`` / ``frequency_context_size`` passed
to ``make_logits_processors`` (mlx-lm's defaults, set explicitly)."""

MLX_PROCESSING = LogitsProcessing(
    order=("penalties", "top_p", "min_p", "top_k", "temperature"),
    repetition_penalty_scope="prompt_and_output",
    frequency_penalty_scope="prompt_and_output",
    presence_penalty_scope="prompt_and_output",
    repetition_penalty_window=MLX_CONTEXT_SIZE,
    frequency_penalty_window=MLX_CONTEXT_SIZE,
    presence_penalty_window=MLX_CONTEXT_SIZE,
    top_p_ties="keep_ties",
    greedy=True,
)
"""mlx-lm 0.32's processing as ``generate_step`` applies it (module docstring)."""


def sampler_kwargs(request: GenerationRequest) -> dict:
    """``make_sampler`` keywords of one request: ``temp``, ``top_p``, ``min_p``, ``top_k``
    (mlx-lm's "off" values are ``top_p`` outside ``(0, 1)``, ``min_p = 0``, ``top_k = 0``)."""
    p = request.params
    return {"temp": float(p.temperature), "top_p": float(p.top_p), "min_p": float(p.min_p), "top_k": int(p.top_k)}


def processor_kwargs(request: GenerationRequest) -> dict:
    """``make_logits_processors`` keywords of one request: each penalty that is on (``None``
    otherwise) with its context size :data:`MLX_CONTEXT_SIZE`."""
    p = request.params
    return {
        "repetition_penalty": float(p.repetition_penalty) if p.repetition_penalty != 1 else None,
        "repetition_context_size": MLX_CONTEXT_SIZE,
        "presence_penalty": float(p.presence_penalty) if p.presence_penalty != 0 else None,
        "presence_context_size": MLX_CONTEXT_SIZE,
        "frequency_penalty": float(p.frequency_penalty) if p.frequency_penalty != 0 else None,
        "frequency_context_size": MLX_CONTEXT_SIZE,
    }


class MlxEngine:
    """mlx-lm's ``speculative_generate_step`` and ``generate_step`` (module docstring).

    No constructor arguments.
    """

    name = "mlx"
    requires = ("mlx", "mlx_lm")  # the modules it imports when loaded (checked by resolve_engine)

    def __init__(self) -> None:
        self._target = None
        self._draft = None
        self._gamma: int | None = None

    def capabilities(self) -> EngineCapabilities:
        """What this adapter runs (module docstring); the version is the installed mlx-lm's."""
        from importlib.metadata import version

        return EngineCapabilities(
            methods=("draft_model",),
            processing=MLX_PROCESSING,
            max_batch_size=1,
            min_tokens=False,
            eos=True,
            per_request_seed=False,
            reports_acceptance=True,
            version=version("mlx-lm"),
            notes="speculative_generate_step(num_draft_tokens=γ) / generate_step with make_sampler and "
                  f"make_logits_processors (context sizes {MLX_CONTEXT_SIZE}); mx.random.seed(seed) before each "
                  "request; the adapter stops at the first EOS as stream_generate does; acceptance from the "
                  "yielded from_draft flags",
            acceptance_scheme="sample_compare",
            seeds=SeedPromise(other_mix=True, unseeded_independent=True, alone=True,
                              source="the adapter: one request at a time, mx.random.seed(seed) before each seeded "
                                     "one; unseeded ones continue MLX's global key"),
            draft_sampling="request",
            first_round_after_token=False,
            stop_tokens=True,  # stream_generate: `token in tokenizer.eos_token_ids`, any id the caller sets
        )

    def load(self, target_dir: Path, draft_dir: Path | None, *, method: str, num_speculative_tokens: int) -> None:
        """Load the target and the draft with ``mlx_lm.utils.load_model``.

        Raises
        ------
        ValueError
            ``method`` other than ``"draft_model"``, ``draft_dir`` missing, or
            ``num_speculative_tokens < 1``.
        """
        from mlx_lm.utils import load_model

        if method != "draft_model":
            raise ValueError(f"method must be 'draft_model' for mlx-lm, got {method!r}")
        if draft_dir is None:
            raise ValueError("method='draft_model' needs draft_dir, got None")
        gamma = int(num_speculative_tokens)
        if gamma != num_speculative_tokens or gamma < 1:
            raise ValueError(f"num_speculative_tokens must be an integer >= 1, got {num_speculative_tokens!r}")
        self.close()
        self._target, _ = load_model(Path(target_dir))
        self._draft, _ = load_model(Path(draft_dir))
        self._gamma = gamma

    def generate(self, requests: Sequence[GenerationRequest], *, speculative: bool) -> list[GenerationResult]:
        """Run each request through mlx-lm's generator, one at a time (module docstring).

        Raises
        ------
        RuntimeError
            Called before :meth:`load`.
        ValueError
            A request with ``min_tokens > 0`` (mlx-lm has no minimum length; named).
        """
        if self._target is None:
            raise RuntimeError("MlxEngine.generate called before load()")
        for r in requests:
            if r.min_tokens > 0 and r.eos_token_id is not None:
                raise ValueError(f"mlx-lm has no min_tokens; got min_tokens={r.min_tokens}")
        return [self._one(r, speculative) for r in requests]

    def _one(self, request: GenerationRequest, speculative: bool) -> GenerationResult:
        import mlx.core as mx
        from mlx_lm.generate import generate_step, speculative_generate_step
        from mlx_lm.sample_utils import make_logits_processors, make_sampler

        sampler = make_sampler(**sampler_kwargs(request))
        processors = make_logits_processors(**processor_kwargs(request))
        prompt = mx.array(list(request.prompt_token_ids), dtype=mx.uint32)
        if request.seed is not None:  # unseeded: MLX's global RNG goes on from where it is
            mx.random.seed(int(request.seed))
        if speculative:
            steps = speculative_generate_step(prompt, self._target, self._draft, num_draft_tokens=self._gamma,
                                              max_tokens=request.max_tokens, sampler=sampler,
                                              logits_processors=processors)
        else:
            steps = generate_step(prompt, self._target, max_tokens=request.max_tokens, sampler=sampler,
                                  logits_processors=processors)
        eos = request.eos_token_id
        tokens: list[int] = []
        flags: list[bool] = []  # from_draft of every token read, past an EOS until the first round ends
        ended = False
        try:
            for token, _, *rest in steps:
                flags.append(bool(rest[0]) if speculative else False)
                if not ended:
                    tokens.append(int(token))
                    ended = eos is not None and int(token) == eos
                if ended and not all(flags):  # the first round is over (a target-sampled token was read)
                    break
        finally:
            steps.close()
        if not speculative:
            return GenerationResult(token_ids=tuple(tokens))
        first = None
        if request.max_tokens > self._gamma:
            first = next((i for i, f in enumerate(flags) if not f), None)
        return GenerationResult(token_ids=tuple(tokens), num_accepted_tokens=sum(flags[: len(tokens)]),
                                first_round_accepted=first)

    def close(self) -> None:
        """Drop the models."""
        self._target = self._draft = None
        self._gamma = None
