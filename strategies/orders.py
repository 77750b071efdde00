"""Rows whose processed law depends on the order of the logits operations.

An engine declares its order of operations (:class:`~specexact.decoders.processing.LogitsProcessing`)
and the audit computes its reference law with it. An engine that applies two operations
in another order is only caught on rows where the order matters: top-p before or after the
temperature, min-p or top-k before or after top-p, a penalty before or after the
temperature or a truncation. :func:`order_sensitive_params` draws the parameters of such a
row for given logits and history; :func:`order_sensitive_rows` draws whole rows.

A row is *order-sensitive* for a pair ``(a, b)`` of operations of the declared order when
the law under the declared order and the law under the order with ``a`` and ``b`` swapped
(:func:`swapped_processing`: their places exchanged, so every operation between them now
runs after ``b`` and before ``a``) are at total variation distance at least ``min_tv``
(default :data:`MIN_ORDER_TV`), computed exactly: both laws are enumerated over the V
tokens (float64 processing of the row's float32 logits) and
``TV = sum |p - p'| / 2``. Transpositions that reverse only relations that commute whatever
the row (:data:`COMMUTING_PAIRS`) are never drawn.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from itertools import combinations

import torch
from hypothesis import reject
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from specexact.decoders import SamplingParams, batch_params
from specexact.decoders.processing import BUILTIN_PROCESSING, LogitsProcessing

from ._validation import InvalidArgument, check_real, int_or_strategy
from .truncation import params_repr

__all__ = ["MIN_ORDER_TV", "COMMUTING_PAIRS", "OrderSensitiveRow", "flipped_relations", "order_pairs", "swapped_processing",
           "order_tv", "order_sensitive_params", "order_sensitive_rows"]

MIN_ORDER_TV = 0.05
"""Default smallest TV between the declared and the swapped order's law of a drawn row."""

COMMUTING_PAIRS = frozenset({
    frozenset({"repetition_penalty", "temperature"}),  # x/r/T = x/T/r, x*r/T = x/T*r for T > 0
    frozenset({"frequency_penalty", "presence_penalty"}),  # both subtract
    frozenset({"top_k", "temperature"}),  # T > 0 keeps the logits' ranks
    frozenset({"min_p", "top_k"}),  # both keep a top set of the same ranking: the kept set is the intersection
})
"""Pairs of operations whose relative order never changes the law (for a positive
temperature, the built-in semantics). A transposition that reverses only such relations
is never drawn (:func:`order_pairs`); ``tests/strategies/test_orders.py`` checks that those
transpositions leave drawn rows' laws unchanged."""

_ATTEMPTS = 12
"""Parameter draws tried per example before it is rejected (``hypothesis.reject``)."""


def flipped_relations(processing: LogitsProcessing, pair: tuple[str, str]) -> frozenset:
    """The relations (unordered pairs of operations) whose order the transposition of
    ``pair`` reverses: ``pair`` itself and, for every operation ``m`` between them, ``{a, m}``
    and ``{m, b}``."""
    i, j = sorted(processing.order.index(op) for op in pair)
    a, b = processing.order[i], processing.order[j]
    middle = processing.order[i + 1:j]
    return frozenset({frozenset({a, b}), *(frozenset({a, m}) for m in middle), *(frozenset({m, b}) for m in middle)})


def order_pairs(processing: LogitsProcessing) -> tuple[tuple[str, str], ...]:
    """Every pair ``(a, b)`` of ``processing.order`` (``a`` applied first) whose transposition
    (:func:`swapped_processing`) can change the law: those that reverse at least one
    relation outside :data:`COMMUTING_PAIRS` (:func:`flipped_relations`)."""
    if not isinstance(processing, LogitsProcessing):
        raise InvalidArgument(f"processing={processing!r} must be a LogitsProcessing")
    return tuple((a, b) for a, b in combinations(processing.order, 2)
                 if not flipped_relations(processing, (a, b)) <= COMMUTING_PAIRS)


def swapped_processing(processing: LogitsProcessing, pair: tuple[str, str]) -> LogitsProcessing:
    """``processing`` with the operations of ``pair`` exchanged in its order (every
    per-operation variant kept).

    Raises
    ------
    InvalidArgument
        An operation of ``pair`` is not in ``processing.order``, or they are the same.
    """
    a, b = pair
    if a == b or a not in processing.order or b not in processing.order:
        raise InvalidArgument(f"pair={pair!r} must name two operations of the order {processing.order!r}")
    swap = {a: b, b: a}
    return replace(processing, order=tuple(swap.get(op, op) for op in processing.order))


def _as_row(values, V: int, name: str) -> torch.Tensor | None:
    if values is None:
        return None
    t = torch.as_tensor(values, dtype=torch.int64).reshape(1, -1)
    if t.numel() and (int(t.min()) < -1 or int(t.max()) >= V):
        raise InvalidArgument(f"{name}={values!r} must hold token ids in [0, {V}) (or -1 padding)")
    return t


