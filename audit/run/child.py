"""What every child process of the audit does first and last (:mod:`.isolation`: a case;
:mod:`.fuzz_child`: the fuzz phase).

:func:`start_child` turns on ``faulthandler`` (a crash prints its stack to the captured
stderr), keeps freed memory when the parent asked for it (:mod:`specexact.audit.core.allocator`),
reads the pickled spec and sets torch's threads from it; :func:`write_child_result` writes the
result as strict JSON through a temporary file, so the parent never reads half a result.
"""

from __future__ import annotations

import faulthandler
import json
import os
import pickle
from pathlib import Path

import torch

from specexact.audit.core.allocator import ENV as ALLOCATOR_ENV
from specexact.audit.core.allocator import keep_freed_memory
from specexact.audit.core.json_io import to_jsonable

__all__ = ["start_child", "write_child_result"]


def start_child(spec_path: str) -> dict:
    """Set the child process up and return its spec (a dict with at least ``"threads"``)."""
    faulthandler.enable()
    if os.environ.get(ALLOCATOR_ENV) == "keep":
        keep_freed_memory()
    spec = pickle.loads(Path(spec_path).read_bytes())
    torch.set_num_threads(int(spec["threads"]))
    return spec


def write_child_result(result_path: str, payload: dict) -> None:
    """Write ``payload`` to ``result_path`` as strict JSON, atomically (temporary file, then rename)."""
    out = Path(result_path)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(to_jsonable(payload), allow_nan=False))
    os.replace(tmp, out)
