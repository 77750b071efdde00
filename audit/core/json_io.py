"""Machine-readable audit report: one JSON document per run."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

__all__ = ["write_json", "read_json", "to_jsonable", "report_to_jsonable", "write_text", "tv_or_none"]


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


def _is_tv_key(key) -> bool:
    return isinstance(key, str) and (key == "detectable_tv" or key.endswith("_detectable_tv"))


def tv_or_none(value):
    """A detectable TV as written in a report: the number, or None where no TV is
    guaranteed (an infinite value, or the string ``"inf"`` of reports before 1.3)."""
    if value is None or value == "inf":
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _tvs_to_none(value):
    if isinstance(value, dict):
        return {k: (tv_or_none(v) if _is_tv_key(k) else _tvs_to_none(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_tvs_to_none(v) for v in value]
    return value


def report_to_jsonable(report: dict) -> dict:
    """:func:`to_jsonable` of an audit report, with every detectable TV (``detectable_tv``
    and ``*_detectable_tv`` fields) that guarantees nothing written as ``null`` instead of
    the string ``"inf"`` (schema 1.3; ``reports/schema.md``)."""
    return _tvs_to_none(to_jsonable(report))


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
    """Write ``report`` atomically (temporary file, fsync, rename). Returns the path.

    Detectable TVs that guarantee nothing are written as ``null``
    (:func:`report_to_jsonable`); other non-finite floats as ``"inf"``, ``"-inf"``,
    ``"nan"``.

    Raises
    ------
    OSError
        The folder cannot be made or the file cannot be written (nothing is left behind).
    """
    return write_text(json.dumps(report_to_jsonable(report), indent=2, allow_nan=False) + "\n", path)


def read_json(path: str | os.PathLike) -> dict:
    """Read a report written by :func:`write_json` (any 1.x version).

    A report written before schema 1.3 has the string ``"inf"`` for a detectable TV that
    guarantees nothing; it is read as ``None``, as 1.3 writes it, so renderers and merges
    see one form.

    Raises
    ------
    OSError
        The file cannot be read.
    ValueError
        It is not JSON.
    """
    data = json.loads(Path(path).read_text())
    return _tvs_to_none(data) if isinstance(data, dict) else data
