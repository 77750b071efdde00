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
    """An order of logits operations and the token scope of the repetition penalty.

    Parameters
    ----------
    order : tuple of str
        Operations from :data:`OPERATIONS` in the order they are applied; ``"penalties"``
        expands to :data:`PENALTIES`. An operation left out is one the engine does not
        implement: parameters that need it are refused (:meth:`unsupported`).
    repetition_penalty_scope : {"output", "prompt_and_output"}
        Which tokens the repetition penalty counts: the generated ones (the built-in), or
        the prompt as well (Hugging Face, vLLM). Frequency and presence penalties always
        count generated tokens.
    greedy : bool
        Whether ``temperature == 0`` (greedy) is supported.

    Raises
    ------
    ValueError
        An unknown or repeated operation, or an unknown scope; the message names it.

    Examples
    --------
    Hugging Face ``generate`` (``GenerationMixin._get_logits_processor``, transformers 5.x)::

        LogitsProcessing(order=("repetition_penalty", "temperature", "top_k", "top_p", "min_p"),
                         repetition_penalty_scope="prompt_and_output", greedy=False)
    """

    order: tuple[str, ...] = BUILTIN_ORDER
    repetition_penalty_scope: RepetitionScope = "output"
    greedy: bool = True

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

    @property
    def is_builtin(self) -> bool:
        """True when this is exactly :func:`~specexact.decoders.process_logits`' processing."""
        return self.order == BUILTIN_ORDER and self.repetition_penalty_scope == "output" and self.greedy

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
        """JSON-ready form, for reports."""
        return {"order": list(self.order), "repetition_penalty_scope": self.repetition_penalty_scope,
                "greedy": self.greedy}

    def __call__(self, logits: torch.Tensor, params: BatchedParams, history: torch.Tensor | None = None,
                 prompt_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The sampling law; see :func:`process_logits_in_order` (which this calls, or
        :func:`~specexact.decoders.process_logits` when :attr:`is_builtin`)."""
        if self.is_builtin:
            return process_logits(logits, params, history)
        return process_logits_in_order(logits, params, history, prompt_ids=prompt_ids, processing=self)


BUILTIN_PROCESSING = LogitsProcessing()
"""The built-in processing (:func:`~specexact.decoders.process_logits`)."""


def process_logits_in_order(
    logits: torch.Tensor,
    params: BatchedParams,
    history: torch.Tensor | None = None,
    *,
    prompt_ids: torch.Tensor | None = None,
    processing: LogitsProcessing = BUILTIN_PROCESSING,
) -> torch.Tensor:
    """Turn raw logits into the sampling law, applying operations in ``processing.order``.

    Shape: ``logits [B, V] -> probs [B, V]``.

    A readable reference, one operation at a time over the batch (see the module
    docstring for what each operation does). With the built-in order it gives the law of
    :func:`~specexact.decoders.process_logits` up to rounding (the tests compare them).

    Parameters
    ----------
    logits : torch.Tensor
        Shape ``[B, V]``, floating point (half precision is computed in float32).
    params : BatchedParams
        Per-row parameters, tensors of shape ``[B]``.
    history : torch.LongTensor, optional
        Shape ``[B, H]``: the generated tokens the penalties count, ``-1`` for padding.
    prompt_ids : torch.LongTensor, optional
        Shape ``[B, T0]``: counted by the repetition penalty when
        ``processing.repetition_penalty_scope == "prompt_and_output"``; ``-1`` for padding.
    processing : LogitsProcessing

    Returns
    -------
    torch.Tensor
        Shape ``[B, V]``, float32 (float64 for float64 input); rows sum to 1 within
        rounding; exact zeros outside the kept set.

    Raises
    ------
    ValueError
        NaN / ``+inf`` / all ``-inf`` logits, mismatched batch sizes, ids outside
        ``[0, V)``, a prompt missing where the scope needs it, or a parameter the order
        does not implement (named with its value and row).
    """
    _validate_logits(logits)
    B, V = logits.shape
    if params.batch_size != B:
        raise ValueError(f"params has {params.batch_size} rows but logits has {B}")
    for name, t in (("history", history), ("prompt_ids", prompt_ids)):
        if t is not None and (t.dim() != 2 or t.shape[0] != B):
            raise ValueError(f"{name} must have shape [{B}, H], got {tuple(t.shape)}")
    _refuse_unsupported(params, processing)
    x = logits if logits.dtype in (torch.float32, torch.float64) else logits.float()
    x, narrow_to = _widen_if_overflow(x, params)
    empty = torch.empty(B, 0, dtype=torch.int64, device=x.device)
    counts = token_counts(history if history is not None else empty, V).to(x.dtype)  # [B, V]
    seen = counts > 0
    rep_seen = seen
    if processing.repetition_penalty_scope == "prompt_and_output" and bool((params.repetition_penalty != 1).any()):
        if prompt_ids is None:
            raise ValueError("prompt_ids is required: the repetition penalty counts the prompt "
                             "(repetition_penalty_scope='prompt_and_output')")
        rep_seen = seen | (token_counts(prompt_ids, V) > 0)

    def col(t: torch.Tensor) -> torch.Tensor:
        return t.to(x.dtype)[:, None]  # [B, 1]

    neg_inf = torch.tensor(-torch.inf, dtype=x.dtype, device=x.device)
    for op in processing.order:
        if op == "repetition_penalty":
            rep = col(params.repetition_penalty)
            x = torch.where(rep_seen, torch.where(x > 0, x / rep, x * rep), x)
        elif op == "frequency_penalty":
            x = x - col(params.frequency_penalty) * counts
        elif op == "presence_penalty":
            x = x - col(params.presence_penalty) * seen.to(x.dtype)
        elif op == "temperature":
            t = params.temperature
            x = x / col(torch.where(t == 0, torch.ones_like(t), t))
        elif op == "min_p":
            probs = torch.softmax(x, dim=-1)
            keep = probs >= col(params.min_p) * probs.amax(-1, keepdim=True)
            x = torch.where(keep, x, neg_inf)
        elif op == "top_k":
            rows = ((params.top_k > 0) & (params.top_k < V)).nonzero().squeeze(1)
            if rows.numel():
                k = params.top_k[rows]
                kth = torch.topk(x[rows], int(k.max()), dim=-1).values.gather(1, (k - 1)[:, None])
                x = x.clone()
                x[rows] = torch.where(x[rows] >= kth, x[rows], neg_inf)
        elif op == "top_p":
            rows = (params.top_p < 1).nonzero().squeeze(1)
            if rows.numel():
                kept = torch.softmax(x[rows].to(torch.float64), dim=-1)
                nucleus = _nucleus_reference(kept, params.top_p[rows].to(torch.float64))
                x = x.clone()
                x[rows] = torch.where(nucleus, x[rows], neg_inf)
    probs = torch.softmax(x, dim=-1)
    greedy = params.temperature == 0
    if bool(greedy.any()):
        one_hot = torch.zeros_like(probs).scatter_(1, x.argmax(-1, keepdim=True), 1.0)
        probs = torch.where(greedy[:, None], one_hot, probs)
    return probs if narrow_to is None else probs.to(narrow_to)


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
