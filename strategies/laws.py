"""Logits and probability rows in edge families, built from a seed and a few shape numbers.

A case is a small frozen record (family, sizes, seed, shape parameters) whose tensor is
built deterministically from it with a seeded :class:`torch.Generator`; its ``repr`` is a
copy-pastable reproduction, e.g.
``LogitsCase(family='near_tie', vocab_size=8193, batch_size=2, seed=7, dtype='float16')``.
Arrays of any size (V = 256000) therefore cost a handful of Hypothesis choices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar
from functools import cached_property

import numpy as np
import torch
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from ._validation import InvalidArgument, check_families, check_int, check_real, int_or_strategy
from .vocab import vocab_sizes

__all__ = [
    "DTYPES",
    "LOGIT_FAMILIES",
    "PROB_FAMILIES",
    "LogitsCase",
    "ProbsCase",
    "logit_tensors",
    "probability_tensors",
    "affine_permutations",
    "zipf_logits",
]

#: dtype names a case can carry (``getattr(torch, name)``).
DTYPES: tuple[str, ...] = ("float32", "float64", "float16", "bfloat16")

#: Logits families (see :func:`logit_tensors`).
LOGIT_FAMILIES: tuple[str, ...] = (
    "zipf", "flat", "one_hot", "near_tie", "exact_tie", "masked", "huge", "spikes",
    "fp16_roundtrip", "bf16_roundtrip",
)

#: Probability families (see :func:`probability_tensors`).
PROB_FAMILIES: tuple[str, ...] = (
    "zipf", "flat", "one_hot", "near_tie", "exact_tie", "masked", "subnormal",
    "fp16_roundtrip", "bf16_roundtrip", "off_by_rounding",
)

_SEED_MAX = 2**32 - 1


def _torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def zipf_logits(vocab_size: int, batch_size: int, *, seed: int, zipf_exponent: float = 1.1,
                temperature: float = 1.0) -> torch.Tensor:
    """Zipf-like logit rows: ``-zipf_exponent * log(1 + rank) / temperature``.

    Each row ranks the vocabulary by its own seeded permutation, so the head sits on
    different ids per row and no two logits of a row are equal.

    Returns
    -------
    torch.Tensor
        Shape ``[batch_size, vocab_size]``, float64, finite, row maximum 0.
    """
    g = torch.Generator().manual_seed(seed)
    by_rank = torch.log1p(torch.arange(vocab_size, dtype=torch.float64)) * (-zipf_exponent / temperature)
    return by_rank[affine_permutations(vocab_size, batch_size, g)]


def affine_permutations(vocab_size: int, batch_size: int, generator: torch.Generator) -> torch.Tensor:
    """``batch_size`` seeded permutations of ``range(vocab_size)``, ``[B, V]`` int64.

    Row ``b`` is ``(a_b * i + c_b) mod V`` with ``a_b`` coprime to V: cheap at V = 256000
    (no per-row shuffle) and different per row.
    """
    V = vocab_size
    i = np.arange(V, dtype=np.int64)  # numpy: torch's int64 remainder is slow on CPU
    rows = []
    for _ in range(batch_size):
        a, c = (int(x) for x in torch.randint(0, 2**31 - 1, (2,), generator=generator))
        a = a % V if V > 1 else 0
        while V > 1 and math.gcd(a, V) != 1:
            a = (a + 1) % V
        rows.append((i * a + c) % V)
    return torch.from_numpy(np.stack(rows))


def _rank_order(x: torch.Tensor) -> torch.Tensor:
    """Token ids of each row sorted by decreasing value, ties by lower id."""
    return torch.sort(x, dim=-1, descending=True, stable=True).indices


@dataclass(frozen=True)
class _CaseBase:
    family: str
    vocab_size: int
    batch_size: int = 1
    seed: int = 0
    dtype: str = "float32"
    zipf_exponent: float = 1.1
    temperature: float = 1.0
    num_spikes: int = 1
    masked_fraction: float = 0.0
    magnitude: float = 1.0

    _families: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        if self.family not in self._families:
            raise InvalidArgument(f"family={self.family!r} must be one of {self._families!r}")
        check_int(self.vocab_size, "vocab_size", minimum=1)
        check_int(self.batch_size, "batch_size", minimum=1)
        check_int(self.seed, "seed", minimum=0, maximum=_SEED_MAX)
        if self.dtype not in DTYPES:
            raise InvalidArgument(f"dtype={self.dtype!r} must be one of {DTYPES!r}")
        check_real(self.zipf_exponent, "zipf_exponent", low=0.0)
        check_real(self.temperature, "temperature", low=0.0, low_open=True)
        check_int(self.num_spikes, "num_spikes", minimum=1)
        check_real(self.masked_fraction, "masked_fraction", low=0.0, high=1.0, high_open=True)
        check_real(self.magnitude, "magnitude", low=0.0, high=1.0, low_open=True)

    def _repr_pretty_(self, printer, cycle) -> None:
        """Hypothesis / IPython pretty printing: the copy-pastable ``repr``."""
        printer.text(repr(self))

    def _head(self) -> torch.Tensor:
        return zipf_logits(self.vocab_size, self.batch_size, seed=self.seed,
                           zipf_exponent=self.zipf_exponent, temperature=self.temperature)

    def _generator(self, salt: int) -> torch.Generator:
        return torch.Generator().manual_seed((self.seed * 1_000_003 + salt) % (2**63))

    def _random_ids(self, count: int, salt: int) -> torch.Tensor:
        """``count`` distinct token ids per row, ``[B, count]``."""
        return affine_permutations(self.vocab_size, self.batch_size, self._generator(salt))[:, :count]

    def _num_masked(self) -> int:
        return min(self.vocab_size - 1, int(self.masked_fraction * self.vocab_size))


@dataclass(frozen=True)
class LogitsCase(_CaseBase):
    """A ``[batch_size, vocab_size]`` logits tensor of one family (see :func:`logit_tensors`).

    The fields are the recipe; :attr:`logits` is built from them on first access and
    cached. ``LogitsCase(**fields).logits`` reproduces the tensor bit for bit.
    """

    _families: ClassVar[tuple[str, ...]] = LOGIT_FAMILIES

    def __repr__(self) -> str:
        return _recipe_repr(self, "LogitsCase")

    @cached_property
    def logits(self) -> torch.Tensor:
        """Shape ``[batch_size, vocab_size]``, dtype :attr:`dtype`; no NaN or ``+inf``;
        ``-inf`` only in the ``one_hot`` and ``masked`` families, never a whole row."""
        B, V, fam = self.batch_size, self.vocab_size, self.family
        dtype = _torch_dtype(self.dtype)
        x = self._head()  # float64, max 0, in about [-2 * 12.5 / 0.25, 0]
        if fam == "flat":
            x = torch.zeros(B, V, dtype=torch.float64)
        elif fam == "one_hot":
            hot = self._random_ids(1, salt=1)
            x = torch.full((B, V), -math.inf, dtype=torch.float64).scatter_(1, hot, 0.0)
        elif fam == "exact_tie":
            # A top group of num_spikes equal logits, and a second equal group lower down.
            k = min(self.num_spikes + 1, V)
            order = _rank_order(x)
            top = x.gather(1, order[:, :1])
            x = x.scatter(1, order[:, :k], top.expand(B, k))
            if V > k + 2:
                mid = order[:, k:k + min(k, V - k - 1) + 1]
                x = x.scatter(1, mid, x.gather(1, mid[:, :1]).expand_as(mid))
        elif fam == "masked":
            m = self._num_masked()
            if m:
                x = x.scatter(1, self._random_ids(m, salt=2), -math.inf)
        elif fam == "huge":
            finite_max = torch.finfo(dtype).max
            lo = x.min(dim=-1, keepdim=True).values
            span = torch.where(lo < 0, -lo, torch.ones_like(lo))
            unit = 1.0 + 2.0 * x / span  # in [-1, 1], maximum +1
            x = unit * (self.magnitude * finite_max * 0.99)
        elif fam == "spikes":
            k = min(self.num_spikes, V)
            g = self._generator(3)
            heights = 5.0 + 15.0 * torch.rand(B, k, generator=g, dtype=torch.float64)
            x = x.scatter(1, self._random_ids(k, salt=4), heights)
        elif fam in ("fp16_roundtrip", "bf16_roundtrip"):
            half = torch.float16 if fam == "fp16_roundtrip" else torch.bfloat16
            x = x.to(half).to(torch.float64)
        out = x.to(dtype)
        if fam == "near_tie" and V >= 2:
            # The second-ranked token sits exactly one ulp (of the dtype) below the first,
            # which is moved to 1.0 so that the ulp is a normal number.
            out = (x + 1.0).to(dtype)
            order = _rank_order(out.to(torch.float64))
            top = out.gather(1, order[:, :1])
            below = torch.nextafter(top, torch.full_like(top, -math.inf))
            out = out.scatter(1, order[:, 1:2], below)
        return out

    def repro(self) -> str:
        """Python that rebuilds the tensor."""
        return f"from specexact.strategies import LogitsCase\nlogits = {self!r}.logits"


@dataclass(frozen=True)
class ProbsCase(_CaseBase):
    """A ``[batch_size, vocab_size]`` probability tensor of one family (see
    :func:`probability_tensors`); :attr:`probs` is built from the fields on first access."""

    _families: ClassVar[tuple[str, ...]] = PROB_FAMILIES

    def __repr__(self) -> str:
        return _recipe_repr(self, "ProbsCase")

    @cached_property
    def probs(self) -> torch.Tensor:
        """Shape ``[batch_size, vocab_size]``, dtype :attr:`dtype`: finite, ``>= 0``, every
        row with positive mass; rows sum to 1 only up to the dtype's rounding (further
        off in the ``*_roundtrip`` and ``off_by_rounding`` families)."""
        B, V, fam = self.batch_size, self.vocab_size, self.family
        dtype = _torch_dtype(self.dtype)
        x = self._head()
        p = torch.softmax(x, dim=-1)  # float64
        if fam == "flat":
            p = torch.full((B, V), 1.0 / V, dtype=torch.float64)
        elif fam == "one_hot":
            p = torch.zeros(B, V, dtype=torch.float64).scatter_(1, self._random_ids(1, salt=1), 1.0)
        elif fam == "exact_tie":
            k = min(self.num_spikes + 1, V)
            order = _rank_order(p)
            p = p.scatter(1, order[:, :k], p.gather(1, order[:, :1]).expand(B, k))
            p = p / p.sum(-1, keepdim=True)
        elif fam == "masked":
            m = self._num_masked()
            if m:
                p = p.scatter(1, self._random_ids(m, salt=2), 0.0)
                p = p / p.sum(-1, keepdim=True)
        elif fam == "subnormal" and V >= 2:
            k = min(self.num_spikes, V - 1)
            sub = torch.finfo(dtype).smallest_normal
            # smallest subnormal, then a few larger subnormals: 2**-j of the smallest normal.
            ids = _rank_order(p)[:, V - k:]  # the least probable tokens become subnormal
            vals = torch.tensor([_smallest_subnormal(dtype)] + [sub * 2.0**-j for j in range(1, k)],
                                dtype=torch.float64)[:k]
            lost = p.gather(1, ids).sum(-1, keepdim=True) - vals.sum()
            p = p.scatter(1, ids, vals.expand(B, k).contiguous())
            top = _rank_order(p)[:, :1]
            p = p.scatter(1, top, p.gather(1, top) + lost)  # the top token takes the rest
        elif fam in ("fp16_roundtrip", "bf16_roundtrip"):
            half = torch.float16 if fam == "fp16_roundtrip" else torch.bfloat16
            p = p.to(half).to(torch.float64)
        out = p.to(dtype)
        if fam == "near_tie" and V >= 2:
            # The top two share their mass: m and the float just below m (in the dtype).
            order = _rank_order(p)
            m = (p.gather(1, order[:, :2]).sum(-1, keepdim=True) / 2).to(dtype)
            out = out.scatter(1, order[:, :1], m)
            out = out.scatter(1, order[:, 1:2], torch.nextafter(m, torch.zeros_like(m)))
        elif fam == "off_by_rounding":
            # Normalised in the dtype, then off by k ulps of 1: sums are 1 +- k * eps.
            g = self._generator(5)
            k = torch.randint(-4, 5, (B, 1), generator=g).to(torch.float64)
            scale = 1.0 + k * torch.finfo(dtype).eps
            out = (out.to(torch.float64) * scale).to(dtype)
        if not bool((out.to(torch.float64).sum(-1) > 0).all()):  # pragma: no cover - guard
            raise AssertionError(f"{self!r} built a row with no mass")
        return out

    def repro(self) -> str:
        """Python that rebuilds the tensor."""
        return f"from specexact.strategies import ProbsCase\nprobs = {self!r}.probs"


def _smallest_subnormal(dtype: torch.dtype) -> float:
    return float(torch.nextafter(torch.zeros((), dtype=dtype), torch.ones((), dtype=dtype)))


def _recipe_repr(case, name: str) -> str:
    """``Name(field=value, ...)`` listing the family, sizes and seed, then non-defaults."""
    always = ("family", "vocab_size", "batch_size", "seed", "dtype")
    parts = [f"{f}={getattr(case, f)!r}" for f in always]
    defaults = {"zipf_exponent": 1.1, "temperature": 1.0, "num_spikes": 1,
                "masked_fraction": 0.0, "magnitude": 1.0}
    for f, d in defaults.items():
        v = getattr(case, f)
        if v != d:
            parts.append(f"{f}={v!r}")
    return f"{name}({', '.join(parts)})"


# Which shape parameters each family reads (the others keep their defaults).
_USES = {
    "zipf": ("zipf_exponent", "temperature"),
    "flat": (),
    "one_hot": (),
    "near_tie": ("zipf_exponent", "temperature"),
    "exact_tie": ("zipf_exponent", "temperature", "num_spikes"),
    "masked": ("zipf_exponent", "temperature", "masked_fraction"),
    "huge": ("zipf_exponent", "temperature", "magnitude"),
    "spikes": ("zipf_exponent", "temperature", "num_spikes"),
    "fp16_roundtrip": ("zipf_exponent", "temperature"),
    "bf16_roundtrip": ("zipf_exponent", "temperature"),
    "subnormal": ("zipf_exponent", "temperature", "num_spikes"),
    "off_by_rounding": ("zipf_exponent", "temperature"),
}

_SHAPE = {
    "zipf_exponent": st.floats(0.5, 2.0),
    "temperature": st.floats(0.25, 4.0),
    "num_spikes": st.integers(1, 8),
    "masked_fraction": st.one_of(st.just(0.5), st.floats(0.0, 0.999)),
    "magnitude": st.one_of(st.just(1.0), st.floats(1e-3, 1.0)),
}


def _check_dtypes(dtypes, name: str) -> tuple[str, ...]:
    if dtypes is None:
        return DTYPES
    chosen = check_families(dtypes, name, DTYPES)
    return chosen


@st.composite
def _cases(draw, cls, families, vocab_size, batch_size, dtypes):
    family = draw(st.sampled_from(families))
    V = draw(vocab_size)
    B = draw(batch_size)
    dtype = draw(st.sampled_from(dtypes))
    kwargs = {k: draw(_SHAPE[k]) for k in _USES[family]}
    seed = draw(st.integers(0, _SEED_MAX))
    return cls(family=family, vocab_size=V, batch_size=B, seed=seed, dtype=dtype, **kwargs)


def _common_args(vocab_size, batch_size):
    if vocab_size is None:
        vocab_size = vocab_sizes()
    return (int_or_strategy(vocab_size, "vocab_size", minimum=1),
            int_or_strategy(batch_size, "batch_size", minimum=1))


def logit_tensors(
    *,
    vocab_size: int | SearchStrategy[int] | None = None,
    batch_size: int | SearchStrategy[int] = 1,
    families: tuple[str, ...] | None = None,
    dtypes: tuple[str, ...] | None = None,
) -> SearchStrategy[LogitsCase]:
    """Logits rows in the families that break samplers.

    Parameters
    ----------
    vocab_size : int or SearchStrategy[int], keyword-only
        V (default: :func:`~specexact.strategies.vocab_sizes`, up to 262145).
    batch_size : int or SearchStrategy[int], keyword-only, default 1
        B, >= 1.
    families : sequence of str, keyword-only
        Subset of :data:`LOGIT_FAMILIES` (default all).
    dtypes : sequence of str, keyword-only
        Subset of :data:`DTYPES` (default all four).

    Returns
    -------
    SearchStrategy[LogitsCase]
        ``case.logits`` has shape ``[B, V]`` and the drawn dtype. Families:

        - ``zipf``: ``-s * log(1 + rank) / T`` with a seeded ranking per row;
        - ``flat``: all zero (every token tied);
        - ``one_hot``: one finite logit per row, the rest ``-inf``;
        - ``near_tie``: Zipf shifted to a maximum of 1, the runner-up exactly one ulp (of
          the dtype) below it;
        - ``exact_tie``: Zipf, the top ``num_spikes + 1`` tokens exactly equal, and a
          second equal group just below them;
        - ``masked``: Zipf with ``floor(masked_fraction * V)`` tokens at ``-inf``
          (never all);
        - ``huge``: Zipf mapped onto ``[-M, M]`` with ``M = 0.99 * magnitude * finfo.max``
          (naive ``exp`` overflows; differences overflow to ``-inf``);
        - ``spikes``: Zipf plus ``num_spikes`` tokens raised to distinct heights in
          [5, 20];
        - ``fp16_roundtrip`` / ``bf16_roundtrip``: Zipf rounded through half precision
          (rounding creates ties), stored in the drawn dtype.

        The family, dtype, then the family's shape parameters (``zipf_exponent`` in
        [0.5, 2], ``temperature`` in [0.25, 4], ``num_spikes`` in 1..8,
        ``masked_fraction`` in [0, 1) with 0.5 favoured, ``magnitude`` in [1e-3, 1] with 1
        favoured) and a 32-bit seed are drawn. Every family and every dtype is reachable
        (``tests/strategies/test_laws.py``); Hypothesis's generation is adaptive, not
        uniform, and how often each is drawn is not promised.

    Raises
    ------
    InvalidArgument
        On a bad size, an unknown or repeated family or dtype name.
    """
    V, B = _common_args(vocab_size, batch_size)
    fams = check_families(families, "families", LOGIT_FAMILIES)
    dts = _check_dtypes(dtypes, "dtypes")
    return _cases(LogitsCase, fams, V, B, dts)


def probability_tensors(
    *,
    vocab_size: int | SearchStrategy[int] | None = None,
    batch_size: int | SearchStrategy[int] = 1,
    families: tuple[str, ...] | None = None,
    dtypes: tuple[str, ...] | None = None,
) -> SearchStrategy[ProbsCase]:
    """Probability rows (``target_probs`` / ``draft_probs`` material) in edge families.

    Parameters
    ----------
    vocab_size, batch_size, dtypes
        As :func:`logit_tensors`.
    families : sequence of str, keyword-only
        Subset of :data:`PROB_FAMILIES` (default all).

    Returns
    -------
    SearchStrategy[ProbsCase]
        ``case.probs`` has shape ``[B, V]`` and the drawn dtype, entries finite and
        ``>= 0``, every row with positive mass. Families (the softmax of the Zipf head of
        :func:`logit_tensors` unless stated):

        - ``zipf``; ``flat`` (``1/V``); ``one_hot``;
        - ``near_tie``: the top two tokens share their mass as ``m`` and the float just
          below ``m`` (one ulp of the dtype apart);
        - ``exact_tie``: the top ``num_spikes + 1`` probabilities exactly equal;
        - ``masked``: ``floor(masked_fraction * V)`` exact zeros, renormalised;
        - ``subnormal``: the ``min(num_spikes, V - 1)`` least probable tokens set to
          subnormal values of the dtype (the smallest subnormal first), the mass they
          lose moved to the most probable token;
        - ``fp16_roundtrip`` / ``bf16_roundtrip``: rounded through half precision (small
          probabilities flush to zero, sums drift from 1);
        - ``off_by_rounding``: scaled by ``1 + k * eps`` of the dtype, ``k`` in -4..4, so
          sums are off 1 by the dtype's rounding.

        Every family is reachable (``tests/strategies/test_laws.py``; how often each is
        drawn is not promised).

    Raises
    ------
    InvalidArgument
        As :func:`logit_tensors`.
    """
    V, B = _common_args(vocab_size, batch_size)
    fams = check_families(families, "families", PROB_FAMILIES)
    dts = _check_dtypes(dtypes, "dtypes")
    return _cases(ProbsCase, fams, V, B, dts)
