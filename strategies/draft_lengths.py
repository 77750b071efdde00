"""Draft lengths γ as deployments use them, and the vocabulary cap that keeps an example's cost flat.

Chain drafters verify 1 to 8 tokens a round (EAGLE-style trees up to 8 deep); block
drafters verify blocks of 15 drafts and a bonus token (16 positions). :func:`draft_lengths`
draws γ from the short range most tests shrink into and from the long range, with 8 and
:data:`BLOCK_DRAFT_LENGTH` drawn as values of their own, so neither depends on luck.

A ``[B, γ+1, V]`` target tensor costs ``B (γ+1) V``: :func:`capped_vocab_size` is the
largest V that keeps that product within a fixed number of cells, so a long γ comes with a
smaller vocabulary instead of a larger example.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from ._validation import check_int

__all__ = ["SHORT_DRAFT_LENGTHS", "LONG_DRAFT_LENGTHS", "BLOCK_DRAFT_LENGTH", "draft_lengths", "capped_vocab_size"]

SHORT_DRAFT_LENGTHS = (1, 4)
"""The short range ``[1, 4]`` of γ (where Hypothesis shrinks to)."""

BLOCK_DRAFT_LENGTH = 15
"""γ of a block drafter: 15 drafts and the bonus token, 16 positions."""

LONG_DRAFT_LENGTHS = (8, BLOCK_DRAFT_LENGTH)
"""γ values drawn as values of their own in the long range: a deep chain / tree depth and
the block drafters' block."""


def draft_lengths(*, max_length: int = 16) -> SearchStrategy[int]:
    """γ (``num_draft_tokens``): short chains and the long ones deployments use.

    Parameters
    ----------
    max_length : int, keyword-only, default 16
        Largest γ (>= 1).

    Returns
    -------
    SearchStrategy[int]
        A Python ``int`` in ``[1, max_length]``: from ``[1, 4]`` (two of three branches,
        the first, so a failure shrinks to a short γ) or from the long range
        ``[5, max_length]`` (one branch: the values of :data:`LONG_DRAFT_LENGTHS` within
        bounds, or any value of the range). For ``max_length <= 4`` only the short range.

    Raises
    ------
    InvalidArgument
        ``max_length`` is not an integer ``>= 1``.
    """
    max_length = check_int(max_length, "max_length", minimum=1)
    short = st.integers(SHORT_DRAFT_LENGTHS[0], min(SHORT_DRAFT_LENGTHS[1], max_length))
    if max_length <= SHORT_DRAFT_LENGTHS[1]:
        return short
    named = [k for k in LONG_DRAFT_LENGTHS if k <= max_length]
    long = st.integers(SHORT_DRAFT_LENGTHS[1] + 1, max_length)
    if named:
        # .map keeps it one branch (st.one_of flattens nested one_of branches)
        long = st.one_of(st.sampled_from(named), long).map(int)
    return st.one_of(short, short, long)


def capped_vocab_size(cells: int, batch_size: int, num_draft_tokens: int, *, max_vocab: int,
                      min_vocab: int = 8) -> int:
    """The largest V with ``batch_size * (num_draft_tokens + 1) * V <= cells``, within
    ``[min_vocab, max_vocab]``.

    Parameters
    ----------
    cells : int
        The budget of target-tensor entries per example (``>= 1``).
    batch_size, num_draft_tokens : int
        B and γ (``>= 1``).
    max_vocab : int, keyword-only
        The cap without the budget (``>= 1``).
    min_vocab : int, keyword-only, default 8
        Never below this (nor above ``max_vocab``): small vocabularies stay reachable.

    Returns
    -------
    int

    Raises
    ------
    InvalidArgument
        An argument that is not an integer ``>= 1``.
    """
    cells = check_int(cells, "cells", minimum=1)
    B = check_int(batch_size, "batch_size", minimum=1)
    K = check_int(num_draft_tokens, "num_draft_tokens", minimum=1)
    max_vocab = check_int(max_vocab, "max_vocab", minimum=1)
    min_vocab = check_int(min_vocab, "min_vocab", minimum=1)
    return max(min(min_vocab, max_vocab), min(max_vocab, cells // (B * (K + 1))))
