"""Sequences per second of ``specexact audit --ray`` with 1, 2 and 4 shards, in one run.

Usage (a Ray cluster already running; see docs/long-audits.md, "Ray")::

    python scripts/ray_scale.py --address 127.0.0.1:6379 [--shards 1 2 4] [--json out.json] -- AUDIT ARGS...

Runs, in this order and with the same audit arguments (default: ``--batches 4 --no-fuzz
--threads 1``, the default cases):

1. one process: ``specexact audit`` (the reference);
2. for each N: the N shards ``specexact audit --shard I/N`` as N local processes side by
   side, then ``specexact merge`` (what the shards cost without Ray);
3. for each N: ``specexact audit --ray ADDRESS --shards N``.

For each run it prints the wall time of the whole command, the sequences of the merged
report, sequences per second and the ratio to the one process; the driver's overhead per
shard is (Ray run's wall − the local side-by-side shards' wall) / N. Every run's report
must have the same sequences (``--batches``): the script stops otherwise.

Then, on paper, from the one-process run's report: the hours an audit of the same cases
would take to detect a TV of ``--tv`` (default 1e-3) on every class law check, on 1 to 16
nodes of this process's speed (:func:`tv_estimate`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_AUDIT = ["--batches", "4", "--no-fuzz", "--threads", "1"]


def _specexact(*args: str) -> list[str]:
    return [sys.executable, "-m", "specexact", *args]


def _timed(cmds: list[list[str]]) -> float:
    """Run ``cmds`` side by side; the wall seconds until the last ends (each must exit 0 or 1)."""
    start = time.perf_counter()
    procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for c in cmds]
    for c, p in zip(cmds, procs):
        _, err = p.communicate()
        if p.returncode not in (0, 1):
            sys.exit(f"{' '.join(c)}: exit status {p.returncode}: {err[-1000:]}")
    return time.perf_counter() - start


def _sequences(path: Path) -> int:
    return json.loads(path.read_text())["num_sequences"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--address", required=True, help="the Ray cluster (ray start --head ... prints it)")
    p.add_argument("--shards", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--json", default=None, help="also write the figures here")
    p.add_argument("--tv", type=float, default=1e-3, help="the detectable TV of the estimate on paper (default: 1e-3)")
    p.add_argument("audit", nargs="*", help="the audit's arguments (after --)")
    args = p.parse_args(argv)
    audit = args.audit or DEFAULT_AUDIT
    if "--batches" not in audit:
        sys.exit("give --batches N among the audit's arguments: the runs must draw the same sequences")
    common = ["--no-html", "--quiet", "--no-journal"]
    work = Path(tempfile.mkdtemp(prefix="specexact-ray-scale-"))
    rows = []
    load_before = os.getloadavg()
    one = work / "one.json"
    wall = _timed([_specexact("audit", *audit, *common, "--report-dir", str(work / "one"), "--json", str(one))])
    seqs = _sequences(one)
    rows.append({"run": "one process", "shards": 1, "wall_s": wall, "sequences": seqs})
    for n in args.shards:
        out = [work / f"local{n}-{i}.json" for i in range(1, n + 1)]
        wall = _timed([_specexact("audit", *audit, *common, "--shard", f"{i}/{n}", "--report-dir",
                                  str(work / f"local{n}"), "--json", str(out[i - 1])) for i in range(1, n + 1)])
        merged = work / f"local{n}-merged.json"
        wall += _timed([_specexact("merge", *map(str, out), "--report-dir", str(work / f"local{n}-m"), "--json",
                                   str(merged), "--no-html", "--quiet")])
        rows.append({"run": f"{n} local shard processes + merge", "shards": n, "wall_s": wall,
                     "sequences": _sequences(merged)})
    for n in args.shards:
        merged = work / f"ray{n}.json"
        wall = _timed([_specexact("audit", *audit, "--no-html", "--quiet", "--ray", args.address, "--shards", str(n),
                                  "--report-dir", str(work / f"ray{n}"), "--json", str(merged))])
        local = next(r for r in rows if r["shards"] == n and r["run"].startswith(f"{n} local"))
        rows.append({"run": f"--ray --shards {n}", "shards": n, "wall_s": wall, "sequences": _sequences(merged),
                     "overhead_per_shard_s": (wall - local["wall_s"]) / n})
    if any(r["sequences"] != seqs for r in rows):
        sys.exit(f"the runs drew different sequences: {[r['sequences'] for r in rows]}")
    base = rows[0]["sequences"] / rows[0]["wall_s"]
    for r in rows:
        r["seq_per_s"] = r["sequences"] / r["wall_s"]
        r["ratio"] = r["seq_per_s"] / base
    print(f"audit arguments: {' '.join(audit)}; load average before {load_before[0]:.1f}, after "
          f"{os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs")
    print("| run | wall (s) | sequences | sequences/s | ratio to one process | driver overhead per shard (s) |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        over = f"{r['overhead_per_shard_s']:.1f}" if "overhead_per_shard_s" in r else ""
        print(f"| {r['run']} | {r['wall_s']:.1f} | {r['sequences']:,} | {r['seq_per_s']:,.0f} | {r['ratio']:.2f} | "
              f"{over} |")
    estimate = tv_estimate(json.loads(one.read_text()), args.tv)
    print(f"\nOn paper, from the one-process run: detectable TV ~ 1/sqrt(n), so a case reaches TV {args.tv:g} in "
          "(its time) x (its worst law check's detectable TV / TV)^2; shards split by case (--shard's split):")
    print("| case | sequences | seconds | worst law-check detectable TV | seconds to TV %g |" % args.tv)
    print("|---|---:|---:|---:|---:|")
    for c in estimate["cases"]:
        print(f"| {c['case']} | {c['sequences']:,} | {c['seconds']:.1f} | {c['tv']:.3g} | {c['seconds_at_tv']:,.0f} |")
    print("| nodes (shards) | hours (this machine's one-thread speed per node) |")
    print("|---:|---:|")
    for n, hours in estimate["hours_by_nodes"].items():
        print(f"| {n} | {hours:,.1f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"audit": audit, "load_before": load_before, "rows": rows,
                                               "estimate": estimate}, indent=2))
    shutil.rmtree(work, ignore_errors=True)
    return 0


LAW_CHECKS = ("sequence_law", "sequences_vs_naive", "first_token_law")


def tv_estimate(report: dict, tv: float, nodes=(1, 2, 4, 8, 16)) -> dict:
    """Seconds per case to a detectable TV of ``tv`` on its worst class law check, and the
    hours of the audit on each number of nodes (one shard per node, the shards' cases as
    ``--shard`` splits them: the slowest shard decides)."""
    from specexact.audit import default_cases
    from specexact.audit.run.shard import shard_cases

    cases = []
    for c in report["cases"]:
        tvs = [k["detectable_tv"] for k in report["checks"]
               if k["case"] == c["name"] and k["name"].split("[")[0] in LAW_CHECKS and k["detectable_tv"]]
        worst = max(tvs)
        cases.append({"case": c["name"], "sequences": c["num_sequences"], "seconds": c["wall_time_s"], "tv": worst,
                      "seconds_at_tv": c["wall_time_s"] * (worst / tv) ** 2})
    at = {c["case"]: c["seconds_at_tv"] for c in cases}
    audit_cases = [c for c in default_cases() if c.name in at]
    hours = {n: max(sum(at[c.name] for c in shard_cases(audit_cases, i, n)) for i in range(1, n + 1)) / 3600
             for n in nodes if n <= len(audit_cases)}
    return {"tv": tv, "cases": cases, "hours_by_nodes": hours}


if __name__ == "__main__":
    sys.exit(main())
