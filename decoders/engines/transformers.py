"""Hugging Face transformers' own generate loop as an end-to-end engine (assisted generation).

What runs
---------
``AutoModelForCausalLM.from_pretrained(dir, dtype=torch.float32)`` loads the target (and the
assistant) from the tiny-model folders; every request is one call of
``target.generate(input_ids [1, T0], generation_config=GenerationConfig(...), ...)`` (tested:
transformers 5.24.0):

- ``draft_model``: ``assistant_model=draft`` with ``do_sample=True`` (speculative sampling,
  ``_assisted_decoding`` then ``_speculative_sampling``); the assistant is fixed to
  ``num_assistant_tokens = γ``, ``num_assistant_tokens_schedule = "constant"`` and
  ``assistant_confidence_threshold = 0`` (no early stop of a draft), so every round drafts
  ``γ`` tokens (fewer only near ``max_new_tokens``, or where the assistant drafted EOS);
- ``prompt_lookup``: ``prompt_lookup_num_tokens = γ`` (n-gram lookup in the context, default
  ``max_matching_ngram_size``); its drafts have no logits, so the target's tokens are sampled
  and compared with them (point-mass drafts: the same acceptance as token-wise);
- ``early_exit``: ``assistant_early_exit = 1`` (:data:`~.transformers_methods.EARLY_EXIT_LAYERS`):
  the target drafts with its first decoder layer, final norm and ``lm_head``
  (``EarlyExitCandidateGenerator``, an ``AssistedCandidateGenerator`` whose assistant is the
  target itself: the draft is sampled as ``draft_model``'s, with the same doubled warpers, and
  its processed scores are ``q`` in ``_speculative_sampling``); the target's own
  ``generation_config`` is fixed to ``γ`` tokens a round as the assistant's is above
  (``draft_dir`` is not used);
- ``uag``: universal assisted generation, ``assistant_model=draft, tokenizer=target_tok,
  assistant_tokenizer=draft_tok`` with the tokenizers and the renumbered draft of
  :mod:`~.transformers_methods` (the pair's draft in another vocabulary of ``V + 8`` tokens);
  sampling runs ``UniversalSpeculativeDecodingGenerator`` (the draft's tokens and logits
  mapped to the target's ids, then ``_speculative_sampling``), greedy runs
  ``AssistedCandidateGeneratorDifferentTokenizers`` (through text; its tokens compared with the
  target's argmax). One draft serves every request, as a user's would;
- ``speculative=False``: the same ``generate`` without an assistant (plain sampling).

``temperature == 0`` is ``do_sample=False`` (greedy; the assistant's tokens are then compared
with the target's argmax). transformers has no draft-model method whose assistant is greedy
while the target samples: the assistant generates with a copy of the *target's* generation
config (``AssistedCandidateGenerator.__init__``), whatever its own ``do_sample`` says, so
``draft_model_greedy`` is not declared.

Batch size 1 ("assisted generate is only supported for batch_size = 1"): requests run one
at a time, torch's global RNG seeded with ``torch.manual_seed(request.seed)`` before each
(``per_request_seed=False``). Seeds (:class:`~specexact.decoders.engines.seeds.SeedPromise`):
transformers' ``generate`` draws from torch's global RNG (``torch.multinomial`` without a
generator in ``GenerationMixin._sample`` / ``_assisted_decoding``) and promises nothing per
request; the adapter's seeding before each request makes a seeded request's output depend on
its seed alone (``other_mix``), and an unseeded request (``seed=None``) is not seeded: the
global RNG goes on, so the unseeded requests of a call are consecutive independent draws
(``unseeded_independent``). Nothing the engine returns is changed: the new tokens are
``sequences[0, T0:]``.

Stop tokens (``stop_tokens=True``; checked in ``transformers/generation/utils.py`` of 5.25.0):
the request's ``eos_token_id`` is the only EOS (the models' own ``generation_config.eos_token_id``
is cleared at load), and ``_prepare_special_tokens`` makes it ``_eos_token_tensor``, which every
place that stops or masks reads: ``EosTokenCriteria`` (``_get_stopping_criteria``),
``MinNewTokensLengthLogitsProcessor`` (``_get_logits_processor``: ``min_new_tokens`` masks that
id, applied at every position of a verify window in ``_assisted_decoding`` step 2.3), and
``_assisted_decoding``'s crop of the accepted tokens at the first id in ``_eos_token_tensor``
(step 3, "This is for eos tokens": the tokens a window emits after a stop are dropped, for
every candidate generator: assistant, prompt lookup, early exit, universal assisted
generation). So transformers ends a request at any id it is given, the model's EOS or not.

Processing (checked against ``GenerationMixin._get_logits_processor`` of 5.24.0): repetition
penalty over prompt and output, the min-new-tokens EOS mask (after the repetition penalty,
which is the same law as before it: ``-inf`` stays ``-inf``), temperature, top-k (ties at the
k-th logit kept: ``scores < topk(...)[-1]`` is removed), top-p, min-p on the law at its place.
There is no presence or frequency penalty: a request with one is refused (``ValueError``
naming the field) and :data:`TRANSFORMERS_E2E_PROCESSING` leaves them out, so the audit skips
those rows.

Logprobs (``logprobs="processed"``): for a request that asks, ``generate`` is called with
``output_scores=True, return_dict_in_generate=True``; its ``scores`` are the processed
logits each new token was chosen from (one ``[1, V]`` tensor per token, the accepted drafts'
and the target's own alike under assisted generation), and the adapter reports
``log_softmax(scores[j])[token_j]`` (in float64; the translation of a logits layout into a
logprob, nothing repaired).

Acceptance counts: transformers returns no acceptance metric. Its public ``streamer``
argument receives the prompt, then each round's emitted tokens in one ``put`` (the accepted
drafts and the target's own token). The adapter reports ``first_round_accepted`` as the
first round's tokens minus one for ``draft_model`` where that round cannot have been cut
(no EOS in the request and ``max_tokens > γ``), and the same for ``early_exit``, else
``None``; per-request totals are ``None`` (drafts per round are not visible).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Sequence

import torch
from specexact.decoders.adapters.transformers_logits import TRANSFORMERS_PROCESSING

from .protocol import EngineCapabilities, GenerationRequest, GenerationResult
from .seeds import SeedPromise
from .transformers_methods import EARLY_EXIT_LAYERS, renumber_draft, word_tokenizers

__all__ = ["TRANSFORMERS_E2E_PROCESSING", "TransformersEngine", "generate_kwargs"]

TRANSFORMERS_E2E_PROCESSING = dataclasses.replace(TRANSFORMERS_PROCESSING, greedy=True)
"""transformers' processing in ``generate``: :data:`TRANSFORMERS_PROCESSING` (repetition
penalty over prompt and output, temperature, top-k, top-p, min-p), plus greedy
(``temperature == 0`` maps to ``do_sample=False``: the argmax of the repetition-penalised
logits, ``torch.argmax`` takes the lowest id among ties; the truncations keep the argmax)."""

_METHODS = ("draft_model", "prompt_lookup", "early_exit", "uag")


def _dtype_keyword() -> str:
    """``from_pretrained``'s dtype keyword: ``dtype`` from transformers 4.56, ``torch_dtype`` before."""
    import transformers
    from packaging.version import Version

    return "dtype" if Version(transformers.__version__).release >= (4, 56) else "torch_dtype"


