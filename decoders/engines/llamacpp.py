"""llama.cpp's generation through ``llama-cpp-python`` as an end-to-end engine (prompt lookup, a
greedy draft model).

What runs
---------
The tiny model is written as GGUF from the same weights
(:func:`~specexact.decoders.tiny_models.gguf_export.gguf_model`, float32) and loaded with
``llama_cpp.Llama(model_path, n_ctx=LLAMACPP_N_CTX, n_threads=1, n_threads_batch=1,
type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32)`` (a float32 KV cache: llama.cpp's default f16
cache moves the tiny models' probabilities by up to 7e-4, float32 by at most 3e-6)
(tested: llama-cpp-python 0.3.16, its vendored llama.cpp built from source for the CPU). Every
request is one pass over ``Llama.generate(prompt_ids, top_k=, top_p=, min_p=, typical_p=1,
temp=, repeat_penalty=, frequency_penalty=, presence_penalty=)``, llama-cpp-python's own token
loop, read as ``create_completion`` reads it: token by token, stopping after the request's EOS
or its ``max_tokens``-th token (the generator is then closed):

- ``prompt_lookup`` (``speculative=True``): a ``Llama`` made with
  ``draft_model=llama_cpp.llama_speculative.LlamaPromptLookupDecoding(max_ngram_size=2,
  num_pred_tokens=γ)`` (its documented ``LlamaDraftModel``; ``max_ngram_size`` its default).
  ``generate`` evaluates the last token with the drafts in one batch and samples the target's
  own token at each position with the request's sampler chain (the first drafts come after the
  token sampled from the prompt alone: ``first_round_after_token=True``); it keeps going while the
  sampled token equals the draft there and drops the rest of the KV cache at the first
  mismatch (``acceptance_scheme="sample_compare"``; the drafts are n-gram copies of the
  context, point masses: ``draft_sampling="greedy"``);
- ``draft_model_greedy`` (``speculative=True``): the same ``Llama`` with
  ``draft_model=`` a :func:`greedy_draft_model`, specexact's class on llama-cpp-python's
  documented ``LlamaDraftModel`` interface (``__call__(input_ids) -> draft ids``): the draft
  GGUF's ``γ`` argmax tokens after the context, from a third ``Llama`` through its own
  ``generate(temp=0)``. llama-cpp-python 0.3.16 ships no draft-model class (its only
  ``LlamaDraftModel`` is prompt lookup); this one only proposes ids, and the verification is
  the engine's loop as above;
- plain (``speculative=False``): a second ``Llama`` on the same file without a draft model,
  the same ``generate`` call.

Processing (``Llama._init_sampler`` and llama.cpp's ``llama-sampling.cpp``), declared in
:data:`LLAMACPP_PROCESSING`, never corrected: one sampler chain per ``generate`` call:
penalties (``llama_sampler_init_penalties(last_n_tokens_size=64, repeat, freq, present)``: a
counted token's logit divided by the repetition penalty when positive, multiplied when not,
then ``- count * freq - present``), ``top_k`` (exactly ``k`` by ``std::partial_sort``; ties
unspecified: the declared ``keep_ties`` is exact when there are none; ``k <= 0`` off),
``typical`` (``typical_p=1``: off), ``top_p`` (softmax of the kept logits, the smallest
prefix of mass ``>= p``: inclusive), ``min_p`` (logit ``>= max + log p``), ``temp``
(divide) and ``dist`` (softmax, one ``std::mt19937`` draw); ``temp == 0`` is ``greedy`` after
the penalties. The penalties count the tokens the chain *accepted*: ``llama_sampler_sample``
accepts each token it samples, the prompt is never accepted, and the chain is made anew by
each ``generate`` call, so the scope is the output (``"output"``) in a window of the last 64
(``last_n_tokens_size``). There is no ``min_tokens`` (``min_tokens=False``).

Seeds (:class:`~specexact.decoders.engines.seeds.SeedPromise`): ``generate`` seeds its chain's
``dist`` sampler with ``Llama``'s seed, so the adapter calls ``Llama.set_seed(seed)`` before
each seeded request (``per_request_seed=False``, one request at a time): a seeded request's
output depends on its seed and prompt alone (``other_mix``). An unseeded request gets
``LLAMA_DEFAULT_SEED``, for which llama.cpp's ``get_rng_seed`` draws a fresh seed from
``std::random_device`` (``unseeded_independent``).

``generate`` reuses the KV cache of the previous request over the longest common prefix of
the prompts (its ``reset=True`` prefix match); the adapter leaves that as it is (it is what
users get). Acceptance counts and logprobs are not reported (``generate`` yields ids only).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from specexact.decoders.processing import LogitsProcessing

from .protocol import EngineCapabilities, GenerationRequest, GenerationResult
from .seeds import SeedPromise

__all__ = ["LLAMACPP_LAST_N", "LLAMACPP_METHODS", "LLAMACPP_N_CTX", "LLAMACPP_PROCESSING", "LlamaCppEngine",
           "generate_kwargs", "greedy_draft_model"]

LLAMACPP_METHODS = ("prompt_lookup", "draft_model_greedy")
"""The drafting methods the adapter runs (module docstring)."""

LLAMACPP_LAST_N = 64
"""``Llama(last_n_tokens_size=...)``: the penalties' window (llama-cpp-python's default, set
explicitly)."""

LLAMACPP_N_CTX = 256
"""``Llama(n_ctx=...)``: the context the engine is made with (the tiny models' trained context
is 64; llama.cpp runs past it with a warning, its rope has no limit); declared as
``max_context``."""

LLAMACPP_PROCESSING = LogitsProcessing(
    order=("penalties", "top_k", "top_p", "min_p", "temperature"),
    repetition_penalty_scope="output",
    frequency_penalty_scope="output",
    presence_penalty_scope="output",
    repetition_penalty_window=LLAMACPP_LAST_N,
    frequency_penalty_window=LLAMACPP_LAST_N,
    presence_penalty_window=LLAMACPP_LAST_N,
    top_k_ties="keep_ties",
    top_p_boundary="inclusive",
    greedy=True,
)
"""llama.cpp's sampler chain as ``Llama._init_sampler`` builds it (module docstring)."""


