"""Self-contained HTML audit report: one file, inline CSS, plots as base64 PNG.

Rendered with a jinja2 template whose autoescaping is on: every string that comes from a
sampler (its name, its target, exception messages, outcome labels) is HTML-escaped. The
page loads nothing from elsewhere (no scripts, no external style sheets or images).
"""

from __future__ import annotations

import base64
import math
from typing import Sequence

from specexact.reports.baseline_text import baseline_headline, baseline_lines
from specexact.reports.combined_text import combined_text, split_text
from specexact.reports.certified import CERTIFIED_TV_NOTE, certified_tv_text, lossy_interval_text
from specexact.reports.fuzz_section import fuzz_html

__all__ = ["render_html"]

_TEMPLATE = r"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>specexact audit: {{ r.sampler.name }} — {{ r.verdict|upper }}</title>
<style>
  :root { --ink:#1f2328; --muted:#59636e; --line:#d8dee4; --pass:#1a7f37; --fail:#c62828; --bg:#f6f8fa; }
  * { box-sizing: border-box; }
  body { font: 14px/1.45 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: var(--ink);
         margin: 0; background: #fff; }
  main { max-width: 1240px; margin: 0 auto; padding: 24px 28px 60px; }
  h1 { font-size: 24px; margin: 0 0 4px; display: flex; align-items: center; gap: 12px; flex-wrap: wrap; }
  h1 .name { overflow-wrap: anywhere; }
  h2 { font-size: 18px; margin: 34px 0 8px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
  h3 { font-size: 15px; margin: 18px 0 6px; }
  p.lead, .muted { color: var(--muted); }
  p.lead { margin: 4px 0 16px; }
  .badge { display: inline-block; padding: 2px 10px; border-radius: 12px; font-size: 13px; font-weight: 600;
           color: #fff; letter-spacing: .03em; }
  .badge.pass { background: var(--pass); } .badge.fail { background: var(--fail); }
  .badge.kind { background: #6e4b00; } .badge.small { font-size: 11px; padding: 1px 7px; }
  .cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(185px, 1fr)); gap: 10px; margin: 12px 0; }
  .card { border: 1px solid var(--line); border-radius: 8px; padding: 10px 12px; background: var(--bg); }
  .card .v { font-size: 20px; font-weight: 600; } .card .k { color: var(--muted); font-size: 12px; }
  table { border-collapse: collapse; width: 100%; margin: 8px 0 4px; font-size: 13px; }
  th, td { border-bottom: 1px solid var(--line); padding: 4px 8px; text-align: left; vertical-align: top; }
  th { background: var(--bg); font-weight: 600; position: sticky; top: 0; }
  td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
  tr.fail td { background: #fdecea; }
  td.tv { min-width: 170px; } .nowrap { white-space: nowrap; }
  tr.group th { background: #eef2f6; font-weight: 600; padding-top: 7px; }
  tr.group th .muted { font-weight: 400; font-size: 12.5px; }
  .bar { display: inline-block; height: 9px; background: #2f6db5; border-radius: 2px; vertical-align: middle;
         margin-right: 6px; }
  .bar.none { background: repeating-linear-gradient(45deg, #bbb, #bbb 3px, #eee 3px, #eee 6px); }
  code, pre { font: 12px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
  pre { background: var(--bg); border: 1px solid var(--line); border-radius: 6px; padding: 8px 10px;
        white-space: pre-wrap; overflow-wrap: anywhere; margin: 4px 0; }
  .finding { border: 1px solid #f1b0aa; border-left: 5px solid var(--fail); border-radius: 6px;
             padding: 8px 12px; margin: 10px 0; background: #fffafa; }
  .finding .title { font-weight: 600; overflow-wrap: anywhere; }
  figure { margin: 10px 0 18px; } figure img { max-width: 100%; height: auto; border: 1px solid var(--line);
           border-radius: 6px; } figcaption { color: var(--muted); font-size: 12.5px; margin-top: 4px; }
  .grid2 { display: grid; grid-template-columns: minmax(0, 5fr) minmax(0, 6fr); gap: 18px; align-items: start; }
  @media (max-width: 1000px) { .grid2 { grid-template-columns: 1fr; } }
  details summary { cursor: pointer; color: var(--muted); }
  .kv td:first-child { color: var(--muted); width: 240px; white-space: nowrap; }
  .note { background: #fff8e1; border: 1px solid #f3d37a; border-radius: 6px; padding: 6px 10px; }
  td.sym { font-size: 16px; width: 24px; text-align: center; } td.sym.pass { color: var(--pass); }
  td.sym.fail { color: var(--fail); } td.sym.not_tested { color: var(--muted); }
  footer { margin-top: 40px; color: var(--muted); font-size: 12px; }
</style>
</head>
<body>
<main>
<h1><span>specexact audit of</span> <code class="name">{{ r.sampler.name }}</code>
  <span class="badge {{ r.verdict }}">{{ "NOT AUDITED" if not_started else r.verdict|upper }}</span></h1>
<p class="lead">sampler <code>{{ r.sampler.target }}</code>{% if r.sampler.package %}
  ({{ r.sampler.package.name }} {{ r.sampler.package.version or "" }}){% endif %} ·
  started {{ r.started_at }} UTC · {{ "%.1f"|format(r.wall_time_s) }} s ·
  {{ "{:,}".format(r.num_sequences) }} sequences{% if shard %} · <b>shard {{ shard.index }}/{{ shard.count }}</b>{% endif %}</p>

{% if not_started %}<h2>{{ not_started }}</h2>{% endif %}
{% if baseline %}
<h2>{{ baseline.headline }}</h2>
<p class="note">The exit status follows this comparison, not the verdict above.</p>
<ul>{% for line in baseline.lines %}<li>{{ line }}</li>{% endfor %}</ul>
{% endif %}
{% if diagnosis %}
<h2>Diagnosis: {{ r.diagnosis.summary }}</h2>
<table class="diagnosis">
{% for d in diagnosis %}<tr class="{{ 'fail' if d.status == 'fail' }}"><td class="sym {{ d.status }}">{{ d.symbol }}</td>
<td class="nowrap"><b>{{ d.label }}</b></td><td>{{ d.text }}{% if d.replay %}
<details><summary>replay the strongest event</summary><pre>{{ d.replay }}</pre></details>{% endif %}</td></tr>{% endfor %}
</table>
{% for note in r.diagnosis.notes or [] %}<p class="note">hint: {{ note }}</p>{% endfor %}
{% endif %}
<div class="cards">
  <div class="card"><div class="v">{{ n_checks - n_failed }} / {{ n_checks }}</div><div class="k">checks passed</div></div>
  <div class="card"><div class="v">{{ tiers.findings|length }}</div><div class="k">findings ({% for t in tiers.counts %}{{ t.label }} {{ t.n }}{% if not loop.last %}, {% endif %}{% endfor %})</div></div>
  <div class="card"><div class="v">{{ "%.3g"|format(s.false_fail_rate) }}</div>
    <div class="k">{{ split_line }}</div></div>
  <div class="card"><div class="v">{{ median_tv }}</div><div class="k">median detectable TV (power 0.99)</div></div>
  <div class="card"><div class="v">{{ mode_value }}</div><div class="k">{{ mode_label }}</div></div>
  <div class="card"><div class="v">{{ s.seed }}</div><div class="k">seed{% if s.isolate %} · isolated cases{% endif %}</div></div>
</div>
{% if s.processing and s.processing.level == "logits" %}<p class="note">Logits-level sampler: the reference laws
  use the order it declared ({{ s.processing.order|join(" → ") }}; repetition penalty over
  {{ s.processing.repetition_penalty_scope|replace("_", " ") }}).</p>{% endif %}
{% for sk in s.skipped_cases or [] %}{% if sk.kind == "budget" %}<p class="note">Not run: {{ sk.case }}: {{ sk.reason }}</p>{% else %}<p class="note">Skipped: {{ sk.case }} class{% if (sk.classes or [])|length > 1 %}es{% endif %}
  {{ (sk.classes or [])|join(", ") }}: {{ sk.reason }}</p>{% endif %}{% endfor %}
{% if r.resumed_cases %}<p class="note">Resumed from a journal: {{ r.resumed_cases|length }} case(s) were finished
  by an earlier, interrupted run of the same audit ({{ r.resumed_cases|join(", ") }}).</p>{% endif %}
{% if r.plan and r.plan.note %}<p class="note">{{ r.plan.note }}</p>{% endif %}
{% if combined_line %}<p class="{{ 'note' if r.combined.passed else 'note fail' }}">{{ combined_line }}</p>{% endif %}

<h2>Findings</h2>
{% if not tiers.findings %}<p>No evidence of inexactness: every check passed at its false-fail rate.</p>{% else %}
<p>By tier: {% for t in tiers.counts %}{{ t.label }} <b>{{ t.n }}</b>{% if not loop.last %}, {% endif %}{% endfor %}.</p>{% endif %}
{% for g in tiers.groups %}
<h3>{{ g.label }} ({{ g.findings|length }}) — {% if g.fails %}fails the audit{% else %}listed, does not fail the audit (<code>--strict-inputs</code> makes it fail){% endif %}</h3>
<p class="muted">{{ g.text }}</p>
{% for f in g.findings %}
<div class="finding">
  <div class="title"><span class="badge kind small">{{ f.kind }}</span> {{ f.case }} / {{ f.check }}</div>
  <div>{{ f.message }}</div>
  {% if f.source == "fuzz" %}<div>shrunk example: <code>{{ f.example }}</code> (replay: in the fuzz phase below)</div>{% else %}
  {% if f.worst %}<table><tr><th>outcome (worst bins)</th><th class="num">observed</th><th class="num">expected</th></tr>
    {% for w in f.worst %}<tr><td>{{ w[0] }}</td><td class="num">{{ fmt(w[1]) }}</td><td class="num">{{ fmt(w[2]) }}</td></tr>{% endfor %}
  </table>{% endif %}
  <div class="muted">reproduce (same samples):</div>
  <pre>{{ f.reproduction.command }}</pre>
  <details><summary>Python</summary><pre>{{ f.reproduction.python }}</pre></details>
  {% if f.defect %}<details><summary>defect details</summary><pre>{{ f.defect }}</pre></details>{% endif %}{% endif %}
</div>
{% endfor %}
{% endfor %}
{{ fuzz_section|safe }}
<h2>Do the p-values look uniform?</h2>
<div class="grid2">
{% if img.qq %}<figure><img alt="QQ plot of p-values" src="data:image/png;base64,{{ img.qq }}">
  <figcaption>For an exact sampler every p-value is Uniform(0, 1) (exact tests: at least as large), so the
  points follow the diagonal inside the band; a check fails only above the red line.</figcaption></figure>{% endif %}
<div>
<h3>Per case</h3>
<table>
<tr><th>case</th><th>verdict</th><th class="num">checks passed</th><th class="num">smallest p</th>
<th class="num">largest detectable TV</th><th class="num">sequences</th></tr>
{% for c in case_rows %}<tr class="{{ 'fail' if c.verdict == 'fail' }}"><td class="nowrap"><code>{{ c.name }}</code></td><td>{{ c.verdict }}</td>
<td class="num">{{ c.passed }} / {{ c.total }}</td><td class="num">{{ c.min_p }}</td><td class="num">{{ c.max_tv }}</td>
<td class="num">{{ "{:,}".format(c.num_sequences) }}</td></tr>{% endfor %}
</table>
<p class="muted">The largest detectable TV of a case is its weakest check (a one-bin law, e.g. greedy rows, has
none: nothing to detect there).</p>
</div>
</div>

<h2>Detectable TV per check</h2>
<p class="muted">The smallest total-variation distance (of the binned law, for chi-square checks; of the agreement
or acceptance probability, for the exact tests) that each check detects with probability 0.99 at its sample size
and false-fail rate. Smaller is stronger; hatched = no guarantee at this sample size.</p>
<table class="checks">
<tr><th>check</th><th>method</th><th class="num">n</th><th class="num">p</th><th class="num">BH-adjusted</th>
<th class="tv">detectable TV</th><th class="num">certified TV ≤</th><th>verdict</th></tr>
{% for g in check_groups %}<tr class="group"><th colspan="8"><code>{{ g.case }}</code>
<span class="muted">— {{ g.description }}</span></th></tr>
{% for c in g.checks %}<tr class="{{ 'fail' if not c.passed }}"><td class="nowrap">{{ c.name }}</td><td>{{ c.method }}</td>
<td class="num">{{ "{:,}".format(c.n) }}</td><td class="num">{{ fmt(c.pvalue) }}</td><td class="num">{{ fmt(c.bh_adjusted_pvalue) }}</td>
<td class="tv">{% if c.tv_width is none %}<span class="bar none" style="width:40px"></span>none{% else %}<span class="bar" style="width:{{ c.tv_width }}px"></span>{{ fmt(c.detectable_tv) }}{% endif %}</td>
<td class="num">{{ c.certified }}</td>
<td>{% if c.measured %}measured{% elif c.passed %}pass{% else %}<b style="color:var(--fail)">FAIL</b>{% endif %}</td></tr>{% endfor %}{% endfor %}
</table>
<p class="muted">{{ certified_note }}</p>

{% if r.lossy_measurements %}<h2>Lossy measurements</h2>
<p class="muted">The sampler declares a lossy scheme: its emitted law is measured against the target's, not tested
(these checks pass). TV estimate (plug-in) with its confidence interval.</p>
<table><tr><th>case</th><th>check</th><th class="num">TV from the target [interval]</th><th>law</th>
<th class="num">cells</th><th class="num">n</th></tr>
{% for m in r.lossy_measurements %}<tr><td><code>{{ m.case }}</code></td><td>{{ m.check }}</td>
<td class="num">{{ lossy_text(m) }}</td><td>{{ m.law }}</td><td class="num">{{ fmt(m.num_cells) }}</td>
<td class="num">{{ fmt(m.n) }}</td></tr>{% endfor %}
</table>{% endif %}

{% if scheme_rows %}<h2>Accepted length by scheme</h2>
<p class="muted">Each accepted-length check is judged by the declared scheme's own exact law; the token-wise optimum
(chain cases) is shown beside it.</p>
<table><tr><th>case</th><th>check</th><th>scheme</th><th class="num">mean observed</th><th class="num">its law's mean</th>
<th class="num">token-wise optimum</th></tr>
{% for a in scheme_rows %}<tr><td><code>{{ a.case }}</code></td><td>{{ a.check }}</td><td>{{ a.scheme }}</td>
<td class="num">{{ fmt(a.mean_accepted_length) }}</td><td class="num">{{ fmt(a.expected_mean_accepted_length) }}</td>
<td class="num">{{ fmt(a.tokenwise_optimum_mean_accepted_length) }}</td></tr>{% endfor %}
</table>{% endif %}
{% for n in r.notes or [] %}<p class="note">{{ n }}</p>{% endfor %}

{% if img.worst %}<h2>Observed vs expected: the {{ n_worst }} checks with the smallest p-values</h2>
<figure><img alt="observed vs expected counts of the worst bins" src="data:image/png;base64,{{ img.worst }}">
<figcaption>Each panel shows a check's largest contributions to its statistic (up to five bins);
z = (observed − expected) / √expected. Labels name the most likely outcome of a bin ("+k more": merged
rare outcomes). Independence panels compare how often suspect pairs (rows of one call, or one row in two
calls) agree with how often control pairs agree; shared randomness raises the suspect share.</figcaption></figure>{% endif %}

{% if img.accepted %}<h2>Accepted lengths against the analytic law</h2>
<figure><img alt="accepted-length histograms" src="data:image/png;base64,{{ img.accepted }}">
<figcaption>Drafts accepted in the first round, per row class, against P(N ≥ i) = Σ Π min(p, q); the number over
each bar is z = (observed − expected) / sd. A sampler can emit the right tokens and still accept too few drafts;
this is where it shows.</figcaption></figure>{% endif %}

<h2>Trend</h2>
{% if img.trend %}<figure><img alt="trend of each check over earlier reports" src="data:image/png;base64,{{ img.trend }}">
<figcaption>Each check over the last {{ history|length }} earlier report(s) of this sampler in the same folder and
this one (rightmost).</figcaption></figure>
<table><tr><th>report (UTC)</th><th>verdict</th><th class="num">failed checks</th><th class="num">median detectable TV</th></tr>
{% for h in history_rows %}<tr class="{{ 'fail' if h.verdict == 'fail' }}"><td>{{ h.started_at }}</td><td>{{ h.verdict }}</td>
<td class="num">{{ h.failed }}</td><td class="num">{{ h.median_tv }}</td></tr>{% endfor %}</table>
{% else %}<p class="muted">No earlier reports of this sampler in this folder: the trend starts with this one.</p>{% endif %}

<h2>Cases</h2>
<table>
<tr><th>case</th><th>verdict</th><th class="num">sequences</th><th class="num">calls ({{ planned_label }})</th><th class="num">≈ planned TV</th>
<th class="num">wall s</th><th>run</th><th>description</th></tr>
{% for c in cases %}<tr class="{{ 'fail' if c.verdict == 'fail' }}"><td class="nowrap"><code>{{ c.name }}</code></td><td>{{ c.verdict }}</td>
<td class="num">{{ "{:,}".format(c.num_sequences) }}</td><td class="num">{{ c.num_batches }}{% if c.planned is not none %} ({{ c.planned }}){% endif %}</td>
<td class="num">{{ c.planned_tv }}</td><td class="num">{{ "%.1f"|format(c.wall_time_s) }}</td><td class="nowrap">{{ c.run }}</td><td>{{ c.description }}</td></tr>{% endfor %}
</table>

<h2>Settings and environment</h2>
<table class="kv">
{% for k, v in kv %}<tr><td>{{ k }}</td><td><code>{{ v }}</code></td></tr>{% endfor %}
</table>

<footer>schema {{ r.schema }} (version {{ r.schema_version }}) · written by specexact
{{ r.environment.specexact }} · the JSON report next to this page holds every number shown here.</footer>
</main>
</body>
</html>
"""


def _num(x) -> float:
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return float(x)
    return math.inf if x == "inf" else (-math.inf if x == "-inf" else math.nan)


def _fmt(x) -> str:
    if x is None:
        return "-"
    v = _num(x)
    if math.isnan(v):
        return str(x)
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if v == int(v) and abs(v) < 1e15:
        return f"{int(v):,}"
    return f"{v:.3g}"


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _median_tv(values) -> str:
    finite = sorted(v for v in values if math.isfinite(v))
    if not finite:
        return "-"
    return f"{finite[len(finite) // 2]:.3g}"


def render_html(report: dict, history: Sequence[dict] = ()) -> str:
    """Render ``report`` (the dict of :func:`specexact.audit.run_audit`) as one HTML page.

    Parameters
    ----------
    report : dict
        An audit report (schema ``specexact.audit/1``).
    history : sequence of dict
        Earlier reports' summaries, oldest first (:func:`specexact.reports.trend.load_history`),
        for the trend plot and table.
    """
    import jinja2

    from specexact.reports import plots
    from specexact.reports.trend import summarize

    s = report["settings"]
    alpha = s["per_check_false_fail_rate"]
    checks = report["checks"]
    tvs = [_num(c["detectable_tv"]) for c in checks]
    finite = [v for v in tvs if math.isfinite(v)]
    top = max(finite) if finite else 1.0
    rows = []
    for c, tv in zip(checks, tvs):
        rows.append({**c, "tv_width": None if not math.isfinite(tv) else max(2, round(110 * tv / top)) if top else 2,
                     "certified": certified_tv_text(c), "measured": bool((c.get("details") or {}).get("measured"))})
    current = summarize(report)
    groups: dict[str, dict] = {}
    descriptions = {c["name"]: c.get("description", "") for c in report["cases"]}
    for row in rows:
        g = groups.setdefault(row["case"], {"case": row["case"], "description": descriptions.get(row["case"], ""),
                                            "checks": []})
        g["checks"].append(row)
    case_rows = []
    for c in report["cases"]:
        own = [r for r in rows if r["case"] == c["name"]]
        ps = [_num(r["pvalue"]) for r in own]
        tv_own = [_num(r["detectable_tv"]) for r in own]
        finite_own = [t for t in tv_own if math.isfinite(t)]
        case_rows.append({"name": c["name"], "verdict": c["verdict"], "num_sequences": c["num_sequences"],
                          "passed": sum(1 for r in own if r["passed"]), "total": len(own),
                          "min_p": _fmt(min(ps)) if ps else "-",
                          "max_tv": _fmt(max(finite_own)) if finite_own else "none"})
    img = {
        "qq": _b64(plots.qq_plot(checks, alpha)),
        "worst": _b64(plots.worst_checks_plot(checks)),
        "accepted": _b64(plots.accepted_length_plot(report.get("accepted_length", []))),
        "trend": _b64(plots.trend_plot(list(history), current, alpha)),
    }
    n_worst = min(plots.MAX_WORST_CHECKS, sum(1 for c in checks if c.get("worst")))
    plan_cases = {c["name"]: c for c in ((report.get("plan") or {}).get("cases") or [])}
    cases = []
    for c in report["cases"]:
        ex = c.get("execution") or {}
        pc = plan_cases.get(c["name"]) or {}
        run = []
        if ex.get("isolated"):
            run.append("isolated")
        if ex.get("resumed"):
            run.append("resumed")
        if ex.get("processes"):  # an engine restarted in fresh processes after a crash (execution.processes)
            run.append(f"in process and {len(ex['processes']) - 1} fresh process(es)")
        cases.append({**c, "planned": ex.get("planned_batches"), "run": ", ".join(run) or "in process",
                      "planned_tv": _fmt(pc.get("planned_detectable_tv")) if pc else "-"})
    history_rows = []
    for h in list(history) + [current]:
        history_rows.append({
            "started_at": str(h["started_at"]).replace("T", " ")[:19],
            "verdict": h["verdict"],
            "failed": sum(1 for c in h["checks"].values() if not c["passed"]),
            "median_tv": _median_tv(c["detectable_tv"] for c in h["checks"].values()),
        })
    env = report["environment"]
    if s.get("num_batches") is not None:
        mode_value, mode_label = f"{s['num_batches']} calls", "decoder calls per case (fixed by --batches)"
    else:
        plan = report.get("plan") or {}
        tv = plan.get("target_detectable_tv")
        mode_value = f"{s.get('budget_s') or 0:g} s"
        mode_label = "time budget" + (f"; planned ≈ TV {tv:.3g}" if isinstance(tv, (int, float)) else "")
    kv = [
        ("sampler target", report["sampler"]["target"]),
        ("seed", s["seed"]),
        ("budget / batches", f"{s.get('budget_s')} s" if s.get("num_batches") is None else f"{s['num_batches']} calls per case"),
        ("false-fail rate (audit / per check)", f"{s['false_fail_rate']:g} / {alpha:.3g}"),
        ("false-fail split", split_text(s)),
        ("checks", s["num_checks"]),
        ("device", f"{env.get('device')} ({env.get('device_name')})"),
        ("isolation", f"yes, timeout {s.get('case_timeout_s') or 'default'}" if s.get("isolate") else "no"),
        ("shard", f"{s['shard']['index']}/{s['shard']['count']}" if s.get("shard") else "-"),
        ("audit key", s.get("audit_key")),
        ("specexact", f"{env.get('specexact')} (git {env.get('git_revision') or '-'}"
                      f"{', uncommitted changes' if env.get('git_dirty') else ''})"),
        ("python / torch / CUDA", f"{env.get('python')} / {env.get('torch')} / {env.get('cuda') or '-'}"),
        ("packages", ", ".join(f"{k} {v}" for k, v in (env.get("packages") or {}).items() if v)),
        ("platform", env.get("platform")),
        ("started / finished (UTC)", f"{report['started_at']} / {report.get('finished_at') or '-'}"),
    ]
    if report.get("shards"):
        kv.append(("merged shards", "; ".join(f"{sh['index']}/{sh['count']}: {', '.join(sh['cases'])}"
                                             for sh in report["shards"])))
    from specexact.reports.diagnosis_text import not_started_text

    env_j = jinja2.Environment(autoescape=True)
    template = env_j.from_string(_TEMPLATE)
    return template.render(
        r=report, s=s, checks=rows, cases=cases, check_groups=list(groups.values()), case_rows=case_rows, img=img, n_worst=n_worst, kv=kv, fmt=_fmt,
        n_checks=len(checks), n_failed=sum(1 for c in checks if not c["passed"]),
        median_tv=_median_tv(tvs), mode_value=mode_value, mode_label=mode_label,
        history=list(history), history_rows=history_rows, shard=s.get("shard"),
        planned_label="planned" if s.get("num_batches") is not None else "≈ planned at its start",
        diagnosis=_diagnosis_rows(report), combined_line=combined_text(report),
        split_line=split_text(s),  # the split in the words of every renderer (reports/combined_text.py)
        tiers=_tier_groups(report),
        baseline=({"headline": baseline_headline(report["baseline"]), "lines": baseline_lines(report["baseline"])}
                  if report.get("baseline") else None),
        certified_note=CERTIFIED_TV_NOTE, lossy_text=lossy_interval_text,
        scheme_rows=[a for a in report.get("acceptance") or []
                     if a.get("scheme") not in (None, "tokenwise") or a.get("note")],
        fuzz_section=fuzz_html(report),  # escaped by its own template (reports/fuzz_section.py)
        not_started=not_started_text(report),
    )


def _tier_groups(report: dict) -> dict:
    """Every finding (fuzz findings included) grouped by tier, with the counts and whether
    the tier fails the audit (:mod:`specexact.audit.verdict.tiers`)."""
    from specexact.audit.verdict.build import report_findings
    from specexact.audit.verdict.tiers import TIER_LABELS, TIER_TEXT, TIERS, failing_tiers, findings_by_tier, tier_counts

    findings = report_findings(report)
    bad = failing_tiers(bool((report.get("settings") or {}).get("strict_inputs")))
    counts = tier_counts(findings)
    return {"findings": findings,
            "counts": [{"tier": t, "label": TIER_LABELS[t], "n": counts[t]} for t in TIERS],
            "groups": [{"tier": t, "label": TIER_LABELS.get(t, t), "text": TIER_TEXT.get(t, ""), "fails": t in bad,
                        "findings": fs} for t, fs in findings_by_tier(findings)]}


def _diagnosis_rows(report: dict) -> list[dict]:
    """The diagnosis (report 1.3+) as rows for the page, first on it."""
    from specexact.reports.diagnosis_text import diagnosis_rows

    return diagnosis_rows(report["diagnosis"]) if report.get("diagnosis") else []
