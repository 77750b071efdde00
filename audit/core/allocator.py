"""Keep freed memory in the process: the audit's large CPU tensors without page faults.

torch allocates a CPU tensor with ``posix_memalign``; glibc serves a block larger than its
mmap threshold (128 KiB at start, at most 32 MiB) with a fresh ``mmap`` and gives it back
to the kernel on free. A decoder-level audit call makes hundreds of ``[rows, V]`` tensors
of megabytes to gigabytes (V = 32000, 2048 rows: the verifier's inputs alone are 1.8 GB), so
every one of them costs a page fault per 4 KiB page on first write, and the kernel zeroes
each page: measured here (one thread, V = 32000, B = 2048), a third of an audit call was
kernel time, 2.8 million page faults per call.

:func:`keep_freed_memory` tells glibc (``mallopt``) to serve every block from its heap and
never to trim it, so freed tensors are reused by the next ones: no page faults after the
first call, same results (nothing here changes what is computed; torch's outputs never
depend on what reused memory held). The cost: the process keeps its peak heap until it
exits (the audit's peak, not more). The ``specexact`` command and its worker processes
call it; a library user (the pytest plugin, ``run_audit``) keeps the process's allocator
as it is unless they call it themselves. ``SPECEXACT_MALLOC=default`` turns it off.

Source: glibc manual, "Malloc Tunable Parameters" (``M_MMAP_MAX``, ``M_TRIM_THRESHOLD``,
``M_TOP_PAD``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

__all__ = ["keep_freed_memory", "allocator_setting", "ENV"]

ENV = "SPECEXACT_MALLOC"
"""Environment variable: ``default`` leaves the C allocator as it is."""

# mallopt parameter numbers (glibc <malloc.h>).
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_MAX = -4

_TRIM_THRESHOLD = 2**31 - 1  # the largest value mallopt takes (an int): never trim the heap
_TOP_PAD = 256 << 20  # grow the heap 256 MiB at a time (fewer brk calls)

_state = {"setting": None}


def _libc():
    if platform.system() != "Linux":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    if not hasattr(libc, "mallopt") or not hasattr(libc, "gnu_get_libc_version"):
        return None  # not glibc (musl has no mallopt tunables)
    return libc


def keep_freed_memory() -> bool:
    """Make glibc keep freed memory for reuse (no ``mmap`` per large block, no trimming).

    Idempotent; affects the whole process from the call on.

    Returns
    -------
    bool
        True when the setting is in force (glibc on Linux, and ``SPECEXACT_MALLOC`` is not
        ``default``); False otherwise (nothing changed).
    """
    if _state["setting"] is not None:
        return _state["setting"] == "kept"
    if os.environ.get(ENV, "").strip().lower() == "default":
        _state["setting"] = "default (SPECEXACT_MALLOC=default)"
        return False
    libc = _libc()
    if libc is None:
        _state["setting"] = "default (not glibc)"
        return False
    ok = (libc.mallopt(_M_MMAP_MAX, 0) == 1 and libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD) == 1
          and libc.mallopt(_M_TOP_PAD, _TOP_PAD) == 1)
    _state["setting"] = "kept" if ok else "default (mallopt refused)"
    return ok


def allocator_setting() -> str:
    """What :func:`keep_freed_memory` did in this process, for the report's environment:
    ``"kept"``, ``"default (...)"`` with the reason, or ``"default"`` if it was not called."""
    return _state["setting"] or "default"
