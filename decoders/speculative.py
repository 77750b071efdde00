"""Chain speculative decoding, batched with ragged acceptance, around any verifier."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from .adapters.protocol import LogitsVerifyInputs, is_logits_level, processing_of
from .naive import GenerationOutput, check_prompt
from .params import SamplingParams, batch_params
from . import workspace
from .law_engine import fused_laws, fused_model
from .law_table import model_laws
from .pipeline import process_logits
from .rejection_sampling import PLACEHOLDER_ID, verify

__all__ = ["speculative_generate", "speculative_generate_reference", "VerifierProtocolError", "Verifier",
           "RoundRecord"]

Verifier = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, "torch.Generator | None"], torch.Tensor]


class VerifierProtocolError(ValueError):
    """A verifier returned output that breaks the ``verify`` protocol (a defect)."""


@dataclass(frozen=True)
class RoundRecord:
    """What one speculative round saw and did, handed to ``speculative_generate``'s
    ``observer`` (per-event checks read every decision from it).

    ``A`` is the number of rows still active in the round, ``γ`` the drafts per row.
    The tensors are the decoder's own (not copies): an observer reads them before it
    returns and must not modify or keep them.

    Attributes
    ----------
    round_index : int
        0 for the first round.
    rows : torch.LongTensor
        Shape ``[A]``: batch row of each active row.
    num_generated : torch.LongTensor
        Shape ``[A]``: tokens generated before this round.
    draft_token_ids : torch.LongTensor
        Shape ``[A, γ]``.
    draft_probs : torch.Tensor
        Shape ``[A, γ, V]``, float32: the law each draft was sampled from.
    target_probs : torch.Tensor
        Shape ``[A, γ+1, V]``, float32: the target law after each candidate prefix, after
        the processing the reference laws use (the verifier's declared order for a
        logits-level sampler, which was handed raw logits instead).
    output : torch.LongTensor
        Shape ``[A, γ+1]``: the verifier's output (``-1`` after its last token).
    num_emitted : torch.LongTensor
        Shape ``[A]``: tokens the verifier emitted (accepted drafts + 1).
    num_kept : torch.LongTensor
        Shape ``[A]``: of those, the tokens the decoder kept after the EOS and
        ``max_new_tokens`` cut.
    """

    round_index: int
    rows: torch.Tensor
    num_generated: torch.Tensor
    draft_token_ids: torch.Tensor
    draft_probs: torch.Tensor
    target_probs: torch.Tensor
    output: torch.Tensor
    num_emitted: torch.Tensor
    num_kept: torch.Tensor


def check_verifier_output(out: object, draft_token_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Validate a verifier's output against the protocol; return its emitted counts ``[B]``.

    Raises
    ------
    VerifierProtocolError
        Wrong type / shape / dtype, an id outside ``[0, V)`` other than the ``-1``
        placeholder, a token after a placeholder, no token at all, or an accepted position
        that differs from the drafted token.
    """
    B, K = draft_token_ids.shape
    if not isinstance(out, torch.Tensor):
        raise VerifierProtocolError(f"verifier must return a torch.Tensor, got {type(out).__name__}")
    if tuple(out.shape) != (B, K + 1):
        raise VerifierProtocolError(f"verifier output must have shape [{B}, {K + 1}], got {tuple(out.shape)}")
    if out.dtype.is_floating_point or out.dtype == torch.bool:
        raise VerifierProtocolError(f"verifier output must be integer ids, got {out.dtype}")
    out = out.long()
    bad = ((out < 0) & (out != PLACEHOLDER_ID)) | (out >= vocab_size)
    if bool(bad.any()):
        b, k = bad.nonzero()[0].tolist()
        raise VerifierProtocolError(
            f"verifier emitted id {int(out[b, k])} at [row {b}, position {k}], outside [0, {vocab_size})"
        )
    present = out >= 0
    num = present.sum(1)
    if bool((num == 0).any()):
        raise VerifierProtocolError(f"verifier emitted no token in row {int((num == 0).nonzero()[0, 0])}")
    left_aligned = present == (torch.arange(K + 1, device=out.device)[None] < num[:, None])
    if not bool(left_aligned.all()):
        raise VerifierProtocolError(
            f"verifier output row {int((~left_aligned.all(1)).nonzero()[0, 0])} is not left-aligned"
        )
    accepted_pos = torch.arange(K, device=out.device)[None] < (num - 1)[:, None]
    mismatch = accepted_pos & (out[:, :K] != draft_token_ids)
    if bool(mismatch.any()):
        b, k = mismatch.nonzero()[0].tolist()
        raise VerifierProtocolError(
            f"verifier emitted {int(out[b, k])} at accepted position {k} of row {b}, "
            f"but the drafted token there was {int(draft_token_ids[b, k])}"
        )
    return num


