"""The Markdown report writes ``>=`` as ``>=`` and never an HTML entity (it showed ``&gt;=``,
then ``&lt;lambda&gt;``, in the file), while anything that could be HTML or an entity
stays literal: CommonMark backslash escapes."""

import re

from specexact.reports.markdown import _cell, render_markdown


def test_a_lone_greater_than_stays_as_written():
    assert _cell("bins of >= 200 expected counts") == "bins of >= 200 expected counts"
    assert _cell("p=0 <= 1e-8") == "p=0 \\<= 1e-8"  # a < could start a tag: escaped
    assert _cell("p=0 <= 1e-8 (>= 200 each)") == "p=0 \\<= 1e-8 (>= 200 each)"


def test_html_and_entities_stay_literal_without_entities():
    assert _cell("<script>alert(1)</script>") == "\\<script>alert(1)\\</script>"
    assert _cell("a &lt; b & c") == "a \\&lt; b & c"
    assert _cell("x | y\nz") == "x \\| y z"
    assert _cell("mod:<lambda>") == "mod:\\<lambda>"
    assert _cell("C:\\<x") == "C:\\\\\\<x"  # the backslash stays one, the < is escaped


def test_no_entity_in_a_whole_report(failing_report):
    report = dict(failing_report, sampler={**failing_report["sampler"], "name": "tests.mod:<lambda> -> x"})
    md = render_markdown(report)
    assert not re.search(r"&(gt|lt|amp|quot);", md)
    assert "tests.mod:\\<lambda> -> x" in md
