"""Reference laws of a tiny model's own generation: what an engine's output must follow.

Given the target (a :class:`~specexact.decoders.tiny_models.TinyCausalLM`, or any model
with the :class:`~specexact.decoders.ToyLM` call interface, evaluated in float64), a prompt,
the request's :class:`~specexact.decoders.SamplingParams` and the engine's declared
:class:`~specexact.decoders.processing.LogitsProcessing` (its order of operations and the
token scope of its repetition penalty):

- :func:`exact_sequence_law`: the exact law of the emitted sequences of at most
  ``max_tokens`` tokens, by enumeration over the support (teacher-forced forwards over
  the tree of outputs, one batched forward per depth);
- :func:`conditional_laws`: for observed outputs too long to enumerate, the processed law
  at every position given the observed prefix (one batched teacher-forced forward), for
  per-position checks such as the randomised PIT (:mod:`specexact.exactness.pit`);
- :func:`expected_acceptance`: the exact probability that the first ``j`` drafts of the
  first round are accepted, target and draft both ours.

Semantics shared by all three: the penalties count the generated tokens (and the prompt
for the repetition penalty when the processing's scope says so), position by position;
``min_tokens`` masks EOS for the first ``min_tokens`` generated tokens by setting its raw
logit to ``-inf`` before the processing (vLLM's and Hugging Face's min-tokens logits
processors do this); a sequence ends at EOS (kept as its last token).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from specexact.decoders.params import SamplingParams, batch_params
from specexact.decoders.processing import BUILTIN_PROCESSING, LogitsProcessing
from specexact.exactness.enumeration import SequenceLaw, sequence_law

__all__ = ["exact_sequence_law", "ConditionalLaws", "conditional_laws", "expected_acceptance"]


def _float64(model):
    return model.to(dtype=torch.float64) if getattr(model, "dtype", None) != torch.float64 else model


def _prompt(prompt_ids, vocab_size: int, device) -> torch.Tensor:
    prompt = torch.as_tensor(prompt_ids, dtype=torch.int64).reshape(1, -1).to(device)
    if prompt.shape[1] == 0 or int(prompt.min()) < 0 or int(prompt.max()) >= vocab_size:
        raise ValueError(f"prompt_ids must be a non-empty sequence of ids in [0, {vocab_size}), "
                         f"got {prompt.tolist()[0][:10]}")
    return prompt


def _check_lengths(max_tokens: int, min_tokens: int) -> None:
    if int(max_tokens) != max_tokens or max_tokens < 1:
        raise ValueError(f"max_tokens must be an integer >= 1, got {max_tokens!r}")
    if int(min_tokens) != min_tokens or not 0 <= min_tokens <= max_tokens:
        raise ValueError(f"min_tokens must be an integer in [0, max_tokens={max_tokens}], got {min_tokens!r}")


def exact_sequence_law(
    model,
    prompt_ids: Sequence[int] | torch.Tensor,
    params: SamplingParams,
    processing: LogitsProcessing | None = None,
    *,
    max_tokens: int,
    min_tokens: int = 0,
    eos_token_id: int | None = None,
    max_outcomes: int = 2_000_000,
) -> SequenceLaw:
    """The exact law of the sequences an engine emits for one request, by enumeration.

    Parameters
    ----------
    model : TinyCausalLM or ToyLM-like
        The target; evaluated in float64.
    prompt_ids : sequence of int or torch.LongTensor
        Shape ``[T0]``, ids in ``[0, V)``.
    params : SamplingParams
        The request's sampling parameters.
    processing : LogitsProcessing, optional
        The engine's declared processing (default: the built-in one).
    max_tokens : int
        Tokens per sequence at most (``>= 1``).
    min_tokens : int, default 0
        EOS masked for the first ``min_tokens`` tokens (module docstring).
    eos_token_id : int or None
        Ends a sequence (kept as its last token); None: every sequence has ``max_tokens``.
    max_outcomes : int
        Largest number of prefixes enumerated at one depth (prefixes of positive
        probability times V).

    Returns
    -------
    SequenceLaw
        ``sequences [M, max_tokens]`` (``-1`` after an EOS), ``probs [M]`` float64
        summing to 1, outcomes of positive probability only.

    Raises
    ------
    ValueError
        The support is too large to enumerate (the message names the number of prefixes
        and ``max_outcomes``), a malformed prompt, ``max_tokens`` / ``min_tokens`` out of
        range, or parameters ``processing`` does not implement.
    """
    _check_lengths(max_tokens, min_tokens)
    m64 = _float64(model)
    prompt = _prompt(prompt_ids, m64.vocab_size, m64.device)
    return sequence_law(m64, prompt[0], params, length=int(max_tokens), eos_token_id=eos_token_id,
                        max_outcomes=max_outcomes, processing=processing, min_tokens=int(min_tokens))


@dataclass(frozen=True)
class ConditionalLaws:
    """The target's processed law at every position of observed outputs.

    Attributes
    ----------
    sequences : torch.LongTensor
        Shape ``[N, L]``: the outputs, left-aligned, ``-1`` after their end.
    lengths : torch.LongTensor
        Shape ``[N]``: tokens of each output.
    probs : torch.Tensor
        Shape ``[N, L, V]``, float64: ``probs[n, j]`` is the law of token ``j`` given the
        prompt and ``sequences[n, :j]``; NaN where ``j >= lengths[n]``.
    """

    sequences: torch.Tensor
    lengths: torch.Tensor
    probs: torch.Tensor

    @property
    def valid(self) -> torch.Tensor:
        """Shape ``[N, L]`` bool: positions that hold a token (and a law)."""
        L = self.sequences.shape[1]
        return torch.arange(L, device=self.lengths.device)[None] < self.lengths[:, None]

    def token_probs(self) -> torch.Tensor:
        """Probability of each observed token under its law. Shape ``[N, L]`` float64
        (NaN past the end; 0 marks a token the law cannot produce)."""
        p = self.probs.gather(2, self.sequences.clamp_min(0)[:, :, None])[:, :, 0]
        return torch.where(self.valid, p, torch.nan)

    def pit(self, w: torch.Tensor) -> torch.Tensor:
        """Randomised PIT of every observed token (:func:`specexact.exactness.pit.discrete_pit`,
        tokens ordered by id): i.i.d. ``Uniform(0, 1)`` over the valid positions when the
        outputs follow the laws.

        Shape: ``w [N, L]`` (independent uniforms) ``-> U [N, L]`` float64, NaN past the end.
        """
        from specexact.exactness.pit import discrete_pit

        if tuple(w.shape) != tuple(self.sequences.shape):
            raise ValueError(f"w must have shape {tuple(self.sequences.shape)}, got {tuple(w.shape)}")
        valid = self.valid
        probs = torch.where(valid[:, :, None], self.probs, 0.0)
        tok = self.sequences.clamp_min(0)[:, :, None]
        before = (probs.cumsum(2) - probs).gather(2, tok)[:, :, 0]
        at = probs.gather(2, tok)[:, :, 0]
        total = torch.where(valid, probs.sum(2), 1.0)
        u = discrete_pit(before.reshape(-1), at.reshape(-1), total.reshape(-1), w.reshape(-1).to(torch.float64))
        return torch.where(valid, u.reshape(w.shape), torch.nan)


def _as_sequences(sequences, device) -> torch.Tensor:
    if isinstance(sequences, torch.Tensor):
        seqs = sequences.to(device=device, dtype=torch.int64)
    elif isinstance(sequences, np.ndarray):
        seqs = torch.as_tensor(sequences, dtype=torch.int64, device=device)
    else:
        rows = [tuple(int(t) for t in s) for s in sequences]
        L = max((len(r) for r in rows), default=0)
        seqs = torch.full((len(rows), L), -1, dtype=torch.int64, device=device)
        for i, r in enumerate(rows):
            seqs[i, : len(r)] = torch.tensor(r, dtype=torch.int64)
    if seqs.dim() != 2 or seqs.shape[0] == 0 or seqs.shape[1] == 0:
        raise ValueError(f"sequences must be a non-empty [N, L] array of ids, got shape {tuple(seqs.shape)}")
    return seqs


def conditional_laws(
    model,
    prompt_ids: Sequence[int] | torch.Tensor,
    sequences,
    params: SamplingParams,
    processing: LogitsProcessing | None = None,
    *,
    min_tokens: int = 0,
    eos_token_id: int | None = None,
    max_rows: int = 4096,
) -> ConditionalLaws:
    """The target's processed law at every position of observed outputs (teacher forcing).

    Parameters
    ----------
    model : TinyCausalLM or ToyLM-like
        The target; evaluated in float64.
    prompt_ids : sequence of int or torch.LongTensor
        Shape ``[T0]``: the prompt every output continues.
    sequences : torch.LongTensor, np.ndarray or sequence of sequences of int
        ``[N, L]`` ``-1``-padded outputs (e.g. ``GenerationOutput.tokens``), or ``N``
        token lists (e.g. ``GenerationResult.token_ids``).
    params : SamplingParams
    processing : LogitsProcessing, optional
        The engine's declared processing (default: the built-in one).
    min_tokens : int, default 0
        EOS masked for the first ``min_tokens`` positions.
    eos_token_id : int or None
        Needed for ``min_tokens``; an output's tokens after its first EOS are refused.
    max_rows : int
        Distinct outputs per forward (memory: ``max_rows * L * V`` float64 laws at once).

    Returns
    -------
    ConditionalLaws
        Laws of the distinct outputs computed once each.

    Raises
    ------
    ValueError
        Ids outside ``[0, V)`` other than the ``-1`` padding, a token after a ``-1`` or
        after an EOS, a malformed prompt, ``min_tokens < 0``, or parameters ``processing``
        does not implement.
    """
    if int(min_tokens) != min_tokens or min_tokens < 0:
        raise ValueError(f"min_tokens must be an integer >= 0, got {min_tokens!r}")
    processing = BUILTIN_PROCESSING if processing is None else processing
    m64 = _float64(model)
    V, device = m64.vocab_size, m64.device
    prompt = _prompt(prompt_ids, V, device)
    T0 = prompt.shape[1]
    seqs = _as_sequences(sequences, device)
    N, L = seqs.shape
    if int(seqs.max()) >= V or int(seqs.min()) < -1:
        raise ValueError(f"sequences must hold ids in [0, {V}) or -1 padding, got [{int(seqs.min())}, "
                         f"{int(seqs.max())}]")
    present = seqs >= 0
    lengths = present.sum(1)
    steps = torch.arange(L, device=device)
    if not bool((present == (steps[None] < lengths[:, None])).all()):
        row = int((present != (steps[None] < lengths[:, None])).any(1).nonzero()[0, 0])
        raise ValueError(f"sequences must be left-aligned (-1 only after the last token): row {row} is "
                         f"{seqs[row].tolist()}")
    if eos_token_id is not None:
        is_eos = (seqs == eos_token_id).to(torch.int64)
        after = (is_eos.cumsum(1) - is_eos) > 0
        if bool((after & present).any()):
            row = int((after & present).any(1).nonzero()[0, 0])
            raise ValueError(f"sequence {row} continues after EOS {eos_token_id}: {seqs[row].tolist()}")
    uniq, inverse = torch.unique(seqs, dim=0, return_inverse=True)
    U = uniq.shape[0]
    out = torch.empty(U, L, V, dtype=torch.float64, device=device)
    positions = (T0 - 1 + steps)[None]  # [1, L]
    for start in range(0, U, max_rows):
        chunk = uniq[start:start + max_rows]  # [C, L]
        C = chunk.shape[0]
        inputs = torch.cat([prompt.expand(C, -1), chunk], 1)  # [C, T0 + L]; -1 read as token 0
        logits = m64(inputs, positions.expand(C, -1)).to(torch.float64)  # [C, L, V]
        if eos_token_id is not None and min_tokens > 0:
            logits = logits.clone()
            logits[:, : int(min_tokens), eos_token_id] = -torch.inf
        hist = torch.where(steps[None, None, :] < steps[None, :, None], chunk[:, None, :], -1)  # [C, L, L]
        probs = processing(logits.reshape(C * L, V), batch_params(params, C * L, device), hist.reshape(C * L, L),
                           prompt.expand(C * L, -1))
        out[start:start + C] = probs.reshape(C, L, V).to(torch.float64)
    probs = out.index_select(0, inverse)  # [N, L, V]
    valid = steps[None] < lengths[:, None]
    probs = torch.where(valid[:, :, None], probs, torch.nan)
    return ConditionalLaws(sequences=seqs, lengths=lengths, probs=probs)


def expected_acceptance(
    target,
    draft,
    prompt_ids: Sequence[int] | torch.Tensor,
    params: SamplingParams,
    draft_params: SamplingParams | None = None,
    processing: LogitsProcessing | None = None,
    *,
    num_speculative_tokens: int,
    draft_processing: LogitsProcessing | None = None,
    min_tokens: int = 0,
    eos_token_id: int | None = None,
    scheme: str = "tokenwise",
    max_paths: int = 2_000_000,
) -> np.ndarray:
    """The exact probability that the first ``j`` drafts of the first round are accepted.

    ``P(N >= j) = sum over draft paths d_1..d_j of prod_i min(p_i(d_i), q_i(d_i))``
    (Leviathan et al. 2023, sec. 3.1), ``p_i`` / ``q_i`` the processed target / draft laws
    after the prompt and ``d_1..d_{i-1}``; ``P(N >= 1) = sum_v min(p_1, q_1)``. With
    ``scheme="sample_compare"`` (the target samples its own token and the draft is kept
    while they agree, mlx-lm) ``min(p, q)`` becomes ``p q``. A greedy draft
    (``draft_params.temperature == 0``) is a point mass, so its term is ``p(argmax q)``.
    EOS plays no part beyond ``min_tokens`` (a round's verifier does not see it).

    Parameters
    ----------
    target, draft : TinyCausalLM or ToyLM-like
        Evaluated in float64; the same vocabulary.
    prompt_ids : sequence of int or torch.LongTensor
        Shape ``[T0]``.
    params : SamplingParams
        The target's (the request's).
    draft_params : SamplingParams, optional
        The draft's, as the engine samples it (default: ``params``).
    processing : LogitsProcessing, optional
        The engine's processing of the target (default: built-in).
    num_speculative_tokens : int
        γ >= 1.
    draft_processing : LogitsProcessing, optional
        The engine's processing of the draft (default: ``processing``).
    min_tokens : int, default 0
        EOS masked on both sides for the first ``min_tokens`` positions.
    eos_token_id : int or None
        Needed for ``min_tokens``.
    scheme : {"tokenwise", "sample_compare"}
    max_paths : int
        Largest number of draft paths enumerated at one depth.

    Returns
    -------
    np.ndarray
        Shape ``[γ]``, float64, non-increasing: entry ``j - 1`` is ``P(N >= j)``. Their
        sum is the expected number of accepted drafts in the first round.

    Raises
    ------
    ValueError
        Different vocabularies, ``num_speculative_tokens < 1``, an unknown ``scheme``, a
        malformed prompt, or more than ``max_paths`` paths at some depth (named).
    """
    accept_mass = {"tokenwise": torch.minimum, "sample_compare": torch.mul}.get(scheme)
    if accept_mass is None:
        raise ValueError(f"scheme must be 'tokenwise' or 'sample_compare', got {scheme!r}")
    gamma = int(num_speculative_tokens)
    if gamma != num_speculative_tokens or gamma < 1:
        raise ValueError(f"num_speculative_tokens must be an integer >= 1, got {num_speculative_tokens!r}")
    if int(min_tokens) != min_tokens or min_tokens < 0:
        raise ValueError(f"min_tokens must be an integer >= 0, got {min_tokens!r}")
    processing = BUILTIN_PROCESSING if processing is None else processing
    draft_processing = processing if draft_processing is None else draft_processing
    draft_params = params if draft_params is None else draft_params
    t64, d64 = _float64(target), _float64(draft)
    V, device = t64.vocab_size, t64.device
    if d64.vocab_size != V:
        raise ValueError(f"draft vocab_size {d64.vocab_size} != target vocab_size {V}")
    prompt = _prompt(prompt_ids, V, device)
    T0 = prompt.shape[1]
    at_least = np.empty(gamma)
    paths = torch.empty(1, 0, dtype=torch.int64, device=device)
    weights = torch.ones(1, dtype=torch.float64, device=device)
    for j in range(gamma):
        N = paths.shape[0]
        if N > max_paths:
            raise ValueError(f"enumerating {N} draft paths at depth {j + 1} exceeds max_paths={max_paths}")
        inputs = torch.cat([prompt.expand(N, -1), paths], 1)
        positions = torch.full((N, 1), T0 + j - 1, dtype=torch.int64, device=device)
        laws = []
        for model, proc, prm in ((t64, processing, params), (d64, draft_processing, draft_params)):
            logits = model(inputs, positions)[:, 0].to(torch.float64)  # [N, V]
            if eos_token_id is not None and j < min_tokens:
                logits = logits.clone()
                logits[:, eos_token_id] = -torch.inf
            laws.append(proc(logits, batch_params(prm, N, device), paths, prompt.expand(N, -1)).to(torch.float64))
        child = weights[:, None] * accept_mass(*laws)  # [N, V]
        at_least[j] = float(child.sum())
        if j + 1 == gamma:
            break
        parent, token = (child > 0).nonzero(as_tuple=True)
        paths = torch.cat([paths[parent], token[:, None]], 1)
        weights = child[parent, token]
    return at_least
