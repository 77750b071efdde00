"""The columns a new call shares with the previous call (the prefix caches' lookup)."""

from __future__ import annotations

import torch

from specexact.decoders.prefix_match import reusable_prefix


def test_same_rows_resume_up_to_the_first_column_any_row_differs():
    cached = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    ids = torch.tensor([[1, 2, 3, 9, 9], [5, 6, 0, 8, 9]])
    source, start = reusable_prefix(cached, ids)
    assert start == 2 and source.tolist() == [0, 1]
    assert reusable_prefix(cached, cached[:, :3])[1] == 3  # a shorter call: all its columns
    assert reusable_prefix(cached, ids[:1]) == (None, 0)  # another batch size: same rows only
    assert reusable_prefix(None, ids) == (None, 0)
    assert reusable_prefix(cached, torch.tensor([[0, 2], [5, 6]])) == (None, 0)


def test_any_row_resumes_the_cached_row_with_the_longest_shared_prefix():
    cached = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8], [5, 6, 0, 0]])
    ids = torch.tensor([[5, 6, 7, 1], [1, 2, 3, 4], [5, 6, 0, 3]])
    source, start = reusable_prefix(cached, ids, any_row=True)
    assert source.tolist() == [1, 0, 2] and start == 3
    assert reusable_prefix(cached, ids, any_row=False) == (None, 0)  # row 0 differs from cached row 0 at once
    # one row without a cached row sharing its first id: nothing is reused
    assert reusable_prefix(cached, torch.tensor([[1, 2], [9, 9]]), any_row=True) == (None, 0)


def test_any_row_in_chunks_equals_one_comparison(monkeypatch):
    g = torch.Generator().manual_seed(0)
    cached = torch.randint(0, 3, (7, 6), generator=g)
    ids = torch.cat([cached[torch.randperm(7, generator=g)][:5, :4], torch.randint(0, 3, (5, 3), generator=g)], 1)
    whole = reusable_prefix(cached, ids, any_row=True)
    monkeypatch.setattr("specexact.decoders.prefix_match.MAX_COMPARED", 7 * 6)  # one row at a time
    chunked = reusable_prefix(cached, ids, any_row=True)
    assert whole[1] == chunked[1] >= 4
    assert torch.equal(cached[whole[0], : whole[1]], ids[:, : whole[1]])
    assert torch.equal(cached[chunked[0], : chunked[1]], ids[:, : chunked[1]])
