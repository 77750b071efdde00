"""Markdown and HTML reports: escaping, self-containment, plots, trend over earlier reports."""

import base64
import copy
import json
import re
from pathlib import Path

import pytest

from specexact.cli import main
from specexact.reports import load_history, render_html, render_markdown, write_reports

EVIL = "<script>alert('x')</script>"
HERE = Path(__file__).resolve().parents[1] / "audit"


def poisoned(report: dict) -> dict:
    r = copy.deepcopy(report)
    r["sampler"]["name"] = EVIL
    r["sampler"]["target"] = f"evil:{EVIL}"
    r["environment"]["device_name"] = EVIL
    for c in r["cases"]:
        c["description"] = EVIL
        c["defect"] = EVIL
    for chk in r["checks"]:
        chk["name"] = f"{chk['name']}{EVIL}$\\alpha$ {{"  # also mathtext-looking text in plots
        chk["worst"] = [[f"{EVIL}{w[0]}", w[1], w[2]] for w in chk["worst"]]
    for f in r["findings"]:
        f["message"] = EVIL
        f["defect"] = EVIL
        f["reproduction"]["command"] += f" `{EVIL}`"
    return r


def images(html: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)]


def test_everything_from_the_sampler_is_escaped(failing_report):
    report = poisoned(failing_report)
    html = render_html(report)
    assert "<script" not in html.lower()
    assert "&lt;script&gt;" in html
    md = render_markdown(report)
    # Markdown: backslash escapes in text (no entity); code spans (reproduction commands)
    # show their text literally
    outside_code = re.sub(r"(`+)(.+?)\1", "", md)
    assert not re.search(r"(?<!\\)<script", outside_code.lower()) and "\\<script>" in md
    assert "&lt;" not in md and "&gt;" not in md


def test_html_is_self_contained_with_plots(failing_report):
    html = render_html(failing_report)
    pngs = images(html)
    assert len(pngs) >= 3 and all(p.startswith(b"\x89PNG\r\n\x1a\n") for p in pngs)  # QQ, worst, accepted
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', html)
    assert "<link" not in html and "<script" not in html.lower()
    for text in ("QQ plot of p-values", "accepted-length histograms", "Detectable TV per check", "FAIL",
                 "reproduce (same samples)"):
        assert text in html
    assert html.count("<tr") >= len(failing_report["checks"])


def test_a_crash_message_with_markup_is_escaped_end_to_end(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    # 3 fuzz examples per family: the fuzz phase's crash findings carry the message too
    code = main(["audit", "--quick", "--case", "v8-plain", "--batches", "2", "--fuzz-examples", "3", "--sampler",
                 "faulty_samplers:script_in_message", "--report-dir", str(tmp_path), "--quiet"])
    assert code == 1
    html = next(tmp_path.glob("audit-*.html")).read_text()
    md = next(tmp_path.glob("audit-*.md")).read_text()
    data = json.loads(next(tmp_path.glob("audit-*.json")).read_text())
    assert "<script>" in data["cases"][0]["defect"]  # the JSON keeps the raw text
    assert any("<script>" in f["message"] for f in data["fuzz"]["findings"])
    assert "<script" not in html.lower() and "&lt;script&gt;alert(" in html
    # fenced blocks (replay scripts) and code spans show their text literally
    outside_code = re.sub(r"(`+)(.+?)\1", "", re.sub(r"(?ms)^(`{3,})python\n.*?^\1$", "", md)).lower()
    assert not re.search(r"(?<!\\)<script", outside_code) and "\\<b>bold\\</b>" in md and "&gt;" not in md


def test_trend_over_earlier_reports_in_the_same_folder(tmp_path, passing_report, failing_report):
    # three earlier runs of the same sampler, one shard and one of another sampler (ignored)
    for k, day in enumerate(("01", "02", "03")):
        r = copy.deepcopy(passing_report)
        r["started_at"] = f"2026-01-{day}T00:00:00+00:00"
        if k == 1:
            r["verdict"] = "fail"
            r["checks"][0]["passed"] = False
        (tmp_path / f"audit-builtin-{k}.json").write_text(json.dumps(r))
    shard = copy.deepcopy(passing_report)
    shard["settings"]["shard"] = {"index": 1, "count": 2, "cases": ["v8-plain"]}
    (tmp_path / "audit-shard.json").write_text(json.dumps(shard))
    (tmp_path / "audit-other.json").write_text(json.dumps(failing_report))
    (tmp_path / "notes.json").write_text("not a report")

    history = load_history(tmp_path, sampler_name="builtin")
    assert [h["started_at"][:10] for h in history] == ["2026-01-01", "2026-01-02", "2026-01-03"]
    current = copy.deepcopy(passing_report)
    current["started_at"] = "2026-01-04T00:00:00+00:00"
    paths = write_reports(current, tmp_path, "audit-builtin-now")
    html = paths["html"].read_text()
    assert 'alt="trend of each check over earlier reports"' in html
    assert html.count("2026-01-0") >= 4
    md = paths["md"].read_text()
    assert "## Trend (this report and the 3 before it in this folder)" in md
    assert "verdict changed" not in md  # 2026-01-03 passed like this one
    # the new report is history for the next one, and only once
    assert len(load_history(tmp_path, sampler_name="builtin")) == 4


def test_no_history_means_no_trend_plot(passing_report):
    html = render_html(passing_report, history=[])
    assert "the trend starts with this one" in html


@pytest.mark.parametrize("drop", ["accepted_length", "findings"])
def test_renders_without_optional_sections(passing_report, drop):
    report = copy.deepcopy(passing_report)
    report[drop] = []
    assert "specexact audit" in render_html(report)
    assert "# specexact audit" in render_markdown(report)


def test_trend_plot_takes_exact_checks_with_detectable_tv_zero():
    """A defect check (a crash) reports detectable TV 0: the log colour scale must not fail
    on it (it stopped vllm-logits' HTML report with "Invalid vmin or vmax")."""
    from specexact.reports.plots import trend_plot

    def run(day, tvs):
        return {"started_at": f"2026-01-0{day}T00:00:00", "verdict": "fail",
                "checks": {f"c{i} / x": {"pvalue": 0.5, "detectable_tv": tv, "passed": tv != 0.0, "n": 10}
                           for i, tv in enumerate(tvs)}}

    png = trend_plot([run(1, [0.0, 0.05])], run(2, [0.0, 0.04]), 1e-8)
    assert png is not None and png[:4] == b"\x89PNG"
    assert trend_plot([run(1, [0.0])], run(2, [0.0]), 1e-8)[:4] == b"\x89PNG"  # no positive TV at all
