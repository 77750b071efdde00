"""Human-readable audit report in Markdown.

Text that comes from a sampler (names, exception messages, outcome labels) is escaped so
it renders literally: ``|`` and newlines cannot break a table, ``<`` (with ``>``) and an
``&`` that would start an entity become entities (no HTML injection where Markdown is
rendered as HTML, while ``>= 200`` stays as written), backticks cannot end a code span.
"""

from __future__ import annotations

import math
from typing import Sequence

from specexact.reports.baseline_text import baseline_headline, baseline_lines
from specexact.reports.combined_text import combined_text, split_text
from specexact.reports.certified import CERTIFIED_TV_NOTE, certified_tv_text, lossy_interval_text
from specexact.reports.escaping import markdown_cell as _cell
from specexact.reports.fuzz_section import fuzz_markdown

__all__ = ["render_markdown"]


def _num(x) -> float:
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return float(x)
    return math.inf if x == "inf" else (-math.inf if x == "-inf" else math.nan)


def _fmt(x, spec=".3g") -> str:
    if isinstance(x, str):
        return x
    if x is None:
        return "-"
    return format(x, spec)


def _code(text: object) -> str:
    """An inline code span that holds ``text`` literally (not for table cells)."""
    t = str(text).replace("\r", " ").replace("\n", " ")
    fence = "`"
    while fence in t:
        fence += "`"
    pad = " " if t.startswith("`") or t.endswith("`") else ""
    return f"{fence}{pad}{t}{pad}{fence}"


def _median(values) -> str:
    finite = sorted(v for v in values if math.isfinite(v))
    return f"{finite[len(finite) // 2]:.3g}" if finite else "-"


def _min_expected(report: dict) -> str:
    """``">= 200"``: the smallest expected bin count of the report's chi-square checks (as
    their details record it)."""
    mins = sorted({float(m) for c in report.get("checks", []) if c.get("method") == "asymptotic"
                   if isinstance(m := (c.get("details") or {}).get("min_expected"), (int, float))})
    if not mins:
        return "large"
    return f">= {mins[0]:g}" if len(mins) == 1 else f">= {mins[0]:g} to {mins[-1]:g}"


def _planned_label(report: dict) -> str:
    """What the number in brackets after a case's calls is: exact with ``--batches``; with a
    budget, the prediction made when the case started (it samples for its share of the time)."""
    return "planned" if (report.get("settings") or {}).get("num_batches") is not None else "≈ planned at its start"


def _baseline_section(report: dict) -> list[str]:
    """Regression mode (``--baseline``), right after the diagnosis: what the exit status followed."""
    baseline = report.get("baseline")
    if not baseline:
        return []
    return [f"**{_cell(baseline_headline(baseline))}** — the exit status follows this comparison, not the "
            "verdict above", "", *(f"- {_cell(line)}" for line in baseline_lines(baseline)), ""]


def _diagnosis_section(report: dict) -> list[str]:
    """The diagnosis (report 1.3+), first in the report: one line per part, ✔ / ✗ / not tested."""
    diag = report.get("diagnosis")
    if not diag:
        return []
    from specexact.reports.diagnosis_text import diagnosis_rows

    rows = diagnosis_rows(diag)
    lines = [f"## Diagnosis: {_cell(diag.get('summary', ''))}", ""]
    for row in rows:
        lines.append(f"- {row['symbol']} **{_cell(row['label'])}** — {_cell(row['text'])}")
    for note in diag.get("notes") or []:
        lines.append(f"- hint: {_cell(note)}")
    replays = [(row["label"], row["replay"]) for row in rows if row["replay"]]
    if replays:
        lines += ["", "Replay of the strongest event (rebuilds its laws and calls the sampler on them):", ""]
        for label, code in replays[:3]:
            lines += [f"{_cell(label)}:", "", "```python", *str(code).replace("```", "` ` `").splitlines(), "```", ""]
    lines.append("")
    return lines


