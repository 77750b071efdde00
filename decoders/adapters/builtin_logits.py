"""The built-in verifier behind the logits-level protocol, in any declared order.

:class:`LogitsLevelVerifier` is what a correct logits-level engine does: for each
candidate prefix ``i`` it processes the raw target logits with the row's parameters and
the history *plus the first i drafts* (penalties re-applied per prefix), in its declared
order of operations, then verifies with :func:`~specexact.decoders.verify`. It is the
reference the logits-level audit is tested with, and a template for an engine's adapter
(replace :meth:`LogitsLevelVerifier.target_probs` and the verifier by the engine's own).

``specexact audit --sampler builtin-logits`` audits it in the built-in order.

When its probability-level verifier takes supplied uniforms (the built-in ``verify`` does:
:func:`~specexact.decoders.verify_with_uniforms`), so does the adapter
(:meth:`LogitsLevelVerifier.verify_logits_with_uniforms`, the logits-level
uniforms-injection protocol of :func:`~specexact.decoders.adapters.takes_uniforms`).
Inputs are checked first (:func:`~specexact.decoders.adapters.logits_inputs.validate_logits_verify_inputs`).
"""

from __future__ import annotations

from typing import Callable

import torch

from specexact.decoders.law_table import shared_laws
from specexact.decoders.params import batch_params
from specexact.decoders.processing import BUILTIN_PROCESSING, LogitsProcessing
from specexact.decoders.rejection_sampling import PLACEHOLDER_ID, verify

from .logits_inputs import validate_logits_verify_inputs
from .protocol import Capabilities, LogitsVerifyInputs, declared_processing, takes_uniforms, uniforms_dtype_of

__all__ = ["LogitsLevelVerifier", "candidate_histories", "verify_logits_level"]


def candidate_histories(inputs: LogitsVerifyInputs) -> torch.Tensor:
    """The penalty histories of the γ+1 candidate prefixes.

    Shape: ``[B, K+1, H + K]``, int64: entry ``i`` holds row ``b``'s generated tokens
    then ``draft_token_ids[b, :i]``, ``-1`` elsewhere (padding is ignored by counts).
    """
    B, K = inputs.draft_token_ids.shape
    drafts = inputs.draft_token_ids.long()
    steps = torch.arange(K + 1, device=drafts.device)[:, None]  # [K+1, 1]
    shown = torch.arange(K, device=drafts.device)[None, :] < steps  # [K+1, K]: draft j is in prefix i iff j < i
    draft_part = torch.where(shown[None], drafts[:, None, :], PLACEHOLDER_ID)  # [B, K+1, K]
    out = inputs.output_token_ids.long()[:, None, :].expand(B, K + 1, -1)  # [B, K+1, H]
    return torch.cat([out, draft_part], dim=2)


class LogitsLevelVerifier:
    """Process raw target logits per candidate prefix, then verify (logits-level protocol).

    Parameters
    ----------
    processing : LogitsProcessing
        The order of operations and the per-operation variants it applies (and declares in
        :attr:`capabilities`), e.g. ``LogitsProcessing(top_k_ties="exactly_k")``.
    verifier : callable
        A probability-level verifier (default :func:`~specexact.decoders.verify`).
    name : str
        Its name in reports.
    """

    def __init__(self, processing: LogitsProcessing = BUILTIN_PROCESSING, *,
                 verifier: Callable = verify, name: str = "builtin-logits") -> None:
        self.processing = processing
        self.verifier = verifier
        self.name = name
        self.capabilities = Capabilities(
            max_batch_size=None,
            dtypes=(torch.float32, torch.float64, torch.float16, torch.bfloat16),
            devices=("cpu", "cuda"),
            randomness="generator",
            logits_level=True,
            **declared_processing(processing),
            notes="the built-in pipeline per candidate prefix (half-precision logits processed in float32), "
                  "then the built-in verify",
        )

    def metadata(self) -> dict:
        """JSON-ready facts for the audit report: adapter, library, processing, capabilities."""
        return {"adapter": f"{__name__}:{type(self).__name__}", "library": "specexact",
                "processing": self.processing.to_dict(), "capabilities": self.capabilities.to_dict()}

    def candidate_histories(self, inputs: LogitsVerifyInputs) -> torch.Tensor:
        """The penalty histories of the candidate prefixes, ``[B, K+1, H']`` (the module's
        :func:`candidate_histories`; a subclass may give others)."""
        return candidate_histories(inputs)

    def target_probs(self, inputs: LogitsVerifyInputs) -> torch.Tensor:
        """Shape: ``-> [B, K+1, V]``: the target's law after each candidate prefix.

        Each distinct ``(logits, parameters, history, prompt)`` row is processed once
        (:func:`~specexact.decoders.law_table.shared_laws`; the processing is row-wise, so
        the result is the same bit for bit as processing every row)."""
        B, K = inputs.draft_token_ids.shape
        V = inputs.vocab_size
        hist = self.candidate_histories(inputs)  # [B, K+1, H']
        params = batch_params(list(inputs.target_params), B, inputs.target_logits.device).repeat_interleave(K + 1)
        table = shared_laws(inputs.target_logits.reshape(B * (K + 1), V), params, hist.reshape(B * (K + 1), -1),
                            process=self.processing,
                            extra=(inputs.prompt_token_ids.repeat_interleave(K + 1, dim=0),))
        return table.rows().reshape(B, K + 1, V)

    def verify_logits(self, inputs: LogitsVerifyInputs, generator: torch.Generator | None = None) -> torch.Tensor:
        """``-> LongTensor [B, K+1]`` (the ``verify`` output).

        Raises
        ------
        TypeError, ValueError
            Invalid inputs (:func:`~specexact.decoders.adapters.logits_inputs.validate_logits_verify_inputs`)
            or parameters the declared processing does not implement.
        """
        validate_logits_verify_inputs(inputs)
        return self.verifier(inputs.draft_token_ids, inputs.draft_probs, self.target_probs(inputs), generator)

    @property
    def verify_logits_with_uniforms(self):
        """``verify_logits_with_uniforms(inputs, uniforms [B, K], generator) -> [B, K+1]``:
        :meth:`verify_logits` with the acceptance uniforms supplied to the wrapped
        verifier's ``verify_with_uniforms``; ``None`` when that verifier takes none (so
        :func:`~specexact.decoders.adapters.takes_uniforms` is False)."""
        if not takes_uniforms(self.verifier):
            return None

        def with_uniforms(inputs: LogitsVerifyInputs, uniforms: torch.Tensor,
                          generator: torch.Generator | None = None) -> torch.Tensor:
            validate_logits_verify_inputs(inputs)
            return self.verifier.verify_with_uniforms(inputs.draft_token_ids, inputs.draft_probs,
                                                      self.target_probs(inputs), uniforms, generator)

        return with_uniforms

    @property
    def uniforms_dtype(self) -> torch.dtype:
        """The dtype of the wrapped verifier's acceptance uniforms."""
        return uniforms_dtype_of(self.verifier)

    def __repr__(self) -> str:
        return f"<LogitsLevelVerifier {self.name} order={self.processing.order}>"


verify_logits_level = LogitsLevelVerifier()
"""The entry point ``specexact.samplers: builtin-logits``."""
