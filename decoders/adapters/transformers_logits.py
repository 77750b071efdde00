"""Hugging Face transformers' assisted generation at the logits level.

With ``do_sample=True`` and an assistant model, ``GenerationMixin._assisted_decoding``
(1) builds its logits processors with ``GenerationMixin._get_logits_processor`` from the
``GenerationConfig``, (2) runs them on the target logits of each candidate prefix,
``new_logits[:, i] = logits_processor(candidate_input_ids[:, :cur_len + i], new_logits[:, i])``
for ``i = 0..K``, and (3) verifies with ``_speculative_sampling``. This adapter runs
transformers' own code for (1) and (3) and for every processor in (2); the loop of (2)
is written here (it is inline in ``_assisted_decoding``, which needs a whole model),
line for line as in the tested versions (``candidate_input_ids`` = prompt, generated
tokens, drafts).

What transformers applies, in this order (``_get_logits_processor``, the same in
4.45.2, 4.57.6, 5.17.0 and 5.24.0): ``RepetitionPenaltyLogitsProcessor`` (over
``input_ids``: the prompt counts), ``TemperatureLogitsWarper``, ``TopKLogitsWarper``,
``TopPLogitsWarper``, ``MinPLogitsWarper``. It has no presence or frequency penalty,
and ``temperature=0`` is not sampling (assisted generation then compares argmaxes, with
no speculative sampling), so audit cases that need those are skipped. The processors
are built on a tiny randomly initialised GPT-2 (no download): only its
``_get_logits_processor`` is used.

Randomness: torch's global RNG, seeded once per call from the passed generator
(:func:`~specexact.decoders.adapters.protocol.seeded_global_rng`).

Supplied uniforms (:meth:`TransformersAssistedVerification.verify_logits_with_uniforms`,
for the fuzz phase's boundary-uniform probes): the adapter owns the call and intercepts
``_speculative_sampling``'s one draw ``torch.rand_like(probability_ratio)``, which then
returns the caller's uniforms in float32
(:func:`~specexact.decoders.adapters.transformers.supplied_uniforms`); transformers' own
processors, ratio, comparison ``r <= p/q`` and recovered / bonus draw are unchanged.
Inputs are checked first (:func:`~specexact.decoders.adapters.logits_inputs.validate_logits_verify_inputs`).
"""

from __future__ import annotations

import torch
import transformers

from specexact.decoders.params import SamplingParams
from specexact.decoders.processing import LogitsProcessing
from specexact.decoders.rejection_sampling import PLACEHOLDER_ID

from .logits_inputs import validate_logits_verify_inputs
from .protocol import Capabilities, LogitsVerifyInputs, probs_to_logits, seeded_global_rng
from .transformers import FINDINGS, TransformersSpeculativeSampling, _check_uniforms, one_thread

__all__ = ["TRANSFORMERS_PROCESSING", "TransformersAssistedVerification", "verify_logits_level", "FINDINGS"]

# FINDINGS (re-exported): the same _speculative_sampling, so the same deterministic findings.

TRANSFORMERS_PROCESSING = LogitsProcessing(
    order=("repetition_penalty", "temperature", "top_k", "top_p", "min_p"),
    repetition_penalty_scope="prompt_and_output",
    greedy=False,
)
"""The order of operations of transformers' ``generate`` with ``do_sample=True``."""


