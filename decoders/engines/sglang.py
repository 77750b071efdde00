"""SGLang's own ``Engine.generate`` with speculative decoding, as an end-to-end engine (issue 34).

Written for a GPU run: SGLang 0.5.23 does not start on this project's CPU machine
(``docs/engines/sglang.md``, "End to end: why not on this CPU": its CPU engine,
``SGLANG_USE_CPU_ENGINE=1``, imports ``sgl_kernel``'s CPU build, which is not on PyPI; without
it the model's rotary embedding imports ``vllm._custom_ops``). ``scripts/gpu_check.sh`` runs
``specexact audit --engine sglang --device cuda`` where SGLang imports.

What it calls (read in the installed source, ``sglang/srt/entrypoints/engine.py`` and
``sglang/srt/arg_groups/fields/``)
-----------------------------------------------------------------------------------------
``sglang.Engine(model_path=target_dir, device=..., skip_tokenizer_init=True, dtype="float32",
context_length=64, random_seed=seed, enable_deterministic_inference=True,
sampling_backend="pytorch", disable_cuda_graph=True, mem_fraction_static=...,
log_level="error", **speculative)`` once per configuration, then
``Engine.generate(input_ids=[...], sampling_params=[{...}])`` (:mod:`.sglang_requests`).
The speculative keyword arguments (``speculative_*`` server arguments):

- ``ngram``: ``speculative_algorithm="NGRAM"``, ``speculative_num_draft_tokens=K + 1``
  (SGLang counts the verified root: its ``spec_num_proposed_drafts`` is
  ``verify_ct * (num_draft_tokens - 1)``), ``speculative_ngram_max_bfs_breadth=1`` (a chain);
- ``draft_model_greedy``: ``"STANDALONE"`` with ``speculative_draft_model_path=draft_dir``,
  ``speculative_num_steps=K``, ``speculative_eagle_topk=1``,
  ``speculative_num_draft_tokens=K + 1``: the draft model's argmax chain;
- ``eagle`` / ``eagle3``: ``"EAGLE"`` / ``"EAGLE3"`` with specexact's tiny head of the
  target (:func:`~specexact.decoders.tiny_models.heads.make_head`, the layout vLLM loads;
  whether SGLang's loader takes it is for the GPU run to show) and the same step settings.

``generate(..., speculative=False)``: a second ``Engine`` with the same settings and no
speculative arguments, SGLang's own plain sampling.

Semantics declared (:meth:`SglangEngine.capabilities`)
------------------------------------------------------
- processing: penalties over the *output* only (``penaltylib``: each penalizer's
  ``_cumulate_output_tokens``), then the temperature, top-k, top-p
  (``top_k_top_p_min_p_sampling_from_probs_torch``: sorted, top-k zeroes ranks ``>= k``,
  top-p zeroes a token when the mass before it exceeds ``top_p``); ``min_new_tokens``
  masks the stop ids among the penalties, before the temperature; min-p refused (it asserts
  under seeded sampling);
- seeds: ``sampling_seed`` is honoured under ``enable_deterministic_inference`` (batch-invariant
  ops, ``multinomial_with_seed(seed, positions)``), so a seeded request's output should not
  depend on the others of the call (``other_mix``, ``alone``); unseeded rows all get the seed
  42 there: not independent, not sent;
- ``draft_sampling="greedy"`` (the chains above are argmax or token ids);
  ``first_round_after_token=True`` (the prefill step samples one token before the first
  draft); acceptance counts per request from ``meta_info`` (no first-round count);
- stop tokens: only the model's own EOS (:mod:`.sglang_requests`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from specexact.decoders.processing import LogitsProcessing

from .model_eos import model_eos_ids
from .protocol import EngineCapabilities, GenerationRequest, GenerationResult, installed_version
from .seeds import SeedPromise
from .sglang_requests import generation_results, sampling_params

__all__ = ["METHODS", "SGLANG_E2E_PROCESSING", "TESTED_VERSIONS", "SglangEngine", "engine_kwargs",
           "speculative_kwargs"]

METHODS = ("ngram", "draft_model_greedy", "eagle", "eagle3")
"""The methods of :data:`~specexact.decoders.engines.SPECULATIVE_METHODS` this adapter runs."""

ALGORITHMS = {"ngram": "NGRAM", "draft_model_greedy": "STANDALONE", "eagle": "EAGLE", "eagle3": "EAGLE3"}
"""SGLang's ``speculative_algorithm`` of each method."""

