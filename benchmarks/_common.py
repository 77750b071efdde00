"""Timing, memory caps, environment facts and table rendering shared by the benchmarks."""

from __future__ import annotations

import datetime as _dt
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from specexact.audit.core.allocator import allocator_setting

REPO_ROOT = Path(__file__).resolve().parent.parent

GiB = 1024**3
MiB = 1024**2

#: Default ceiling on a single benchmark's peak memory (process RSS on CPU).
DEFAULT_MEMORY_CAP_BYTES = 6 * GiB
#: What a Python process with torch imported already holds; subtracted from the cap.
BASE_PROCESS_BYTES = 600 * MiB


# --------------------------------------------------------------------------- timing


@dataclass
class Timing:
    """Wall times (seconds) of repeated runs of one piece of work."""

    samples: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else math.nan

    @property
    def min(self) -> float:
        return min(self.samples) if self.samples else math.nan

    @property
    def max(self) -> float:
        return max(self.samples) if self.samples else math.nan

    def quartiles(self) -> tuple[float, float]:
        s = sorted(self.samples)
        if len(s) < 4:
            return (self.min, self.max)
        q = statistics.quantiles(s, n=4, method="inclusive")
        return (q[0], q[2])

    def spread(self) -> str:
        """``min-max`` in milliseconds, for tables."""
        return f"{fmt_ms(self.min)}-{fmt_ms(self.max)}"

    def to_dict(self) -> dict:
        q1, q3 = self.quartiles()
        return {"median_s": self.median, "min_s": self.min, "max_s": self.max,
                "q1_s": q1, "q3_s": q3, "repeats": len(self.samples), "samples_s": list(self.samples)}


def synchronize(device: torch.device | str) -> None:
    """Wait for queued device work (CUDA); nothing on CPU."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(fn: Callable[[], object], *, device: torch.device | str = "cpu", repeats: int = 5,
            min_repeats: int = 3, max_time_s: float = 10.0, warmup: int = 1) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then ``min_repeats`` to ``repeats`` timed
    calls (stopping after ``min_repeats`` once ``max_time_s`` of timed work is spent)."""
    for _ in range(warmup):
        fn()
        synchronize(device)
    timing = Timing()
    spent = 0.0
    for i in range(max(1, repeats)):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        elapsed = time.perf_counter() - start
        timing.samples.append(elapsed)
        spent += elapsed
        if i + 1 >= min_repeats and spent >= max_time_s:
            break
    return timing


# --------------------------------------------------------------------------- formatting


def fmt_ms(seconds: float) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "n/a"
    ms = seconds * 1e3
    if ms >= 100:
        return f"{ms:.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    if ms >= 1:
        return f"{ms:.2f}"
    return f"{ms:.3f}"


def fmt_rate(x: float) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e3:
        return f"{x / 1e3:.1f}k"
    if x >= 10:
        return f"{x:.0f}"
    return f"{x:.2f}"


def fmt_ratio(x: float) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:.3g}x"


def fmt_bytes(n: float) -> str:
    if n is None or not math.isfinite(n):
        return "n/a"
    if n >= GiB:
        return f"{n / GiB:.2f} GiB"
    return f"{n / MiB:.0f} MiB"


def markdown_table(headers: list[str], rows: list[list[object]]) -> str:
    """A GitHub Markdown table (cells converted with ``str``)."""
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        out.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(out)


# --------------------------------------------------------------------------- memory


def fits(bytes_needed: float, cap_bytes: float) -> bool:
    """Whether an estimated peak (on top of the process's own) stays under the cap."""
    return bytes_needed + BASE_PROCESS_BYTES <= cap_bytes


def max_rss_bytes() -> int:
    """Peak resident set size of this process so far (Linux reports KiB, macOS bytes)."""
    import resource

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss) if sys.platform == "darwin" else int(rss) * 1024


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark of this process (Linux >= 4.0: ``/proc/self/clear_refs``
    with 5), so that :func:`peak_rss_bytes` sees only what follows. False where unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    """Peak RSS since the last :func:`reset_peak_rss` (``VmHWM``), else since the start."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return max_rss_bytes()


def current_rss_bytes() -> int:
    """Resident set size now (Linux /proc; falls back to the peak elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return max_rss_bytes()


# --------------------------------------------------------------------------- environment


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_commit() -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                                text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip() != ""
        return {"commit": commit or None, "dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def environment(device: torch.device | str) -> dict:
    """Facts a reader needs to compare two benchmark runs."""
    device = torch.device(device)
    env = {
        "time": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpu": _cpu_model(),
        "usable_cores": usable_cores(),
        "load_average_1min_at_start": load_average(),
        "platform": platform.platform(),
        "device": str(device),
        "env_vars": {k: os.environ[k] for k in sorted(os.environ)
                     if k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "THP_MEM_ALLOC_ENABLE")
                     or k.startswith("MALLOC_")},
        "allocator": allocator_setting(),
        **_git_commit(),
    }
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
    return env


def busy_warning(env: dict) -> str | None:
    """A warning line when the machine looked busy at the start (load above ~half the cores)."""
    load = env.get("load_average_1min_at_start")
    cores = env.get("usable_cores") or 1
    if load is not None and load > 0.5 * cores + 0.5:
        return (f"WARNING: load average {load:.1f} on {cores} usable cores at the start: other work is "
                "competing for the CPU, so these timings are indicative only.")
    return None
