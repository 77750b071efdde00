"""Sampling parameters, penalty histories, and logits built to hit truncation boundaries.

:func:`sampling_params` draws :class:`~specexact.decoders.SamplingParams` alone;
:func:`pipeline_cases` draws a whole input of
:func:`~specexact.decoders.process_logits` (logits, per-row parameters, history) whose
logits are constructed so that the boundary in question is hit exactly: ties at the k-th
logit, a cumulative mass equal to ``top_p`` in exact arithmetic, tied maxima for greedy
and ``min_p = 1``, histories that repeat drafted tokens.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, fields
from functools import cached_property
from typing import ClassVar, Sequence

import torch
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from specexact.decoders import BatchedParams, SamplingParams, batch_params

from ._validation import (
    InvalidArgument,
    check_families,
    check_int,
    check_optional_int,
    int_or_strategy,
)
from .laws import DTYPES, LOGIT_FAMILIES, LogitsCase, affine_permutations
from .vocab import vocab_sizes

__all__ = [
    "HISTORY_KINDS",
    "PARAM_FAMILIES",
    "PIPELINE_FAMILIES",
    "PipelineCase",
    "histories",
    "params_repr",
    "pipeline_cases",
    "sampling_params",
    "sampling_params_family",
]

#: Families of :func:`sampling_params` (and the tags of :func:`sampling_params_family`).
PARAM_FAMILIES: tuple[str, ...] = (
    "greedy", "temperature", "top_k", "top_k_ge_vocab", "top_p", "top_p_tiny", "top_p_one",
    "min_p", "combined", "penalties",
)

#: Families of :func:`pipeline_cases`.
PIPELINE_FAMILIES: tuple[str, ...] = (
    "top_k_tie", "top_k_ge_vocab", "top_p_exact", "top_p_tiny", "top_p_one_large_vocab",
    "min_p", "combined", "penalties", "drafted_history", "greedy_tie", "random",
)

#: Kinds of :func:`histories`.
HISTORY_KINDS: tuple[str, ...] = ("empty", "random", "repeats", "padded")

#: Families whose expected kept set is computed without rounding ambiguity: the logits
#: are exact and only operations exact in every dtype touch them.
EXACT_PIPELINE_FAMILIES: tuple[str, ...] = ("top_k_tie", "top_p_exact", "greedy_tie")

_SEED_MAX = 2**32 - 1
_TINY_TOP_P = (1e-7, 1e-12, 5e-324)
_ONE_TOP_P = (1.0, math.nextafter(1.0, 0.0), 1.0 - 1e-9)
_NO_K = 0


def params_repr(params: SamplingParams) -> str:
    """``SamplingParams(...)`` with the non-default fields only (a valid expression)."""
    parts = [f"{f.name}={getattr(params, f.name)!r}" for f in fields(params)
             if getattr(params, f.name) != f.default]
    return f"SamplingParams({', '.join(parts)})"


def sampling_params_family(params: SamplingParams, vocab_size: int | None = None) -> str:
    """The :data:`PARAM_FAMILIES` tag that describes ``params`` (first rule that matches).

    Rules, in order: ``greedy`` (temperature 0); ``penalties`` (any penalty not neutral);
    ``combined`` (two or more of top-k, top-p < 1 - 1e-9, min-p active); ``top_k_ge_vocab``
    (``top_k >= vocab_size``, or ``> 262145`` without a vocabulary); ``top_k``;
    ``top_p_tiny`` (``top_p <= 1e-6``); ``top_p``; ``min_p``; ``temperature`` (not 1);
    else ``top_p_one``.
    """
    if params.temperature == 0:
        return "greedy"
    if (params.repetition_penalty != 1 or params.presence_penalty != 0
            or params.frequency_penalty != 0):
        return "penalties"
    ge_limit = vocab_size if vocab_size is not None else 262146
    active = [params.top_k > 0, params.top_p < 1 - 1e-9, params.min_p > 0]
    if sum(active) >= 2:
        return "combined"
    if params.top_k >= ge_limit:
        return "top_k_ge_vocab"
    if params.top_k > 0:
        return "top_k"
    if params.top_p <= 1e-6:
        return "top_p_tiny"
    if params.top_p < 1 - 1e-9:
        return "top_p"
    if params.min_p > 0:
        return "min_p"
    if params.temperature != 1:
        return "temperature"
    return "top_p_one"


@functools.lru_cache(maxsize=None)  # built once: see _params
def _temperatures() -> SearchStrategy[float]:
    return st.one_of(st.sampled_from([0.5, 2.0, 1e-3]), st.floats(0.05, 5.0)).filter(
        lambda t: t != 1.0)


@functools.lru_cache(maxsize=None)  # built once: see _params
def _top_k(vocab_size: int | None) -> SearchStrategy[int]:
    hi = max(1, (vocab_size or 101) - 1)
    return st.one_of(st.sampled_from(sorted({k for k in (1, 2, hi) if k <= hi})),
                     st.integers(1, hi))


@functools.lru_cache(maxsize=None)  # built once: see _params
def _top_k_ge(vocab_size: int | None) -> SearchStrategy[int]:
    if vocab_size is None:
        return st.sampled_from([262146, 10**6, 2**31 - 1])
    return st.one_of(st.sampled_from([vocab_size, vocab_size + 1, 2**31 - 1]),
                     st.integers(vocab_size, 4 * vocab_size))


@functools.lru_cache(maxsize=None)  # built once: see _params
def _top_p() -> SearchStrategy[float]:
    return st.one_of(st.sampled_from([0.5, 0.9, 0.25]),
                     st.floats(1e-5, 1.0, exclude_max=True).filter(lambda p: p < 1 - 1e-9))


@functools.lru_cache(maxsize=None)  # built once: see _params
def _min_p() -> SearchStrategy[float]:
    return st.one_of(st.sampled_from([1.0, 0.5, 1e-3]), st.floats(0.0, 1.0, exclude_min=True))


@functools.lru_cache(maxsize=None)  # built once: see _params
def _penalty_fields() -> SearchStrategy[dict]:
    rep = st.one_of(st.sampled_from([0.5, 1.3, 2.0]),
                    st.floats(0.25, 4.0).filter(lambda r: r != 1.0))
    pen = st.one_of(st.sampled_from([0.0, -1.5, 2.0]), st.floats(-2.0, 2.0))
    def at_least_one(d: dict) -> dict:
        if d["repetition_penalty"] == 1 and d["presence_penalty"] == 0 and d["frequency_penalty"] == 0:
            d = {**d, "presence_penalty": 0.5}
        return d

    return st.fixed_dictionaries({
        "repetition_penalty": st.one_of(st.just(1.0), rep),
        "presence_penalty": pen,
        "frequency_penalty": pen,
    }).map(at_least_one)


# Cached (as the helpers above): a strategy object is validated on its first draw, and the
# flatmap of sampling_params asked for a new one on every draw (the same draws either way).
@functools.lru_cache(maxsize=None)
@st.composite
def _params(draw, family: str, vocab_size: int | None) -> SamplingParams:
    if family == "greedy":
        extra = draw(st.sampled_from([{}, {"top_k": 1}, {"top_p": 0.5, "min_p": 0.3}]))
        return SamplingParams(temperature=0.0, **extra)
    if family == "temperature":
        return SamplingParams(temperature=draw(_temperatures()))
    if family == "top_k":
        return SamplingParams(top_k=draw(_top_k(vocab_size)))
    if family == "top_k_ge_vocab":
        return SamplingParams(top_k=draw(_top_k_ge(vocab_size)))
    if family == "top_p":
        return SamplingParams(top_p=draw(_top_p()))
    if family == "top_p_tiny":
        return SamplingParams(top_p=draw(st.sampled_from(_TINY_TOP_P)))
    if family == "top_p_one":
        return SamplingParams(top_p=draw(st.sampled_from(_ONE_TOP_P)))
    if family == "min_p":
        return SamplingParams(min_p=draw(_min_p()))
    if family == "combined":
        return SamplingParams(
            temperature=draw(st.one_of(st.just(1.0), _temperatures())),
            top_k=draw(_top_k(vocab_size)), top_p=draw(_top_p()), min_p=draw(_min_p()))
    if family == "penalties":
        truncation = draw(st.sampled_from([{}, {"top_k": 2}, {"top_p": 0.8}, {"min_p": 0.1}]))
        return SamplingParams(**draw(_penalty_fields()), **truncation)
    raise AssertionError(family)  # pragma: no cover


def sampling_params(
    *,
    vocab_size: int | None = None,
    families: Sequence[str] | None = None,
) -> SearchStrategy[SamplingParams]:
    """Valid :class:`~specexact.decoders.SamplingParams` in the truncation edge families.

    Parameters
    ----------
    vocab_size : int or None, keyword-only
        V the parameters are meant for: bounds ``top_k`` to ``1 .. V-1`` and makes
        ``top_k_ge_vocab`` draw ``k >= V``. Without it ``top_k`` is in 1..100 and
        ``top_k_ge_vocab`` is above every size :func:`vocab_sizes` draws.
    families : sequence of str, keyword-only
        Subset of :data:`PARAM_FAMILIES` (default all).

    Returns
    -------
    SearchStrategy[SamplingParams]
        Families (``sampling_params_family`` recovers the tag from the value):
        ``greedy`` (temperature 0, sometimes with truncations that greedy ignores),
        ``temperature`` (0.05..5, 1e-3 favoured, never 1), ``top_k`` (1..V-1, 1, 2, V-1
        favoured), ``top_k_ge_vocab`` (V, V+1, 2**31-1, up to 4V), ``top_p`` (1e-5..1),
        ``top_p_tiny`` (1e-7, 1e-12, 5e-324), ``top_p_one`` (1, the float below 1,
        1-1e-9), ``min_p`` (0..1, 1 favoured), ``combined`` (temperature, top-k, top-p and
        min-p all set), ``penalties`` (repetition 0.25..4, presence and frequency
        -2..2, at least one active, with an optional truncation). The family is drawn
        first (``st.sampled_from``), so every family is reachable, with or without
        ``vocab_size`` (``tests/strategies/test_truncation.py``); Hypothesis does not
        promise how often each is drawn.

    Raises
    ------
    InvalidArgument
        If ``vocab_size < 1`` or a family is unknown.
    """
    vocab_size = check_optional_int(vocab_size, "vocab_size", minimum=1)
    fams = check_families(families, "families", PARAM_FAMILIES)
    if vocab_size == 1:
        fams = tuple(f for f in fams if f not in ("top_k", "combined")) or ("top_k_ge_vocab",)
    return st.sampled_from(fams).flatmap(lambda f: _params(f, vocab_size))


def histories(
    *,
    vocab_size: int | SearchStrategy[int],
    batch_size: int = 1,
    max_length: int = 16,
    kinds: Sequence[str] | None = None,
    token_ids: Sequence[int] | None = None,
) -> SearchStrategy[torch.Tensor]:
    """Penalty histories: ``[B, H]`` int64 token ids with ``-1`` padding.

    Parameters
    ----------
    vocab_size : int or SearchStrategy[int], keyword-only
        Ids are in ``[0, V)``.
    batch_size : int, keyword-only, default 1
        B.
    max_length : int, keyword-only, default 16
        Largest H, >= 1.
    kinds : sequence of str, keyword-only
        Subset of :data:`HISTORY_KINDS` (default all).
    token_ids : sequence of int, keyword-only
        If given, ids are drawn from these (e.g. the head of the logits, so that the
        penalties move the truncation boundary), else from ``[0, V)``.

    Returns
    -------
    SearchStrategy[torch.Tensor]
        ``empty``: ``H = 0``; ``random``: ids from the pool; ``repeats``: two or three ids
        repeated (every row has a repeat); ``padded``: ``random`` with a ``-1`` tail of
        random length per row. Every kind is reachable (``tests/strategies/test_truncation.py``;
        Hypothesis does not promise how often each is drawn). Elements are drawn one by
        one (H is small), so they shrink.

    Raises
    ------
    InvalidArgument
        On bad sizes, unknown kinds, or ids outside ``[0, V)``.
    """
    B = check_int(batch_size, "batch_size", minimum=1)
    H = check_int(max_length, "max_length", minimum=1)
    chosen = check_families(kinds, "kinds", HISTORY_KINDS)
    V = int_or_strategy(vocab_size, "vocab_size", minimum=1)
    if token_ids is not None:
        token_ids = tuple(token_ids)
        if not token_ids:
            raise InvalidArgument("token_ids=() must hold at least one id")
        for t in token_ids:
            check_int(t, "token_ids[...]", minimum=0)
            if isinstance(vocab_size, int) and t >= vocab_size:
                raise InvalidArgument(f"token_ids contains {t}, outside [0, vocab_size={vocab_size})")
    return _histories(V, B, H, chosen, token_ids).map(lambda pair: pair[1])


@st.composite
def _histories(draw, V, B, H, kinds, token_ids):
    """``(kind, tensor)``."""
    v = draw(V)
    kind = draw(st.sampled_from(kinds))
    pool = st.sampled_from(token_ids) if token_ids else st.integers(0, v - 1)
    if kind == "empty":
        return kind, torch.zeros(B, 0, dtype=torch.int64)
    length = draw(st.integers(2 if kind == "repeats" else 1, H))
    if kind == "repeats":
        few = draw(st.lists(pool, min_size=1, max_size=3, unique=True))
        rows = []
        for _ in range(B):
            row = draw(st.lists(st.sampled_from(few), min_size=length, max_size=length))
            row[-1] = row[0]  # at least one repeat per row
            rows.append(row)
    else:
        rows = [draw(st.lists(pool, min_size=length, max_size=length)) for _ in range(B)]
        if kind == "padded":
            for row in rows:
                cut = draw(st.integers(0, length))
                row[cut:] = [-1] * (length - cut)
    return kind, torch.tensor(rows, dtype=torch.int64).reshape(B, length)


@dataclass(frozen=True)
class PipelineCase:
    """One input of :func:`~specexact.decoders.process_logits`, built from its fields.

    Parameters
    ----------
    family : str
        One of :data:`PIPELINE_FAMILIES`.
    vocab_size, batch_size : int
        V, B.
    seed : int
        Seeds the logits.
    dtype : str
        dtype of the logits.
    logits_family : str
        ``laws.LOGIT_FAMILIES`` family the logits start from.
    params : tuple of SamplingParams
        One per row.
    history : tuple of tuple of int, or None
        Penalty history per row (``-1`` padding), or None.
    edge : int
        ``top_k_tie``: extra tokens tied with the k-th logit beyond it; ``top_p_exact``:
        size of the equal-logit tier (a power of two).
    history_kind : str
        The :data:`HISTORY_KINDS` kind of ``history`` (``"none"`` when None,
        ``"drafted"`` for ``drafted_history``).

    Notes
    -----
    ``repr(case)`` is a valid expression (with ``SamplingParams`` and ``PipelineCase``
    imported) that rebuilds the same input.
    """

    family: str
    vocab_size: int
    batch_size: int
    seed: int
    dtype: str
    logits_family: str
    params: tuple[SamplingParams, ...]
    history: tuple[tuple[int, ...], ...] | None = None
    edge: int = 0
    history_kind: str = "none"

    _families: ClassVar[tuple[str, ...]] = PIPELINE_FAMILIES

    def __post_init__(self) -> None:
        if self.family not in PIPELINE_FAMILIES:
            raise InvalidArgument(f"family={self.family!r} must be one of {PIPELINE_FAMILIES!r}")
        check_int(self.vocab_size, "vocab_size", minimum=1)
        check_int(self.batch_size, "batch_size", minimum=1)
        check_int(self.seed, "seed", minimum=0, maximum=_SEED_MAX)
        if self.dtype not in DTYPES:
            raise InvalidArgument(f"dtype={self.dtype!r} must be one of {DTYPES!r}")
        if self.logits_family not in LOGIT_FAMILIES:
            raise InvalidArgument(
                f"logits_family={self.logits_family!r} must be one of {LOGIT_FAMILIES!r}")
        if len(self.params) != self.batch_size or not all(
                isinstance(p, SamplingParams) for p in self.params):
            raise InvalidArgument(
                f"params must be {self.batch_size} SamplingParams (one per row), got {self.params!r}")
        if self.history is not None and len(self.history) != self.batch_size:
            raise InvalidArgument(
                f"history must have {self.batch_size} rows, got {len(self.history)}")

    def __repr__(self) -> str:
        params = ", ".join(params_repr(p) for p in self.params)
        parts = [f"family={self.family!r}", f"vocab_size={self.vocab_size!r}",
                 f"batch_size={self.batch_size!r}", f"seed={self.seed!r}",
                 f"dtype={self.dtype!r}", f"logits_family={self.logits_family!r}",
                 f"params=({params},)"]
        if self.history is not None:
            parts.append(f"history={self.history!r}")
        if self.edge:
            parts.append(f"edge={self.edge!r}")
        if self.history_kind != "none":
            parts.append(f"history_kind={self.history_kind!r}")
        return f"PipelineCase({', '.join(parts)})"

    def _repr_pretty_(self, printer, cycle) -> None:
        """Hypothesis / IPython pretty printing: the copy-pastable ``repr``."""
        printer.text(repr(self))

    @property
    def exact(self) -> bool:
        """True when the family's boundary is hit in exact arithmetic, so a reference
        must agree token for token, with no rounding tolerance."""
        return self.family in EXACT_PIPELINE_FAMILIES

    @property
    def batched_params(self) -> BatchedParams:
        return batch_params(list(self.params), self.batch_size)

    @cached_property
    def history_tensor(self) -> torch.Tensor | None:
        """``[B, H]`` int64 or None."""
        if self.history is None:
            return None
        return torch.tensor(self.history, dtype=torch.int64).reshape(self.batch_size, -1)

    @cached_property
    def logits(self) -> torch.Tensor:
        """``[B, V]`` logits in :attr:`dtype` (no NaN / ``+inf``, no all ``-inf`` row)."""
        B, V, fam = self.batch_size, self.vocab_size, self.family
        dtype = getattr(torch, self.dtype)
        base = LogitsCase(family=self.logits_family, vocab_size=V, batch_size=B,
                          seed=self.seed, dtype=self.dtype, num_spikes=2,
                          masked_fraction=0.5).logits
        g = torch.Generator().manual_seed(self.seed)
        if fam == "top_k_tie":
            x = base.to(torch.float64).clone()
            order = torch.sort(x, dim=-1, descending=True, stable=True).indices
            for b, p in enumerate(self.params):
                k = min(max(p.top_k, 1), V)
                lo, hi = max(0, k - 2), min(V, k + max(self.edge, 1))
                ids = order[b, lo:hi]
                x[b, ids] = float(x[b, order[b, k - 1]])
            return x.to(dtype)
        if fam == "top_p_exact":
            tier = self.edge
            perm = affine_permutations(V, B, g)[:, :tier]
            x = torch.full((B, V), -math.inf, dtype=torch.float64).scatter_(1, perm, 0.0)
            return x.to(dtype)
        if fam == "penalties":
            # Both signs and an exact zero: shift the Zipf head so its median is 0.
            x = base.to(torch.float64)
            finite = torch.where(torch.isfinite(x), x, torch.nan)
            med = torch.nanmedian(finite, dim=-1, keepdim=True).values
            big = 0.99 * torch.finfo(dtype).max
            x = torch.where(torch.isfinite(x), (x - med).clamp(-big, big), x)
            return x.to(dtype)
        return base

    def repro(self) -> str:
        """Python that rebuilds the input and runs the pipeline on it."""
        return (
            "from specexact.decoders import SamplingParams, process_logits\n"
            "from specexact.strategies import PipelineCase\n"
            f"case = {self!r}\n"
            "probs = process_logits(case.logits, case.batched_params, case.history_tensor)"
        )


def _top_ids(logits: torch.Tensor, count: int) -> list[int]:
    row = logits[0].to(torch.float64)
    order = torch.sort(row, descending=True, stable=True).indices[:count]
    return [int(i) for i in order if math.isfinite(float(row[i]))] or [int(order[0])]


@st.composite
def _pipeline_cases(draw, families, vocab_size, batch_size, dtypes, logits_families):
    family = draw(st.sampled_from(families))
    V = draw(vocab_size)
    B = draw(batch_size)
    if family == "top_p_exact" and V < 2:
        family = "top_p_tiny"
    dtype = draw(st.sampled_from(dtypes))
    seed = draw(st.integers(0, _SEED_MAX))
    logits_family = draw(st.sampled_from(logits_families))
    edge = 0
    history = None
    history_kind = "none"

    def rows(strategy):
        return tuple(draw(strategy) for _ in range(B))

    if family == "top_k_tie":
        logits_family = "zipf"
        if V < 2:
            params = rows(st.just(SamplingParams(top_k=1)))
        else:
            params = rows(st.builds(SamplingParams, top_k=_top_k(V)))
        edge = draw(st.integers(1, 4))
    elif family == "top_k_ge_vocab":
        params = rows(st.builds(SamplingParams, top_k=_top_k_ge(V)))
    elif family == "top_p_exact":
        j = draw(st.integers(1, max(1, min(int(math.log2(V)), 10))))
        edge = 2**j
        params = tuple(
            SamplingParams(top_p=draw(st.integers(1, edge - 1)) / edge,
                           temperature=draw(st.sampled_from([1.0, 0.5, 3.0])))
            for _ in range(B))
        logits_family = "flat"
    elif family == "top_p_tiny":
        params = rows(st.builds(SamplingParams, top_p=st.sampled_from(_TINY_TOP_P)))
    elif family == "top_p_one_large_vocab":
        params = rows(st.builds(SamplingParams, top_p=st.sampled_from(_ONE_TOP_P)))
        logits_family = draw(st.sampled_from(["zipf", "flat", "fp16_roundtrip"]))
    elif family == "min_p":
        params = rows(st.builds(SamplingParams, min_p=_min_p(),
                                temperature=st.one_of(st.just(1.0), _temperatures())))
    elif family == "combined":
        params = rows(_params("combined", V if V > 1 else None)) if V > 1 else rows(
            st.builds(SamplingParams, top_p=_top_p(), min_p=_min_p()))
    elif family == "greedy_tie":
        logits_family = draw(st.sampled_from(["flat", "exact_tie"]))
        params = rows(st.just(SamplingParams(temperature=0.0)))
    elif family in ("penalties", "drafted_history"):
        if logits_family in ("one_hot",):
            logits_family = "zipf"
        params = rows(_params("penalties", V if V > 1 else None))
    else:  # random
        params = rows(sampling_params(vocab_size=V))

    case_logits = PipelineCase(family=family, vocab_size=V, batch_size=B, seed=seed,
                               dtype=dtype, logits_family=logits_family, params=params,
                               edge=edge).logits
    head = _top_ids(case_logits, 8)
    if family == "drafted_history":
        # Row j sees the generated tokens plus the first j drafts; drafts repeat ids
        # already in the history (the penalties then count them twice).
        generated = draw(st.lists(st.sampled_from(head), min_size=1, max_size=6))
        drafts = draw(st.lists(st.sampled_from(generated), min_size=B - 1, max_size=B - 1))
        full = generated + drafts
        width = len(full)
        history = tuple(tuple(full[:len(generated) + j] + [-1] * (B - 1 - j)) for j in range(B))
        assert all(len(r) == width for r in history)
        history_kind = "drafted"
    elif family in ("penalties", "random") or draw(st.booleans()):
        kind, tensor = draw(_histories(st.just(V), B, 12, HISTORY_KINDS, tuple(head)))
        history = tuple(tuple(int(t) for t in row) for row in tensor.tolist())
        history_kind = kind
    return PipelineCase(family=family, vocab_size=V, batch_size=B, seed=seed, dtype=dtype,
                        logits_family=logits_family, params=params, history=history,
                        edge=edge, history_kind=history_kind)


def pipeline_cases(
    *,
    vocab_size: int | SearchStrategy[int] | None = None,
    batch_size: int | SearchStrategy[int] | None = None,
    families: Sequence[str] | None = None,
    dtypes: Sequence[str] | None = None,
    logits_families: Sequence[str] | None = None,
) -> SearchStrategy[PipelineCase]:
    """Inputs of :func:`~specexact.decoders.process_logits` that sit on truncation edges.

    Parameters
    ----------
    vocab_size : int or SearchStrategy[int], keyword-only
        V (default :func:`vocab_sizes`).
    batch_size : int or SearchStrategy[int], keyword-only
        B (default 1..3; ``drafted_history`` uses the rows as the K+1 candidate prefixes).
    families : sequence of str, keyword-only
        Subset of :data:`PIPELINE_FAMILIES` (default all).
    dtypes : sequence of str, keyword-only
        Logits dtypes (default all of ``laws.DTYPES``).
    logits_families : sequence of str, keyword-only
        ``laws.LOGIT_FAMILIES`` the logits start from where the family leaves it open
        (default all).

    Returns
    -------
    SearchStrategy[PipelineCase]
        Families:

        - ``top_k_tie``: Zipf logits (temperature 1) where the tokens ranked ``k-1`` to
          ``k+edge`` share the k-th value exactly (all must be kept);
        - ``top_k_ge_vocab``: ``top_k >= V`` (no truncation);
        - ``top_p_exact``: ``edge = 2**j`` equal logits, the rest ``-inf``, and
          ``top_p = m / 2**j``: the cumulative mass equals ``top_p`` exactly after ``m``
          tokens (keep exactly the ``m`` lowest ids of the tier);
        - ``top_p_tiny``: ``top_p`` in (1e-7, 1e-12, 5e-324) (keep the most probable
          token only);
        - ``top_p_one_large_vocab``: ``top_p`` in (1, the float below 1, 1 - 1e-9),
          meant for large V where a cumulative sum rounds;
        - ``min_p``: ``min_p`` in (0, 1], 1 favoured (ties at the maximum);
        - ``combined``: temperature, top-k, top-p and min-p together;
        - ``penalties``: logits of both signs with an exact 0 (median shifted to 0),
          repetition / presence / frequency penalties, and a history drawn from the head;
        - ``drafted_history``: penalties, and row ``j`` has the history of the j-th
          candidate prefix: generated tokens plus the first ``j`` drafts, which repeat
          generated ids;
        - ``greedy_tie``: temperature 0 on flat or tied-maximum logits (lowest id wins);
        - ``random``: :func:`sampling_params` on any logits family.

        The family is drawn first (``top_p_exact`` falls back to ``top_p_tiny`` at
        V = 1); histories are attached to every ``penalties`` / ``random`` case and to
        about half of the others (kinds of :func:`histories`). Every family, and every
        history kind (with ``"drafted"`` and ``"none"``), is reachable
        (``tests/strategies/test_truncation.py``; Hypothesis does not promise how often).

    Raises
    ------
    InvalidArgument
        On bad sizes or unknown names.
    """
    V = int_or_strategy(vocab_size if vocab_size is not None else vocab_sizes(), "vocab_size",
                        minimum=1)
    B = int_or_strategy(batch_size if batch_size is not None else st.integers(1, 3),
                        "batch_size", minimum=1)
    fams = check_families(families, "families", PIPELINE_FAMILIES)
    dts = check_families(dtypes, "dtypes", DTYPES)
    lfs = check_families(logits_families, "logits_families", LOGIT_FAMILIES)
    return _pipeline_cases(fams, V, B, dts, lfs)