class TransformersAssistedVerification:
    """transformers' processors per candidate prefix, then its ``_speculative_sampling``.

    Parameters
    ----------
    function : callable, optional
        The ``_speculative_sampling`` to wrap (default: the installed one).

    Raises
    ------
    TypeError
        If ``function``'s signature is not a supported variant
        (:class:`~specexact.decoders.adapters.transformers.TransformersSpeculativeSampling`).
    """

    name = "transformers-logits"

    def __init__(self, function=None) -> None:
        self._sampling = TransformersSpeculativeSampling(function)
        self.uniforms_dtype = self._sampling.uniforms_dtype
        self._processors: dict[SamplingParams, object] = {}
        self._model = None
        self.capabilities = Capabilities(
            max_batch_size=1,
            dtypes=(torch.float32,),
            devices=("cpu",),
            randomness="global_rng",
            logits_level=True,
            order_of_operations=TRANSFORMERS_PROCESSING.order,
            repetition_penalty_scope=TRANSFORMERS_PROCESSING.repetition_penalty_scope,
            greedy=TRANSFORMERS_PROCESSING.greedy,
            notes="logits level: transformers' own logits processors (built by _get_logits_processor) on "
                  "each candidate prefix, then _speculative_sampling; rows one by one",
        )

    def metadata(self) -> dict:
        """JSON-ready facts for the audit report: transformers' version and function, the
        signature variant, where the processors come from, capabilities."""
        meta = self._sampling.metadata()
        meta.update({
            "adapter": f"{__name__}:{type(self).__name__}",
            "processors_from": "transformers.GenerationMixin._get_logits_processor",
            "capabilities": self.capabilities.to_dict(),
        })
        return meta

    def logits_processor(self, params: SamplingParams):
        """transformers' ``LogitsProcessorList`` for ``params`` (cached).

        Raises
        ------
        ValueError
            If ``params`` needs an operation transformers does not implement (named).
        """
        if params in self._processors:
            return self._processors[params]
        bad = TRANSFORMERS_PROCESSING.unsupported(params)
        if bad:
            raise ValueError(f"transformers' sampling does not implement {', '.join(bad)}")
        model = self._tiny_model()
        config = transformers.GenerationConfig(
            do_sample=True,
            temperature=float(params.temperature),
            top_k=int(params.top_k),
            top_p=float(params.top_p),
            min_p=float(params.min_p) if params.min_p > 0 else None,
            repetition_penalty=float(params.repetition_penalty),
        )
        model._prepare_special_tokens(config, False, device="cpu")
        processors = model._get_logits_processor(
            generation_config=config, input_ids_seq_length=1, encoder_input_ids=None,
            prefix_allowed_tokens_fn=None, logits_processor=transformers.LogitsProcessorList(),
            device="cpu", model_kwargs={},
        )
        self._processors[params] = processors
        return processors

    def _tiny_model(self):
        if self._model is None:
            config = transformers.GPT2Config(vocab_size=8, n_positions=8, n_embd=4, n_layer=1, n_head=1,
                                             bos_token_id=None, eos_token_id=None)
            self._model = transformers.GPT2LMHeadModel(config)
        return self._model

    def processed_target_logits(self, inputs: LogitsVerifyInputs, row: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Row ``row``'s ``candidate_input_ids [1, T0 + n + K]`` and its target logits after
        transformers' processors, one candidate prefix at a time: ``new_logits [1, K+1, V]``
        float32 (as in ``_assisted_decoding``)."""
        K = inputs.num_draft_tokens
        processors = self.logits_processor(inputs.target_params[row])
        candidate_input_ids = inputs.candidate_token_ids(row).cpu()[None]  # [1, T0 + n + K]
        cur_len = candidate_input_ids.shape[1] - K
        new_logits = inputs.target_logits[row:row + 1].to(torch.float32).cpu().clone()  # [1, K+1, V]
        if len(processors) > 0:
            for i in range(K + 1):
                new_logits[:, i, :] = processors(candidate_input_ids[:, : cur_len + i], new_logits[:, i, :])
        return candidate_input_ids, new_logits

    def verify_rows(self, inputs: LogitsVerifyInputs, uniforms: torch.Tensor | None = None) -> torch.Tensor:
        """The rows one by one, on torch's global RNG as it stands: ``-> [B, K+1]``; with
        ``uniforms [B, K]``, row ``b``'s acceptance uniforms are ``uniforms[b]``."""
        B, K = inputs.draft_token_ids.shape
        out = torch.full((B, K + 1), PLACEHOLDER_ID, dtype=torch.int64, device=inputs.draft_token_ids.device)
        candidate_logits = probs_to_logits(inputs.draft_probs, torch.float32)  # [B, K, V]
        with one_thread():
            for b in range(B):
                candidate_input_ids, new_logits = self.processed_target_logits(inputs, b)
                valid = self._sampling.call_row(candidate_input_ids, candidate_logits[b:b + 1].cpu(), K, new_logits,
                                                row=b, uniforms=None if uniforms is None else uniforms[b])
                out[b, : valid.numel()] = valid.to(out.device)
        return out

    def verify_logits(self, inputs: LogitsVerifyInputs, generator: torch.Generator | None = None) -> torch.Tensor:
        """The logits-level protocol: ``-> LongTensor [B, K+1]``; one seed per call from
        ``generator`` for torch's global RNG, restored afterwards.

        Raises
        ------
        TypeError, ValueError
            Invalid inputs (:func:`~specexact.decoders.adapters.logits_inputs.validate_logits_verify_inputs`),
            a generator that is not a ``torch.Generator``, or parameters transformers does not implement.
        """
        self._check(inputs, generator)
        with seeded_global_rng(generator, inputs.target_logits.device):
            return self.verify_rows(inputs)

    def verify_logits_with_uniforms(self, inputs: LogitsVerifyInputs, uniforms: torch.Tensor,
                                    generator: torch.Generator | None = None) -> torch.Tensor:
        """The uniforms-injection protocol at the logits level: as :meth:`verify_logits`, with
        draft ``i`` of row ``b`` judged by transformers' ``r <= p/q`` for ``r = uniforms[b, i]``
        in float32 (module docstring). Shape: ``uniforms [B, K] -> [B, K+1]``."""
        self._check(inputs, generator)
        _check_uniforms(uniforms, inputs.draft_token_ids)
        with seeded_global_rng(generator, inputs.target_logits.device):
            return self.verify_rows(inputs, uniforms=uniforms)

    def _check(self, inputs: LogitsVerifyInputs, generator) -> None:
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        validate_logits_verify_inputs(inputs)
        for params in inputs.target_params:
            self.logits_processor(params)  # raises ValueError for an operation transformers lacks

    def __repr__(self) -> str:
        return f"<TransformersAssistedVerification transformers {transformers.__version__}>"


verify_logits_level = TransformersAssistedVerification()
"""The entry point ``specexact.samplers: transformers-logits``."""
