#!/usr/bin/env python
"""Calibration of the per-event PIT checks (acceptance, recovered_token_law, bonus_token_law)
on a correct verifier: false-fail ratios at several levels, with replicate counts.

Each seed runs a case's decoder calls with the decision observer and splits the batch into
groups of rows, each group one independent trial of every PIT check
(``specexact.audit.zoo.decisions_calibration.decision_null_pvalues``). The ratio of rejections
to ``trials * level`` gets a verdict from ``calibration_ratio_check`` (band [0.5, 2]) where
the trials suffice for the per-row false-fail rate (``--false-fail-rate`` over the rows).

Usage::

    python scripts/decisions_calibration.py --case calibration-v5 --seeds 200 --group-rows 32
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from specexact.audit import default_cases, resolve_sampler
from specexact.audit.zoo.decisions_calibration import PIT_CHECKS, decision_null_pvalues
from specexact.audit.zoo.selfcheck import calibration_case, calibration_table


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", default="calibration-v5", help="calibration-v5 or a default case name")
    parser.add_argument("--sampler", default="builtin")
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--num-batches", type=int, default=2)
    parser.add_argument("--group-rows", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=None, help="override the case's batch size")
    parser.add_argument("--min-expected", type=float, default=20.0)
    parser.add_argument("--levels", default="0.2,0.1,0.05,0.01")
    parser.add_argument("--false-fail-rate", type=float, default=1e-6)
    parser.add_argument("--rate-tolerance", type=float, default=1.25)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    levels = [float(x) for x in args.levels.split(",")]
    if args.case == "calibration-v5":
        case = calibration_case()
    else:
        case = next(c for c in default_cases() if c.name == args.case)
    if args.batch_size:
        from dataclasses import replace

        case = replace(case, batch_size=args.batch_size)
    verifier, _ = resolve_sampler(args.sampler)
    t0 = time.perf_counter()
    records = decision_null_pvalues(case, verifier, seeds=range(args.first_seed, args.first_seed + args.seeds),
                                    num_batches=args.num_batches, group_rows=args.group_rows,
                                    min_expected=args.min_expected)
    wall = time.perf_counter() - t0
    rate = args.false_fail_rate / (len(PIT_CHECKS) * len(levels))
    rows = []
    for level in levels:
        for row in calibration_table(records, [level]):
            entry = row.to_dict()
            try:
                [checked] = calibration_table([r for r in records if r.type == row.check_type], [level],
                                              false_fail_rate=rate, rate_tolerance=args.rate_tolerance)
                entry.update(checked.to_dict())
                entry["verdict"] = "pass" if checked.result.passed else "FAIL"
            except ValueError:
                entry["verdict"] = "too few trials"
            rows.append(entry)
    print(f"case {case.name}, B={case.batch_size}, {args.seeds} seeds x {args.num_batches} calls, groups of "
          f"{args.group_rows} rows, {wall:.0f} s; verdicts at {rate:.3g} per row (tolerance {args.rate_tolerance})\n")
    print("| check | nominal | trials | rejections | ratio | verdict |\n|---|---|---|---|---|---|")
    for e in rows:
        print(f"| {e['check_type']} | {e['level']:g} | {e['trials']} | {e['rejections']} | "
              f"{e['ratio']:.3f} | {e['verdict']} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"case": case.name, "batch_size": case.batch_size, "seeds": args.seeds, "wall_s": wall,
                       "group_rows": args.group_rows, "rows": rows}, fh, indent=2, default=float)
    return 1 if any(e["verdict"] == "FAIL" for e in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