class _RoundRecorder:
    """A ``transformers`` streamer that keeps every ``put`` (the prompt, then one chunk per
    round of assisted generation, one token per step of plain generation)."""

    def __init__(self) -> None:
        self.chunks: list[list[int]] = []

    def put(self, value) -> None:
        self.chunks.append([int(t) for t in torch.as_tensor(value).reshape(-1).tolist()])

    def end(self) -> None:
        pass


def generate_kwargs(request: GenerationRequest) -> dict:
    """The ``GenerationConfig`` fields of one request.

    Parameters
    ----------
    request : GenerationRequest

    Returns
    -------
    dict
        ``do_sample``, ``temperature``, ``top_k`` (``0``: off, passed explicitly since the
        library default is 50), ``top_p``, ``min_p`` (``None``: off), ``repetition_penalty``,
        ``max_new_tokens``, ``min_new_tokens``, ``eos_token_id`` and ``pad_token_id``.

    Raises
    ------
    ValueError
        ``presence_penalty`` or ``frequency_penalty`` not 0: transformers' ``generate`` has
        neither (the message names the field and its value).
    """
    p = request.params
    for name in ("presence_penalty", "frequency_penalty"):
        value = getattr(p, name)
        if value != 0:
            raise ValueError(f"transformers' generate has no {name}; got {name}={value!r}")
    kw = {
        "repetition_penalty": float(p.repetition_penalty),
        "max_new_tokens": int(request.max_tokens),
        "min_new_tokens": int(request.min_tokens),
        "eos_token_id": request.eos_token_id,
        "pad_token_id": request.eos_token_id if request.eos_token_id is not None else 0,
    }
    if p.temperature == 0:
        kw["do_sample"] = False
    else:
        kw.update(do_sample=True, temperature=float(p.temperature), top_k=int(p.top_k), top_p=float(p.top_p),
                  min_p=float(p.min_p) if p.min_p > 0 else None)
    return kw


