"""A real two-node Ray cluster on this machine for the ``--ray`` tests (``tox -e ray``).

:func:`start_cluster` starts a head node and a second worker node (``ray start``, one CPU
each, a small object store, no dashboard), everything under a fresh temporary folder.
:func:`stop_cluster` ends exactly the processes of that cluster, by their ids: every
process whose command line names the folder (GCS, raylets, monitors, agents) and every
process below them (the workers). ``ray stop --force`` is not used: it stops every Ray
process of the machine, other people's clusters included. Then the folder is removed.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OBJECT_STORE_BYTES = 200 * 1024 * 1024


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_cli() -> str:
    return str(Path(sys.executable).with_name("ray"))


def start_cluster(env: dict) -> tuple[str, Path, dict]:
    """Start the head and a worker node; return ``(address, temp folder, environment)``.

    ``env`` is the nodes' environment (their workers and the shards they run inherit it);
    the returned one adds the cluster's own token (Ray's token authentication with a fresh
    random token in the environment: so neither a token left in ``~/.ray/auth_token`` by
    another cluster nor its absence changes what the tests see), and ``HOME`` inside the
    temp folder (whatever Ray writes under ``~/.ray`` goes with the folder): drivers run with
    it. The temp folder is short (``/tmp/sxray-…``): Ray's socket paths
    must fit 107 bytes.
    """
    temp = Path(tempfile.mkdtemp(prefix="sxray-", dir="/tmp"))
    port = free_port()
    (temp / "home").mkdir()
    env = {**env, "RAY_TMPDIR": str(temp), "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
           "RAY_AUTH_TOKEN": secrets.token_hex(32), "HOME": str(temp / "home")}
    env.pop("RAY_AUTH_TOKEN_PATH", None)
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", f"--object-store-memory={OBJECT_STORE_BYTES}",
              "--disable-usage-stats"]
    try:
        subprocess.run([_ray_cli(), "start", "--head", f"--port={port}", "--include-dashboard=false",
                        f"--temp-dir={temp}", *common], env=env, check=True, capture_output=True, timeout=180)
        subprocess.run([_ray_cli(), "start", f"--address=127.0.0.1:{port}", *common], env=env, check=True,
                       capture_output=True, timeout=180)
    except BaseException:
        stop_cluster(temp)
        raise
    return f"127.0.0.1:{port}", temp, env


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process we can read."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        out[int(entry.name)] = (ppid, cmd)
    return out


def cluster_pids(temp: Path) -> set[int]:
    """The processes of the cluster in ``temp``: those naming it and all their descendants."""
    procs = _processes()
    mine = {pid for pid, (_, cmd) in procs.items() if str(temp) in cmd and pid != os.getpid()}
    grown = True
    while grown:
        below = {pid for pid, (ppid, _) in procs.items() if ppid in mine} - mine
        grown = bool(below)
        mine |= below
    return mine


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2] != "Z"


def stop_cluster(temp: Path, wait_s: float = 30.0) -> list[int]:
    """End the cluster in ``temp`` (SIGTERM, then SIGKILL after ``wait_s``); remove ``temp``.

    Returns
    -------
    list of int
        Processes of the cluster still alive afterwards (none when all went well).
    """
    pids = cluster_pids(temp)
    for sig, wait in ((signal.SIGTERM, wait_s), (signal.SIGKILL, 10.0)):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.2)
        pids = {p for p in pids if _alive(p)} | cluster_pids(temp)
        if not pids:
            break
    shutil.rmtree(temp, ignore_errors=True)
    return sorted(p for p in pids | cluster_pids(temp) if _alive(p))
