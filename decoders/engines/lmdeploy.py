"""LMDeploy's own pipeline (PyTorch engine) with speculative decoding, as an end-to-end engine (issue 34).

Written for a GPU run: LMDeploy 0.18.0 does not start on a CPU (``docs/engines/lmdeploy.md``,
"End to end: why not on this CPU": ``PytorchEngineConfig`` asserts ``device_type in ['cuda',
'ascend', 'maca', 'camb']``, and the default ``cuda`` calls ``torch.cuda.get_device_name``).
``scripts/gpu_check.sh`` runs ``specexact audit --engine lmdeploy --device cuda`` where LMDeploy
imports.

What it calls (read in the installed source, ``lmdeploy/pipeline.py``, ``lmdeploy/messages.py``,
``lmdeploy/serve/core/async_engine.py``)
--------------------------------------------------------------------------------------------
``lmdeploy.pipeline(model_dir, backend_config=PytorchEngineConfig(device_type=...,
session_len=64, eager_mode=True, cache_max_entry_count=...), speculative_config=
SpeculativeConfig(method=m, model=head_dir, num_speculative_tokens=K), log_level="ERROR")``
once per configuration. Prompts are token ids: per request ``AsyncEngine.preprocess(None,
session_id, gen_config=GenerationConfig(...), input_ids=[...], do_preprocess=False)`` then
``AsyncEngine.generate(request, stream_response=False)`` (what the deprecated
``Pipeline.generate`` does), all requests of a call at once on the pipeline's own event loop
(``Pipeline.internal_thread.loop``, where ``start_loop`` started the engine).

``model_dir`` is the target folder with a tokenizer beside its files: LMDeploy loads a
tokenizer at start-up whatever the input, and the tiny models have none; the adapter writes
the word-level one of the zoo (``t<i>`` is token ``i``, no special tokens:
:func:`~specexact.decoders.engines.transformers_methods.word_tokenizers`) into a sibling folder
``<target>-lmdeploy`` that links the target's ``config.json`` and ``model.safetensors``.

Methods: ``eagle`` and ``eagle3`` (LMDeploy's proposers ``eagle``, ``eagle3``; its others are
``deepseek_mtp``, ``qwen3_5_mtp``, ``hy3_mtp``, ``dflash``, for those model families) with
specexact's tiny heads (:func:`~specexact.decoders.tiny_models.heads.make_head`, the layout vLLM
loads; whether LMDeploy's loader takes it is for the GPU run to show). The proposers take the
head's argmax: ``draft_sampling="greedy"``. ``generate(..., speculative=False)``: a second
pipeline without ``speculative_config``.

Semantics declared (:meth:`LmdeployEngine.capabilities`), from ``FusedLogitsProcessor``:
repetition penalty over the generated ids, temperature, the ``min_new_tokens`` mask of the
stop ids (after the temperature, which leaves ``-inf`` in place: the same law as before it),
then top-k, top-p (a token is cut when the mass before it exceeds ``top_p``), min-p, each on
the law left by the one before; seeds per request (``random_seed``), a fresh random seed for
an unseeded request; no presence / frequency penalties; no acceptance counts per request.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Sequence

from specexact.decoders.processing import LogitsProcessing

from .lmdeploy_requests import generation_config_kwargs, generation_result
from .model_eos import model_eos_ids
from .protocol import EngineCapabilities, GenerationRequest, GenerationResult, installed_version
from .seeds import SeedPromise

__all__ = ["METHODS", "LMDEPLOY_E2E_PROCESSING", "TESTED_VERSIONS", "LmdeployEngine", "tokenized_model_dir"]

METHODS = ("eagle", "eagle3")
"""The methods of :data:`~specexact.decoders.engines.SPECULATIVE_METHODS` this adapter runs."""

TESTED_VERSIONS = ("0.18.0",)
"""LMDeploy versions whose source this adapter was written against (not run end to end: no GPU here)."""

LMDEPLOY_E2E_PROCESSING = LogitsProcessing(order=("repetition_penalty", "temperature", "top_k", "top_p", "min_p"),
                                           repetition_penalty_scope="output", greedy=True, top_k_ties="lower_id",
                                           top_p_boundary="inclusive", min_tokens_mask="before_processing")
"""LMDeploy's processing of the target (module docstring)."""


