"""Crash-safe journal of finished audit cases, so a killed audit resumes where it stopped.

The journal is a JSON-lines file. Its first line is a header
``{"type": "header", "key": ..., ...}``; every later line is one finished case
``{"type": "case", "name": ..., "result": <CaseResult.to_dict()>, ...}``, appended with one
``write`` on an ``O_APPEND`` descriptor and ``fsync``-ed before the audit moves on. A case
is therefore either wholly in the journal or not at all: a kill (even ``SIGKILL``, or a
power cut after the ``fsync``) loses at most the case that was running. A torn last line
(a kill in the middle of a write) is detected on reading and cut off before appending.

The key is a hash of everything that decides the results (sampler, seed, cases, budget or
batches, false-fail rate, shard, device, versions; see
:func:`specexact.audit.audit.audit_key`); the file is named after it, so an audit restarted
with the same arguments finds its journal and one with other arguments starts afresh.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Journal", "JournalState", "journal_path", "JOURNAL_VERSION"]

JOURNAL_VERSION = 1


def journal_path(directory: str | os.PathLike, key: str) -> Path:
    """``DIR/audit-KEY.jsonl``."""
    return Path(directory) / f"audit-{key}.jsonl"


@dataclass
class JournalState:
    """What an existing journal held: its header and its finished cases by name."""

    header: dict | None = None
    cases: dict[str, dict] = field(default_factory=dict)
    torn_bytes: int = 0


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def _read(path: Path) -> tuple[JournalState, int]:
    """Parse ``path``; return the state and the byte length of its valid prefix."""
    state = JournalState()
    data = path.read_bytes()
    good = 0
    pos = 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        if end < 0:
            break  # torn last line: no newline
        line = data[pos:end]
        try:
            rec = json.loads(line)
        except ValueError:
            break  # torn or corrupt: stop here, drop the rest
        if not isinstance(rec, dict):
            break
        if rec.get("type") == "header" and state.header is None:
            state.header = rec
        elif rec.get("type") == "case" and state.header is not None and isinstance(rec.get("name"), str):
            state.cases[rec["name"]] = rec
        else:
            break
        pos = end + 1
        good = pos
    state.torn_bytes = len(data) - good
    return state, good


class Journal:
    """Append-only, fsync-ed journal of one audit (see the module docstring).

    Use :meth:`open`; it returns the journal (ready to append) and what it already held.
    """

    def __init__(self, path: Path, key: str):
        self.path = path
        self.key = key

    @classmethod
    def open(cls, path: str | os.PathLike, key: str, header, *, fresh: bool = False) -> tuple["Journal", JournalState]:
        """Open (resume) or create the journal at ``path``.

        Parameters
        ----------
        path : path
            The journal file.
        key : str
            The audit's key; a journal with another key (or none) is replaced.
        header : dict or callable returning a dict
            Written as the first line of a new journal (``type``, ``key`` and ``version``
            are added); called only when a new journal is made. An existing journal keeps
            its own header, which is returned.
        fresh : bool
            Discard an existing journal.

        Returns
        -------
        (Journal, JournalState)
            The state's ``header`` is the header in force; ``cases`` the finished cases.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        journal = cls(path, key)
        if path.exists() and not fresh:
            state, good = _read(path)
            if state.header is not None and state.header.get("key") == key:
                if state.torn_bytes:
                    with open(path, "r+b") as fh:  # cut a torn tail before appending
                        fh.truncate(good)
                        fh.flush()
                        os.fsync(fh.fileno())
                return journal, state
        record = {"type": "header", "version": JOURNAL_VERSION, "key": key,
                  **(header() if callable(header) else header)}
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w") as fh:
            fh.write(json.dumps(record, allow_nan=False, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
        return journal, JournalState(header=record)

    def append_case(self, name: str, result: dict, **extra) -> None:
        """Append one finished case durably (one ``write``, then ``fsync``)."""
        line = json.dumps({"type": "case", "name": name, "result": result, **extra},
                          allow_nan=False, sort_keys=True) + "\n"
        data = line.encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)

    def remove(self) -> None:
        """Delete the journal (after the final report is safely written)."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