def _prefix_histories(work: torch.Tensor, start: int, lengths: torch.Tensor, count: int) -> torch.Tensor:
    """Histories for ``count`` candidate prefixes: generated tokens + the first j drafts.

    Shape: ``work [B, L] -> [B, count, L - start]``; entry j holds
    ``work[:, start : lengths + j]`` and ``-1`` after it.
    """
    hist = work[:, start:]  # [B, H]
    H = hist.shape[1]
    idx = torch.arange(H, device=work.device)[None, None, :]  # [1, 1, H]
    end = (lengths - start)[:, None, None] + torch.arange(count, device=work.device)[None, :, None]
    return torch.where(idx < end, hist[:, None, :], PLACEHOLDER_ID)  # [B, count, H]


def _stack_laws(tables) -> torch.Tensor:
    """The draft laws of a round as one tensor. Shape: γ tables of ``A`` rows -> ``[A, γ, V]``."""
    first = tables[0]
    A = first.num_rows
    if all(t.inverse is None for t in tables):
        out = torch.empty(A, len(tables), first.probs.shape[1], dtype=first.probs.dtype, device=first.probs.device)
        for i, t in enumerate(tables):
            out[:, i] = t.probs
        return out
    # One gather from the concatenated tables: every entry is written once.
    offsets, index, parts = 0, [], []
    for t in tables:
        inv = t.inverse if t.inverse is not None else torch.arange(A, device=t.probs.device)
        index.append(inv + offsets)
        parts.append(t.probs)
        offsets += t.probs.shape[0]
    table = torch.cat(parts) if len(parts) > 1 else parts[0]
    return table.index_select(0, torch.stack(index, 1).reshape(-1)).reshape(A, len(tables), -1)


def speculative_generate_reference(
    target,
    draft,
    prompt_ids: torch.Tensor,
    target_params: SamplingParams | Sequence[SamplingParams],
    draft_params: SamplingParams | Sequence[SamplingParams] | None = None,
    *,
    num_draft_tokens: int,
    max_new_tokens: int,
    generator: torch.Generator | None = None,
    eos_token_id: int | None = None,
    verifier: Verifier = verify,
    observer: Callable[[RoundRecord], None] | None = None,
) -> GenerationOutput:
    """The readable reference of :func:`speculative_generate`: the models and the logits
    pipeline run on every row of every call.

    Same parameters, output, generator draws, verifier calls and observer records as
    :func:`speculative_generate` (``tests/decoders/test_law_table.py`` compares them bit
    for bit), which computes each distinct law of a call once
    (:mod:`specexact.decoders.law_table`).
    """
    return _speculative(target, draft, prompt_ids, target_params, draft_params, num_draft_tokens=num_draft_tokens,
                        max_new_tokens=max_new_tokens, generator=generator, eos_token_id=eos_token_id,
                        verifier=verifier, observer=observer, share=False)


