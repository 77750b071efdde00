"""The fuzz phase's section of the Markdown and HTML reports (schema 1.3 ``fuzz``).

What it shows: the fuzz verdict and its share of the budget, every family with the
examples it tried (per input family: families x examples) and the vocabulary range, and
every finding with the rule it broke, its shrunk example, the failing call and the
replay script; the generated statistical cases with their verdicts. Text from the
sampler (exception messages, names) is escaped: Markdown cells and code spans as in
:mod:`.markdown`, the replay in a fence longer than any backtick run in it; the HTML with
jinja2's autoescaping.
"""

from __future__ import annotations

from specexact.reports.escaping import markdown_cell as _cell  # one escaping rule for the whole report

__all__ = ["fuzz_markdown", "fuzz_html"]




def _code(text: object) -> str:
    t = str(text).replace("\r", " ").replace("\n", " ")
    fence = "`"
    while fence in t:
        fence += "`"
    pad = " " if t.startswith("`") or t.endswith("`") else ""
    return f"{fence}{pad}{t}{pad}{fence}"


def _fence(text: str) -> str:
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}python\n{text.rstrip()}\n{fence}"


def _tried(family: dict) -> str:
    tried = family.get("tried") or {}
    return ", ".join(f"{k} {v}" for k, v in tried.items()) or "-"


def _share(report: dict) -> str:
    plan = (report.get("plan") or {}).get("fuzz") or {}
    if plan.get("planned_time_s") is not None:
        used = plan.get("time_s")
        return (f"{plan['share']:.0%} of the budget ({plan['planned_time_s']:.0f} s planned"
                + (f", {used:.1f} s used" if used is not None else "") + ")")
    return f"{plan.get('examples_per_family') or '-'} examples per family"


def _tier_label(finding: dict) -> str:
    """The finding's tier as reports name it (:mod:`specexact.audit.verdict.tiers`)."""
    from specexact.audit.verdict.tiers import TIER_LABELS, tier_of

    tier = finding.get("tier") or tier_of(finding)
    return TIER_LABELS.get(tier, tier)


def fuzz_markdown(report: dict) -> list[str]:
    """Markdown lines of the fuzz section (none when the report has no fuzz phase)."""
    fz = report.get("fuzz")
    if not fz:
        return []
    lines = ["## Fuzz phase", "",
             f"- verdict: **{fz['verdict'].upper()}**; profile {_cell(fz['settings']['profile'])}, seed "
             f"{fz['settings']['seed']}; {_share(report)}; {fz['time_s']:.1f} s",
             f"- fuzzed within: {_cell(fz['level'])} level, randomness {_cell(fz['subject']['randomness'])}, "
             f"input dtypes {_cell(', '.join(fz['subject']['input_dtypes']))}, supplied uniforms "
             f"{_cell(fz['subject']['uniforms_dtype'] or 'not possible (no probes)')}"]
    if fz.get("error"):
        lines.append(f"- **the fuzz phase could not run:** {_cell(fz['error'].splitlines()[0])}")
    for n in fz.get("not_applicable") or []:
        lines.append(f"- not applicable, not run: {_cell(n['what'])} ({_cell(n['reason'])})")
    lines += ["", "| family | examples | stopped | s | V | tried (input family: examples) | rules |",
              "|---|---|---|---|---|---|---|"]
    for f in fz["families"]:
        lo, hi = (f.get("vocab_sizes") or [0, 0])[:2]
        lines.append(f"| {_cell(f['name'])} | {f['examples']:,} | {_cell(f['stopped'])} | {f['time_s']:.1f} | "
                     f"{lo}..{hi} | {_cell(_tried(f))} | {_cell(', '.join(f['rules']))} |")
    for k, f in enumerate(fz["findings"], 1):
        known = f" — known as {_code(f['known_as'])}" if f.get("known_as") else ""
        c = f["call"]
        lines += ["", f"### Fuzz finding {k}: {_cell(f['family'])} / {_cell(f['rule'])}{known}", "",
                  f"- tier: {_cell(_tier_label(f))}",
                  f"- rule: {_cell(f['rule_text'])}",
                  f"- what happened: {_cell(f['message'])}",
                  f"- shrunk example: {_code(f['example'])}",
                  f"- failing call: {_code(c['entry'])} with V={c['vocab_size']}, B={c['batch_size']}, "
                  f"K={c['num_draft_tokens']}, generator seed {c['generator_seed']}"
                  + (f", uniforms {_code(c['uniforms'])}" if c.get("uniforms") is not None else ""),
                  f"- found at example {f.get('examples_to_failure') or '-'} of its family"
                  + (" (flaky: did not fail again on replay)" if f.get("flaky") else ""),
                  "", "Replay:", "", _fence(f["replay"])]
    generated = set(fz.get("generated_cases") or [])
    rows = [c for c in report.get("cases", []) if c["name"] in generated]
    if rows:
        lines += ["", "Generated statistical cases (their checks are in the tables below): "
                  + "; ".join(f"{_cell(c['name'])} {c['verdict']}" for c in rows)]
    return lines + [""]


