"""Vocabulary sizes: degenerate, odd, power-of-two and tile edges, and real tokenizers."""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from ._validation import InvalidArgument, check_families, check_int, check_optional_int

__all__ = [
    "REAL_VOCAB_SIZES",
    "VOCAB_FAMILIES",
    "vocab_size_family",
    "vocab_sizes",
]

#: Vocabulary sizes of released tokenizers: Llama 2, Llama 3, Qwen 2, Gemma.
REAL_VOCAB_SIZES: tuple[int, ...] = (32000, 128256, 151936, 256000)

_SMALL_ODD = tuple(range(3, 64, 2))
# 2**j - 1, 2**j, 2**j + 1 around the small powers of two (vectorisation widths).
_POW2_EDGES = tuple(sorted({2**j + d for j in range(7, 12) for d in (-1, 0, 1)}))
# One below and one past kernel tile / block sizes (4096 .. 262144), e.g. 8193.
_TILE_EDGES = tuple(sorted({2**j + d for j in range(12, 19) for d in (-1, 1)}))
_ARBITRARY_MAX = 4096

#: Family names, in the order :func:`vocab_sizes` lists them.
VOCAB_FAMILIES: tuple[str, ...] = (
    "one", "two", "small_odd", "pow2_edge", "tile_edge", "real", "arbitrary",
)

_VALUES = {
    "one": (1,),
    "two": (2,),
    "small_odd": _SMALL_ODD,
    "pow2_edge": _POW2_EDGES,
    "tile_edge": _TILE_EDGES,
    "real": REAL_VOCAB_SIZES,
}


def vocab_size_family(vocab_size: int) -> str:
    """The family :func:`vocab_sizes` files ``vocab_size`` under.

    Families are disjoint: ``"one"`` (1), ``"two"`` (2), ``"small_odd"`` (odd 3..63),
    ``"pow2_edge"`` (``2**j - 1, 2**j, 2**j + 1`` for ``j = 7..11``), ``"tile_edge"``
    (``2**j +- 1`` for ``j = 12..18``, e.g. 8193), ``"real"`` (:data:`REAL_VOCAB_SIZES`),
    else ``"arbitrary"``.

    Raises
    ------
    InvalidArgument
        If ``vocab_size`` is not an integer >= 1.
    """
    check_int(vocab_size, "vocab_size", minimum=1)
    for family, values in _VALUES.items():
        if vocab_size in values:
            return family
    return "arbitrary"


def _nearest_arbitrary(v: int, lo: int, hi: int) -> int:
    """``v`` if it belongs to no named family, else the nearest such value in [lo, hi]."""
    for step in range(hi - lo + 1):
        for cand in (v + step, v - step):
            if lo <= cand <= hi and vocab_size_family(cand) == "arbitrary":
                return cand
    raise InvalidArgument(f"no arbitrary vocabulary size in [{lo}, {hi}]")  # pragma: no cover


def vocab_sizes(
    *,
    min_size: int = 1,
    max_size: int | None = None,
    families: tuple[str, ...] | None = None,
) -> SearchStrategy[int]:
    """Vocabulary sizes V that break kernels: 1, 2, odd, power-of-two and tile edges, real.

    Parameters
    ----------
    min_size : int, keyword-only, default 1
        Smallest V generated, >= 1.
    max_size : int or None, keyword-only
        Largest V generated (None: up to 262145, the largest tile edge). Tests that build
        ``[B, K, V]`` tensors per example should cap it.
    families : sequence of str, keyword-only, optional
        Subset of :data:`VOCAB_FAMILIES` (default: all). Families with no value inside
        ``[min_size, max_size]`` are dropped.

    Returns
    -------
    SearchStrategy[int]
        A Python ``int``. Each example first picks one of the families that has values in
        bounds (:func:`hypothesis.strategies.sampled_from`), then a value of it;
        ``"arbitrary"`` is an integer in ``[min_size, min(max_size, 4096)]`` (or the whole
        range when ``min_size > 4096``) outside the other families. Every family in
        bounds is reachable (``tests/strategies/test_vocab.py``); how often each is drawn
        is not promised (alone, a one-value family such as ``"one"`` appears once, since
        Hypothesis does not repeat an example).
        :func:`vocab_size_family` gives the family of a value.

    Raises
    ------
    InvalidArgument
        If a bound is not an integer, ``min_size < 1``, ``max_size < min_size``, a family
        is unknown, or no chosen family has a value in bounds.
    """
    min_size = check_int(min_size, "min_size", minimum=1)
    max_size = check_optional_int(max_size, "max_size", minimum=1)
    if max_size is not None and max_size < min_size:
        raise InvalidArgument(f"max_size={max_size!r} must be >= min_size={min_size!r}")
    chosen = check_families(families, "families", VOCAB_FAMILIES)
    hi = max_size if max_size is not None else max(_TILE_EDGES)

    branches: dict[str, SearchStrategy[int]] = {}
    for family in chosen:
        if family == "arbitrary":
            top = min(hi, _ARBITRARY_MAX) if min_size <= _ARBITRARY_MAX else hi
            if top - min_size < 256 and all(vocab_size_family(v) != "arbitrary"
                                            for v in range(min_size, top + 1)):
                continue
            branches[family] = st.integers(min_size, top).map(
                lambda v, lo=min_size, hi=top: _nearest_arbitrary(v, lo, hi))
            continue
        values = tuple(v for v in _VALUES[family] if min_size <= v <= hi)
        if values:
            branches[family] = st.sampled_from(values)
    if not branches:
        raise InvalidArgument(
            f"no vocabulary family in {chosen!r} has a size in [min_size={min_size}, "
            f"max_size={max_size}]"
        )
    names = tuple(branches)
    return st.sampled_from(names).flatmap(lambda family: branches[family])
