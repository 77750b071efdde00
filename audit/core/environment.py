"""Where an audit ran: package versions, device, git revision, the sampler's distribution."""

from __future__ import annotations

import functools
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from specexact.audit.core.allocator import allocator_setting

__all__ = ["environment", "sampler_package"]

_PACKAGES = ("numpy", "scipy", "rich", "hypothesis", "matplotlib", "jinja2")


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
    except Exception:  # noqa: BLE001 - git is optional
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def environment(device: torch.device | str) -> dict:
    """Versions, device and git revision, for the report's metadata."""
    rev = _git("rev-parse", "HEAD") or None
    dirty = None
    if rev:
        status = _git("status", "--porcelain", "--untracked-files=no")
        dirty = bool(status) if status is not None else None
    dev = torch.device(device)
    return {
        "specexact": _version("specexact"),  # the installed distribution's version (= specexact.__version__)
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "numpy": np.__version__,
        "scipy": _version("scipy"),
        "packages": {name: _version(name) for name in _PACKAGES},
        "device": str(dev),
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or platform.machine(),
        "torch_num_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "git_revision": rev,
        "git_dirty": dirty,
        "allocator": allocator_setting(),
    }


def _path_state() -> tuple:
    """``sys.path`` with each folder's modification time: an install into any of them (a new
    ``*.dist-info`` folder) changes it."""
    state = []
    for entry in sys.path:
        try:
            state.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            state.append((entry, None))
    return tuple(state)


@functools.lru_cache(maxsize=4)
def _packages_distributions(path_state: tuple) -> dict:
    """:func:`importlib.metadata.packages_distributions` for one :func:`_path_state` (it reads
    every installed distribution's file list: about 0.2 s of CPU, once per audit before)."""
    from importlib.metadata import packages_distributions

    return packages_distributions()


def sampler_package(target: str) -> dict | None:
    """``{"name", "version"}`` of the distribution that provides ``MODULE:CALLABLE``, if any."""
    top = target.partition(":")[0].split(".")[0]
    try:
        dists = list(_packages_distributions(_path_state()).get(top) or [])
    except Exception:  # noqa: BLE001 - broken metadata must not stop an audit
        dists = []
    if not dists:
        return None
    return {"name": dists[0], "version": _version(dists[0])}
