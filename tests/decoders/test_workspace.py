"""Reused storage for the decoders' per-round tensors (specexact.decoders.workspace)."""

from __future__ import annotations

import math

import pytest
import torch

from specexact.decoders import workspace


@pytest.fixture(autouse=True)
def fresh_workspace():
    workspace.release()
    yield
    workspace.release()


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def test_a_buffer_nothing_else_holds_is_reused():
    if workspace._use_count(torch.empty(1)) is None:
        pytest.skip("this torch has no storage use count: take never reuses")
    a = workspace.take("x", (4, 5))
    ptr = _storage(a)
    del a
    b = workspace.take("x", (3, 5))  # smaller: a view of the same storage
    assert _storage(b) == ptr and b.shape == (3, 5) and b.is_contiguous()


@pytest.mark.parametrize("hold", ["tensor", "view", "numpy"])
def test_a_buffer_still_held_elsewhere_is_never_handed_out_again(hold):
    a = workspace.take("x", (4, 5))
    a.fill_(7.0)
    kept = {"tensor": lambda: a, "view": lambda: a[1:, 2], "numpy": lambda: a.numpy()}[hold]()
    del a
    b = workspace.take("x", (4, 5))
    b.fill_(-1.0)
    assert float(torch.as_tensor(kept).min()) == 7.0  # what the holder sees is untouched


def test_other_names_dtypes_and_larger_shapes_get_their_own_storage():
    a = workspace.take("x", (2, 3))
    b = workspace.take("y", (2, 3))
    assert _storage(a) != _storage(b)
    del a
    c = workspace.take("x", (2, 3), dtype=torch.float64)
    assert c.dtype == torch.float64
    del c
    d = workspace.take("x", (50, 3))
    assert d.shape == (50, 3) and d.numel() == math.prod((50, 3))


def test_reuse_off_and_release_give_fresh_storage(monkeypatch):
    a = workspace.take("x", (4, 5))
    ptr = _storage(a)
    monkeypatch.setattr(workspace, "REUSE", False)
    fresh = workspace.take("x", (4, 5))
    assert _storage(fresh) != ptr
    monkeypatch.setattr(workspace, "REUSE", True)
    workspace.release()
    assert "x" not in workspace._buffers


def test_the_poison_hook_fills_every_buffer_handed_out(monkeypatch):
    a = workspace.take("x", (4, 5))
    a.fill_(3.0)
    del a
    monkeypatch.setattr(workspace, "POISON", float("nan"))
    assert bool(workspace.take("x", (4, 5)).isnan().all())  # reused
    assert bool(workspace.take("z", (2, 2)).isnan().all())  # fresh
    monkeypatch.setattr(workspace, "REUSE", False)
    assert bool(workspace.take("x", (4, 5)).isnan().all())  # never kept


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_storage_on_other_devices_is_never_kept():
    t = workspace.take("x", (4, 5), device="cuda")
    assert t.device.type == "cuda" and "x" not in workspace._buffers
