"""Regression mode in the saved reports: the Markdown and HTML say what the exit status followed."""

import json
from pathlib import Path

from specexact.audit.verdict.baseline import compare_to_baseline
from specexact.reports import render_html, render_markdown
from specexact.reports.baseline_text import baseline_headline, baseline_lines

ENGINES = Path(__file__).resolve().parents[2] / "reports" / "engines"


def _sglang_in_regression_mode() -> dict:
    baseline = json.loads((ENGINES / "sglang" / "baseline-sglang.json").read_text())
    report = json.loads(json.dumps(baseline))  # the recorded run against itself: nothing new
    diff = compare_to_baseline(report, baseline)
    report["baseline"] = {"path": "reports/engines/sglang/baseline-sglang.json", **diff.to_dict()}
    return report


def test_markdown_and_html_show_the_comparison_and_the_known_findings():
    report = _sglang_in_regression_mode()
    head = baseline_headline(report["baseline"])
    assert head.startswith("regression mode against reports/engines/sglang/baseline-sglang.json: no regression (0 new")
    lines = baseline_lines(report["baseline"])
    assert "still failing (known): fuzz / acceptance_probes / acceptance_rule[draft_above, rejects]" in lines
    md, html = render_markdown(report), render_html(report)
    assert f"**{head}**" in md and "- still failing (known): fuzz / acceptance_probes" in md
    assert head in html and "still failing (known): fuzz / acceptance_probes" in html
    assert "exit status follows this comparison" in md and "exit status follows this comparison" in html


def test_a_regression_and_a_baseline_of_another_sampler_are_said():
    report = _sglang_in_regression_mode()
    report["baseline"].update(regressed=True, new_failures=[{"case": "fuzz", "check": "acceptance_probes / "
                                                             "acceptance_rule[identical, rejects]"}],
                              notes=["sampler differs: baseline 'sglang', now 'mine:verify'"])
    md = render_markdown(report)
    assert ": REGRESSED (1 new failures" in md
    assert "- new failure: fuzz / acceptance_probes / acceptance_rule[identical, rejects]" in md
    assert "- note: sampler differs: baseline 'sglang', now 'mine:verify'" in md


def test_no_baseline_no_section():
    report = json.loads((ENGINES / "sglang" / "baseline-sglang.json").read_text())
    assert "regression mode against" not in render_markdown(report)
    assert "regression mode against" not in render_html(report)