def tokenized_model_dir(target_dir: Path) -> Path:
    """The sibling folder ``<target>-lmdeploy``: links to the target's ``config.json`` and
    ``model.safetensors`` and the zoo's word-level tokenizer (module docstring); made once.

    Raises
    ------
    ValueError
        ``target_dir`` lacks ``config.json`` or ``model.safetensors``.
    """
    target_dir = Path(target_dir)
    files = ("config.json", "model.safetensors")
    if not all((target_dir / f).is_file() for f in files):
        raise ValueError(f"target_dir must hold {files}, got {str(target_dir)!r}")
    out = target_dir.parent / f"{target_dir.name}-lmdeploy"
    if (out / "tokenizer.json").is_file():
        return out
    import json

    from .transformers_methods import word_tokenizers

    out.mkdir(exist_ok=True)
    for f in files:
        if not (out / f).exists():
            os.symlink((target_dir / f).resolve(), out / f)
    vocab = int(json.loads((target_dir / "config.json").read_text())["vocab_size"])
    word_tokenizers(vocab, extra=0)[0].save_pretrained(out)
    return out


class LmdeployEngine:
    """LMDeploy's pipeline behind :class:`~specexact.decoders.engines.EndToEndEngine`.

    Parameters
    ----------
    device : str, default "cuda"
        ``PytorchEngineConfig.device_type``.
    session_len : int, default 64
        LMDeploy's context length (the tiny models' ``max_position_embeddings``); declared as
        :attr:`~specexact.decoders.engines.EngineCapabilities.max_context`.
    cache_max_entry_count : float, default 0.1
        LMDeploy's share of the free GPU memory for its KV cache, per pipeline (two run).

    Raises
    ------
    ValueError
        A session length below 2, a cache share outside ``(0, 0.5]``.
    """

    name = "lmdeploy"
    requires = ("lmdeploy",)  # the modules it imports when loaded (checked by resolve_engine)

    def __init__(self, *, device: str = "cuda", session_len: int = 64, cache_max_entry_count: float = 0.1) -> None:
        if int(session_len) != session_len or session_len < 2:
            raise ValueError(f"session_len must be an integer >= 2, got {session_len!r}")
        if not 0 < float(cache_max_entry_count) <= 0.5:
            raise ValueError(f"cache_max_entry_count must be in (0, 0.5], got {cache_max_entry_count!r}")
        self.device, self.session_len = str(device), int(session_len)
        self.cache_max_entry_count = float(cache_max_entry_count)
        self.method: str | None = None
        self.num_speculative_tokens: int | None = None
        self.target_dir: Path | None = None
        self._eos_ids: tuple[int, ...] = ()
        self._spec = None
        self._plain = None
        self._lmdeploy = None
        self._sessions = 0

    def _import(self):
        if self._lmdeploy is None:
            import lmdeploy

            self._lmdeploy = lmdeploy
        return self._lmdeploy

    def _pipeline(self, model_dir: Path, speculative_config=None):
        lmdeploy = self._import()
        config = lmdeploy.PytorchEngineConfig(device_type=self.device, session_len=self.session_len, eager_mode=True,
                                              cache_max_entry_count=self.cache_max_entry_count)
        return lmdeploy.pipeline(str(model_dir), backend_config=config, speculative_config=speculative_config,
                                 log_level="ERROR")

    def load(self, target_dir: Path, draft_dir: Path | None, *, method: str, num_speculative_tokens: int) -> None:
        """Start LMDeploy's speculative pipeline and its plain one (running ones are closed first).

        Raises
        ------
        ValueError
            An unknown ``method``, ``num_speculative_tokens < 1``, or a target folder
            without its files.
        ImportError
            LMDeploy is not installed.
        """
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        if isinstance(num_speculative_tokens, bool) or int(num_speculative_tokens) != num_speculative_tokens \
                or num_speculative_tokens < 1:
            raise ValueError(f"num_speculative_tokens must be an integer >= 1, got {num_speculative_tokens!r}")
        target_dir = Path(target_dir)
        model_dir = tokenized_model_dir(target_dir)
        from specexact.decoders.tiny_models.heads import make_head, spec_of

        head = make_head(method, spec_of(target_dir), target_dir.parent)
        self._import()
        from lmdeploy.messages import SpeculativeConfig

        self.close()
        self.target_dir, self.method, self.num_speculative_tokens = target_dir, method, int(num_speculative_tokens)
        self._eos_ids = model_eos_ids(target_dir)
        self._plain = self._pipeline(model_dir)
        self._spec = self._pipeline(model_dir, SpeculativeConfig(method=method, model=str(head),
                                                                 num_speculative_tokens=int(num_speculative_tokens)))

    def capabilities(self) -> EngineCapabilities:
        """What this adapter runs and LMDeploy's semantics (module docstring)."""
        version = installed_version("lmdeploy")
        return EngineCapabilities(
            methods=METHODS, processing=LMDEPLOY_E2E_PROCESSING, max_batch_size=None, min_tokens=True, eos=True,
            per_request_seed=True, reports_acceptance=False, version=version, acceptance_scheme="tokenwise",
            draft_sampling="greedy", first_round_after_token=True, logprobs=None, max_context=self.session_len,
            seeds=SeedPromise(other_mix=True, alone=True, unseeded_independent=True,
                              source="lmdeploy/pytorch/strategies/ar/sampling.py (random_seed per request, offsets by "
                                     "step); serve/core/async_engine.py (random.getrandbits(64) for an unseeded one)"),
            notes=("lmdeploy.pipeline(PytorchEngineConfig(eager_mode, session_len)); token-id prompts through "
                   "AsyncEngine.preprocess(input_ids=...) and generate(stream_response=False) on the pipeline's loop; "
                   "stop_token_ids=[eos] only for the model's EOS, ignore_eos when no EOS; include_stop_str_in_output "
                   "(the stop token in the output); a request's output: its GenOut chunks' token_ids joined; no "
                   "presence / frequency penalties"))

    async def _run(self, pipe, requests: Sequence[GenerationRequest]) -> list:
        from lmdeploy import GenerationConfig

        engine = pipe.async_engine

        async def one(req: GenerationRequest):
            self._sessions += 1
            config = GenerationConfig(**generation_config_kwargs(req, model_eos_ids=self._eos_ids))
            pre = await engine.preprocess(None, self._sessions, gen_config=config,
                                          input_ids=list(req.prompt_token_ids), do_preprocess=False)
            return [out async for out in engine.generate(pre, stream_response=False)]

        return await asyncio.gather(*(one(r) for r in requests))

    def generate(self, requests: Sequence[GenerationRequest], *, speculative: bool) -> list[GenerationResult]:
        """Run ``requests`` through the pipeline's engine (speculative or plain), all at once, in order.

        Raises
        ------
        RuntimeError
            :meth:`load` was not called.
        ValueError
            A request LMDeploy cannot express (:func:`.lmdeploy_requests.unsupported`), or an
            output that ended in error (:func:`.lmdeploy_requests.generation_result`).
        TypeError
            ``speculative`` is not a bool.
        """
        if self._spec is None:
            raise RuntimeError("LmdeployEngine.generate called before load()")
        if not isinstance(speculative, bool):
            raise TypeError(f"speculative must be a bool, got {speculative!r}")
        requests = list(requests)
        if not requests:
            return []
        for r in requests:  # refuse before anything runs
            generation_config_kwargs(r, model_eos_ids=self._eos_ids)
        pipe = self._spec if speculative else self._plain
        future = asyncio.run_coroutine_threadsafe(self._run(pipe, requests), pipe.internal_thread.loop)
        outputs = future.result()
        return [generation_result(out, r) for out, r in zip(outputs, requests)]

    def close(self) -> None:
        """Close both pipelines (safe to call twice)."""
        for attr in ("_spec", "_plain"):
            pipe = getattr(self, attr)
            if pipe is not None:
                pipe.close()
                setattr(self, attr, None)

    def __repr__(self) -> str:
        return f"<LmdeployEngine method={self.method} K={self.num_speculative_tokens} target={self.target_dir}>"