def order_tv(logits, params: SamplingParams, processing: LogitsProcessing, pair: tuple[str, str], *,
             history=None, prompt=None) -> float:
    """Exact TV between the law of one row under ``processing`` and under
    :func:`swapped_processing` of ``pair``.

    Parameters
    ----------
    logits : array_like
        Shape ``[V]``: raw logits (processed in float64).
    params : SamplingParams
    processing : LogitsProcessing
    pair : tuple of str
        Two operations of ``processing.order``.
    history, prompt : sequence of int, optional
        The generated tokens the penalties count, and the prompt (for a penalty whose
        declared scope includes it; empty when None).

    Returns
    -------
    float
        ``sum_v |p(v) - p'(v)| / 2`` in [0, 1].

    Raises
    ------
    InvalidArgument
        Token ids out of range, or ``pair`` not in the order.
    ValueError
        Parameters the processing does not implement (as the processing raises).
    """
    x = torch.as_tensor(logits).to(torch.float64).reshape(1, -1)
    V = x.shape[1]
    hist = _as_row(history, V, "history")
    prom = _as_row(prompt if prompt is not None else (), V, "prompt")
    p = batch_params([params], 1)
    kw = {"prompt_ids": prom} if prom is not None else {}
    declared = processing(x, p, hist, **kw)
    swapped = swapped_processing(processing, pair)(x, p, hist, **kw)
    return float(0.5 * (declared - swapped).abs().sum())


def _values(op: str, V: int) -> SearchStrategy:
    """Settings of ``op`` that act on a row of V tokens (none neutral, temperature > 0)."""
    if op == "temperature":
        return st.one_of(st.sampled_from([0.25, 0.5, 2.0, 4.0]), st.floats(0.2, 5.0)).filter(
            lambda t: abs(t - 1) > 0.05)
    if op == "top_k":
        return st.integers(1, max(1, V - 1))
    if op == "top_p":
        return st.one_of(st.sampled_from([0.5, 0.8, 0.9]), st.floats(0.05, 0.97))
    if op == "min_p":
        return st.one_of(st.sampled_from([0.05, 0.1, 0.3]), st.floats(0.01, 0.6))
    if op == "repetition_penalty":
        return st.one_of(st.sampled_from([1.5, 2.0, 0.6]), st.floats(1.1, 4.0), st.floats(0.3, 0.9))
    return st.one_of(st.sampled_from([0.5, 1.0, 2.0]), st.floats(0.2, 3.0))  # frequency / presence


@st.composite
def _sensitive(draw, x: torch.Tensor, history, prompt, processing: LogitsProcessing, pairs, min_tv: float):
    V = int(x.numel())
    for _ in range(_ATTEMPTS):
        pair = draw(st.sampled_from(pairs))
        others = [op for op in processing.order if op not in pair]
        extra = draw(st.lists(st.sampled_from(others), unique=True, max_size=2)) if others else []
        fields = {op: draw(_values(op, V)) for op in (*pair, *extra)}
        params = SamplingParams(**fields)
        tv = order_tv(x, params, processing, pair, history=history, prompt=prompt)
        if tv >= min_tv:
            return params, pair, tv
    reject()


def order_sensitive_params(*, logits, processing: LogitsProcessing = BUILTIN_PROCESSING, history=None,
                           prompt=None, pairs=None, min_tv: float = MIN_ORDER_TV) -> SearchStrategy:
    """Parameters under which the law of one row changes when two operations are swapped.

    Parameters
    ----------
    logits : array_like
        Shape ``[V]`` (V >= 2): the row's raw logits.
    processing : LogitsProcessing, keyword-only
        The declared order (default the built-in).
    history, prompt : sequence of int, optional
        The tokens the penalties count (module :func:`order_tv`).
    pairs : sequence of (str, str), optional
        Pairs to swap (default :func:`order_pairs` of ``processing``).
    min_tv : float, keyword-only, default :data:`MIN_ORDER_TV`
        In (0, 1]: the smallest TV between the two laws.

    Returns
    -------
    SearchStrategy[tuple[SamplingParams, tuple[str, str], float]]
        ``(params, pair, tv)``: both operations of ``pair`` active (a positive temperature
        away from 1, a top-k below V, top-p / min-p in (0, 1), non-neutral penalties), up
        to two more operations of the order active, and the exact TV (>= ``min_tv``).
        Up to :data:`_ATTEMPTS` parameter draws are tried per example; when none reaches
        ``min_tv`` (a flat row, or a pair that cannot act on it) the example is rejected.

    Raises
    ------
    InvalidArgument
        ``logits`` not a finite-maximum row of V >= 2, ``min_tv`` outside (0, 1], an empty
        or unknown pair list.
    """
    x = torch.as_tensor(logits).detach().to(torch.float64).reshape(-1)
    if x.numel() < 2 or not bool(torch.isfinite(x.max())):
        raise InvalidArgument(f"logits must be a row of V >= 2 with a finite maximum, got shape {tuple(x.shape)}")
    min_tv = check_real(min_tv, "min_tv", low=0.0, high=1.0, low_open=True)
    allowed = order_pairs(processing)
    pairs = allowed if pairs is None else tuple(tuple(p) for p in pairs)
    if not pairs or any(p not in allowed for p in pairs):
        raise InvalidArgument(f"pairs={pairs!r} must be a non-empty subset of {allowed!r}")
    hist = None if history is None else tuple(int(t) for t in history)
    prom = None if prompt is None else tuple(int(t) for t in prompt)
    return _sensitive(x, hist, prom, processing, pairs, min_tv)


