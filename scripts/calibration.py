#!/usr/bin/env python
"""Nightly calibration of the audit: false-fail ratios of its checks on a correct verifier.

Runs the real case runner (``specexact.audit.cases.dispatch.run_case``) with a correct verifier
(default: the built-in ``verify``) on groups of cases over as many seeds as a time budget
allows, records every check's p-value, and compares the rejection frequency of each check
type with nominal at several levels (ratio = rejections / (trials * level)). Where enough
trials were pooled, each (type, level) ratio gets a verdict from
``calibration_ratio_check`` (band [0.5, 2]; one-sided [0, 2] for the conservative Fisher
pair tests), with the whole table's false-fail rate ``--false-fail-rate`` split over its
rows (Bonferroni). Writes a JSON file and prints Markdown tables.

The audit's combined check (``specexact.audit.checks.combined``: the Cauchy combination of the
checks' p-values with half of the audit's rate) and the audit's verdict as a whole
("overall": a check at ``p <= (1 - share) * level / m`` or the combination of the others at
``p <= share * level``) are calibrated too, each (group, seed) an audit of the group's cases
and each (case, seed) an audit of one case: rows ``combined[...]`` and ``overall[...]``
(band [0.5, 2]; the combination's validity under dependence is asymptotic for small rates).
The combination reads the discrete checks' p-values randomised within their atom, as the
audit does (``specexact.audit.checks.combined.combination_pvalue``).

Groups (time shares in parentheses):

- ``calibration-v5`` (0.5): twelve row classes over V=5 (``selfcheck.calibration_case``);
- ``quick`` (0.3): the default exact cases with quarter batches (``cases.quick_cases``);
- ``two-sample`` (0.2): the V=4096 case with 128 rows per call (first-token law,
  sequences vs naive sampling, first acceptance, independence).

Usage::

    python scripts/calibration.py --budget-s 300 --json reports/calibration.json
    python scripts/calibration.py --budget-s 600 --group two-sample   # one group only
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from specexact.audit import default_cases, quick_cases, resolve_sampler
from specexact.audit.run.stages import environment
from specexact.audit.checks.combined import COMBINED_SHARE, EXACT_RULES, combination_pvalue
from specexact.exactness import calibration_ratio_check, cauchy_combination
from specexact.audit.zoo.selfcheck import (
    cached_exact_laws,
    calibration_case,
    calibration_table,
    null_pvalues,
)

# Exact checks (the per-event rules) never reject a correct sampler: only an excess counts.
ONE_SIDED = ("independent_rows", "independent_calls", "first_acceptance", "acceptance_exact", "recovered_support",
             "eos_cut")


def groups():
    two_sample = [replace(c, batch_size=128) for c in default_cases() if not c.exact]
    return [
        ("calibration-v5", [calibration_case()], 0.5),
        ("quick", quick_cases(), 0.3),
        ("two-sample", two_sample, 0.2),
    ]


def rows_with_verdicts(records, levels, rate, tolerance):
    """calibration_table rows; a verdict only where the trials are enough for ``rate``."""
    plain = calibration_table(records, levels, one_sided_types=ONE_SIDED)
    out = []
    for row in plain:
        entry = row.to_dict()
        try:
            [checked] = [r for r in calibration_table(
                [rec for rec in records if rec.type == row.check_type], [row.level],
                false_fail_rate=rate, one_sided_types=ONE_SIDED, rate_tolerance=tolerance)]
            entry.update(checked.to_dict())
            entry["verdict"] = "too few trials" if checked.result is None else ("pass" if checked.result.passed else "FAIL")
        except ValueError:
            entry["verdict"] = "too few trials"
        out.append(entry)
    return out


def audit_units(records, by):
    """``{unit: [(pvalue, the p-value it brings to the combination, enters the combination)]}``
    with ``by`` ``"audit"`` (group's cases of one seed) or ``"case"`` (one case of one seed);
    the second is randomised within its atom as the audit's combined check reads it
    (``combined.combination_pvalue``, the uniform from the seed, case and check)."""
    units = defaultdict(list)
    for rec in records:
        key = rec.seed if by == "audit" else (rec.case, rec.seed)
        entry = {"case": rec.case, "name": rec.check, "pvalue": rec.pvalue,
                 "details": {"pvalue_lower": rec.pvalue_lower}}
        units[key].append((rec.pvalue, combination_pvalue(entry, rec.seed),
                           rec.has_power and rec.type not in EXACT_RULES))
    return units


def combined_rows(records, levels, rate, tolerance, label):
    """Calibration rows of the combined check and of the whole verdict (module docstring)
    over each unit of ``records`` (audits of a group by seed, and of each case by seed)."""
    out = []
    for by in ("audit", "case"):
        units = list(audit_units(records, by).values())
        for level in levels:
            hits = {"combined": 0, "overall": 0}
            for unit in units:
                m = len(unit)
                per_check = (1 - COMBINED_SHARE) * level / m
                own = [p <= per_check for p, _, _ in unit]
                entered = [0.5 if fails else q for (_, q, enters), fails in zip(unit, own) if enters]
                plain = [q for _, q, enters in unit if enters]
                hits["combined"] += bool(plain) and cauchy_combination(plain) <= level
                comb = bool(entered) and cauchy_combination(entered) <= COMBINED_SHARE * level
                hits["overall"] += any(own) or comb
            for kind, k in hits.items():
                entry = {"check_type": f"{kind}[{label}, per {'seed' if by == 'audit' else 'case and seed'}]",
                         "level": level, "trials": len(units), "rejections": int(k),
                         "ratio": k / (len(units) * level) if units else None, "one_sided": False}
                try:
                    res = calibration_ratio_check(int(k), len(units), level, false_fail_rate=rate,
                                                  rate_tolerance=tolerance)
                    entry["verdict"] = "pass" if res.passed else "FAIL"
                except ValueError:
                    entry["verdict"] = "too few trials"
                out.append(entry)
    return out


def markdown(entries):
    lines = ["| check type | nominal | trials | rejections | ratio | band | verdict |",
             "|---|---|---|---|---|---|---|"]
    for e in entries:
        band = "[0, 2]" if e["one_sided"] else "[0.5, 2]"
        ratio = "-" if e["ratio"] is None else f"{e['ratio']:.3f}"
        lines.append(f"| {e['check_type']} | {e['level']:g} | {e['trials']} | {e['rejections']} | "
                     f"{ratio} | {band} | {e['verdict']} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget-s", type=float, default=1800.0, help="sampling time in seconds")
    parser.add_argument("--levels", default="0.2,0.1,0.05,0.01", help="nominal levels, comma-separated")
    parser.add_argument("--false-fail-rate", type=float, default=1e-6,
                        help="false-fail rate of the whole verdict table (split over its rows)")
    parser.add_argument("--rate-tolerance", type=float, default=1.25,
                        help="two-sided verdicts cover true rates within this factor of nominal")
    parser.add_argument("--sampler", default="builtin", help="a correct verifier (name or MODULE:CALLABLE)")
    parser.add_argument("--num-batches", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=5, help="seeds per scheduling step")
    parser.add_argument("--group", action="append", choices=[name for name, _, _ in groups()], default=None,
                        help="calibrate only this group (repeatable; default all three, time shared by their weights)")
    parser.add_argument("--json", type=Path, default=None, help="output JSON (default reports/calibration-<time>.json)")
    args = parser.parse_args(argv)
    levels = [float(x) for x in args.levels.split(",")]
    torch.set_num_threads(1)
    verifier, target = resolve_sampler(args.sampler)
    started = dt.datetime.now(dt.timezone.utc)
    plan = [g for g in groups() if args.group is None or g[0] in args.group]
    total_weight = sum(w for _, _, w in plan)
    results = {}
    t0 = time.perf_counter()
    with cached_exact_laws():
        for name, cases, weight in plan:
            share = args.budget_s * weight / total_weight
            start, seed, records = time.perf_counter(), 0, []
            while time.perf_counter() - start < share:
                records += null_pvalues(cases, verifier, seeds=range(seed, seed + args.chunk),
                                        num_batches=args.num_batches)
                seed += args.chunk
            results[name] = dict(records=records, seeds=seed, wall_s=time.perf_counter() - start,
                                 cases=[c.name for c in cases])
            print(f"{name}: {seed} seeds, {len(records)} check outcomes, "
                  f"{results[name]['wall_s']:.0f} s", file=sys.stderr, flush=True)
    all_records = [r for g in results.values() for r in g["records"]]
    types = sorted({r.type for r in all_records})
    num_rows = (len(types) + 4 * len(results)) * len(levels)  # check types, then combined / overall x 2 units
    rate = args.false_fail_rate / num_rows
    overall = rows_with_verdicts(all_records, levels, rate, args.rate_tolerance)
    by_group = {name: rows_with_verdicts(g["records"], levels, rate, args.rate_tolerance)
                for name, g in results.items()}
    combined = [row for name, g in results.items()
                for row in combined_rows(g["records"], levels, rate, args.rate_tolerance, name)]
    per_check = defaultdict(list)
    for rec in all_records:
        per_check[(rec.case, rec.check)].append(rec.pvalue)
    checks = []
    for (case, check), pvalues in sorted(per_check.items()):
        pvalues = np.array(pvalues)
        checks.append({"case": case, "check": check, "trials": int(pvalues.size),
                       "rejections": {f"{lv:g}": int(np.count_nonzero(pvalues <= lv)) for lv in levels},
                       "ratio": {f"{lv:g}": float(np.mean(pvalues <= lv) / lv) for lv in levels}})
    report = {
        "schema": "specexact.calibration/1",
        "started_at": started.isoformat(timespec="seconds"),
        "wall_time_s": time.perf_counter() - t0,
        "settings": {"budget_s": args.budget_s, "levels": levels, "false_fail_rate": args.false_fail_rate,
                     "per_row_false_fail_rate": rate, "rate_tolerance": args.rate_tolerance,
                     "sampler": args.sampler, "sampler_target": target, "num_batches": args.num_batches,
                     "one_sided_types": list(ONE_SIDED)},
        "environment": environment("cpu"),
        "groups": {name: {"cases": g["cases"], "seeds": g["seeds"], "wall_s": g["wall_s"],
                          "check_outcomes": len(g["records"]),
                          "no_power": dict(Counter(r.type for r in g["records"] if not r.has_power))}
                   for name, g in results.items()},
        "overall": overall,
        "by_group": by_group,
        "combined": combined,
        "checks": checks,
    }
    path = args.json or Path("reports") / f"calibration-{started.strftime('%Y%m%dT%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, allow_nan=False, default=float))
    print(f"## Calibration ratios, all groups (verdicts at {rate:.3g} per row)\n")
    print(markdown(overall))
    print(f"\n## The combined check and the whole verdict (share {COMBINED_SHARE:g} for the combination)\n")
    print(markdown(combined))
    for name, entries in by_group.items():
        print(f"\n## {name}: {results[name]['seeds']} seeds, cases {', '.join(results[name]['cases'])}\n")
        print(markdown(entries))
    print(f"\nwrote {path}")
    failed = any(e["verdict"] == "FAIL" for e in [*overall, *combined])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
