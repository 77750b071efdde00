"""The diagnosis comes first in the Markdown and the HTML, one line per part (reports 1.3)."""

import copy

import pytest

from specexact.audit.verdict.diagnosis import PARTS
from specexact.reports import validate_report
from specexact.reports.diagnosis_text import diagnosis_rows
from specexact.reports.html import render_html
from specexact.reports.markdown import render_markdown
from specexact.reports.schema import SchemaError


def test_markdown_puts_the_diagnosis_first(failing_report):
    md = render_markdown(failing_report)
    first_section = md.split("\n## ")[1]
    assert first_section.startswith("Diagnosis: faulty: recovered token")
    lines = [ln for ln in first_section.splitlines() if ln.startswith("- ") and "**" in ln]
    assert len(lines) == len(PARTS)
    assert any(ln.startswith("- ✗ **recovered token**") for ln in lines)
    assert any(ln.startswith("- ✔ **bonus token**") for ln in lines)
    assert any(ln.startswith("- – **per-prefix processing") and "not tested" in ln for ln in lines)
    assert "```python" in first_section and "replay_event" in first_section
    assert md.index("## Diagnosis") < md.index("## Findings") < md.index("## Checks")


def test_html_puts_the_diagnosis_first_and_escapes_it(failing_report):
    report = copy.deepcopy(failing_report)
    part = next(p for p in report["diagnosis"]["parts"] if p["status"] == "fail")
    part["evidence"] = "<script>alert(1)</script>"
    html = render_html(report)
    assert html.index("Diagnosis: faulty") < html.index("checks passed") < html.index("<h2>Findings")
    assert "<script>alert" not in html and "&lt;script&gt;" in html
    assert html.count('<td class="sym') == len(PARTS)


def test_rows_and_passing_report(passing_report):
    rows = diagnosis_rows(passing_report["diagnosis"])
    assert [r["label"] for r in rows] == [label for _, label in PARTS]
    assert all(r["symbol"] in "✔–" for r in rows) and all(r["replay"] is None for r in rows)
    assert "Diagnosis: no part found faulty" in render_markdown(passing_report)


def test_old_reports_without_a_diagnosis_still_render(passing_report):
    report = copy.deepcopy(passing_report)
    del report["diagnosis"]
    assert "Diagnosis" not in render_markdown(report) and "Diagnosis" not in render_html(report)


def test_schema_checks_the_diagnosis(passing_report):
    report = copy.deepcopy(passing_report)
    validate_report(report)
    report["diagnosis"]["parts"][0]["status"] = "maybe"
    with pytest.raises(SchemaError, match="diagnosis"):
        validate_report(report)
