"""Invalid inputs: a valid example with one corruption; the sampler must refuse it clearly.

The rule ``refuses_invalid_input``: a ``ValueError`` or ``TypeError`` (what the built-in
``verify`` raises, naming the argument), not another exception and not an output.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from specexact.decoders.adapters.protocol import LogitsVerifyInputs

from specexact.fuzz.examples import ProbInputs
from specexact.fuzz.invariants import GLOBAL_SEED
from specexact.fuzz.rules import rule_error
from specexact.fuzz.subject import Call, CallTimeout, Subject

__all__ = ["PROB_CORRUPTIONS", "LOGITS_CORRUPTIONS", "corrupt", "check_refused", "BadGenerator"]

PROB_CORRUPTIONS = (
    "nan_draft_prob", "nan_target_prob", "inf_target_prob", "negative_draft_prob", "target_row_without_mass",
    "draft_id_too_large", "draft_id_negative", "target_missing_position", "vocabulary_mismatch",
    "float_draft_ids", "integer_probs", "one_dimensional_ids", "no_drafts", "not_a_generator",
)
"""Corruptions of a probability-level call."""

LOGITS_CORRUPTIONS = (
    "nan_logit", "posinf_logit", "row_all_neginf", "draft_id_too_large", "nan_draft_prob", "params_count",
    "output_id_too_large", "prompt_id_negative", "logits_missing_position", "not_a_generator",
)
"""Corruptions of a logits-level call."""


class BadGenerator:
    """Passed as the generator by the ``not_a_generator`` corruption."""

    def __repr__(self) -> str:
        return "BadGenerator()"


def _poke(t: torch.Tensor, value: float, seed: int) -> torch.Tensor:
    t = t.clone()
    flat = t.view(-1)
    flat[seed % flat.numel()] = value
    return t


def corrupt(inputs, kind: str, seed: int = 0):
    """``inputs`` (:class:`ProbInputs` or :class:`LogitsVerifyInputs`) with corruption ``kind``.

    Returns the corrupted inputs (the generator is replaced separately for
    ``not_a_generator``).

    Raises
    ------
    ValueError
        An unknown ``kind`` for the inputs' level.
    """
    if isinstance(inputs, ProbInputs):
        ids, q, p = inputs.draft_token_ids, inputs.draft_probs, inputs.target_probs
        B, K, V = inputs.shape
        if kind == "nan_draft_prob":
            return ProbInputs(ids, _poke(q, float("nan"), seed), p)
        if kind == "nan_target_prob":
            return ProbInputs(ids, q, _poke(p, float("nan"), seed))
        if kind == "inf_target_prob":
            return ProbInputs(ids, q, _poke(p, float("inf"), seed))
        if kind == "negative_draft_prob":
            return ProbInputs(ids, _poke(q, -0.25, seed), p)
        if kind == "target_row_without_mass":
            p = p.clone()
            p[seed % B, seed % (K + 1)] = 0.0
            return ProbInputs(ids, q, p)
        if kind == "draft_id_too_large":
            return ProbInputs(_poke(ids, V + seed % 3, seed), q, p)
        if kind == "draft_id_negative":
            return ProbInputs(_poke(ids, -1 - seed % 2, seed), q, p)
        if kind == "target_missing_position":
            return ProbInputs(ids, q, p[:, :K].contiguous())
        if kind == "vocabulary_mismatch":
            return ProbInputs(ids, q, torch.cat([p, p[..., :1]], -1))
        if kind == "float_draft_ids":
            return ProbInputs(ids.to(torch.float32), q, p)
        if kind == "integer_probs":
            return ProbInputs(ids, (q > 0).to(torch.int64), p)
        if kind == "one_dimensional_ids":
            return ProbInputs(ids[:, 0].contiguous(), q, p)
        if kind == "no_drafts":
            return ProbInputs(ids[:, :0].contiguous(), q[:, :0].contiguous(), p[:, :1].contiguous())
        if kind == "not_a_generator":
            return inputs
        raise ValueError(f"unknown probability-level corruption {kind!r}; known: {PROB_CORRUPTIONS}")
    x: LogitsVerifyInputs = inputs
    V = x.vocab_size
    if kind == "nan_logit":
        return replace(x, target_logits=_poke(x.target_logits, float("nan"), seed))
    if kind == "posinf_logit":
        return replace(x, target_logits=_poke(x.target_logits, float("inf"), seed))
    if kind == "row_all_neginf":
        t = x.target_logits.clone()
        t[seed % x.batch_size, seed % (x.num_draft_tokens + 1)] = -float("inf")
        return replace(x, target_logits=t)
    if kind == "draft_id_too_large":
        return replace(x, draft_token_ids=_poke(x.draft_token_ids, V, seed))
    if kind == "nan_draft_prob":
        return replace(x, draft_probs=_poke(x.draft_probs, float("nan"), seed))
    if kind == "params_count":
        return replace(x, target_params=x.target_params + x.target_params[:1])
    if kind == "output_id_too_large":
        out = torch.cat([x.output_token_ids, torch.full((x.batch_size, 1), -1, dtype=torch.int64)], 1)
        for b in range(x.batch_size):
            out[b, int((out[b] >= 0).sum())] = V + seed % 2
        return replace(x, output_token_ids=out)
    if kind == "prompt_id_negative":
        return replace(x, prompt_token_ids=_poke(x.prompt_token_ids, -2, seed))
    if kind == "logits_missing_position":
        return replace(x, target_logits=x.target_logits[:, :-1].contiguous())
    if kind == "not_a_generator":
        return x
    raise ValueError(f"unknown logits-level corruption {kind!r}; known: {LOGITS_CORRUPTIONS}")


def check_refused(subject: Subject, inputs, kind: str, *, seed: int = 0, source: str = "") -> None:
    """Call the sampler on ``inputs`` with corruption ``kind``; raise ``refuses_invalid_input``
    unless it raises ``ValueError`` or ``TypeError``."""
    bad = corrupt(inputs, kind, seed)
    entry = "verify_logits" if subject.logits_level else "verify"
    call = Call(entry=entry, inputs=bad, generator_seed=seed, source=source + f"  # corrupted: {kind}")
    expect_refusal(subject, call, kind, seed=seed)


def expect_refusal(subject: Subject, call: Call, kind: str, *, seed: int = 0, shown=None) -> None:
    """Make ``call`` (inputs already corrupted with ``kind``); raise ``refuses_invalid_input``
    unless the sampler raises ``ValueError`` or ``TypeError``. ``shown(out)`` describes a
    returned output in the finding (default: its tokens when small, else its type)."""
    gen = BadGenerator() if kind == "not_a_generator" else call.generator(subject.device)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(GLOBAL_SEED)
            out = subject.run(call, gen)
    except (ValueError, TypeError):
        return
    except CallTimeout as exc:
        raise rule_error("refuses_invalid_input", f"{kind}: hung ({exc}) instead of raising ValueError/TypeError",
                         call) from None
    except Exception as exc:  # noqa: BLE001 - the wrong kind of error is the finding
        raise rule_error("refuses_invalid_input", f"{kind}: raised {type(exc).__name__}: {exc} instead of "
                                                  "ValueError/TypeError", call) from None
    if shown is None:
        text = out.tolist() if isinstance(out, torch.Tensor) and out.numel() <= 32 else type(out).__name__
    else:
        text = shown(out)
    raise rule_error("refuses_invalid_input", f"{kind}: returned {text} instead of raising ValueError/TypeError",
                     call)