TESTED_VERSIONS = ("0.5.23",)
"""SGLang versions whose source this adapter was written against (not run end to end: no GPU here)."""

SGLANG_E2E_PROCESSING = LogitsProcessing(order=("penalties", "temperature", "top_k", "top_p"),
                                         repetition_penalty_scope="output", greedy=True, top_k_ties="lower_id",
                                         top_p_boundary="inclusive", min_tokens_mask="before_processing")
"""SGLang's processing of the target (module docstring); min-p left out (refused)."""


def speculative_kwargs(method: str, target_dir: Path, draft_dir: Path | None, num_speculative_tokens: int) -> dict:
    """SGLang's ``speculative_*`` server arguments for one of :data:`METHODS` (module docstring).

    Raises
    ------
    ValueError
        An unknown ``method``, ``num_speculative_tokens < 1``, or ``draft_model_greedy``
        without ``draft_dir``; the message names the argument and its value.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if isinstance(num_speculative_tokens, bool) or int(num_speculative_tokens) != num_speculative_tokens \
            or num_speculative_tokens < 1:
        raise ValueError(f"num_speculative_tokens must be an integer >= 1, got {num_speculative_tokens!r}")
    k = int(num_speculative_tokens)
    kw = {"speculative_algorithm": ALGORITHMS[method], "speculative_num_draft_tokens": k + 1}
    if method == "ngram":
        kw.update(speculative_ngram_min_bfs_breadth=1, speculative_ngram_max_bfs_breadth=1)
        return kw
    kw.update(speculative_num_steps=k, speculative_eagle_topk=1)
    if method == "draft_model_greedy":
        if draft_dir is None:
            raise ValueError(f"method={method!r} needs draft_dir, got None")
        kw["speculative_draft_model_path"] = str(draft_dir)
        return kw
    from specexact.decoders.tiny_models.heads import make_head, spec_of

    kw["speculative_draft_model_path"] = str(make_head(method, spec_of(Path(target_dir)), Path(target_dir).parent))
    return kw


def engine_kwargs(target_dir: Path, *, device: str, seed: int, context_length: int, mem_fraction_static: float) -> dict:
    """The keyword arguments of every ``sglang.Engine`` this adapter starts (module docstring)."""
    return dict(model_path=str(target_dir), device=device, skip_tokenizer_init=True, dtype="float32",
                context_length=int(context_length), random_seed=int(seed), enable_deterministic_inference=True,
                sampling_backend="pytorch", disable_cuda_graph=True, mem_fraction_static=float(mem_fraction_static),
                log_level="error")


class SglangEngine:
    """SGLang's ``Engine`` behind :class:`~specexact.decoders.engines.EndToEndEngine`.

    Parameters
    ----------
    device : str, default "cuda"
        SGLang's ``device``.
    context_length : int, default 64
        SGLang's context length (the tiny models' ``max_position_embeddings``); declared as
        :attr:`~specexact.decoders.engines.EngineCapabilities.max_context`.
    seed : int, default 0
        The engine's ``random_seed`` (requests carry their own ``sampling_seed``).
    mem_fraction_static : float, default 0.2
        SGLang's share of the GPU memory for weights and KV cache, per ``Engine`` (two run).

    Raises
    ------
    ValueError
        A context length below 2, a negative seed, a memory fraction outside ``(0, 0.5]``.
    """

    name = "sglang"
    requires = ("sglang",)  # the modules it imports when loaded (checked by resolve_engine)

    def __init__(self, *, device: str = "cuda", context_length: int = 64, seed: int = 0,
                 mem_fraction_static: float = 0.2) -> None:
        if int(context_length) != context_length or context_length < 2:
            raise ValueError(f"context_length must be an integer >= 2, got {context_length!r}")
        if int(seed) != seed or seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
        if not 0 < float(mem_fraction_static) <= 0.5:
            raise ValueError(f"mem_fraction_static must be in (0, 0.5], got {mem_fraction_static!r}")
        self.device, self.context_length, self.seed = str(device), int(context_length), int(seed)
        self.mem_fraction_static = float(mem_fraction_static)
        self.method: str | None = None
        self.num_speculative_tokens: int | None = None
        self.target_dir: Path | None = None
        self._draft_dir: Path | None = None
        self._eos_ids: tuple[int, ...] = ()
        self._spec = None
        self._plain = None
        self._sglang = None

    def _import(self):
        if self._sglang is None:
            import sglang

            self._sglang = sglang
        return self._sglang

    def _kwargs(self) -> dict:
        return engine_kwargs(self.target_dir, device=self.device, seed=self.seed, context_length=self.context_length,
                             mem_fraction_static=self.mem_fraction_static)

    def load(self, target_dir: Path, draft_dir: Path | None, *, method: str, num_speculative_tokens: int) -> None:
        """Start SGLang's speculative ``Engine`` and its plain one (running ones are shut down first).

        Raises
        ------
        ValueError
            A bad ``method`` / ``num_speculative_tokens`` (:func:`speculative_kwargs`), or a
            ``target_dir`` without ``config.json``.
        ImportError
            SGLang is not installed.
        """
        target_dir = Path(target_dir)
        if not (target_dir / "config.json").is_file():
            raise ValueError(f"target_dir must hold a config.json, got {str(target_dir)!r}")
        spec = speculative_kwargs(method, target_dir, None if draft_dir is None else Path(draft_dir),
                                  num_speculative_tokens)
        sglang = self._import()
        self.close()
        self.target_dir, self.method, self.num_speculative_tokens = target_dir, method, int(num_speculative_tokens)
        self._draft_dir = None if draft_dir is None else Path(draft_dir)
        self._eos_ids = model_eos_ids(target_dir)
        self._plain = sglang.Engine(**self._kwargs())
        self._spec = sglang.Engine(**self._kwargs(), **spec)

    def capabilities(self) -> EngineCapabilities:
        """What this adapter runs and SGLang's semantics (module docstring)."""
        version = installed_version("sglang")
        return EngineCapabilities(
            methods=METHODS, processing=SGLANG_E2E_PROCESSING, max_batch_size=None, min_tokens=True, eos=True,
            per_request_seed=True, reports_acceptance=True, version=version, acceptance_scheme="tokenwise",
            draft_sampling="greedy", first_round_after_token=True, logprobs=None, max_context=self.context_length,
            seeds=SeedPromise(other_mix=True, alone=True, unseeded_independent=False,
                              source="sglang/srt/layers/sampler.py (sampling_seed under enable_deterministic_inference:"
                                     " multinomial_with_seed(seed, positions), batch-invariant ops)"),
            notes=("sglang.Engine(skip_tokenizer_init, float32, enable_deterministic_inference, sampling_backend="
                   "'pytorch', disable_cuda_graph); requests: sampling_seed, no_stop_trim, stop_token_ids=[eos] only "
                   "for the model's EOS, ignore_eos when no EOS; min_p refused (asserts under seeded sampling); "
                   "acceptance counts from meta_info spec_num_proposed_drafts / spec_num_correct_drafts"))

    def generate(self, requests: Sequence[GenerationRequest], *, speculative: bool) -> list[GenerationResult]:
        """Run ``requests`` through ``Engine.generate`` (speculative or plain), in order.

        Raises
        ------
        RuntimeError
            :meth:`load` was not called.
        ValueError
            A request SGLang cannot express (:func:`.sglang_requests.unsupported`).
        TypeError
            ``speculative`` is not a bool.
        """
        if self._spec is None:
            raise RuntimeError("SglangEngine.generate called before load()")
        if not isinstance(speculative, bool):
            raise TypeError(f"speculative must be a bool, got {speculative!r}")
        requests = list(requests)
        if not requests:
            return []
        params = [sampling_params(r, model_eos_ids=self._eos_ids) for r in requests]
        engine = self._spec if speculative else self._plain
        outputs = engine.generate(input_ids=[list(r.prompt_token_ids) for r in requests], sampling_params=params)
        if isinstance(outputs, dict):  # one request: SGLang returns its dict alone
            outputs = [outputs]
        return generation_results(outputs, speculative=speculative)

    def close(self) -> None:
        """Shut both engines down (safe to call twice)."""
        for attr in ("_spec", "_plain"):
            engine = getattr(self, attr)
            if engine is not None:
                engine.shutdown()
                setattr(self, attr, None)

    def __repr__(self) -> str:
        return f"<SglangEngine method={self.method} K={self.num_speculative_tokens} target={self.target_dir}>"