def generate_kwargs(request: GenerationRequest) -> dict:
    """``Llama.generate`` keywords of one request: llama.cpp's "off" values are ``top_k = 0``,
    ``top_p = 1``, ``min_p = 0``, ``typical_p = 1``, penalties ``1 / 0 / 0`` (specexact's
    defaults map onto them unchanged); ``temp = 0`` is greedy."""
    p = request.params
    return {"top_k": int(p.top_k), "top_p": float(p.top_p), "min_p": float(p.min_p), "typical_p": 1.0,
            "temp": float(p.temperature), "repeat_penalty": float(p.repetition_penalty),
            "frequency_penalty": float(p.frequency_penalty), "presence_penalty": float(p.presence_penalty)}


def greedy_draft_model(draft, gamma: int):
    """A ``llama_cpp.llama_speculative.LlamaDraftModel`` proposing ``gamma`` argmax tokens of
    ``draft`` (a ``llama_cpp.Llama``) after the context it is given.

    Parameters
    ----------
    draft : llama_cpp.Llama
        The draft model (its KV cache is reused across calls by ``generate``'s prefix match).
    gamma : int
        Drafts per call, ``>= 1``.

    Returns
    -------
    LlamaDraftModel
        Called as the engine calls it: ``model(input_ids)`` with ``input_ids`` a 1-D
        ``numpy.intc`` array of the context, returning a 1-D ``numpy.intc`` array of ``gamma``
        draft ids (``Llama.generate(temp=0)``: llama.cpp's greedy sampler, penalties off).
    """
    import numpy as np
    from llama_cpp.llama_speculative import LlamaDraftModel

    class _GreedyDraft(LlamaDraftModel):
        def __call__(self, input_ids, /, **kwargs):
            out: list[int] = []
            steps = draft.generate(list(int(t) for t in input_ids), top_k=0, top_p=1.0, min_p=0.0, typical_p=1.0,
                                   temp=0.0, repeat_penalty=1.0)
            try:
                for token in steps:
                    out.append(int(token))
                    if len(out) >= gamma:
                        break
            finally:
                steps.close()
            return np.array(out, dtype=np.intc)

    return _GreedyDraft()