class TransformersEngine:
    """transformers' ``generate`` (assisted generation, prompt lookup, plain sampling).

    See the module docstring for what runs. No constructor arguments.
    """

    name = "transformers"
    requires = ("transformers",)  # the modules it imports when loaded (checked by resolve_engine)

    def __init__(self) -> None:
        self._target = None
        self._draft = None
        self._method: str | None = None
        self._gamma: int | None = None
        self._tokenizers: tuple | None = None

    def capabilities(self) -> EngineCapabilities:
        """What this adapter runs (module docstring); the version is the installed one."""
        import transformers

        return EngineCapabilities(
            methods=_METHODS,
            processing=TRANSFORMERS_E2E_PROCESSING,
            max_batch_size=1,
            min_tokens=True,
            eos=True,
            per_request_seed=False,
            reports_acceptance=True,
            version=transformers.__version__,
            notes="model.generate(assistant_model=draft, do_sample=True) with the assistant's num_assistant_tokens=γ, "
                  "schedule 'constant', assistant_confidence_threshold=0; prompt_lookup_num_tokens=γ; one request "
                  "per call, torch.manual_seed(seed) before each; first_round_accepted from the streamer's first "
                  "round (draft_model and early_exit, None where EOS or max_tokens <= γ could cut it); early_exit: "
                  f"assistant_early_exit={EARLY_EXIT_LAYERS}; uag: word-level tokenizers and the pair's draft renumbered "
                  "into a V+8 vocabulary (transformers_methods)",
            acceptance_scheme="tokenwise",
            draft_sampling="request",
            first_round_after_token=False,
            logprobs="processed",
            stop_tokens=True,  # _eos_token_tensor: EosTokenCriteria, MinNewTokensLengthLogitsProcessor, the window's crop
            seeds=SeedPromise(other_mix=True, unseeded_independent=True, alone=True,
                              source="the adapter: one request at a time, torch.manual_seed(seed) before each seeded "
                                     "one; unseeded ones continue torch's global RNG"),
        )

    def load(self, target_dir: Path, draft_dir: Path | None, *, method: str, num_speculative_tokens: int) -> None:
        """Load the target (and for ``draft_model`` the assistant) in float32.

        Raises
        ------
        ValueError
            ``method`` not one of ``draft_model`` / ``prompt_lookup`` / ``early_exit`` / ``uag``,
            ``num_speculative_tokens < 1``, or ``draft_model`` / ``uag`` without ``draft_dir``.
        """
        from transformers import AutoModelForCausalLM

        if method not in _METHODS:
            raise ValueError(f"method must be one of {_METHODS} for transformers, got {method!r}")
        gamma = int(num_speculative_tokens)
        if gamma != num_speculative_tokens or gamma < 1:
            raise ValueError(f"num_speculative_tokens must be an integer >= 1, got {num_speculative_tokens!r}")
        if method in ("draft_model", "uag") and draft_dir is None:
            raise ValueError(f"method={method!r} needs draft_dir, got None")
        self.close()
        self._target = self._load_model(AutoModelForCausalLM, target_dir)
        if method == "early_exit":  # the target is its own assistant
            self._fix_rounds(self._target, gamma)
        if method in ("draft_model", "uag"):
            draft = self._load_model(AutoModelForCausalLM, draft_dir)
            if method == "uag":
                vocab = self._target.config.vocab_size
                renumber_draft(draft, vocab)
                self._tokenizers = word_tokenizers(vocab)
            self._fix_rounds(draft, gamma)
            self._draft = draft
        self._method, self._gamma = method, gamma

    @staticmethod
    def _fix_rounds(assistant, gamma: int) -> None:
        """γ drafts a round, no schedule, no confidence stop (the assistant's own config)."""
        assistant.generation_config.num_assistant_tokens = gamma
        assistant.generation_config.num_assistant_tokens_schedule = "constant"
        assistant.generation_config.assistant_confidence_threshold = 0.0

    @staticmethod
    def _load_model(auto, folder):
        model = auto.from_pretrained(Path(folder), **{_dtype_keyword(): torch.float32})
        model.eval()
        # The request decides EOS: the folder's config names one (tiny models: 1).
        model.generation_config.eos_token_id = None
        return model

    def generate(self, requests: Sequence[GenerationRequest], *, speculative: bool) -> list[GenerationResult]:
        """Run each request through ``generate``, one at a time (module docstring).

        Raises
        ------
        RuntimeError
            Called before :meth:`load`.
        ValueError
            A request with a presence or frequency penalty (:func:`generate_kwargs`).
        """
        if self._target is None:
            raise RuntimeError("TransformersEngine.generate called before load()")
        from transformers import GenerationConfig

        kwargs_list = [generate_kwargs(r) for r in requests]  # refuse before running any
        results = []
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            for request, kw in zip(requests, kwargs_list):
                extra = {}
                if speculative and self._method == "draft_model":
                    extra["assistant_model"] = self._draft
                elif speculative and self._method == "uag":
                    extra.update(assistant_model=self._draft, tokenizer=self._tokenizers[0],
                                 assistant_tokenizer=self._tokenizers[1])
                elif speculative and self._method == "early_exit":
                    kw = dict(kw, assistant_early_exit=EARLY_EXIT_LAYERS)
                elif speculative:
                    kw = dict(kw, prompt_lookup_num_tokens=self._gamma)
                if request.logprobs:
                    kw = dict(kw, output_scores=True, return_dict_in_generate=True)
                recorder = _RoundRecorder()
                prompt = torch.tensor([request.prompt_token_ids], dtype=torch.int64)
                if request.seed is not None:  # unseeded: the global RNG goes on from where it is
                    torch.manual_seed(int(request.seed))
                with torch.no_grad():
                    out = self._target.generate(prompt, attention_mask=torch.ones_like(prompt),
                                                generation_config=GenerationConfig(**kw), streamer=recorder, **extra)
                sequences = out.sequences if request.logprobs else out
                tokens = tuple(int(t) for t in sequences[0, prompt.shape[1]:].tolist())
                logprobs = None
                if request.logprobs:
                    logprobs = tuple(float(torch.log_softmax(s[0].to(torch.float64), -1)[t])
                                     for s, t in zip(out.scores, tokens))
                results.append(GenerationResult(token_ids=tokens, logprobs=logprobs,
                                                first_round_accepted=self._first_round(request, recorder, speculative)))
        finally:
            torch.set_num_threads(threads)
        return results

    def _first_round(self, request: GenerationRequest, recorder: _RoundRecorder, speculative: bool) -> int | None:
        if not speculative or self._method not in ("draft_model", "early_exit"):
            return None
        if request.eos_token_id is not None or request.max_tokens <= self._gamma or len(recorder.chunks) < 2:
            return None
        return len(recorder.chunks[1]) - 1

    def close(self) -> None:
        """Drop the models."""
        self._target = self._draft = None
        self._method = self._gamma = self._tokenizers = None