def speculative_generate(
    target,
    draft,
    prompt_ids: torch.Tensor,
    target_params: SamplingParams | Sequence[SamplingParams],
    draft_params: SamplingParams | Sequence[SamplingParams] | None = None,
    *,
    num_draft_tokens: int,
    max_new_tokens: int,
    generator: torch.Generator | None = None,
    eos_token_id: int | None = None,
    verifier: Verifier = verify,
    observer: Callable[[RoundRecord], None] | None = None,
) -> GenerationOutput:
    """Chain speculative decoding: draft γ tokens, verify γ+1 prefixes in one target call.

    Shape: ``prompt_ids [B, T0] -> tokens [B, max_new_tokens]``.

    Each round, for every unfinished row: the draft model proposes γ tokens
    autoregressively, each from its own processed law ``q_i`` (kept as ``draft_probs``);
    one target call gives the logits after all γ+1 candidate prefixes (position ``t``
    predicts token ``t + 1``); the pipeline re-applies the penalties for each prefix
    (history = generated tokens plus the drafts before it) to give ``target_probs``; then
    ``verifier`` accepts a prefix of the drafts and emits one recovered or bonus token.
    The emitted tokens are cut after an EOS and at ``max_new_tokens`` (no bonus past
    them), which keeps the law exact: any prefix of an exact sequence is exact.

    Parameters
    ----------
    target, draft : callable
        ``model(input_ids [B, T], positions [B, n]) -> logits [B, n, V]`` with attributes
        ``vocab_size`` and ``device`` (e.g. :class:`~specexact.decoders.ToyLM`); same V.
    prompt_ids : torch.LongTensor
        Shape ``[B, T0]``, ``T0 >= 1``.
    target_params : SamplingParams or sequence of B SamplingParams
        The target's law (what naive sampling would use).
    draft_params : SamplingParams or sequence, optional
        The draft's own temperature / truncation / penalties; defaults to ``target_params``.
    num_draft_tokens : int
        γ >= 1, drafted tokens per round.
    max_new_tokens : int
        Tokens to generate per row at most.
    generator : torch.Generator, optional
        The only randomness (draft sampling and the verifier's draws), on the models' device.
    eos_token_id : int, optional
        A row stops after emitting it.
    verifier : callable or logits-level adapter
        Anything with the :func:`~specexact.decoders.verify` protocol, called with the
        processed laws; or an adapter whose capabilities declare ``logits_level=True``:
        its ``verify_logits`` gets the *raw* target logits of the γ+1 prefixes, each row's
        ``target_params`` and token history
        (:class:`~specexact.decoders.adapters.LogitsVerifyInputs`) and applies the
        processing itself. Called on the unfinished rows only.
    observer : callable, optional
        ``observer(record)`` after every round with a :class:`RoundRecord` (drafts, both
        laws at every position, the verifier's output, the cut). For a logits-level
        verifier the decoder then also computes the processed target laws with its
        declared processing (extra work only when an observer is given).

    Returns
    -------
    GenerationOutput
        ``accepted_lengths [B, R]`` records the verifier's accepted drafts per round.

    Raises
    ------
    ValueError
        On bad prompts, ``num_draft_tokens < 1`` or models with different vocabularies.
    VerifierProtocolError
        If the verifier's output breaks the protocol (a defect of the verifier).

    Notes
    -----
    With models that expose their states (``prefix_states`` / ``project``, as
    :class:`~specexact.decoders.ToyLM`), the logits and the law of each distinct
    ``(state, parameters, history)`` of a call are computed once
    (:func:`~specexact.decoders.law_table.model_laws`); the output, the draws and what the
    verifier and the observer receive are those of :func:`speculative_generate_reference`,
    bit for bit.
    """
    return _speculative(target, draft, prompt_ids, target_params, draft_params, num_draft_tokens=num_draft_tokens,
                        max_new_tokens=max_new_tokens, generator=generator, eos_token_id=eos_token_id,
                        verifier=verifier, observer=observer, share=True)