class LlamaCppEngine:
    """llama-cpp-python's ``Llama.generate`` with prompt lookup, and without (module docstring).

    No constructor arguments.
    """

    name = "llamacpp"
    requires = ("llama_cpp", "gguf")  # the modules it imports when loaded (checked by resolve_engine)

    def __init__(self) -> None:
        self._spec = None
        self._plain = None
        self._draft = None
        self._gamma: int | None = None

    def capabilities(self) -> EngineCapabilities:
        """What this adapter runs (module docstring); the version is the installed llama-cpp-python's."""
        from importlib.metadata import version

        return EngineCapabilities(
            methods=LLAMACPP_METHODS,
            processing=LLAMACPP_PROCESSING,
            max_batch_size=1,
            min_tokens=False,
            eos=True,
            per_request_seed=False,
            reports_acceptance=False,
            version=version("llama-cpp-python"),
            notes=f"Llama(model.gguf f32, n_ctx={LLAMACPP_N_CTX}, last_n_tokens_size={LLAMACPP_LAST_N}, n_threads=1, f32 KV cache, "
                  "draft_model=LlamaPromptLookupDecoding(max_ngram_size=2, num_pred_tokens=γ) or specexact's "
                  "LlamaDraftModel of γ argmax tokens of the draft GGUF) / the same without "
                  "a draft model; Llama.generate read up to EOS or max_tokens; Llama.set_seed(seed) before each "
                  "seeded request, LLAMA_DEFAULT_SEED for an unseeded one",
            acceptance_scheme="sample_compare",
            draft_sampling="greedy",
            first_round_after_token=True,  # generate drafts only after sampling the prompt's next token
            seeds=SeedPromise(other_mix=True, unseeded_independent=True, alone=True,
                              source="llama_cpp.Llama.generate seeds its sampler chain's dist sampler with Llama's "
                                     "seed; the adapter sets it before each seeded request (one at a time); "
                                     "LLAMA_DEFAULT_SEED draws a std::random_device seed (llama.cpp get_rng_seed)"),
            max_context=LLAMACPP_N_CTX,
        )

    def load(self, target_dir: Path, draft_dir: Path | None, *, method: str, num_speculative_tokens: int) -> None:
        """Write (or reuse) the GGUF files and make the ``Llama`` instances.

        ``draft_dir`` is used by ``draft_model_greedy`` only (prompt lookup drafts from the
        context).

        Raises
        ------
        ValueError
            ``method`` other than ``"prompt_lookup"`` / ``"draft_model_greedy"``,
            ``draft_model_greedy`` without ``draft_dir``, or ``num_speculative_tokens < 1``.
        """
        import llama_cpp
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        from specexact.decoders.tiny_models.gguf_export import gguf_model

        if method not in LLAMACPP_METHODS:
            raise ValueError(f"method must be one of {LLAMACPP_METHODS} for llama.cpp, got {method!r}")
        if method == "draft_model_greedy" and draft_dir is None:
            raise ValueError("method='draft_model_greedy' needs draft_dir, got None")
        gamma = int(num_speculative_tokens)
        if gamma != num_speculative_tokens or gamma < 1:
            raise ValueError(f"num_speculative_tokens must be an integer >= 1, got {num_speculative_tokens!r}")
        self.close()
        path = str(gguf_model(target_dir))
        common = dict(model_path=path, n_ctx=LLAMACPP_N_CTX, n_threads=1, n_threads_batch=1,
                      last_n_tokens_size=LLAMACPP_LAST_N, type_k=llama_cpp.GGML_TYPE_F32,
                      type_v=llama_cpp.GGML_TYPE_F32, verbose=False)
        if method == "prompt_lookup":
            drafter = LlamaPromptLookupDecoding(max_ngram_size=2, num_pred_tokens=gamma)
        else:
            self._draft = Llama(**dict(common, model_path=str(gguf_model(draft_dir))))
            drafter = greedy_draft_model(self._draft, gamma)
        self._spec = Llama(**common, draft_model=drafter)
        self._plain = Llama(**common)
        self._gamma = gamma

    def generate(self, requests: Sequence[GenerationRequest], *, speculative: bool) -> list[GenerationResult]:
        """Run each request through ``Llama.generate``, one at a time (module docstring).

        Raises
        ------
        RuntimeError
            Called before :meth:`load`.
        ValueError
            A request with ``min_tokens > 0`` and an EOS (llama.cpp has no minimum length; named).
        """
        if self._spec is None:
            raise RuntimeError("LlamaCppEngine.generate called before load()")
        for r in requests:
            if r.min_tokens > 0 and r.eos_token_id is not None:
                raise ValueError(f"llama-cpp-python has no min_tokens; got min_tokens={r.min_tokens}")
        llm = self._spec if speculative else self._plain
        return [self._one(llm, r) for r in requests]

    @staticmethod
    def _one(llm, request: GenerationRequest) -> GenerationResult:
        import llama_cpp

        llm.set_seed(int(request.seed) if request.seed is not None else llama_cpp.LLAMA_DEFAULT_SEED)
        steps = llm.generate(list(request.prompt_token_ids), **generate_kwargs(request))
        eos = request.eos_token_id
        tokens: list[int] = []
        try:
            for token in steps:
                tokens.append(int(token))
                if (eos is not None and tokens[-1] == eos) or len(tokens) >= request.max_tokens:
                    break
        finally:
            steps.close()
        return GenerationResult(token_ids=tuple(tokens))

    def close(self) -> None:
        """Drop the ``Llama`` instances (their ``close`` frees llama.cpp's context and model)."""
        for llm in (self._spec, self._plain, self._draft):
            if llm is not None:
                llm.close()
        self._spec = self._plain = self._draft = None
        self._gamma = None
