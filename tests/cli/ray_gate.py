"""The built-in verifier behind a gate the ``--ray`` tests control through files.

``--sampler ray_gate:verify`` (this folder on ``PYTHONPATH``) samples exactly as
``builtin`` does. On its first call in a process it looks at the folder named by
``SPECEXACT_TEST_GATE`` (nothing happens without it), with ``S`` the process's shard
(``--shard I/N`` in its command line, as ``I-of-N``; ``local`` without one):

- appends ``S PID`` to ``calls.log`` (which shards ran, how often);
- ``crash-S`` exists: the process ends at once with status 3 (a crash, no report);
- ``hold-S`` exists: writes ``held-S`` (holding its pid) and waits until ``hold-S`` is gone.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from pathlib import Path

from specexact.decoders import verify as _builtin_verify

_gated = False


def _shard() -> str:
    argv = sys.argv
    if "--shard" in argv:
        return argv[argv.index("--shard") + 1].replace("/", "-of-")
    return "local"


def _gate() -> None:
    global _gated
    if _gated:
        return
    _gated = True
    folder = os.environ.get("SPECEXACT_TEST_GATE")
    if not folder:
        return
    gate, shard = Path(folder), _shard()
    with open(gate / "calls.log", "a") as f:
        f.write(f"{shard} {os.getpid()}\n")
    if (gate / f"crash-{shard}").exists():
        os._exit(3)
    hold = gate / f"hold-{shard}"
    if hold.exists():
        tmp = gate / f".held-{shard}"
        tmp.write_text(str(os.getpid()))
        tmp.rename(gate / f"held-{shard}")
        while hold.exists():
            time.sleep(0.05)


@functools.wraps(_builtin_verify)
def verify(*args, **kwargs):
    """:func:`specexact.decoders.verify` behind the gate (module docstring)."""
    _gate()
    return _builtin_verify(*args, **kwargs)
