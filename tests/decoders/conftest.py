"""Fixtures of the decoder tests.

``poisoned_storage``: every tensor the decoders allocate uninitialised (``torch.empty`` /
``torch.empty_like`` / ``Tensor.new_empty``, and every buffer
:func:`specexact.decoders.workspace.take` hands out, reused or fresh) is filled with
poison first: NaN for floating point, ``True`` for bool, ``0xA5`` for uint8, a third of
the type's maximum for other integers (an index that far out raises). A fast path that
reads an entry it did not write then gives other output than its reference, whatever the
allocator's freed memory held.
"""

from __future__ import annotations

import pytest
import torch

from specexact.decoders import workspace


def poison_(t: torch.Tensor) -> torch.Tensor:
    """Fill ``t`` with the poison of its dtype (in place)."""
    if t.is_floating_point():
        t.fill_(float("nan"))
    elif t.dtype == torch.bool:
        t.fill_(True)
    elif t.dtype == torch.uint8:
        t.fill_(0xA5)
    elif not t.is_complex():
        t.fill_(torch.iinfo(t.dtype).max // 3)
    return t


@pytest.fixture
def poisoned_storage(monkeypatch):
    empty, empty_like, new_empty = torch.empty, torch.empty_like, torch.Tensor.new_empty
    monkeypatch.setattr(torch, "empty", lambda *a, **k: poison_(empty(*a, **k)))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **k: poison_(empty_like(*a, **k)))
    monkeypatch.setattr(torch.Tensor, "new_empty", lambda self, *a, **k: poison_(new_empty(self, *a, **k)))
    monkeypatch.setattr(workspace, "POISON", float("nan"))
    workspace.release()  # no buffer left from an unpoisoned test
    yield
    workspace.release()
