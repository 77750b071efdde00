"""audit.allocator: glibc keeps freed memory, so a large tensor made again costs no page faults."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from specexact.audit.core import allocator
from specexact.audit.run.isolation import _child_env

GLIBC = allocator._libc() is not None

# A fresh process makes and frees a 64 MiB tensor 20 times and counts the page faults of the
# last 4 (16,384 pages of 4 KiB each time glibc maps it afresh). With the memory kept, the
# first allocations still touch new heap pages (glibc's aligned blocks walk up the heap
# before they settle; measured: every later one reuses touched pages from the 10th on).
_PROBE = r"""
import json, resource, sys, torch
from specexact.audit.core import allocator
torch.set_num_threads(1)
kept = allocator.keep_freed_memory() if sys.argv[1] == "keep" else False
n = 64 << 18  # float32 entries: 64 MiB
faults = []
for _ in range(20):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    x = torch.ones(n)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    total = float(x.sum())
    del x
print(json.dumps({"kept": kept, "setting": allocator.allocator_setting(), "faults": sum(faults[-4:]),
                  "sum": total}))
"""


def _probe(mode: str, **env) -> dict:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, timeout=120,
                         env={**os.environ, **env})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.skipif(not GLIBC, reason="glibc only (mallopt)")
def test_kept_memory_makes_a_large_tensor_again_without_page_faults():
    default = _probe("default", SPECEXACT_MALLOC="")
    kept = _probe("keep", SPECEXACT_MALLOC="")
    assert default["setting"] == "default" and not default["kept"]
    assert default["faults"] >= 4 * 16000  # glibc's default: a fresh mapping, a fault per page
    assert kept["kept"] and kept["setting"] == "kept"
    assert kept["faults"] < 1000
    assert kept["sum"] == default["sum"] == float(64 << 18)


def test_specexact_malloc_default_leaves_the_allocator(monkeypatch):
    monkeypatch.setitem(allocator._state, "setting", None)
    monkeypatch.setenv("SPECEXACT_MALLOC", "default")
    assert allocator.keep_freed_memory() is False
    assert allocator.allocator_setting() == "default (SPECEXACT_MALLOC=default)"
    probe = _probe("keep", SPECEXACT_MALLOC="default")
    assert not probe["kept"] and probe["faults"] >= (4 * 16000 if GLIBC else 0)


def test_isolated_children_allocate_as_the_parent(monkeypatch):
    monkeypatch.delenv("SPECEXACT_MALLOC", raising=False)
    monkeypatch.setitem(allocator._state, "setting", "kept")
    assert _child_env()["SPECEXACT_MALLOC"] == "keep"
    monkeypatch.setitem(allocator._state, "setting", "default (not glibc)")
    assert "SPECEXACT_MALLOC" not in _child_env()


def test_the_report_environment_says_which_allocator(monkeypatch):
    from specexact.audit.core.environment import environment

    monkeypatch.setitem(allocator._state, "setting", "kept")
    assert environment("cpu")["allocator"] == "kept"
    monkeypatch.setitem(allocator._state, "setting", None)
    assert environment("cpu")["allocator"] == "default"
