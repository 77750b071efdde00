"""Merge the JSON reports of an audit's shards (``specexact merge``) into the report of the whole audit.

The shards come from :mod:`specexact.audit.run.shard` (``--shard i/n``); each report is
validated against the schema (:mod:`specexact.reports.schema`), and the merged report is
computed by :func:`~specexact.audit.verdict.build.build_report` exactly as an unsharded
audit's is.
"""

from __future__ import annotations

from typing import Sequence

from specexact.audit.run.shard import ShardError
from specexact.audit.verdict.build import build_report
from specexact.reports.schema import SchemaError, validate_report

__all__ = ["merge_reports"]


def merge_reports(reports: Sequence[dict]) -> dict:
    """Merge the JSON reports of shards ``1/n .. n/n`` of one audit into one report.

    Raises
    ------
    ShardError
        A report is not a shard, the shards come from different audits (sampler, seed,
        cases, sample sizes, false-fail rate, device or versions differ: their
        ``settings.audit_key`` differ), a shard is missing or given twice, or the shards'
        cases do not add up to the audit's cases.
    """

    if not reports:
        raise ShardError("nothing to merge: give the JSON reports of all shards")
    for k, r in enumerate(reports):
        try:
            validate_report(r)
        except SchemaError as exc:
            raise ShardError(f"report {k + 1} is not a valid audit report: {exc}") from exc
        if not r["settings"].get("shard"):
            raise ShardError(f"report {k + 1} ({r['started_at']}) is not a shard (run with --shard I/N)")
    keys = {r["settings"]["audit_key"] for r in reports}
    if len(keys) != 1:
        raise ShardError("the reports come from different audits (sampler, seed, cases, sample sizes, "
                         f"false-fail rate, device or versions differ): audit keys {sorted(keys)}")
    count = reports[0]["settings"]["shard"]["count"]
    indices = sorted(r["settings"]["shard"]["index"] for r in reports)
    if indices != list(range(1, count + 1)):
        raise ShardError(f"need shards 1..{count} exactly once each, got {indices}")
    first = reports[0]
    all_cases = list(first["settings"]["all_cases"])
    by_name: dict[str, dict] = {}
    for r in reports:
        for c in r["cases"]:
            if c["name"] in by_name:
                raise ShardError(f"case {c['name']!r} is in two shards")
            by_name[c["name"]] = c
    left_out = [sk for r in reports for sk in r["settings"].get("skipped_cases") or [] if sk.get("kind") == "budget"]
    accounted = sorted([*by_name, *(sk["case"] for sk in left_out)])
    if accounted != sorted(all_cases):
        missing = sorted(set(all_cases) - set(by_name) - {sk["case"] for sk in left_out})
        extra = sorted(set(by_name) - set(all_cases))
        raise ShardError(f"the shards' cases do not add up to the audit's: missing {missing}, unexpected {extra}")
    shards = sorted(reports, key=lambda r: r["settings"]["shard"]["index"])
    settings = dict(first["settings"])
    settings["shard"] = None
    settings["skipped_cases"] = [*(sk for sk in first["settings"].get("skipped_cases") or [] if sk.get("kind") != "budget"),
                                 *left_out]  # each shard leaves out its own cases for its budget
    merged = build_report(
        [by_name[n] for n in all_cases if n in by_name],
        sampler=first["sampler"],
        settings=settings,
        environment=first["environment"],
        started_at=min(r["started_at"] for r in shards),
        finished_at=max(r.get("finished_at") or r["started_at"] for r in shards),
        wall_time_s=max(r["wall_time_s"] for r in shards),
        plan=None,
        fuzz=next((r["fuzz"] for r in shards if r.get("fuzz")), None),  # the fuzz stage runs in shard 1
        shards=[{
            "index": r["settings"]["shard"]["index"],
            "count": r["settings"]["shard"]["count"],
            "cases": [c["name"] for c in r["cases"]],
            "started_at": r["started_at"],
            "wall_time_s": r["wall_time_s"],
            "verdict": r["verdict"],
            "environment": r["environment"],
            "plan": r.get("plan"),
        } for r in shards],
    )
    # each shard's plan note (a floor its budget could not buy, a budget too small), where
    # the merged report's readers look: its notes
    merged["notes"] = [*merged.get("notes", []),
                       *(f"shard {r['settings']['shard']['index']}/{r['settings']['shard']['count']} plan: "
                         f"{r['plan']['note']}" for r in shards if (r.get("plan") or {}).get("note"))]
    return merged
