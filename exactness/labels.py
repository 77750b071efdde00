"""Readable labels of enumerated outcomes, formatted only when read.

A law of sequences has up to millions of outcomes; a check names only its few worst
cells, so formatting every outcome's label up front cost more than the check itself
(1.6 s of the 2.1 s of an end-to-end case's checks on the built-in engine, 2026-12-07).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["SequenceLabels"]


class SequenceLabels(Sequence):
    """``labels[m]`` is row ``m`` of ``sequences`` as text, e.g. ``"3 1 7"`` (``-1`` padding
    left out), formatted when read.

    Parameters
    ----------
    sequences : np.ndarray
        Shape ``[M, L]``, integer, ``-1``-padded outcomes.

    Raises
    ------
    ValueError
        ``sequences`` is not two-dimensional.
    """

    def __init__(self, sequences: np.ndarray) -> None:
        sequences = np.asarray(sequences)
        if sequences.ndim != 2:
            raise ValueError(f"sequences must have shape [M, L], got shape {sequences.shape}")
        self._sequences = sequences

    def __len__(self) -> int:
        return int(self._sequences.shape[0])

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return " ".join(str(int(t)) for t in self._sequences[index] if t >= 0)

    def __repr__(self) -> str:
        return f"SequenceLabels({len(self)} outcomes)"