def _process_text(i: int, p: dict) -> str:
    """One process of a case's ``execution.processes``, in words."""
    def ids(xs):
        return ("class " if len(xs) == 1 else "classes ") + ", ".join(map(str, xs))
    where = "the audit's process" if p["process"] == "audit" else f"fresh process {i}"
    did = []
    if p.get("whole_case"):
        did.append("the whole case")
    if p["searched"]:
        ok = [c for c in p["searched"] if c not in p["crashing"]]
        did.append("alone: " + ", ".join(filter(None, [f"{ids(ok)} ran" if ok else "",
                                                     f"{ids(p['crashing'])} crashed" if p["crashing"] else ""])))
    if p["checked"]:
        did.append(f"laws of {ids(p['checked'])} checked")
    if p.get("note"):
        did.append(_cell(p["note"]))
    return f"{where}: " + (", ".join(did) if did else "nothing")


def _findings_section(report: dict) -> list[str]:
    """Every finding (fuzz findings included), grouped by tier with the counts, saying which
    tiers fail the audit (:mod:`specexact.audit.verdict.tiers`)."""
    from specexact.audit.verdict.build import report_findings
    from specexact.audit.verdict.tiers import TIER_LABELS, TIER_TEXT, TIERS, failing_tiers, findings_by_tier, tier_counts

    findings = report_findings(report)
    if not findings:
        return []
    bad = failing_tiers(bool((report.get("settings") or {}).get("strict_inputs")))
    counts = tier_counts(findings)
    lines = ["## Findings", "",
             "By tier: " + ", ".join(f"{TIER_LABELS[t]} **{counts[t]}**" if counts[t] else f"{TIER_LABELS[t]} 0"
                                     for t in TIERS), ""]
    for tier, group in findings_by_tier(findings):
        how = "fails the audit" if tier in bad else "listed, does not fail the audit (`--strict-inputs` makes it fail)"
        lines += [f"### {_cell(TIER_LABELS.get(tier, tier))} ({len(group)}) — {how}", "",
                  f"*{_cell(TIER_TEXT.get(tier, ''))}*", ""]
        for f in group:
            kind = f.get("kind")
            lines.append(f"- **{_cell(f['case'])} / {_cell(f['check'])}**"
                         + (f" ({_cell(kind)})" if kind else "") + f": {_cell(f['message'])}")
            if f.get("source") == "fuzz":
                lines.append(f"  - shrunk example: {_code(f.get('example'))}; replay: Fuzz finding "
                             f"{int(f.get('fuzz_index') or 0) + 1} below")
                continue
            if f.get("worst"):
                worst = "; ".join(f"{_cell(w[0])}: observed {_fmt(w[1])}, expected {_fmt(w[2])}" for w in f["worst"][:3])
                lines.append(f"  - worst: {worst}")
            lines.append(f"  - reproduce: {_code(f['reproduction']['command'])}")
            shrunk = f["reproduction"].get("shrunk")
            if shrunk:  # a generated end-to-end scenario, shrunk (audit/cases/e2e/shrink.py)
                lines.append(f"  - shrunk scenario (still fails {_cell(', '.join(shrunk.get('failing') or []))}): "
                             f"{_cell(shrunk.get('description') or '')}; replay: "
                             f"{_code('; '.join(shrunk['python'].splitlines()))}")
        lines.append("")
    return lines


