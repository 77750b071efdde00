"""What the ``specexact`` command's modules share: exit statuses, defaults, and the
one-line errors behind status 2.

Status 1 means one thing only: the audit found inexactness or a defect of the sampler. An
audit that could not run or could not keep its results — a bad argument, a sampler that
cannot be imported, a folder that is a file, a full disk, an interruption, another run
holding the same journal — exits 2 with one line on stderr that names the path or the
argument, never a traceback, so a CI job never blames the sampler for the tool's own
failure.
"""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager

__all__ = ["sigterm_as_interrupt", "EXIT_PASS", "EXIT_FAIL", "EXIT_ERROR", "CliError", "os_error_line", "DEFAULT_BUDGET_S",
           "QUICK_BUDGET_S", "JOURNAL_SUBDIR", "DEFAULT_CLI_CALL_TIMEOUT_S", "DEFAULT_REPORT_DIR"]

EXIT_PASS, EXIT_FAIL, EXIT_ERROR = 0, 1, 2

#: ``--budget`` default of ``specexact audit``, seconds.
DEFAULT_BUDGET_S = 90.0
#: ``--budget`` default with ``--quick`` (a smoke test: the whole command, imports and
#: reports included, in about 20 s on a 2-core machine).
QUICK_BUDGET_S = 8.0
#: ``--call-timeout`` default, seconds: one call of the sampler in the audit's own process
#: past this long is a hang (the largest default case's call takes seconds; an opt-in
#: V = 32000 case on a busy machine, a minute).
DEFAULT_CLI_CALL_TIMEOUT_S = 300.0
#: Journal sub-folder of the report folder (finished cases of running or killed audits).
JOURNAL_SUBDIR = ".journal"
#: ``--report-dir`` default of ``specexact audit``, ``merge`` and ``fuzz``, relative to the
#: current folder: a folder of its own, never a source package (in a clone of specexact,
#: ``./reports`` is the ``specexact.reports`` package; git ignores this one).
DEFAULT_REPORT_DIR = "specexact-reports"


class CliError(Exception):
    """The command cannot go on; ``str(exc)`` is the one-line message (exit status 2)."""


def os_error_line(exc: OSError, what: str = "") -> str:
    """``"<what> PATH: reason"`` for an :class:`OSError`, naming every path it carries.

    Parameters
    ----------
    exc : OSError
    what : str
        What was being done (``"cannot write the reports to"``); may be empty.
    """
    paths = [p for p in (exc.filename, exc.filename2) if p is not None]
    reason = exc.strerror or str(exc) or type(exc).__name__
    where = " -> ".join(os.fspath(p) if not isinstance(p, int) else f"fd {p}" for p in paths)
    head = " ".join(part for part in (what, where) if part)
    return f"{head}: {reason}" if head else reason


@contextmanager
def sigterm_as_interrupt():
    """SIGTERM (a cancelled CI job) raises :class:`KeyboardInterrupt` inside the block, so a
    command ends as on Ctrl-C (exit 2, its journal kept); outside the main thread signals
    are left alone."""
    def handler(signum, frame):
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
