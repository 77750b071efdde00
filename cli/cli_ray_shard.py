"""One shard of ``specexact audit --ray`` and the driver's journal of finished shards.

Light on purpose (the standard library only): Ray imports this module on every worker node
to run :func:`run_shard`, and the default test suite tests the rest without Ray.

:func:`run_shard` runs the existing ``specexact audit --shard I/N`` with the audit's own
arguments (:func:`shard_arguments`) as a subprocess on the node, in a temporary report
folder, and returns its JSON report text: a shard run by Ray is byte for byte the report
of the same ``--shard`` run anywhere else. A subprocess that ends without a report (killed,
crashed, exit status 2) raises :class:`ShardFailed`, which Ray retries
(``retry_exceptions``); a worker or node that dies is retried by Ray too (``max_retries``).

:class:`ShardJournal` keeps each finished shard's report under
``<report-dir>/.journal/ray-<key>/`` (written to a temporary name, ``fsync``-ed, renamed),
so a driver started again with the same arguments resumes without running those shards
again; :meth:`ShardJournal.remove` deletes it once the merged report is written.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["ShardFailed", "DRIVER_ONLY", "SHARD_FOLDER_PREFIX", "shard_arguments", "run_key", "run_shard", "ShardJournal",
           "failure_line"]

#: ``specexact audit`` options that belong to the driver, not to a shard (each shard gets its
#: own ``--shard``, ``--report-dir``, ``--json``, ``--no-html``, ``--quiet``, ``--no-journal``).
DRIVER_ONLY = frozenset({"ray", "shards", "ray_retries", "ray_cpus", "ray_gpus", "shard", "report_dir", "json",
                         "no_html", "history", "quiet", "fresh", "no_journal", "help", "started"})


class ShardFailed(RuntimeError):
    """A shard's ``specexact audit`` ended without a report; Ray retries the task on it."""


