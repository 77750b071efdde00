"""Naive target-only sampling: one target call per token (the reference law)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from .law_engine import fused_laws, fused_model
from .law_table import model_laws
from .params import SamplingParams, batch_params
from .pipeline import process_logits
from .processing import LogitsProcessing

__all__ = ["GenerationOutput", "naive_generate", "naive_generate_reference", "check_prompt"]


@dataclass(frozen=True)
class GenerationOutput:
    """What a sampler produced for a batch.

    Attributes
    ----------
    tokens : torch.LongTensor
        Shape ``[B, max_new_tokens]``: generated ids left-aligned, ``-1`` after the end
        (an EOS token, when emitted, is the last kept token).
    num_tokens : torch.LongTensor
        Shape ``[B]``: generated tokens per row.
    target_calls : int
        Forward calls of the target model (each serves the whole batch).
    draft_calls : int
        Forward calls of the draft model (0 for the naive sampler).
    accepted_lengths : torch.LongTensor or None
        Shape ``[B, R]`` for R speculative rounds: draft tokens accepted by the verifier in
        each round (before EOS / max_new_tokens cut the round), ``-1`` where the row had
        already finished. None for the naive sampler.
    """

    tokens: torch.Tensor
    num_tokens: torch.Tensor
    target_calls: int
    draft_calls: int = 0
    accepted_lengths: torch.Tensor | None = None


def check_prompt(prompt_ids: torch.Tensor, vocab_size: int, max_new_tokens: int) -> None:
    """Validate a ``[B, T0]`` prompt and ``max_new_tokens``; raise ValueError naming them."""
    if not isinstance(prompt_ids, torch.Tensor) or prompt_ids.dim() != 2 or 0 in prompt_ids.shape:
        shape = tuple(prompt_ids.shape) if isinstance(prompt_ids, torch.Tensor) else type(prompt_ids).__name__
        raise ValueError(f"prompt_ids must be a non-empty LongTensor [B, T0], got {shape}")
    if int(prompt_ids.min()) < 0 or int(prompt_ids.max()) >= vocab_size:
        raise ValueError(
            f"prompt_ids must lie in [0, {vocab_size}), got [{int(prompt_ids.min())}, {int(prompt_ids.max())}]"
        )
    if int(max_new_tokens) != max_new_tokens or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")


def naive_generate_reference(
    target,
    prompt_ids: torch.Tensor,
    params: SamplingParams | Sequence[SamplingParams],
    *,
    max_new_tokens: int,
    generator: torch.Generator | None = None,
    eos_token_id: int | None = None,
    processing: "LogitsProcessing | None" = None,
) -> GenerationOutput:
    """The readable reference of :func:`naive_generate`: the model and the logits pipeline
    run on every row at every step, and every row's law is sampled by
    :func:`~specexact.decoders.sample_from_probs`.

    Same parameters, output and generator draws as :func:`naive_generate`
    (``tests/decoders/test_law_table.py`` compares them bit for bit).
    """
    return _naive(target, prompt_ids, params, max_new_tokens=max_new_tokens, generator=generator,
                  eos_token_id=eos_token_id, processing=processing, share=False)


def naive_generate(
    target,
    prompt_ids: torch.Tensor,
    params: SamplingParams | Sequence[SamplingParams],
    *,
    max_new_tokens: int,
    generator: torch.Generator | None = None,
    eos_token_id: int | None = None,
    processing: "LogitsProcessing | None" = None,
) -> GenerationOutput:
    """Sample autoregressively from the target alone through the logits pipeline.

    Shape: ``prompt_ids [B, T0] -> tokens [B, max_new_tokens]``.

    Parameters
    ----------
    target : callable
        ``target(input_ids [B, T], positions [B, n]) -> logits [B, n, V]`` with attributes
        ``vocab_size`` and ``device`` (e.g. :class:`~specexact.decoders.ToyLM`).
    prompt_ids : torch.LongTensor
        Shape ``[B, T0]``, ``T0 >= 1``.
    params : SamplingParams or sequence of B SamplingParams
        Per-row sampling parameters (see :func:`~specexact.decoders.process_logits`).
    max_new_tokens : int
        Tokens to generate per row at most.
    generator : torch.Generator, optional
        The only randomness: one float64 uniform per row and step.
    eos_token_id : int, optional
        A row stops after emitting it (kept in the output).
    processing : LogitsProcessing, optional
        The order of operations (default: :func:`~specexact.decoders.process_logits`'
        built-in one); a logits-level sampler's audit passes the order it declared.

    Returns
    -------
    GenerationOutput

    Raises
    ------
    ValueError
        On a malformed prompt or ``max_new_tokens`` (see :func:`check_prompt`), or
        parameters ``processing`` does not implement.

    Notes
    -----
    With a model that exposes its states (``prefix_states`` / ``project``, as
    :class:`~specexact.decoders.ToyLM`), each step computes the logits and the law of each
    distinct ``(state, parameters, history)`` once and samples every row from its law
    without building the ``[B, V]`` laws
    (:func:`~specexact.decoders.law_table.model_laws`); the output and the draws are those
    of :func:`naive_generate_reference`, bit for bit.
    """
    return _naive(target, prompt_ids, params, max_new_tokens=max_new_tokens, generator=generator,
                  eos_token_id=eos_token_id, processing=processing, share=True)


def _naive(target, prompt_ids, params, *, max_new_tokens, generator, eos_token_id, processing,
           share: bool) -> GenerationOutput:
    V = target.vocab_size
    check_prompt(prompt_ids, V, max_new_tokens)
    device = target.device
    prompt_ids = prompt_ids.to(device)
    B, T0 = prompt_ids.shape
    bp = batch_params(params, B, device)
    seq = torch.cat([prompt_ids, torch.full((B, max_new_tokens), -1, dtype=torch.int64, device=device)], 1)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    # The built-in processing object is process_logits itself (LogitsProcessing.is_builtin):
    # the audit passes it for the built-in sampler, and the fused path computes its laws.
    builtin = processing is None or getattr(processing, "is_builtin", False)
    fused = share and builtin and fused_model(target)
    for t in range(max_new_tokens):
        positions = torch.full((B, 1), T0 + t - 1, dtype=torch.int64, device=device)
        token = (fused_laws(target, seq[:, : T0 + t], positions, bp, seq[:, T0 : T0 + t], sample=True,
                            generator=generator) if fused else None)  # [B]
        if token is None:
            laws = model_laws(target, seq[:, : T0 + t], positions, bp, seq[:, T0 : T0 + t],
                              process=process_logits if processing is None else processing,
                              extra=() if processing is None else (prompt_ids,), share=share)  # B laws
            token = laws.sample(generator)  # [B]
            del laws
        seq[:, T0 + t] = torch.where(done, -1, token)
        if eos_token_id is not None:
            done |= token == eos_token_id
        if bool(done.all()):
            break
    tokens = seq[:, T0:]
    return GenerationOutput(tokens=tokens, num_tokens=(tokens >= 0).sum(1), target_calls=t + 1)