def render_markdown(report: dict, history: Sequence[dict] = ()) -> str:
    """Render an audit report (the dict of :func:`specexact.audit.run_audit`) as Markdown.

    ``history``: earlier reports' summaries (:func:`specexact.reports.trend.load_history`),
    oldest first, for the trend section.
    """
    s = report["settings"]
    env = report["environment"]
    plan = report.get("plan") or {}
    shard = s.get("shard")
    from specexact.reports.diagnosis_text import not_started_text

    not_started = not_started_text(report)
    lines = [
        f"# specexact audit: {_cell(report['sampler']['name'])} — "
        + ("**NOT AUDITED**" if not_started else f"**{report['verdict'].upper()}**")
        + (f" (shard {shard['index']}/{shard['count']})" if shard else ""),
        "",
        *([f"**{_cell(not_started)}**", ""] if not_started else []),
        *_diagnosis_section(report),
        *_baseline_section(report),
        f"- sampler: {_code(report['sampler']['target'])}",
        f"- started: {report['started_at']}, wall time {report['wall_time_s']:.1f} s, "
        f"{report['num_sequences']:,} sequences",
        f"- {split_text(s)}",
        *([f"- {_cell(combined_text(report))}"] if combined_text(report) else []),
        f"- seed {s['seed']}; " + (f"budget {s['budget_s']:g} s" if s.get("budget_s") else
                                   f"{s['num_batches']} decoder calls per case")
        + ("; cases isolated in subprocesses" if s.get("isolate") else ""),
        f"- torch {env['torch']} on {env['device']} ({_cell(env.get('device_name'))}), "
        f"specexact {env['specexact']}, git {env.get('git_revision') or '-'}",
    ]
    proc = s.get("processing") or {}
    if proc.get("level") == "logits":
        lines.append(f"- logits-level sampler: reference laws use its declared order "
                     f"{' → '.join(_code(op) for op in proc['order'])}; repetition penalty over "
                     f"{proc['repetition_penalty_scope'].replace('_', ' ')}; greedy {'supported' if proc['greedy'] else 'not supported'}")
    for sk in s.get("skipped_cases") or []:
        classes = sk.get("classes") or []
        if sk.get("kind") == "budget":
            lines.append(f"- not run: {_cell(sk['case'])}: {_cell(sk['reason'])}")
            continue
        lines.append(f"- skipped: {_cell(sk['case'])} class{'es' if len(classes) > 1 else ''} "
                     f"{', '.join(map(str, classes))}: {_cell(sk['reason'])}")
    if report.get("resumed_cases"):
        lines.append(f"- resumed from a journal: {', '.join(_cell(c) for c in report['resumed_cases'])} "
                     "finished in an earlier, interrupted run")
    if report.get("shards"):
        lines.append("- merged from shards: " + "; ".join(
            f"{sh['index']}/{sh['count']} ({', '.join(_cell(c) for c in sh['cases'])})" for sh in report["shards"]))
    if plan.get("note"):
        lines.append(f"- **plan:** {_cell(plan['note'])}")
    lines += [
        "",
        "Detectable TV: the smallest total-variation distance (of the binned law, for "
        "goodness-of-fit checks) that the check detects with power 1 - false-pass rate at its "
        "sample size and false-fail rate. Method `exact` = exact test or exact support check; "
        f"`asymptotic` = chi-square approximation on bins of {_min_expected(report)} expected counts.",
        "",
    ]
    lines += _findings_section(report)
    lines += fuzz_markdown(report)  # the fuzz phase (reports/fuzz_section.py)
    plan_cases = {c["name"]: c for c in plan.get("cases") or []}
    lines += ["## Cases", "",
              f"| case | verdict | sequences | calls ({_planned_label(report)}) | ≈ planned TV | wall s | description |",
              "|---|---|---|---|---|---|---|"]
    for c in report["cases"]:
        ex = c.get("execution") or {}
        pc = plan_cases.get(c["name"]) or {}
        tags = [t for t, on in (("isolated", ex.get("isolated")), ("resumed", ex.get("resumed"))) if on]
        planned = f" ({ex['planned_batches']})" if ex.get("planned_batches") is not None else ""
        lines.append(f"| {_cell(c['name'])} | {c['verdict']}{' (' + ', '.join(tags) + ')' if tags else ''} | "
                     f"{c['num_sequences']:,} | {c.get('num_batches', '-')}{planned} | "
                     f"{_fmt(pc.get('planned_detectable_tv'))} | {c['wall_time_s']:.1f} | {_cell(c['description'])} |")
    timed = [c for c in report["cases"] if c.get("phase_times_s")]
    if timed:
        lines += ["", "Where a case's wall time went (seconds):", ""]
        lines += [f"- {_cell(c['name'])}: " + ", ".join(f"{k.replace('_', ' ')} {v:.1f}"
                                                       for k, v in c["phase_times_s"].items()) for c in timed]
    moved = [c for c in report["cases"] if (c.get("execution") or {}).get("processes")]
    if moved:
        lines += ["", "Where a case ran (its engine could not be loaded again in the audit's process after a crash; "
                      "it went on in fresh processes):", ""]
        lines += [f"- {_cell(c['name'])}: " + "; ".join(_process_text(i, p) for i, p in
                                                         enumerate(c["execution"]["processes"]))
                  for c in moved]
    lines += ["", "## Checks", "",
              "| case | check | method | n | p-value | BH-adjusted | detectable TV | certified TV ≤ | verdict |",
              "|---|---|---|---|---|---|---|---|---|"]
    for chk in report["checks"]:
        verdict = "measured" if (chk.get("details") or {}).get("measured") else (
            "pass" if chk["passed"] else "**FAIL**")
        lines.append(
            f"| {_cell(chk['case'])} | {_cell(chk['name'])} | {chk['method']} | {chk['n']:,} | "
            f"{_fmt(chk['pvalue'])} | {_fmt(chk.get('bh_adjusted_pvalue'))} | "
            f"{_fmt(chk['detectable_tv'])} | {_cell(certified_tv_text(chk))} | {verdict} |"
        )
    lines += ["", _cell(CERTIFIED_TV_NOTE)]
    lossy = report.get("lossy_measurements") or []
    if lossy:
        lines += ["", "## Lossy measurements", "",
                  "The sampler declares a lossy scheme: its emitted law is measured against the target's, not "
                  "tested (these checks pass). TV estimate (plug-in) with its confidence interval.", "",
                  "| case | check | TV from the target [interval] | law | cells | n |", "|---|---|---|---|---|---|"]
        for row in lossy:
            lines.append(f"| {_cell(row['case'])} | {_cell(row['check'])} | {lossy_interval_text(row)} | "
                         f"{row['law']} | {row['num_cells']:,} | {row['n']:,} |")
    schemes = [r for r in report.get("acceptance") or []
               if r.get("scheme") not in (None, "tokenwise") or r.get("note")]
    if schemes:
        lines += ["", "## Accepted length by scheme", "",
                  "Each accepted-length check is judged by the declared scheme's own exact law; the token-wise "
                  "optimum (chain cases) is shown beside it.", "",
                  "| case | check | scheme | mean observed | its law's mean | token-wise optimum |",
                  "|---|---|---|---|---|---|"]
        for r in schemes:
            lines.append(f"| {_cell(r['case'])} | {_cell(r['check'])} | {_cell(r['scheme'])} | "
                         f"{_fmt(r['mean_accepted_length'], '.4g')} | {_fmt(r['expected_mean_accepted_length'], '.4g')} | "
                         f"{_fmt(r['tokenwise_optimum_mean_accepted_length'], '.4g')} |")
    if report.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {_cell(n)}" for n in report["notes"]]
    hists = [h for h in report.get("accepted_length", []) if h.get("observed")]
    if hists:
        lines += ["", "## Accepted lengths (first round): observed / expected", "",
                  "| case | check | counts |", "|---|---|---|"]
        for h in hists:
            pairs = ", ".join(f"{_cell(lbl)}: {o:,.0f} / {e:,.1f}"
                              for lbl, o, e in zip(h["labels"], h["observed"], h["expected"]))
            lines.append(f"| {_cell(h['case'])} | {_cell(h['check'])} | {pairs} |")
    if history:
        lines += ["", f"## Trend (this report and the {len(history)} before it in this folder)", "",
                  "| report (UTC) | verdict | failed checks | median detectable TV |", "|---|---|---|---|"]
        from specexact.reports.trend import summarize

        for h in list(history) + [summarize(report)]:
            lines.append(f"| {str(h['started_at'])[:19].replace('T', ' ')} | {h['verdict']} | "
                         f"{sum(1 for c in h['checks'].values() if not c['passed'])} | "
                         f"{_median((c['detectable_tv'] for c in h['checks'].values()))} |")
        changed = []
        last = history[-1]["checks"]
        for chk in report["checks"]:
            key = f"{chk['case']} / {chk['name']}"
            before = last.get(key)
            if before is not None and before["passed"] != bool(chk["passed"]):
                changed.append(f"{_cell(key)}: {'pass' if before['passed'] else 'FAIL'} → "
                               f"{'pass' if chk['passed'] else 'FAIL'}")
        if changed:
            lines += ["", "Checks whose verdict changed since the previous report: " + "; ".join(changed)]
    return "\n".join(lines) + "\n"
