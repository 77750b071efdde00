"""Every renderer (terminal, Markdown, HTML) states the false-fail split and the combined
check with its p-value and threshold (reports/combined_text.py, audit/combined.py)."""

import copy
import html as html_module
import re

import pytest
import torch

from specexact.audit import quick_cases, run_audit
from specexact.audit.checks.combined import enters_combination
from specexact.audit.verdict.build import build_report
from specexact.audit.zoo import CORRECT
from specexact.cli_output import print_table
from specexact.reports.combined_text import combined_text, split_text
from specexact.reports.html import render_html
from specexact.reports.markdown import render_markdown

FALSE_FAIL_RATE = 1e-6


@pytest.fixture(scope="module")
def small_report():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        case = next(c for c in quick_cases() if c.name == "v8-plain")
        return run_audit(CORRECT["builtin"], cases=[case], num_batches=2, budget_s=None, seed=0,
                         false_fail_rate=FALSE_FAIL_RATE)
    finally:
        torch.set_num_threads(before)


def spread(report, k=6):
    """``k`` combined checks at twice the whole rate's Bonferroni threshold: the combined
    check fails, no check on its own."""
    cases = copy.deepcopy(report["cases"])
    p, done = 2 * FALSE_FAIL_RATE / report["settings"]["num_checks"], 0
    for case in cases:
        for chk in case["checks"]:
            if done < k and enters_combination(chk):
                chk.update(pvalue=p, passed=True)
                done += 1
    return build_report(cases, sampler=report["sampler"], settings=report["settings"],
                        environment=report["environment"], started_at=report["started_at"],
                        finished_at=report["finished_at"], wall_time_s=report["wall_time_s"])


def text_of(page: str) -> str:
    """The words of an HTML page (tags dropped, entities decoded, whitespace collapsed)."""
    return " ".join(html_module.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def split_statements(text: str) -> set[str]:
    """Every statement of the false-fail split in ``text``: from "false-fail rate of the"
    to the per-check rate's "each"."""
    return set(re.findall(r"false-fail rate of the .*? each", text))


def test_markdown_html_and_terminal_state_the_split_in_one_sentence(small_report, capsys):
    """One wording of the split (Bonferroni over the checks, the combined check's share),
    from reports/combined_text.py, in every renderer: no other description of it."""
    split = split_text(small_report["settings"])
    md = " ".join(render_markdown(small_report).split())
    page = text_of(render_html(small_report))
    print_table(small_report)
    terminal = " ".join(capsys.readouterr().out.split())
    for text in (md, page, terminal):
        assert split_statements(text) == {split}, split_statements(text)
    assert "bonferroni+cauchy over" not in page


def test_older_reports_state_bonferroni_alone(small_report):
    old = dict(small_report["settings"], correction="bonferroni")
    old.pop("combination")
    assert split_text(old).endswith(f"split (bonferroni) over {old['num_checks']} checks: "
                                    f"{old['per_check_false_fail_rate']:.3g} each")
    assert combined_text({"combined": None}) is None


def test_renderers_state_the_split_and_the_combined_check(small_report, capsys):
    failing = spread(small_report)
    assert failing["verdict"] == "fail"
    for report in (small_report, failing):
        split, line = split_text(report["settings"]), combined_text(report)
        assert "0.5 of it (5e-07) for the combined check" in split
        assert f"{report['settings']['per_check_false_fail_rate']:.3g} each" in split
        assert (": pass" if report["combined"]["passed"] else ": FAIL") in line
        assert f"p = {report['combined']['pvalue']:.3g}" in line and "5e-07" in line
        md = render_markdown(report)
        assert split in md and "combined check (cauchy combination" in md
        html = render_html(report)
        assert split in text_of(html) and "combined check (cauchy combination" in html
        print_table(report)
        out = capsys.readouterr().out
        assert "combined check (cauchy" in out and "for the combined check" in out
    assert "<= 5e-07: FAIL" in combined_text(failing)
    randomised = small_report["combined"]["randomised"]
    assert randomised > 0 and f", {randomised} discrete ones randomised within their atom" in combined_text(small_report)
