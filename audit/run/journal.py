"""Crash-safe journal of finished audit cases, so a killed audit resumes where it stopped.

The journal is a JSON-lines file. Its first line is a header
``{"type": "header", "key": ..., ...}``; every later line is one finished case
``{"type": "case", "name": ..., "result": <CaseResult.to_dict()>, ...}``, appended with one
``write`` on an ``O_APPEND`` descriptor and ``fsync``-ed before the audit moves on. A case
is therefore either wholly in the journal or not at all: a kill (even ``SIGKILL``, or a
power cut after the ``fsync``) loses at most the case that was running. The fuzz stage's
finished result is one line ``{"type": "fuzz", "result": <FuzzResult.to_dict()>}``
(:meth:`Journal.append_fuzz`), so a resume does not run the fuzz phase again. A torn last line
(a kill in the middle of a write) is detected on reading and cut off before appending.

The key is a hash of everything that decides the results (sampler, seed, cases, budget or
batches, false-fail rate, shard, device, versions; see
:func:`specexact.audit.run.stages.audit_key`); the file is named after it, so an audit restarted
with the same arguments finds its journal and one with other arguments starts afresh.

**One writer per key.** :meth:`Journal.open` takes an exclusive ``flock`` on
``DIR/audit-KEY.lock`` (holding the writer's pid and start time) and keeps it until
:meth:`Journal.close` or :meth:`Journal.finish`, or until the process ends (the kernel
drops the lock of a killed process, so a ``SIGKILL``-ed audit never leaves a stale lock).
A second audit with the same key, while the first runs, gets :class:`JournalBusy` (after
waiting ``wait_s`` seconds for it), naming the holder; audits with other keys never wait
for each other. The lock file is removed while the lock is held, and a process that
locked a file that was meanwhile removed locks the new one instead, so removing it is
race-free. On platforms without ``fcntl`` there is no lock.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

try:  # POSIX advisory locks; elsewhere journals are not locked
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

__all__ = ["Journal", "JournalState", "JournalBusy", "journal_path", "lock_path", "held_journal", "read_journal",
           "JOURNAL_VERSION"]

JOURNAL_VERSION = 1


def journal_path(directory: str | os.PathLike, key: str) -> Path:
    """``DIR/audit-KEY.jsonl``."""
    return Path(directory) / f"audit-{key}.jsonl"


def lock_path(path: str | os.PathLike) -> Path:
    """The lock file of the journal at ``path``: ``DIR/audit-KEY.lock``."""
    path = Path(path)
    return path.with_name(path.stem + ".lock")


def _named(exc: OSError, path) -> OSError:
    """``exc`` naming ``path`` when it names no file (a failed ``write`` or ``fsync`` on a
    descriptor), so the command's one-line error says which journal could not be written."""
    if exc.filename is not None:
        return exc
    return OSError(exc.errno, exc.strerror or str(exc) or type(exc).__name__, os.fspath(path))


class JournalBusy(RuntimeError):
    """Another process is running the same audit and holds its journal.

    Attributes
    ----------
    path : Path
        The journal.
    holder : dict
        What the holder wrote into the lock file (``pid``, ``started_at``), possibly empty.
    """

    def __init__(self, path: Path, holder: dict, waited_s: float):
        self.path, self.holder, self.waited_s = Path(path), dict(holder), waited_s
        who = (f"pid {holder['pid']}, started {holder.get('started_at', '?')}" if holder.get("pid")
               else "another process")
        waited = f" (waited {waited_s:g} s)" if waited_s else ""
        super().__init__(f"another audit with the same arguments is running ({who}) and holds the journal "
                         f"{self.path}{waited}")


def _lock(path: Path, wait_s: float) -> int | None:
    """Lock ``lock_path(path)`` exclusively; return its descriptor (None without fcntl).

    Raises
    ------
    JournalBusy
        The lock stayed held by another process for ``wait_s`` seconds.
    """
    if fcntl is None:  # pragma: no cover
        return None
    lp = lock_path(path)
    deadline = time.monotonic() + max(wait_s, 0.0)
    while True:
        fd = os.open(lp, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            if time.monotonic() >= deadline:
                raise JournalBusy(path, holder, wait_s) from None
            time.sleep(0.1)
            continue
        try:
            same = os.fstat(fd).st_ino == os.stat(lp).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # the holder removed the file after we opened it: lock the new one
            os.close(fd)
            continue
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "started_at": _dt.datetime.now(_dt.timezone.utc)
                                 .isoformat(timespec="seconds")}).encode())
        return fd


