"""Outcome labels formatted when read (exactness/labels.py)."""

import numpy as np
import pytest

from specexact.exactness._validate import check_labels
from specexact.exactness.labels import SequenceLabels


def test_labels_read_as_the_outcomes_tokens_without_the_padding():
    labels = SequenceLabels(np.array([[3, 1, 7], [2, -1, -1], [0, 5, -1]]))
    assert len(labels) == 3 and labels[0] == "3 1 7" and labels[1] == "2" and labels[-1] == "0 5"
    assert labels[1:] == ["2", "0 5"] and list(labels) == ["3 1 7", "2", "0 5"]


def test_a_check_keeps_them_unformatted_and_reads_only_what_it_names():
    class Counting(SequenceLabels):
        read = 0

        def __getitem__(self, index):
            Counting.read += 1
            return super().__getitem__(index)

    labels = Counting(np.arange(2_000_000).reshape(-1, 2))
    assert check_labels(labels, 1_000_000) is labels and Counting.read == 0


def test_a_law_that_is_not_a_table_of_rows_is_refused():
    with pytest.raises(ValueError, match=r"sequences must have shape \[M, L\], got shape \(3,\)"):
        SequenceLabels(np.array([1, 2, 3]))
