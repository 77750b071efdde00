"""Machine-readable audit report: one JSON document per run."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

__all__ = ["write_json", "read_json", "to_jsonable", "write_text"]


def to_jsonable(value):
    """Replace non-finite floats by the strings ``"inf"``, ``"-inf"``, ``"nan"`` (strict JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        return to_jsonable(value.item())
    return value


def write_text(text: str, path: str | os.PathLike) -> Path:
    """Write ``text`` atomically (temporary file, fsync, rename). Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a report is an ordinary file
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def write_json(report: dict, path: str | os.PathLike) -> Path:
    """Write ``report`` atomically (temporary file, fsync, rename). Returns the path."""
    return write_text(json.dumps(to_jsonable(report), indent=2, allow_nan=False) + "\n", path)


def read_json(path: str | os.PathLike) -> dict:
    """Read a report written by :func:`write_json`."""
    return json.loads(Path(path).read_text())