def _speculative(target, draft, prompt_ids, target_params, draft_params, *, num_draft_tokens, max_new_tokens,
                 generator, eos_token_id, verifier, observer, share: bool) -> GenerationOutput:
    V = target.vocab_size
    if draft.vocab_size != V:
        raise ValueError(f"draft vocab_size {draft.vocab_size} != target vocab_size {V}")
    if int(num_draft_tokens) != num_draft_tokens or num_draft_tokens < 1:
        raise ValueError(f"num_draft_tokens must be an integer >= 1, got {num_draft_tokens!r}")
    check_prompt(prompt_ids, V, max_new_tokens)
    gamma = int(num_draft_tokens)
    device = target.device
    prompt_ids = prompt_ids.to(device)
    B, T0 = prompt_ids.shape
    t_bp = batch_params(target_params, B, device)
    logits_level = is_logits_level(verifier)
    if logits_level:
        t_list = ((target_params,) * B if isinstance(target_params, SamplingParams)
                  else tuple(target_params))
    d_bp = batch_params(target_params if draft_params is None else draft_params, B, device)
    # The fused path: laws straight from the models' states into the verifier's inputs.
    fused = share and not logits_level and fused_model(target) and fused_model(draft)

    L = T0 + max_new_tokens + gamma + 1
    seq = torch.full((B, L), PLACEHOLDER_ID, dtype=torch.int64, device=device)
    seq[:, :T0] = prompt_ids
    lengths = torch.full((B,), T0, dtype=torch.int64, device=device)  # prompt + generated
    done = torch.zeros(B, dtype=torch.bool, device=device)
    steps = torch.arange(gamma + 1, device=device)
    accepted_log: list[torch.Tensor] = []
    target_calls = draft_calls = 0

    while not bool(done.all()):
        act = (~done).nonzero().squeeze(1)  # [A]
        A = act.numel()
        a_len = lengths[act]  # [A]
        width = int(a_len.max()) + gamma
        work = seq[act, :width].clone()  # [A, W]: generated so far, drafts written in
        a_rows = torch.arange(A, device=device)

        # Draft γ tokens autoregressively from the draft's processed law q_i.
        draft_ids = torch.empty(A, gamma, dtype=torch.int64, device=device)
        d_act = d_bp.select(act)
        if fused:  # the laws written straight into the verifier's input (law_engine)
            draft_probs_t = workspace.take("draft_probs", (A, gamma, V), device=device)
        draft_laws = []
        for i in range(gamma):
            hist = _prefix_histories(work, T0, a_len + i, 1)[:, 0]  # [A, H]
            ids_i, pos_i = work[:, : width - gamma + i], (a_len - 1 + i)[:, None]
            d_i = (fused_laws(draft, ids_i, pos_i, d_act, hist, dest=draft_probs_t[:, i], sample=True,
                              generator=generator) if fused else None)
            if d_i is None:
                laws = model_laws(draft, ids_i, pos_i, d_act, hist, process=process_logits, share=share)  # q_i
                d_i = laws.sample(generator)  # [A]
                if fused:
                    draft_probs_t[:, i] = laws.rows()
                else:
                    draft_laws.append(laws)
            work[a_rows, a_len + i] = d_i
            draft_ids[:, i] = d_i
        if not fused:
            draft_probs_t = _stack_laws(draft_laws)  # [A, γ, V]
        del draft_laws
        draft_calls += gamma

        # One target call for all γ+1 prefixes; penalties re-applied per prefix.
        positions = (a_len - 1)[:, None] + steps[None]  # [A, γ+1]
        hist = _prefix_histories(work, T0, a_len, gamma + 1).reshape(A * (gamma + 1), -1)  # [A(γ+1), H]
        need_probs = not logits_level or observer is not None
        t_act = t_bp.select(act).repeat_interleave(gamma + 1)
        done_fused = False
        if fused:
            target_probs = workspace.take("target_probs", (A, gamma + 1, V), device=device)
            done_fused = fused_laws(target, work, positions, t_act, hist, dest=target_probs.view(A * (gamma + 1), V))
        if not done_fused:
            extra = (prompt_ids[act].repeat_interleave(gamma + 1, 0),) if logits_level and need_probs else ()
            laws = model_laws(target, work, positions, t_act, hist,
                              process=(processing_of(verifier) if logits_level else process_logits) if need_probs
                              else None, extra=extra, keep_logits=logits_level, share=share)
            if fused:
                target_probs.view(A * (gamma + 1), V).copy_(laws.rows())
            else:
                target_probs = laws.rows().reshape(A, gamma + 1, V) if need_probs else None
            if logits_level:
                t_logits = laws.logits_rows().reshape(A, gamma + 1, V)  # [A, γ+1, V], raw
            del laws
        target_calls += 1
        if logits_level:  # the sampler processes the raw logits per prefix itself
            act_list = act.tolist()
            out = verifier.verify_logits(LogitsVerifyInputs(
                draft_token_ids=draft_ids.clone(), draft_probs=draft_probs_t, target_logits=t_logits,
                target_params=tuple(t_list[r] for r in act_list), prompt_token_ids=prompt_ids[act],
                output_token_ids=_prefix_histories(work, T0, a_len, 1)[:, 0]), generator)
            del t_logits
        else:
            # The verifier gets its own copy of the ids: its output is checked against ours.
            out = verifier(draft_ids.clone(), draft_probs_t, target_probs, generator)
        num = check_verifier_output(out, draft_ids, V)  # [A], emitted per row
        out = out.to(device).long()
        round_log = torch.full((B,), -1, dtype=torch.int64, device=device)
        round_log[act] = num - 1
        accepted_log.append(round_log)

        # Cut after EOS and at max_new_tokens, then append.
        keep = steps[None] < num[:, None]  # [A, γ+1]
        if eos_token_id is not None:
            is_eos = (out == eos_token_id) & keep
            after_eos = (is_eos.to(torch.int64).cumsum(1) - is_eos.to(torch.int64)) > 0
            keep &= ~after_eos
        remaining = T0 + max_new_tokens - a_len  # [A]
        keep &= steps[None] < remaining[:, None]
        m = keep.sum(1)  # [A]
        if observer is not None:
            observer(RoundRecord(round_index=len(accepted_log) - 1, rows=act, num_generated=a_len - T0,
                                 draft_token_ids=draft_ids, draft_probs=draft_probs_t, target_probs=target_probs,
                                 output=out, num_emitted=num, num_kept=m))
        r_idx, c_idx = keep.nonzero(as_tuple=True)
        seq[act[r_idx], a_len[r_idx] + c_idx] = out[r_idx, c_idx]
        lengths[act] = a_len + m
        finished = lengths[act] >= T0 + max_new_tokens
        if eos_token_id is not None:
            finished |= ((out == eos_token_id) & keep).any(1)
        done[act] = finished
        del draft_probs_t, target_probs, out

    tokens = seq[:, T0 : T0 + max_new_tokens]
    return GenerationOutput(
        tokens=tokens,
        num_tokens=lengths - T0,
        target_calls=target_calls,
        draft_calls=draft_calls,
        accepted_lengths=torch.stack(accepted_log, 1),
    )
