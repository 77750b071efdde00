#!/usr/bin/env python
"""Kill table: how many decoder calls the audit needs to fail each planted bug.

For every verifier of ``specexact.audit.zoo.WRONG`` the full audit (default cases, fixed
sample sizes, ``run_audit(..., num_batches=b, budget_s=None)``) is run for increasing
``b`` until it fails; the correct verifiers of ``zoo.CORRECT`` run once at the largest
``b``. Prints a Markdown table (verifier, batches, sequences, failing checks, seconds) and
optionally writes the rows as JSON.

Usage::

    python scripts/kill_table.py                      # batches 1 2 4 8, false-fail rate 1e-6
    python scripts/kill_table.py --only always_accept,builtin --json reports/kill.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from specexact.audit.zoo.selfcheck import kill_table, kill_table_markdown
from specexact.audit.zoo import CORRECT, WRONG


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="1,2,4,8", help="decoder calls per case to try, comma-separated")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--false-fail-rate", type=float, default=1e-6, help="the whole audit's false-fail rate")
    parser.add_argument("--only", default=None, help="comma-separated verifier names (default: all of WRONG and CORRECT)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    verifiers = {**WRONG, **CORRECT}
    if args.only:
        names = args.only.split(",")
        unknown = sorted(set(names) - set(verifiers))
        if unknown:
            parser.error(f"unknown verifiers {unknown}; known: {sorted(verifiers)}")
        verifiers = {name: verifiers[name] for name in names}
    batches = [int(b) for b in args.batches.split(",")]

    def progress(row):
        print(f"{row.name}: {row.verdict} at batches {row.batches} ({row.wall_time_s:.0f} s)",
              file=sys.stderr, flush=True)

    rows = kill_table(verifiers, batches=batches, seed=args.seed, false_fail_rate=args.false_fail_rate,
                      correct=CORRECT, on_row=progress)
    print(kill_table_markdown(rows, max_checks=3))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"batches": batches, "seed": args.seed,
                                         "false_fail_rate": args.false_fail_rate,
                                         "rows": [row.to_dict() for row in rows]}, indent=2))
    survivors = [r.name for r in rows if r.expected == "fail" and r.verdict == "pass"]
    false_fails = [r.name for r in rows if r.expected == "pass" and r.verdict == "fail"]
    return 1 if survivors or false_fails else 0


if __name__ == "__main__":
    sys.exit(main())
