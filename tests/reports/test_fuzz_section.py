"""The fuzz section of the Markdown and HTML reports: what was tried, the findings, escaped."""

import pytest

from specexact.audit import quick_cases, run_audit
from specexact.audit.zoo.floats import accepts_at_equality
from specexact.reports import render_html, render_markdown, validate_report


@pytest.fixture(scope="module")
def report():
    """A report with a fuzz finding: 5 examples per family (seed 0) find the planted fault;
    the rendering is the subject here (the fuzz phase's CI size, 25, on the same fault:
    tests/audit/zoo/test_floats.py::test_each_planted_fault_is_caught[accepts_at_equality])."""
    r = run_audit(accepts_at_equality, sampler_name="specexact.audit.zoo_float:accepts_at_equality",
                  cases=[c for c in quick_cases() if c.name == "v8-plain"], num_batches=2, budget_s=None,
                  fuzz=True, fuzz_examples=5)
    validate_report(r)
    return r


@pytest.mark.statistical(checks=0)  # a planted fault: only a false pass is at stake
def test_markdown_and_html_show_the_finding_its_example_and_replay(report, alpha):
    md = render_markdown(report)
    assert "## Fuzz phase" in md and "### Fuzz finding 1: acceptance_probes / zero_probability_token" in md
    assert "shrunk example: `ProbExample(" in md and "```python" in md and "REPRODUCED" in md
    for f in report["fuzz"]["families"]:
        assert f"| {f['name']} | {f['examples']:,} |" in md
    html = render_html(report)
    assert "<h2>Fuzz phase</h2>" in html and "zero_probability_token" in html and "replay" in html


@pytest.mark.statistical(checks=0)
def test_sampler_text_in_the_fuzz_section_is_escaped(report, alpha):
    evil = dict(report)
    evil["fuzz"] = {**report["fuzz"], "findings": [{**report["fuzz"]["findings"][0],
                                                    "message": "<script>alert(1)</script> | x",
                                                    "example": "a`b<img>"}]}
    md = render_markdown(evil)
    assert "<script>" not in md.replace("\\<script>", "") and "\\<script>" in md and "\\| x" in md
    assert "&lt;" not in md and "&gt;" not in md
    html = render_html(evil)
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<img>" not in html