_HTML = r"""<h2>Fuzz phase</h2>
<p><span class="badge {{ 'fail' if fz.verdict != 'pass' else 'pass' }}">{{ fz.verdict|upper }}</span>
 profile {{ fz.settings.profile }}, seed {{ fz.settings.seed }} · {{ share }} · {{ "%.1f"|format(fz.time_s) }} s ·
 {{ fz.level }} level, randomness {{ fz.subject.randomness }}, input dtypes {{ fz.subject.input_dtypes|join(", ") }},
 supplied uniforms {{ fz.subject.uniforms_dtype or "not possible (no probes)" }}</p>
{% if fz.error %}<p class="note">The fuzz phase could not run: {{ fz.error }}</p>{% endif %}
{% for n in fz.not_applicable or [] %}<p class="note">Not applicable, not run: <code>{{ n.what }}</code> ({{ n.reason }})</p>{% endfor %}
<table><tr><th>family</th><th class="num">examples</th><th>stopped</th><th class="num">s</th><th>V</th>
<th>tried (input family: examples)</th><th>rules</th></tr>
{% for f in fz.families %}<tr class="{{ 'fail' if f.examples_to_failure }}"><td class="nowrap"><code>{{ f.name }}</code></td>
<td class="num">{{ "{:,}".format(f.examples) }}</td><td>{{ f.stopped }}</td><td class="num">{{ "%.1f"|format(f.time_s) }}</td>
<td class="nowrap">{{ f.vocab_sizes[0] }}..{{ f.vocab_sizes[1] }}</td>
<td>{% for k, v in (f.tried or {}).items() %}{{ k }} {{ v }}{% if not loop.last %}, {% endif %}{% endfor %}</td>
<td>{{ f.rules|join(", ") }}</td></tr>{% endfor %}</table>
{% for f in fz.findings %}
<div class="finding">
  <div class="title"><span class="badge kind small">fuzz</span> <span class="badge kind small">{{ tier_label(f) }}</span> {{ f.family }} / {{ f.rule }}
  {% if f.known_as %}<span class="muted">— known as <code>{{ f.known_as }}</code></span>{% endif %}</div>
  <div>{{ f.message }}</div>
  <div class="muted">rule: {{ f.rule_text }}</div>
  <div>shrunk example: <code>{{ f.example }}</code></div>
  <div class="muted">call <code>{{ f.call.entry }}</code>: V={{ f.call.vocab_size }}, B={{ f.call.batch_size }},
   K={{ f.call.num_draft_tokens }}, generator seed {{ f.call.generator_seed }}{% if f.call.uniforms is not none %},
   uniforms <code>{{ f.call.uniforms }}</code>{% endif %}; found at example {{ f.examples_to_failure or "-" }}</div>
  <details open><summary>replay</summary><pre>{{ f.replay }}</pre></details>
</div>
{% endfor %}
{% if generated %}<p>Generated statistical cases (checks below):
{% for c in generated %}<code>{{ c.name }}</code> {{ c.verdict }}{% if not loop.last %}; {% endif %}{% endfor %}</p>{% endif %}
"""


def fuzz_html(report: dict) -> str:
    """The HTML of the fuzz section (empty when the report has no fuzz phase); escaped."""
    fz = report.get("fuzz")
    if not fz:
        return ""
    import jinja2

    names = set(fz.get("generated_cases") or [])
    generated = [c for c in report.get("cases", []) if c["name"] in names]
    env = jinja2.Environment(autoescape=True)
    return env.from_string(_HTML).render(fz=fz, share=_share(report), generated=generated, tier_label=_tier_label)
