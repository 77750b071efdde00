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
  sequences vs naive sampling, first acceptance, independence);
- ``e2e-scenarios`` (only when named with ``--group``): the built-in engine's generated
  scenario cases of audit seed 0 (``audit/cases/e2e/scenarios.py``: per-band PIT checks on the
  speculative and plain paths, ``reproducible``), run by the correct built-in engine on
  ``--num-batches`` calls per seed (each seed shifts every request's seed). Besides the ratio
  table it prints, per check type, a Kolmogorov-Smirnov test of the band checks' p-values
  against Uniform(0, 1) (``scipy.stats.kstest``; checks with power only) and the rejections at
  the audit's per-check level ``--audit-level`` with their Clopper-Pearson 95 % interval
  (``scipy.stats.binomtest``).

Usage::

    python scripts/calibration.py --budget-s 300 --json reports/calibration.json
    python scripts/calibration.py --budget-s 600 --group two-sample   # one group only
    python scripts/calibration.py --budget-s 1200 --group e2e-scenarios  # the engine's scenarios
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
from scipy import stats

from specexact.audit import default_cases, quick_cases, resolve_sampler
from specexact.audit.cases.e2e.scenarios import scenario_cases
from specexact.decoders.engines.builtin import BuiltinEngine
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
             "eos_cut", "reproducible", "reproducible_in_mix", "independent_requests")

E2E_GROUP = "e2e-scenarios"
AUDIT_LEVEL = 0.5e-6 / 99
"""The per-check false-fail rate of the default audit of the built-in engine (seed 0: the
Bonferroni half of 1e-6 over its 99 checks, ``docs/engines/end-to-end.md``), at which the
scenario cases' checks run there."""


def groups():
    two_sample = [replace(c, batch_size=128) for c in default_cases() if not c.exact]
    return [
        ("calibration-v5", [calibration_case()], 0.5),
        ("quick", quick_cases(), 0.3),
        ("two-sample", two_sample, 0.2),
    ]


GROUP_NAMES = [name for name, _, _ in groups()] + [E2E_GROUP]


def e2e_group():
    """``(cases, engine)`` of the ``e2e-scenarios`` group: the built-in engine's scenario
    cases of audit seed 0, and the correct engine that runs them."""
    engine = BuiltinEngine()
    return scenario_cases(engine, "draft_model", seed=0), engine


def e2e_engine(seed: int) -> BuiltinEngine:
    """The correct engine of the ``e2e-scenarios`` group for calibration seed ``seed``.

    Every second request of a scenario case is unseeded and draws from the engine's own
    stream, which each load starts from ``BuiltinEngine(seed=...)`` (the engine loads again
    whenever the case's γ changes). One engine for every seed gave every seed's unseeded
    requests the same outputs: half of each trial's draws repeated across trials, whose
    p-values were then not independent (measured 2026-12-07, 298 seeds: KS p = 1.3e-7 for
    ``token_law``, 7e-6 for ``plain_token_law``, in opposite directions). A fresh engine
    seeded from the trial's seed gives each trial its own stream."""
    return BuiltinEngine(seed=int(seed) + 1)


def uniformity_rows(records, audit_level):
    """Per check type (checks with power only): the Kolmogorov-Smirnov test of the p-values
    against Uniform(0, 1) and the rejections at ``audit_level`` with their Clopper-Pearson
    95 % interval."""
    out = []
    by_type = defaultdict(list)
    for rec in records:
        if rec.has_power and rec.type not in ONE_SIDED:  # exact checks' p-values are 1 or 0 by design
            by_type[rec.type].append(rec.pvalue)
    for kind, pvalues in sorted(by_type.items()):
        pvalues = np.asarray(pvalues, dtype=np.float64)
        ks = stats.kstest(pvalues, "uniform")
        k = int(np.count_nonzero(pvalues <= audit_level))
        ci = stats.binomtest(k, pvalues.size, audit_level).proportion_ci(confidence_level=0.95, method="exact")
        out.append({"check_type": kind, "trials": int(pvalues.size), "ks_statistic": float(ks.statistic),
                    "ks_pvalue": float(ks.pvalue), "audit_level": audit_level, "rejections_at_audit_level": k,
                    "rejection_rate_ci95": [float(ci.low), float(ci.high)],
                    "min_pvalue": float(pvalues.min())})
    return out


def uniformity_markdown(entries):
    lines = ["| check type | trials (with power) | KS statistic | KS p-value | smallest p | rejections at the "
             "audit's level | 95 % CI of the rate |", "|---|---|---|---|---|---|---|"]
    for e in entries:
        lo, hi = e["rejection_rate_ci95"]
        lines.append(f"| {e['check_type']} | {e['trials']} | {e['ks_statistic']:.4f} | {e['ks_pvalue']:.3g} | "
                     f"{e['min_pvalue']:.3g} | {e['rejections_at_audit_level']} (level {e['audit_level']:.3g}) | "
                     f"[{lo:.3g}, {hi:.3g}] |")
    return "\n".join(lines)


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
    parser.add_argument("--group", action="append", choices=GROUP_NAMES, default=None,
                        help="calibrate only this group (repeatable; default the first three, time shared by their "
                             f"weights; {E2E_GROUP} only when named)")
    parser.add_argument("--audit-level", type=float, default=AUDIT_LEVEL,
                        help=f"the audit's per-check level for the {E2E_GROUP} group's rejection count")
    parser.add_argument("--json", type=Path, default=None, help="output JSON (default reports/calibration-<time>.json)")
    args = parser.parse_args(argv)
    levels = [float(x) for x in args.levels.split(",")]
    torch.set_num_threads(1)
    verifier, target = resolve_sampler(args.sampler)
    started = dt.datetime.now(dt.timezone.utc)
    plan = [(*g, verifier) for g in groups() if args.group is None or g[0] in args.group]
    if args.group is not None and E2E_GROUP in args.group:
        e2e_cases_, engine = e2e_group()
        plan.append((E2E_GROUP, e2e_cases_, 1.0, engine))
    total_weight = sum(w for _, _, w, _ in plan)
    results = {}
    t0 = time.perf_counter()
    with cached_exact_laws():
        for name, cases, weight, runner in plan:
            share = args.budget_s * weight / total_weight
            start, seed, records = time.perf_counter(), 0, []
            while time.perf_counter() - start < share:
                # the scenario cases' checks at the audit's per-check rate (their cells follow it)
                if name == E2E_GROUP:  # one engine per seed: its unseeded stream is the trial's own
                    for s in range(seed, seed + args.chunk):
                        records += null_pvalues(cases, e2e_engine(s), seeds=[s], num_batches=args.num_batches,
                                                false_fail_rate=args.audit_level)
                else:
                    records += null_pvalues(cases, runner, seeds=range(seed, seed + args.chunk),
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
    if E2E_GROUP in results:
        report["uniformity"] = uniformity_rows(results[E2E_GROUP]["records"], args.audit_level)
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
    if "uniformity" in report:
        print(f"\n## {E2E_GROUP}: p-values against Uniform(0, 1), rejections at the audit's per-check level\n")
        print(uniformity_markdown(report["uniformity"]))
    print(f"\nwrote {path}")
    failed = any(e["verdict"] == "FAIL" for e in [*overall, *combined])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