def shard_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The ``specexact audit`` arguments of ``args`` that every shard repeats.

    Rebuilt from the parsed values (so abbreviations and ``--opt=value`` spellings do not
    matter): every option of the ``audit`` sub-parser ``parser`` whose value differs from its
    default, in the parser's order, except the driver's own (:data:`DRIVER_ONLY`).

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The ``audit`` sub-command's parser.
    args : argparse.Namespace
        Its parsed arguments, before any command changed them.

    Returns
    -------
    list of str
    """
    out: list[str] = []
    for action in parser._actions:  # noqa: SLF001 - argparse has no public list of its options
        if not action.option_strings or action.dest in DRIVER_ONLY or action.dest == argparse.SUPPRESS:
            continue
        value = getattr(args, action.dest, action.default)
        if value == action.default:
            continue
        flag = max(action.option_strings, key=len)
        if isinstance(action, argparse._StoreTrueAction):  # noqa: SLF001
            out.append(flag)
        elif isinstance(action, argparse._AppendAction):  # noqa: SLF001
            for v in value:
                out += [flag, str(v)]
        elif isinstance(action, argparse._StoreAction):  # noqa: SLF001
            out += [flag, str(value)]
    return out


def run_key(arguments: list[str], count: int, version: str) -> str:
    """The journal key of a Ray run: a hash of the shards' arguments, their count and the
    specexact version (shards of other code are caught again by the merge's audit key)."""
    text = json.dumps({"arguments": arguments, "shards": count, "specexact": version})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the shard's process gets SIGKILL when the Ray worker that started it dies, so a
    killed worker leaves no audit running on its node (elsewhere: nothing)."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG


#: A shard's temporary report folder: ``PREFIX<worker pid>-<I>-of-<N>-<random>`` in the node's temp folder.
SHARD_FOLDER_PREFIX = "specexact-ray-shard-"


def _remove_orphans() -> None:
    """Remove the shard folders of workers that died (a killed worker cannot remove its own)."""
    for folder in Path(tempfile.gettempdir()).glob(f"{SHARD_FOLDER_PREFIX}*"):
        pid = folder.name[len(SHARD_FOLDER_PREFIX):].split("-")[0]
        if not pid.isdigit():
            continue
        if _dead(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _dead(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie not yet reaped counts as ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, another user's
        return False
    if not Path("/proc").is_dir():  # not Linux: alive as far as kill says
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # it ended between the two looks
        return True
    return stat[stat.rindex(")") + 2] == "Z"


def _node() -> str:
    """This machine's name, and the Ray node's id when this runs in a Ray worker."""
    ray = sys.modules.get("ray")  # imported by the Ray worker itself, never here
    try:  # is_initialized first: the runtime context of a process without Ray would start a local Ray
        node_id = ray.get_runtime_context().get_node_id() if ray is not None and ray.is_initialized() else None
    except Exception:  # noqa: BLE001 - not in a Ray worker
        node_id = None
    return os.uname().nodename + (f" (Ray node {node_id[:8]})" if node_id else "")


def run_shard(arguments: list[str], index: int, count: int, cwd: str | None = None) -> dict:
    """Run shard ``index`` of ``count`` of the audit with ``arguments`` here (a Ray task's body).

    Parameters
    ----------
    arguments : list of str
        :func:`shard_arguments` of the audit.
    index, count : int
        The shard, 1-based, of ``count``.
    cwd : str, optional
        The driver's folder: the shard runs there when the node has it (``--sampler
        module:fn`` is imported from the current folder, as by ``python -m``).

    Returns
    -------
    dict
        ``{"index", "status" (0 or 1), "report" (the JSON text), "seconds", "node"}``.

    Raises
    ------
    ShardFailed
        The audit ended without a report: killed, crashed, or exit status 2 (its last line).
    """
    _remove_orphans()
    folder = Path(tempfile.mkdtemp(prefix=f"{SHARD_FOLDER_PREFIX}{os.getpid()}-{index}-of-{count}-"))
    out = folder / "shard.json"
    cmd = [sys.executable, "-m", "specexact", "audit", *arguments, "--shard", f"{index}/{count}",
           "--report-dir", str(folder), "--json", str(out), "--no-html", "--quiet", "--no-journal"]
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, errors="replace", preexec_fn=_die_with_parent,
                              cwd=cwd if cwd and os.path.isdir(cwd) else None)
        if proc.returncode in (0, 1) and out.is_file():
            return {"index": index, "status": proc.returncode, "report": out.read_text(),
                    "seconds": time.perf_counter() - started, "node": _node()}
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        how = (f"killed by signal {-proc.returncode}" if proc.returncode < 0
               else f"exit status {proc.returncode}")
        raise ShardFailed(f"its audit ended without a report ({how})" + (f": {lines[-1]}" if lines else ""))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def failure_line(failed: dict[int, str], count: int, tries: int, kept: int, journal: Path) -> str:
    """The one line of a Ray run with failed shards (exit status 2).

    Parameters
    ----------
    failed : dict
        Shard index -> why its last try failed.
    count : int
        Shards of the audit.
    tries : int
        Tries each shard had (``1 + --ray-retries``).
    kept : int
        Finished shards in the journal.
    journal : Path
        The journal folder.
    """
    first = min(failed)
    what = "; ".join(f"shard {i}/{count}" for i in sorted(failed))
    why = " ".join(failed[first].split())
    return (f"{what} failed after {tries} {'try' if tries == 1 else 'tries'} each (shard {first}/{count}: {why}); "
            f"no report was written; {kept} finished shard{'' if kept == 1 else 's'} kept in the journal {journal}: "
            "run the same command again to resume them (--fresh starts over)")


class ShardJournal:
    """Finished shards' JSON reports of one Ray run, ``DIR/ray-KEY/shard-I-of-N.json``.

    Parameters
    ----------
    directory : str or os.PathLike
        The report folder's journal folder (``<report-dir>/.journal``).
    key : str
        :func:`run_key` of the run.
    count : int
        Its number of shards.
    """

    def __init__(self, directory: str | os.PathLike, key: str, count: int):
        self.path = Path(directory) / f"ray-{key}"
        self.count = count

    def file(self, index: int) -> Path:
        """The file of shard ``index``'s report."""
        return self.path / f"shard-{index}-of-{self.count}.json"

    def finished(self) -> dict[int, str]:
        """Shard index -> report text of every shard in the journal that is a whole report of
        that shard (a file cut short or of another shard is ignored: that shard runs again)."""
        out = {}
        for i in range(1, self.count + 1):
            try:
                text = self.file(i).read_text()
                shard = json.loads(text)["settings"]["shard"]
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if isinstance(shard, dict) and (shard.get("index"), shard.get("count")) == (i, self.count):
                out[i] = text
        return out

    def add(self, index: int, text: str) -> Path:
        """Keep shard ``index``'s report ``text``: a temporary file, ``fsync``, rename, and
        ``fsync`` of the folder, so the file is whole or absent after any crash."""
        self.path.mkdir(parents=True, exist_ok=True)
        final = self.file(index)
        fd, tmp = tempfile.mkstemp(dir=self.path, prefix=f".{final.name}.")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dfd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        return final

    def remove(self) -> None:
        """Delete the journal (after the merged report is written)."""
        shutil.rmtree(self.path, ignore_errors=True)