def _holder(fd: int) -> dict:
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@dataclass
class JournalState:
    """What an existing journal held: its header and its finished cases by name."""

    header: dict | None = None
    cases: dict[str, dict] = field(default_factory=dict)
    fuzz: dict | None = None  # the fuzz stage's result (FuzzResult.to_dict()), once it finished
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
        elif rec.get("type") == "fuzz" and state.header is not None and isinstance(rec.get("result"), dict):
            state.fuzz = rec["result"]
        else:
            break
        pos = end + 1
        good = pos
    state.torn_bytes = len(data) - good
    return state, good


def read_journal(path: str | os.PathLike) -> JournalState:
    """What the journal at ``path`` holds now (an empty state if there is none); read-only,
    needs no lock (a torn last line is ignored)."""
    try:
        return _read(Path(path))[0]
    except FileNotFoundError:
        return JournalState()


class Journal:
    """Append-only, fsync-ed journal of one audit (see the module docstring).

    Use :meth:`open`; it returns the journal (ready to append, its lock held) and what it
    already held. :meth:`finish` removes it once the reports are written; :meth:`close`
    keeps it (for a later resume) and releases the lock.
    """

    def __init__(self, path: Path, key: str, lock_fd: int | None = None):
        self.path = path
        self.key = key
        self._lock_fd = lock_fd

    @classmethod
    def open(cls, path: str | os.PathLike, key: str, header, *, fresh: bool = False,
             wait_s: float = 0.0) -> tuple["Journal", JournalState]:
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
        wait_s : float
            How long to wait for another process holding the same journal (default: not
            at all).

        Returns
        -------
        (Journal, JournalState)
            The state's ``header`` is the header in force; ``cases`` the finished cases.

        Raises
        ------
        JournalBusy
            Another process holds this journal (the same audit is running).
        OSError
            The folder cannot be made or written (e.g. a path component is a file).
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        earlier = _HELD.pop(str(path.absolute()), None)
        if earlier is not None:  # this process's earlier run of the same audit is over
            earlier.close()
        fd = _lock(path, wait_s)
        try:
            journal, state = cls._open_locked(path, key, header, fresh, fd)
        except BaseException:
            _unlock(fd)
            raise
        _HELD[str(path.absolute())] = journal
        return journal, state

    @classmethod
    def _open_locked(cls, path: Path, key: str, header, fresh: bool, fd) -> tuple["Journal", JournalState]:
        journal = cls(path, key, fd)
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
        tmp_fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(tmp_fd, "w") as fh:
                fh.write(json.dumps(record, allow_nan=False, sort_keys=True) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            Path(tmp).unlink(missing_ok=True)
            raise _named(exc, path) from exc
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _fsync_dir(path.parent)
        return journal, JournalState(header=record)

    def append_case(self, name: str, result: dict, **extra) -> None:
        """Append one finished case durably (one ``write``, then ``fsync``)."""
        self._append({"type": "case", "name": name, "result": result, **extra})

    def append_fuzz(self, result: dict) -> None:
        """Append the fuzz stage's finished result (``FuzzResult.to_dict()``) durably: a
        resumed audit takes it from here instead of running the fuzz phase again."""
        self._append({"type": "fuzz", "result": result})

    def _append(self, record: dict) -> None:
        line = json.dumps(record, allow_nan=False, sort_keys=True) + "\n"
        data = line.encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        except OSError as exc:
            raise _named(exc, self.path) from exc
        finally:
            os.close(fd)

    @property
    def locked(self) -> bool:
        """Whether this process still holds the journal's lock."""
        return self._lock_fd is not None

    def remove(self) -> None:
        """Delete the journal (after the final report is safely written); keep the lock."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass

    def close(self) -> None:
        """Release the lock and keep the journal (a later run of the audit resumes it)."""
        if _HELD.get(str(self.path.absolute())) is self:
            del _HELD[str(self.path.absolute())]
        _unlock(self._lock_fd)
        self._lock_fd = None

    def finish(self) -> None:
        """Delete the journal and its lock file, release the lock, and remove the folder if
        it is now empty (after the reports are safely written)."""
        self.remove()
        if self._lock_fd is not None:
            lock_path(self.path).unlink(missing_ok=True)  # while held: see the module docstring
        self.close()
        try:
            self.path.parent.rmdir()
        except OSError:  # other audits' journals (or anything else) are there
            pass


#: Journals this process holds, by absolute path: the audit returns the journal's path in
#: its report, and whoever writes the reports then finishes (or closes) it.
_HELD: dict[str, Journal] = {}


def held_journal(path: str | os.PathLike) -> Journal | None:
    """The journal at ``path`` if this process holds it (opened, not yet closed)."""
    return _HELD.get(str(Path(path).absolute()))


def _unlock(fd: int | None) -> None:
    if fd is None:
        return
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
