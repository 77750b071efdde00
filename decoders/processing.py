"""Logits processing in a declared order of operations (the reference for logits-level samplers).

:func:`~specexact.decoders.process_logits` fixes one order (vLLM v1's: penalties,
temperature, min-p, top-k, top-p) and counts only the generated tokens in the penalties.
Engines that process logits themselves differ: Hugging Face ``generate`` applies the
repetition penalty over the prompt too, and min-p *after* top-k and top-p. An audit of
such an engine must compare it with the law its own order gives, not ours, or a correct
engine fails. :class:`LogitsProcessing` states an order; calling it computes the law.

Each operation, whatever its place in the order, does what
:func:`~specexact.decoders.process_logits` documents for it, on the logits as they stand
at that point (a truncated token is ``-inf`` from then on):

- ``repetition_penalty``: a seen token's positive logit is divided by the penalty, a
  negative one multiplied (CTRL, Keskar et al. 2019, eq. 1);
- ``frequency_penalty`` / ``presence_penalty``: ``- f * count`` / ``- r * [count > 0]``;
- ``temperature``: divide by it (``0``: the result is a point mass on the argmax of the
  final logits, lowest id among ties);
- ``min_p``: keep ``softmax >= min_p * max(softmax)``;
- ``top_k``: keep logits ``>=`` the k-th largest (ties kept);
- ``top_p``: keep the smallest set of most probable tokens whose mass is ``>= top_p``
  (ties by lower id first; the most probable token always kept).

Declared semantics
------------------
Engines also differ in what one operation does. :class:`LogitsProcessing` declares, per
operation, the variant the engine implements (the defaults are the built-in's, above), and
every reference law computed with it uses them:

- ``top_k_ties``: ``"keep_ties"`` (every token tied with the k-th value kept: the built-in,
  vLLM) or exactly ``k`` tokens with the ties at the k-th value broken by ``"lower_id"``
  (alias ``"exactly_k"``; FlashInfer's ``tie_break`` *small*) or ``"higher_id"`` (*large*);
- ``top_p_boundary``: ``"inclusive"`` (the smallest set of mass ``>= top_p``: the
  built-in) or ``"exclusive"`` (the smallest set of mass ``> top_p``);
  ``top_p_ties``: how tokens of equal probability are ranked: ``"lower_id"`` first (the
  built-in), ``"higher_id"`` first, or ``"keep_ties"`` (every token as probable as the last
  one kept is kept too: mlx-lm 0.32's ``apply_top_p``);
- ``min_p_law`` / ``top_p_law``: the law the operation reads: ``"as_ordered"`` (the law at
  its place in the order: after the temperature in the built-in order, vLLM and
  transformers) or ``"untempered"`` (the law the same operations give without the division
  by the temperature, wherever the operation sits). An operation placed before
  ``"temperature"`` in the order reads the untempered law either way (mlx-lm and llama.cpp
  apply the temperature last: declare that order);
- ``repetition_penalty_scope`` / ``frequency_penalty_scope`` / ``presence_penalty_scope``:
  the tokens each penalty counts, ``"output"`` (the generated tokens: the built-in) or
  ``"prompt_and_output"``; ``repetition_penalty_window`` / ``frequency_penalty_window`` /
  ``presence_penalty_window``: ``None`` (the whole context) or ``N``, only the last ``N``
  tokens of that context (mlx-lm's ``*_context_size``, llama.cpp's ``penalty_last_n``);
- ``min_tokens_mask``: where ``min_tokens`` sets EOS to ``-inf`` (end-to-end engines,
  :class:`~specexact.decoders.engines.EngineCapabilities`): ``"before_processing"`` (before
  every operation, so truncation chooses among the other tokens: vLLM, transformers) or
  ``"after_processing"`` (EOS removed from the kept set and the rest renormalised).

What cannot be declared is refused with the reason (:class:`LogitsProcessing` raises
``ValueError``): a tie-break that is not a function of the token ids (``"random"``,
``"unspecified"``: the law is not determined), a window below 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from .params import BatchedParams, SamplingParams
from .pipeline import (
    _nucleus_reference,
    _validate_logits,
    _widen_if_overflow,
    process_logits,
    token_counts,
)

__all__ = [
    "OPERATIONS",
    "PENALTIES",
    "BUILTIN_ORDER",
    "SEMANTICS_FIELDS",
    "PENALTY_SCOPES",
    "TOP_K_TIES",
    "TOP_P_BOUNDARIES",
    "TOP_P_TIES",
    "TRUNCATION_LAWS",
    "MIN_TOKENS_MASKS",
    "LogitsProcessing",
    "BUILTIN_PROCESSING",
    "process_logits_in_order",
]

PENALTIES = ("repetition_penalty", "frequency_penalty", "presence_penalty")
"""The penalty operations, in the built-in order; ``"penalties"`` in an order stands for them."""

OPERATIONS = PENALTIES + ("temperature", "min_p", "top_k", "top_p")
"""Operation names an order may hold (plus the shorthand ``"penalties"``)."""

BUILTIN_ORDER = OPERATIONS
"""The order of :func:`~specexact.decoders.process_logits` (vLLM v1's ``Sampler``)."""

RepetitionScope = Literal["output", "prompt_and_output"]
PenaltyScope = RepetitionScope

PENALTY_SCOPES = ("output", "prompt_and_output")
"""The token contexts a penalty may count (its ``*_penalty_scope``)."""

TOP_K_TIES = ("keep_ties", "lower_id", "higher_id")
"""Values of :attr:`LogitsProcessing.top_k_ties` (``"exactly_k"`` is accepted for ``"lower_id"``)."""

TOP_P_BOUNDARIES = ("inclusive", "exclusive")
"""Values of :attr:`LogitsProcessing.top_p_boundary`."""

TOP_P_TIES = ("lower_id", "higher_id", "keep_ties")
"""Values of :attr:`LogitsProcessing.top_p_ties`."""

TRUNCATION_LAWS = ("as_ordered", "untempered")
"""Values of :attr:`LogitsProcessing.min_p_law` and :attr:`LogitsProcessing.top_p_law`."""

MIN_TOKENS_MASKS = ("before_processing", "after_processing")
"""Values of :attr:`LogitsProcessing.min_tokens_mask`."""

_UNDECLARABLE_TIE_BREAKS = {
    "random": "a random tie-break does not determine the law",
    "unspecified": "an unspecified tie-break (e.g. torch.topk / argpartition on ties) does not determine the law",
    "any": "an arbitrary tie-break does not determine the law",
}

_PENALTY_SCOPE_FIELDS = {"repetition_penalty": "repetition_penalty_scope",
                         "frequency_penalty": "frequency_penalty_scope",
                         "presence_penalty": "presence_penalty_scope"}
_PENALTY_WINDOW_FIELDS = {"repetition_penalty": "repetition_penalty_window",
                          "frequency_penalty": "frequency_penalty_window",
                          "presence_penalty": "presence_penalty_window"}

SEMANTICS_FIELDS = ("top_k_ties", "top_p_boundary", "top_p_ties", "min_p_law", "top_p_law",
                    "frequency_penalty_scope", "presence_penalty_scope", "repetition_penalty_window",
                    "frequency_penalty_window", "presence_penalty_window", "min_tokens_mask")
"""The per-operation variants of :class:`LogitsProcessing` beyond its order, repetition
scope and greedy flag (what :attr:`~specexact.decoders.adapters.Capabilities.semantics`
may set)."""

_PARAM_OF_OPERATION = {
    "repetition_penalty": ("repetition_penalty", 1.0),
    "frequency_penalty": ("frequency_penalty", 0.0),
    "presence_penalty": ("presence_penalty", 0.0),
    "temperature": ("temperature", 1.0),
    "min_p": ("min_p", 0.0),
    "top_k": ("top_k", 0),
    "top_p": ("top_p", 1.0),
}


@dataclass(frozen=True)
class LogitsProcessing:
    """An order of logits operations and the variant of each operation (the module docstring).

    Parameters
    ----------
    order : tuple of str
        Operations from :data:`OPERATIONS` in the order they are applied; ``"penalties"``
        expands to :data:`PENALTIES`. An operation left out is one the engine does not
        implement: parameters that need it are refused (:meth:`unsupported`).
    repetition_penalty_scope : {"output", "prompt_and_output"}
        Which tokens the repetition penalty counts: the generated ones (the built-in), or
        the prompt as well (Hugging Face, vLLM).
    greedy : bool
        Whether ``temperature == 0`` (greedy) is supported.
    top_k_ties : {"keep_ties", "lower_id", "higher_id"}
        ``"keep_ties"`` (the built-in): every token tied with the k-th largest logit is
        kept; ``"lower_id"`` (alias ``"exactly_k"``) / ``"higher_id"``: exactly ``k``
        tokens, ties at the k-th value broken by the lower / higher token id.
    top_p_boundary : {"inclusive", "exclusive"}
        The smallest set of most probable tokens whose mass is ``>= top_p`` (the built-in)
        or ``> top_p``.
    top_p_ties : {"lower_id", "higher_id", "keep_ties"}
        Tokens of equal probability ranked lower id first (the built-in) or higher id
        first, or ``"keep_ties"``: every token as probable as the last one kept is kept.
    min_p_law, top_p_law : {"as_ordered", "untempered"}
        The law min-p (its maximum probability) and top-p read: the law at the operation's
        place in the order (the built-in), or the law the same operations give without the
        division by the temperature.
    frequency_penalty_scope, presence_penalty_scope : {"output", "prompt_and_output"}
        As ``repetition_penalty_scope``, for the frequency / presence penalty (built-in:
        ``"output"``).
    repetition_penalty_window, frequency_penalty_window, presence_penalty_window : int or None
        ``None`` (the built-in): the penalty counts its whole scope; ``N >= 1``: only the
        last ``N`` tokens of it (prompt then generated tokens, in order).
    min_tokens_mask : {"before_processing", "after_processing"}
        Where a ``min_tokens`` mask (EOS at ``-inf`` until enough tokens were generated,
        end-to-end engines) is applied: before every operation (vLLM, transformers) or
        after them (then the rest is renormalised). See :func:`process_logits_in_order`'s
        ``min_tokens_masked``.

    Raises
    ------
    ValueError
        An unknown or repeated operation, an unknown variant, a tie-break that does not
        determine the law (``"random"``, ``"unspecified"``), a window that is not an
        integer ``>= 1``; the message names the field and its value.

    Examples
    --------
    Hugging Face ``generate`` (``GenerationMixin._get_logits_processor``, transformers 5.x)::

        LogitsProcessing(order=("repetition_penalty", "temperature", "top_k", "top_p", "min_p"),
                         repetition_penalty_scope="prompt_and_output", greedy=False)

    mlx-lm 0.32 (``make_sampler``: top-p, min-p, top-k on the log-probabilities, then the
    temperature in ``categorical_sampling``; top-p keeps the tokens tied at its threshold;
    penalties over the last 20 tokens of prompt and output)::

        LogitsProcessing(order=("penalties", "top_p", "min_p", "top_k", "temperature"),
                         top_p_ties="keep_ties", repetition_penalty_scope="prompt_and_output",
                         frequency_penalty_scope="prompt_and_output",
                         presence_penalty_scope="prompt_and_output", repetition_penalty_window=20,
                         frequency_penalty_window=20, presence_penalty_window=20)

    (mlx-lm's top-k uses ``argpartition``, whose tie-break is unspecified: a law with ties
    at the k-th value cannot be declared for it.)
    """

    order: tuple[str, ...] = BUILTIN_ORDER
    repetition_penalty_scope: RepetitionScope = "output"
    greedy: bool = True
    top_k_ties: str = "keep_ties"
    top_p_boundary: str = "inclusive"
    top_p_ties: str = "lower_id"
    min_p_law: str = "as_ordered"
    top_p_law: str = "as_ordered"
    frequency_penalty_scope: PenaltyScope = "output"
    presence_penalty_scope: PenaltyScope = "output"
    repetition_penalty_window: int | None = None
    frequency_penalty_window: int | None = None
    presence_penalty_window: int | None = None
    min_tokens_mask: str = "before_processing"

    def __post_init__(self) -> None:
        order = tuple(self.order)
        expanded: list[str] = []
        for op in order:
            expanded.extend(PENALTIES if op == "penalties" else (op,))
        unknown = [op for op in expanded if op not in OPERATIONS]
        if unknown:
            raise ValueError(f"order has unknown operations {unknown}; allowed: {OPERATIONS} or 'penalties'")
        repeated = sorted({op for op in expanded if expanded.count(op) > 1})
        if repeated:
            raise ValueError(f"order names {repeated} more than once: {order!r}")
        if self.repetition_penalty_scope not in ("output", "prompt_and_output"):
            raise ValueError("repetition_penalty_scope must be 'output' or 'prompt_and_output', "
                             f"got {self.repetition_penalty_scope!r}")
        object.__setattr__(self, "order", tuple(expanded))
        if self.top_k_ties == "exactly_k":
            object.__setattr__(self, "top_k_ties", "lower_id")
        for name, allowed in (("top_k_ties", TOP_K_TIES), ("top_p_ties", TOP_P_TIES),
                              ("top_p_boundary", TOP_P_BOUNDARIES), ("min_p_law", TRUNCATION_LAWS),
                              ("top_p_law", TRUNCATION_LAWS), ("frequency_penalty_scope", PENALTY_SCOPES),
                              ("presence_penalty_scope", PENALTY_SCOPES), ("min_tokens_mask", MIN_TOKENS_MASKS)):
            value = getattr(self, name)
            if value in allowed:
                continue
            why = _UNDECLARABLE_TIE_BREAKS.get(value) if name.endswith("_ties") else None
            if why is not None:
                raise ValueError(f"{name}={value!r} cannot be declared: {why}; declare one of {allowed} "
                                 "(or keep the audit's cases free of ties)")
            raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
        for name in _PENALTY_WINDOW_FIELDS.values():
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be None (the whole context) or an integer >= 1, got {value!r}")

    @property
    def is_builtin(self) -> bool:
        """True when this is exactly :func:`~specexact.decoders.process_logits`' processing."""
        return self == BUILTIN_PROCESSING

    def semantics(self) -> dict:
        """The per-operation variants (:data:`SEMANTICS_FIELDS`) that differ from the built-in's,
        e.g. ``{"top_k_ties": "lower_id"}`` (empty for the built-in semantics)."""
        return {name: getattr(self, name) for name in SEMANTICS_FIELDS
                if getattr(self, name) != getattr(BUILTIN_PROCESSING, name)}

    def penalty_context(self, penalty: str) -> tuple[str, int | None]:
        """``(scope, window)`` of one of :data:`PENALTIES`: the tokens it counts."""
        if penalty not in _PENALTY_SCOPE_FIELDS:
            raise ValueError(f"penalty must be one of {PENALTIES}, got {penalty!r}")
        return getattr(self, _PENALTY_SCOPE_FIELDS[penalty]), getattr(self, _PENALTY_WINDOW_FIELDS[penalty])

    def unsupported(self, params: SamplingParams) -> list[str]:
        """The settings of ``params`` this processing cannot apply, e.g. ``["presence_penalty=0.5"]``.

        A parameter at its neutral value (``top_k=0``, ``top_p=1``, a penalty of ``1`` / ``0``,
        ``temperature=1``) needs no operation.
        """
        out = []
        for op, (field, neutral) in _PARAM_OF_OPERATION.items():
            value = getattr(params, field)
            if value != neutral and op not in self.order and not (op == "temperature" and value == 0):
                out.append(f"{field}={value!r}")
        if params.temperature == 0 and not self.greedy:
            out.append("temperature=0 (greedy)")
        return out

    def to_dict(self) -> dict:
        """JSON-ready form, for reports: the order, the repetition scope, greedy, and every
        per-operation variant (:data:`SEMANTICS_FIELDS`)."""
        return {"order": list(self.order), "repetition_penalty_scope": self.repetition_penalty_scope,
                "greedy": self.greedy, **{name: getattr(self, name) for name in SEMANTICS_FIELDS}}

    def __call__(self, logits: torch.Tensor, params: BatchedParams, history: torch.Tensor | None = None,
                 prompt_ids: torch.Tensor | None = None, *,
                 min_tokens_masked: torch.Tensor | None = None) -> torch.Tensor:
        """The sampling law; see :func:`process_logits_in_order` (which this calls, or
        :func:`~specexact.decoders.process_logits` when :attr:`is_builtin`)."""
        if self.is_builtin:
            if min_tokens_masked is not None:
                _check_mask(min_tokens_masked, logits)
                logits = logits.masked_fill(min_tokens_masked, -torch.inf)
            return process_logits(logits, params, history)
        return process_logits_in_order(logits, params, history, prompt_ids=prompt_ids, processing=self,
                                       min_tokens_masked=min_tokens_masked)


BUILTIN_PROCESSING = LogitsProcessing()
"""The built-in processing (:func:`~specexact.decoders.process_logits`)."""


def process_logits_in_order(
    logits: torch.Tensor,
    params: BatchedParams,
    history: torch.Tensor | None = None,
    *,
    prompt_ids: torch.Tensor | None = None,
    processing: LogitsProcessing = BUILTIN_PROCESSING,
    min_tokens_masked: torch.Tensor | None = None,
) -> torch.Tensor:
    """Turn raw logits into the sampling law, applying operations in ``processing.order``
    with the variants ``processing`` declares.

    Shape: ``logits [B, V] -> probs [B, V]``.

    A readable reference, one operation at a time over the batch (see the module
    docstring for what each operation and each variant does). With the built-in
    processing it gives the law of :func:`~specexact.decoders.process_logits` up to
    rounding (the tests compare them).

    Parameters
    ----------
    logits : torch.Tensor
        Shape ``[B, V]``, floating point (half precision is computed in float32).
    params : BatchedParams
        Per-row parameters, tensors of shape ``[B]``.
    history : torch.LongTensor, optional
        Shape ``[B, H]``: the generated tokens the penalties count, in order, ``-1`` for
        padding (anywhere; a window counts the last valid entries).
    prompt_ids : torch.LongTensor, optional
        Shape ``[B, T0]``: the prompt, counted (before ``history``) by the penalties whose
        scope is ``"prompt_and_output"``; ``-1`` for padding.
    processing : LogitsProcessing
    min_tokens_masked : torch.BoolTensor, optional
        Shape ``[B, V]``: tokens set to ``-inf`` at this step (EOS while fewer than
        ``min_tokens`` tokens were generated), before every operation or after them as
        ``processing.min_tokens_mask`` declares.

    Returns
    -------
    torch.Tensor
        Shape ``[B, V]``, float32 (float64 for float64 input); rows sum to 1 within
        rounding; exact zeros outside the kept set.

    Raises
    ------
    ValueError
        NaN / ``+inf`` / all ``-inf`` logits, mismatched batch sizes, ids outside
        ``[0, V)``, a prompt missing where a penalty's scope needs it, a parameter the
        order does not implement (named with its value and row), or a ``min_tokens``
        mask of another shape or one that leaves a row no token.
    """
    _validate_logits(logits)
    B, V = logits.shape
    if params.batch_size != B:
        raise ValueError(f"params has {params.batch_size} rows but logits has {B}")
    for name, t in (("history", history), ("prompt_ids", prompt_ids)):
        if t is not None and (t.dim() != 2 or t.shape[0] != B):
            raise ValueError(f"{name} must have shape [{B}, H], got {tuple(t.shape)}")
    if min_tokens_masked is not None:
        _check_mask(min_tokens_masked, logits)
    _refuse_unsupported(params, processing)
    x = logits if logits.dtype in (torch.float32, torch.float64) else logits.float()
    x, narrow_to = _widen_if_overflow(x, params)
    neg_inf = torch.tensor(-torch.inf, dtype=x.dtype, device=x.device)
    if min_tokens_masked is not None and processing.min_tokens_mask == "before_processing":
        x = torch.where(min_tokens_masked, neg_inf, x)
        _validate_logits(x)
    empty = torch.empty(B, 0, dtype=torch.int64, device=x.device)
    output = history if history is not None else empty
    counts = token_counts(output, V).to(x.dtype)  # [B, V]: checks the ids
    counts_of = {}
    for penalty, field in (("repetition_penalty", "repetition_penalty"), ("frequency_penalty", "frequency_penalty"),
                           ("presence_penalty", "presence_penalty")):
        scope, window = processing.penalty_context(penalty)
        if scope == "output" and window is None:
            counts_of[penalty] = counts
            continue
        neutral = _PARAM_OF_OPERATION[penalty][1]
        if not bool((getattr(params, field) != neutral).any()):
            counts_of[penalty] = counts  # not applied: any counts do
            continue
        if scope == "prompt_and_output" and prompt_ids is None:
            raise ValueError(f"prompt_ids is required: the {penalty.replace('_', ' ')} counts the prompt "
                             f"({_PENALTY_SCOPE_FIELDS[penalty]}='prompt_and_output')")
        tokens = output if scope == "output" else torch.cat([prompt_ids.long(), output.long()], dim=1)
        counts_of[penalty] = token_counts(_last_tokens(tokens, window), V).to(x.dtype)

    def col(t: torch.Tensor) -> torch.Tensor:
        return t.to(x.dtype)[:, None]  # [B, 1]

    # u: the same operations without the division by the temperature (for the "untempered"
    # variants of min-p and top-p); kept only when one of them is declared.
    track = "untempered" in (processing.min_p_law, processing.top_p_law)
    u = x
    for op in processing.order:
        if op == "repetition_penalty":
            rep, seen = col(params.repetition_penalty), counts_of[op] > 0
            x = torch.where(seen, torch.where(x > 0, x / rep, x * rep), x)
            u = torch.where(seen, torch.where(u > 0, u / rep, u * rep), u) if track else x
            continue
        if op == "frequency_penalty":
            delta = col(params.frequency_penalty) * counts_of[op]
        elif op == "presence_penalty":
            delta = col(params.presence_penalty) * (counts_of[op] > 0).to(x.dtype)
        elif op == "temperature":
            t = params.temperature
            x = x / col(torch.where(t == 0, torch.ones_like(t), t))
            if not track:
                u = x
            continue
        if op in ("frequency_penalty", "presence_penalty"):
            x = x - delta
            u = u - delta if track else x
            continue
        keep = _truncation(op, x, u, params, processing)
        if keep is not None:
            x = torch.where(keep, x, neg_inf)
            u = torch.where(keep, u, neg_inf) if track else x
    if min_tokens_masked is not None and processing.min_tokens_mask == "after_processing":
        x = torch.where(min_tokens_masked, neg_inf, x)
        dead = torch.isneginf(x).all(-1)
        if bool(dead.any()):
            raise ValueError(f"min_tokens_masked leaves row {int(dead.nonzero()[0, 0])} no token after processing "
                             "(min_tokens_mask='after_processing')")
    probs = torch.softmax(x, dim=-1)
    greedy = params.temperature == 0
    if bool(greedy.any()):
        one_hot = torch.zeros_like(probs).scatter_(1, x.argmax(-1, keepdim=True), 1.0)
        probs = torch.where(greedy[:, None], one_hot, probs)
    return probs if narrow_to is None else probs.to(narrow_to)


def _check_mask(mask: torch.Tensor, logits: torch.Tensor) -> None:
    if mask.dtype != torch.bool or tuple(mask.shape) != tuple(logits.shape):
        raise ValueError(f"min_tokens_masked must be a bool tensor of shape {tuple(logits.shape)}, "
                         f"got {mask.dtype} {tuple(mask.shape)}")


def _last_tokens(tokens: torch.Tensor, window: int | None) -> torch.Tensor:
    """``tokens [B, T]`` with every valid entry (``>= 0``) but the last ``window`` of its
    row set to ``-1`` (``window`` None: unchanged)."""
    if window is None or tokens.shape[1] == 0:
        return tokens
    valid = tokens >= 0
    from_end = valid.flip(1).cumsum(1).flip(1)  # valid entries at or after each position
    return torch.where(valid & (from_end <= window), tokens, -1)


def _truncation(op: str, x: torch.Tensor, u: torch.Tensor, params: BatchedParams,
                processing: LogitsProcessing) -> torch.Tensor | None:
    """The kept set ``[B, V]`` of truncation ``op`` (None: nothing cut), on the current
    logits ``x`` or their untempered twin ``u`` as declared."""
    B, V = x.shape
    if op == "min_p":
        probs = torch.softmax(u if processing.min_p_law == "untempered" else x, dim=-1)
        return probs >= params.min_p.to(x.dtype)[:, None] * probs.amax(-1, keepdim=True)
    if op == "top_k":
        rows = ((params.top_k > 0) & (params.top_k < V)).nonzero().squeeze(1)
        if not rows.numel():
            return None
        k = params.top_k[rows]
        keep = torch.ones(B, V, dtype=torch.bool, device=x.device)
        if processing.top_k_ties == "keep_ties":
            kth = torch.topk(x[rows], int(k.max()), dim=-1).values.gather(1, (k - 1)[:, None])
            keep[rows] = x[rows] >= kth
        else:
            keep[rows] = _ranks(x[rows], processing.top_k_ties == "higher_id") < k[:, None]
        return keep
    if op == "top_p":
        rows = (params.top_p < 1).nonzero().squeeze(1)
        if not rows.numel():
            return None
        law = u if processing.top_p_law == "untempered" else x
        kept = torch.softmax(law[rows].to(torch.float64), dim=-1)
        keep = torch.ones(B, V, dtype=torch.bool, device=x.device)
        keep[rows] = _nucleus(kept, params.top_p[rows].to(torch.float64), processing)
        return keep
    raise AssertionError(op)


def _ranks(values: torch.Tensor, higher_id_first: bool) -> torch.Tensor:
    """Rank (0 = first) of every entry of each row of ``values [R, V]`` in descending order,
    ties by lower id first (or higher id first)."""
    V = values.shape[-1]
    v = values.flip(-1) if higher_id_first else values
    order = torch.sort(v, dim=-1, descending=True, stable=True).indices
    if higher_id_first:
        order = V - 1 - order
    ranks = torch.empty_like(order)
    ranks.scatter_(1, order, torch.arange(V, device=values.device).expand_as(order).contiguous())
    return ranks


def _nucleus(kept: torch.Tensor, top_p: torch.Tensor, processing: LogitsProcessing) -> torch.Tensor:
    """The top-p set ``[R, V]`` of normalised float64 probabilities ``kept [R, V]`` under the
    declared boundary and tie ranking (the built-in's: :func:`_nucleus_reference`)."""
    if processing.top_p_boundary == "inclusive" and processing.top_p_ties == "lower_id":
        return _nucleus_reference(kept, top_p)
    V = kept.shape[-1]
    higher = processing.top_p_ties == "higher_id"
    v = kept.flip(-1) if higher else kept
    sorted_probs, order = torch.sort(v, dim=-1, descending=True, stable=True)
    if higher:
        order = V - 1 - order
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs  # exclusive cumsum
    if processing.top_p_boundary == "inclusive":
        in_nucleus = mass_before < top_p[:, None]
    else:
        in_nucleus = mass_before <= top_p[:, None]
    in_nucleus[:, 0] = True  # the most probable token is always kept
    nucleus = torch.zeros_like(in_nucleus).scatter_(1, order, in_nucleus)
    if processing.top_p_ties == "keep_ties":
        last = torch.where(nucleus, kept, torch.inf).amin(-1, keepdim=True)  # the least probable kept
        nucleus = kept >= last
    return nucleus


def _refuse_unsupported(params: BatchedParams, processing: LogitsProcessing) -> None:
    for op, (field, neutral) in _PARAM_OF_OPERATION.items():
        values = getattr(params, field)
        bad = values != neutral
        if op == "temperature":
            bad &= values != 0
        if op not in processing.order and bool(bad.any()):
            row = int(bad.nonzero()[0, 0])
            raise ValueError(f"{field}={float(values[row])!r} (row {row}) needs the operation {op!r}, "
                             f"which the order {processing.order} does not include")
    if not processing.greedy and bool((params.temperature == 0).any()):
        row = int((params.temperature == 0).nonzero()[0, 0])
        raise ValueError(f"temperature=0 (greedy, row {row}) is not supported by this processing")
