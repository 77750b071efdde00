"""The columns a new call shares with the previous call (the prefix caches' lookup)."""

from __future__ import annotations

import torch

from specexact.decoders.prefix_match import reusable_prefix, row_prefixes


def test_same_rows_resume_up_to_the_first_column_any_row_differs():
    cached = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    ids = torch.tensor([[1, 2, 3, 9, 9], [5, 6, 0, 8, 9]])
    source, start = reusable_prefix(cached, ids)
    assert start == 2 and source.tolist() == [0, 1]
    assert reusable_prefix(cached, cached[:, :3])[1] == 3  # a shorter call: all its columns
    assert reusable_prefix(cached, ids[:1]) == (None, 0)  # another batch size: same rows only
    assert reusable_prefix(None, ids) == (None, 0)
    assert reusable_prefix(cached, torch.tensor([[0, 2], [5, 6]])) == (None, 0)


def test_each_row_resumes_the_cached_row_with_the_longest_shared_prefix():
    cached = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8], [5, 6, 0, -2]])  # -2: a column not to reuse
    ids = torch.tensor([[5, 6, 7, 1, 0], [1, 2, 3, 4, 4], [5, 6, 0, 0, 0], [9, 9, 9, 9, 9]])
    source, length = row_prefixes(cached, ids)
    assert length.tolist() == [3, 4, 3, 0]
    assert source[:3].tolist() == [1, 0, 2]
    assert [t.tolist() for t in row_prefixes(None, ids)] == [[0] * 4, [0] * 4]


def test_row_prefixes_in_chunks_equal_one_comparison(monkeypatch):
    g = torch.Generator().manual_seed(0)
    cached = torch.randint(0, 3, (7, 6), generator=g)
    ids = torch.cat([cached[torch.randperm(7, generator=g)][:5, :4], torch.randint(0, 3, (5, 3), generator=g)], 1)
    source, length = row_prefixes(cached, ids)
    monkeypatch.setattr("specexact.decoders.prefix_match.MAX_COMPARED", 7 * 6)  # one row at a time
    chunked = row_prefixes(cached, ids)
    assert torch.equal(length, chunked[1]) and bool((length >= 4).all())
    for src, m, row in zip(chunked[0].tolist(), length.tolist(), ids):
        assert torch.equal(cached[src, :m], row[:m])
        assert m == 6 or m == 7 or cached[src, m] != row[m]
