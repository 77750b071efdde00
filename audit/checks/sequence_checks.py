"""The goodness-of-fit check of sampled sequences against their enumerated exact law.

Shared by the kinds of case whose emitted law is enumerated (decoder-level cases,
:mod:`.decoder_kind`; end-to-end cases, :mod:`~specexact.audit.cases.e2e`): observed sequences of zero
reference probability are appended as outcomes of probability 0 with their counts, so the
chi-square check fails them exactly (a support failure), whatever the sample size.
"""

from __future__ import annotations

import numpy as np
import torch

from specexact.exactness.enumeration import SequenceLaw, count_sequences, encode_sequences
from specexact.exactness.goodness_of_fit import chisquare_gof
from specexact.exactness.labels import SequenceLabels
from specexact.exactness.results import CheckResult

__all__ = ["sequence_counts", "sequence_law_check"]


def _padded(rows: np.ndarray, width: int) -> np.ndarray:
    """``rows`` ``[M, L]`` right-padded with ``-1`` to at least ``width`` columns."""
    if rows.shape[1] >= width:
        return rows
    return np.pad(rows, ((0, 0), (0, width - rows.shape[1])), constant_values=-1)


def sequence_counts(law: SequenceLaw, flat: torch.Tensor) -> tuple[np.ndarray, np.ndarray, SequenceLabels, np.ndarray]:
    """``(counts, probs, labels, codes)`` of sampled sequences ``flat`` (``[N, L]`` int64,
    ``-1``-padded) over the outcomes of ``law``, with every observed outcome of zero reference
    probability appended (count, probability 0, its tokens as label); ``codes [N]`` are the
    rows' :func:`~specexact.exactness.enumeration.encode_sequences` codes."""
    counts, unexpected = count_sequences(law, flat)
    probs, labels = law.probs, law.labels()
    codes = encode_sequences(flat, law.vocab_size)  # [N]
    if len(unexpected):
        off = np.flatnonzero(~np.isin(codes, law.codes))
        _, first, off_counts = np.unique(codes[off], return_index=True, return_counts=True)
        rows = flat[off[first]].tolist()
        counts = np.concatenate([counts, off_counts])
        probs = np.concatenate([probs, np.zeros(len(rows))])
        labels = SequenceLabels(np.concatenate([_padded(law.sequences, flat.shape[1]),
                                                _padded(np.asarray(rows, dtype=np.int64), law.sequences.shape[1])]))
    return counts, probs, labels, codes


def sequence_law_check(law: SequenceLaw, flat: torch.Tensor, *, false_fail_rate: float, min_expected: float,
                       name: str) -> tuple[CheckResult, np.ndarray]:
    """Chi-square goodness of fit of ``flat`` (``[N, L]``) against ``law`` at
    ``false_fail_rate`` (a sequence of zero probability fails at once); returns the check and
    the rows' codes."""
    counts, probs, labels, codes = sequence_counts(law, flat)
    check = chisquare_gof(counts, probs, false_fail_rate=false_fail_rate, labels=labels, min_expected=min_expected,
                          name=name)
    return check, codes