@dataclass(frozen=True)
class OrderSensitiveRow:
    """One row whose law depends on the order of two operations (module docstring).

    Attributes
    ----------
    logits : tuple of float
        ``[V]`` raw logits (float32 values).
    params : SamplingParams
    history : tuple of int
        The generated tokens the penalties count.
    pair : tuple of str
        The two operations, in the declared order.
    tv : float
        Exact TV between the declared and the swapped order's law.
    processing : LogitsProcessing
        The declared processing.
    """

    logits: tuple[float, ...]
    params: SamplingParams
    history: tuple[int, ...]
    pair: tuple[str, str]
    tv: float
    processing: LogitsProcessing = BUILTIN_PROCESSING

    @cached_property
    def tensor(self) -> torch.Tensor:
        """``[V]`` float32 logits."""
        return torch.tensor(self.logits, dtype=torch.float32)

    def law(self, swapped: bool = False) -> torch.Tensor:
        """``[V]`` float64 law under the declared order (or the swapped one)."""
        proc = swapped_processing(self.processing, self.pair) if swapped else self.processing
        hist = torch.tensor([list(self.history)], dtype=torch.int64).reshape(1, len(self.history))
        return proc(self.tensor.to(torch.float64)[None], batch_params([self.params], 1), hist,
                    prompt_ids=torch.empty(1, 0, dtype=torch.int64))[0]

    def __repr__(self) -> str:
        return (f"OrderSensitiveRow(logits={self.logits!r}, params={params_repr(self.params)}, "
                f"history={self.history!r}, pair={self.pair!r}, tv={self.tv!r})")


@st.composite
def _rows(draw, vocab_size, processing, pairs, min_tv):
    V = draw(vocab_size)
    scale = draw(st.sampled_from([1.0, 2.0, 4.0]))
    seed = draw(st.integers(0, 2**32 - 1))
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(V, generator=g, dtype=torch.float64) * scale).to(torch.float32)
    top = torch.argsort(x, descending=True)[: max(1, min(V, 4))].tolist()
    history = tuple(draw(st.lists(st.sampled_from(top), min_size=1, max_size=6)))
    params, pair, tv = draw(order_sensitive_params(logits=x, processing=processing, history=history,
                                                   prompt=(), pairs=pairs, min_tv=min_tv))
    return OrderSensitiveRow(logits=tuple(float(v) for v in x), params=params, history=history, pair=pair,
                             tv=tv, processing=processing)


def order_sensitive_rows(*, vocab_size=st.integers(4, 64), processing: LogitsProcessing = BUILTIN_PROCESSING,
                         pairs=None, min_tv: float = MIN_ORDER_TV) -> SearchStrategy[OrderSensitiveRow]:
    """Whole order-sensitive rows: seeded Gaussian logits (scale 1, 2 or 4), a history of
    the row's most probable tokens (so the penalties act on tokens truncation keeps), and
    :func:`order_sensitive_params`.

    Parameters
    ----------
    vocab_size : int or SearchStrategy[int], keyword-only, default integers(4, 64)
        V (>= 2).
    processing, pairs, min_tv
        As :func:`order_sensitive_params`.

    Returns
    -------
    SearchStrategy[OrderSensitiveRow]

    Raises
    ------
    InvalidArgument
        As :func:`order_sensitive_params`; ``vocab_size`` below 2.
    """
    V = int_or_strategy(vocab_size, "vocab_size", minimum=2)
    min_tv = check_real(min_tv, "min_tv", low=0.0, high=1.0, low_open=True)
    allowed = order_pairs(processing)
    pairs = allowed if pairs is None else tuple(tuple(p) for p in pairs)
    if not pairs or any(p not in allowed for p in pairs):
        raise InvalidArgument(f"pairs={pairs!r} must be a non-empty subset of {allowed!r}")
    return _rows(V, processing, pairs, min_tv)
