"""The Markdown report writes ``>=`` as ``>=`` (it showed ``&gt;=`` in the file), while
anything that could be HTML or an entity stays literal."""

from specexact.reports.markdown import _cell


def test_a_lone_greater_than_stays_as_written():
    assert _cell("bins of >= 200 expected counts") == "bins of >= 200 expected counts"
    assert _cell("p=0 <= 1e-8") == "p=0 &lt;= 1e-8"  # a < could start a tag: escaped
    assert _cell("p=0 <= 1e-8 (>= 200 each)") == "p=0 &lt;= 1e-8 (>= 200 each)"


def test_html_and_entities_stay_literal():
    assert _cell("<script>alert(1)</script>") == "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert _cell("a &lt; b & c") == "a &amp;lt; b & c"
    assert _cell("x | y\nz") == "x \\| y z"
