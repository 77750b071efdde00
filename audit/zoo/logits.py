"""Planted bugs and correct variants of the logits-level protocol, for self-checks.

Logits-level engines process the raw target logits themselves, so their bugs are in the
processing: penalties not re-applied per candidate prefix, a history off by one draft,
operations in another order than declared, the prompt left out of a repetition penalty
that should count it. ``WRONG_LOGITS`` holds one of each; ``CORRECT_LOGITS`` holds
correct engines with different declared orders and scopes. ``tests/audit/zoo/test_logits.py``
audits all of them: every wrong one must fail, every correct one must pass. From the
command line: ``specexact audit --sampler specexact.audit.zoo_logits:stale_penalty_history``.
"""

from __future__ import annotations

import torch

from specexact.decoders.adapters.builtin_logits import LogitsLevelVerifier, candidate_histories
from specexact.decoders.adapters.protocol import Capabilities, LogitsVerifyInputs, declared_processing
from specexact.decoders.processing import BUILTIN_PROCESSING, LogitsProcessing

__all__ = ["WRONG_LOGITS", "WRONG_ORDER_LOGITS", "CORRECT_LOGITS"]

_PROMPT_SCOPE = LogitsProcessing(repetition_penalty_scope="prompt_and_output")

TRANSFORMERS_LIKE = LogitsProcessing(order=("repetition_penalty", "temperature", "top_k", "top_p", "min_p"),
                                     repetition_penalty_scope="prompt_and_output", greedy=False)
"""transformers' processing (``adapters.transformers_logits.TRANSFORMERS_PROCESSING``, a
test checks they are equal), restated here so this module does not import transformers."""


_LEAN = LogitsProcessing(order=("repetition_penalty", "temperature", "top_k"), greedy=False)
"""A lean engine: repetition penalty, temperature and top-k only (no top-p, min-p,
presence / frequency penalty or greedy), so the audit drops most classes for it."""


class _HistoryBug(LogitsLevelVerifier):
    """Correct but for the penalty histories it gives the candidate prefixes."""

    def __init__(self, name: str, histories, processing: LogitsProcessing = BUILTIN_PROCESSING) -> None:
        super().__init__(processing, name=name)
        self._histories = histories

    def candidate_histories(self, inputs: LogitsVerifyInputs) -> torch.Tensor:
        return self._histories(inputs)


def _round_start_history(inputs: LogitsVerifyInputs) -> torch.Tensor:
    """Every prefix gets the history at the start of the round (drafts never counted)."""
    K = inputs.num_draft_tokens
    return inputs.output_token_ids.long()[:, None, :].expand(-1, K + 1, -1)


def _one_draft_ahead(inputs: LogitsVerifyInputs) -> torch.Tensor:
    """Prefix i counts drafts ``:i+1`` (the token it is predicting is already in its history)."""
    full = candidate_histories(inputs)  # [B, K+1, H+K]
    H = inputs.output_token_ids.shape[1]
    K = inputs.num_draft_tokens
    drafts = inputs.draft_token_ids.long()
    ahead = full.clone()
    for i in range(K):
        ahead[:, i, H + i] = drafts[:, i]
    return ahead


class _Misdeclared(LogitsLevelVerifier):
    """Applies one processing and declares another in its capabilities."""

    def __init__(self, name: str, applied: LogitsProcessing, declared: LogitsProcessing) -> None:
        super().__init__(applied, name=name)
        self.capabilities = Capabilities(
            max_batch_size=None, dtypes=(torch.float32, torch.float64, torch.float16, torch.bfloat16), devices=("cpu", "cuda"),
            randomness="generator", logits_level=True, **declared_processing(declared),
            notes=f"planted bug: applies {applied.to_dict()}",
        )


stale_penalty_history = _HistoryBug("stale_penalty_history", _round_start_history)
"""Penalties computed once per round: the drafts before a candidate prefix are not counted."""

history_one_draft_ahead = _HistoryBug("history_one_draft_ahead", _one_draft_ahead)
"""Prefix i's penalties count one draft too many (off by one in the prefix slice)."""

lean_stale_penalty_history = _HistoryBug("lean_stale_penalty_history", _round_start_history, _LEAN)
"""The stale-history bug in a lean engine (repetition penalty, temperature, top-k)."""

lean_penalty_last = _Misdeclared(
    "lean_penalty_last",
    applied=LogitsProcessing(order=("temperature", "top_k", "repetition_penalty"), greedy=False),
    declared=_LEAN,
)
"""A lean engine that applies the repetition penalty after top-k while declaring it first."""

min_p_last_declared_builtin = _Misdeclared(
    "min_p_last_declared_builtin",
    applied=LogitsProcessing(order=("penalties", "temperature", "top_k", "top_p", "min_p")),
    declared=BUILTIN_PROCESSING,
)
"""Min-p applied after top-p (transformers' order) while the built-in order is declared."""

top_p_before_temperature = _Misdeclared(
    "top_p_before_temperature",
    applied=LogitsProcessing(order=("penalties", "top_p", "min_p", "top_k", "temperature")),
    declared=LogitsProcessing(order=("penalties", "temperature", "min_p", "top_k", "top_p")),
)
"""Top-p applied to the untempered law (before the temperature, with it and top-p swapped)
while the built-in order is declared: the law differs only on rows where both act and the
nucleus of the tempered law is not that of the untempered one (order-sensitive rows,
:func:`specexact.strategies.order_sensitive_params`); caught by the fuzz phase's probes as
``declared_processing`` (``tests/audit/zoo/test_logits_order.py``)."""

prompt_ignored_by_repetition = _Misdeclared(
    "prompt_ignored_by_repetition", applied=BUILTIN_PROCESSING, declared=_PROMPT_SCOPE,
)
"""Declares a repetition penalty over the prompt and generated tokens, counts generated only."""

builtin_order = LogitsLevelVerifier(BUILTIN_PROCESSING, name="builtin_order")
transformers_order = LogitsLevelVerifier(TRANSFORMERS_LIKE, name="transformers_order")
prompt_scope = LogitsLevelVerifier(_PROMPT_SCOPE, name="prompt_scope")
lean = LogitsLevelVerifier(_LEAN, name="lean")

WRONG_LOGITS = {v.name: v for v in (stale_penalty_history, history_one_draft_ahead,
                                    min_p_last_declared_builtin, prompt_ignored_by_repetition,
                                    lean_stale_penalty_history, lean_penalty_last)}
"""Deliberately wrong logits-level samplers, by name."""

WRONG_ORDER_LOGITS = {v.name: v for v in (top_p_before_temperature,)}
"""Planted faults of the declared order that the fuzz phase's order-sensitive rows catch
exactly (not in :data:`WRONG_LOGITS`, whose test asks the statistical quick cases)."""

CORRECT_LOGITS = {v.name: v for v in (builtin_order, transformers_order, prompt_scope, lean)}
"""Correct logits-level samplers with different declared processing, by name."""
