"""Human-readable audit report in Markdown."""

from __future__ import annotations

__all__ = ["render_markdown"]


def _fmt(x, spec=".3g") -> str:
    if isinstance(x, str):
        return x
    if x is None:
        return "-"
    return format(x, spec)


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(report: dict) -> str:
    """Render an audit report (the dict of :func:`specexact.audit.run_audit`) as Markdown."""
    s = report["settings"]
    env = report["environment"]
    lines = [
        f"# specexact audit: {_cell(report['sampler']['name'])} — **{report['verdict'].upper()}**",
        "",
        f"- sampler: `{_cell(report['sampler']['target'])}`",
        f"- started: {report['started_at']}, wall time {report['wall_time_s']:.1f} s, "
        f"{report['num_sequences']:,} sequences",
        f"- false-fail rate of the whole audit: {s['false_fail_rate']:g}, split ({s['correction']}) "
        f"over {s['num_checks']} checks: {s['per_check_false_fail_rate']:.3g} each",
        f"- seed {s['seed']}; " + (f"budget {s['budget_s']:g} s" if s.get("budget_s") else
                                   f"{s['num_batches']} decoder calls per case"),
        f"- torch {env['torch']} on {env['device']} ({_cell(env.get('device_name'))}), "
        f"specexact {env['specexact']}, git {env.get('git_revision') or '-'}",
        "",
        "Detectable TV: the smallest total-variation distance (of the binned law, for "
        "goodness-of-fit checks) that the check detects with power 1 - false-pass rate at its "
        "sample size and false-fail rate. Method `exact` = exact test or exact support check; "
        "`asymptotic` = chi-square approximation on bins of >= 20-50 expected counts.",
        "",
    ]
    if report["findings"]:
        lines += ["## Findings", ""]
        for f in report["findings"]:
            lines.append(f"- **{_cell(f['case'])} / {_cell(f['check'])}**: {_cell(f['message'])}")
            if f.get("worst"):
                worst = "; ".join(f"{_cell(w[0])}: observed {_fmt(w[1])}, expected {_fmt(w[2])}" for w in f["worst"][:3])
                lines.append(f"  - worst: {worst}")
            lines.append(f"  - reproduce: `{_cell(f['reproduction']['command'])}`")
        lines.append("")
    lines += ["## Cases", "", "| case | verdict | sequences | wall s | description |", "|---|---|---|---|---|"]
    for c in report["cases"]:
        lines.append(f"| {_cell(c['name'])} | {c['verdict']} | {c['num_sequences']:,} | "
                     f"{c['wall_time_s']:.1f} | {_cell(c['description'])} |")
    lines += ["", "## Checks", "",
              "| case | check | method | n | p-value | BH-adjusted | detectable TV | verdict |",
              "|---|---|---|---|---|---|---|---|"]
    for chk in report["checks"]:
        lines.append(
            f"| {_cell(chk['case'])} | {_cell(chk['name'])} | {chk['method']} | {chk['n']:,} | "
            f"{_fmt(chk['pvalue'])} | {_fmt(chk.get('bh_adjusted_pvalue'))} | "
            f"{_fmt(chk['detectable_tv'])} | {'pass' if chk['passed'] else '**FAIL**'} |"
        )
    return "\n".join(lines) + "\n"
