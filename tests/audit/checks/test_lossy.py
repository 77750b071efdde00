"""Lossy samplers are measured, not failed: the measured TV's interval covers the exact TV."""

import functools

import numpy as np
import pytest
from scipy import stats

import specexact.audit.checks.lossy as lossy
from specexact.audit.checks.lossy import lossy_tv_check
from specexact.audit.cases.dispatch import run_case
from specexact.audit.cases.tree_case import tree_cases
from specexact.audit.cases.tree_kind import _laws
from specexact.decoders.tree import REFERENCE_SAMPLERS, TreeSampler, verify_tree_typical
from specexact.exactness.tree_laws import generation_law, round_law, target_sequence_law, typical_program

CASE = next(c for c in tree_cases() if c.name == "typical-v3")
NUM_BATCHES = 4
N = NUM_BATCHES * CASE.batch_size  # one class

# Medusa's typical acceptance with a sampled next token (the greedy default is farther from the
# target); its parameters are Medusa's defaults.
SAMPLED = TreeSampler("typical_sampled", REFERENCE_SAMPLERS["typical"].capabilities,
                      functools.partial(verify_tree_typical, next_token="sample"))


@functools.lru_cache(maxsize=4)
def exact_laws(next_token: str):
    """``(outcomes, target probs, sampler probs, exact TV)`` of the case's class 0 (length 4)."""
    laws = _laws(CASE, 0)
    lossy_law = generation_law(laws, lambda prefix: round_law(laws, typical_program, branching=CASE.branching,
                                                             drafting=CASE.drafting, prefix=prefix,
                                                             next_token=next_token), CASE.length)
    target = target_sequence_law(laws, CASE.length)
    keys = sorted(set(target) | set(lossy_law))
    p0 = np.array([target.get(k, 0.0) for k in keys])
    p1 = np.array([lossy_law.get(k, 0.0) for k in keys])
    return keys, p0, p1, 0.5 * float(np.abs(p0 - p1).sum())


def test_the_exact_tv_is_larger_for_greedy_than_for_sampled_next_tokens():
    assert exact_laws("sample")[3] == pytest.approx(0.3979, abs=1e-3)
    assert exact_laws("greedy")[3] == pytest.approx(0.6691, abs=1e-3)


# One audit run with the measurement's delta set to the suite's per-check rate: its interval
# must cover the exactly known TV (a miss has probability <= alpha).
@pytest.mark.statistical(checks=1)
def test_the_audit_measures_a_typical_sampler_with_an_interval_covering_the_exact_tv(alpha, monkeypatch):
    monkeypatch.setattr(lossy, "LOSSY_DELTA", alpha)
    res = run_case(CASE, SAMPLED, false_fail_rate=1e-6, num_batches=NUM_BATCHES)
    assert res.passed and res.defect is None
    chk = next(c for c in res.checks if c.name == "lossy_tv[class 0]")
    tv = chk.details["lossy_tv"]
    exact = exact_laws("sample")[3]
    assert tv["delta"] == alpha and tv["law"] == "full" and tv["n"] == N
    assert tv["lower"] <= exact <= tv["upper"], (tv, exact)
    assert tv["lower"] > 0.1  # informative: the sampler is certainly lossy
    acc = next(c for c in res.checks if c.name.startswith("accepted_length"))
    assert acc.passed and acc.details["measured"]


# Coverage of the audit's own 99 % interval (LOSSY_DELTA = 0.01) on this case's exact law, at
# the case's sample size: R replicates drawn from the exact lossy law, counted on the same cells.
# Measured (10 000 replicates, n = 8192): 53 misses (sampled next token, exact TV 0.398; mean
# interval [0.384, 0.459]) and 60 (greedy, TV 0.669; [0.657, 0.731]) against 100 allowed.
R = 2000


@pytest.mark.statistical(checks=2)
@pytest.mark.parametrize("next_token", ["sample", "greedy"])
def test_the_interval_covers_the_exact_tv_at_least_at_its_level(next_token, alpha):
    _, p0, p1, exact = exact_laws(next_token)
    rng = np.random.default_rng(7)
    misses = 0
    for r in range(R):
        counts = rng.multinomial(N, p1)
        tv = lossy_tv_check(counts, p0, false_fail_rate=1e-6, min_expected=200, name="lossy_tv",
                            split_seed=r).details["lossy_tv"]
        misses += not (tv["lower"] <= exact <= tv["upper"])
    assert misses <= stats.binom.isf(alpha, R, lossy.LOSSY_DELTA), misses


def test_the_binned_law_is_measured_when_outcomes_are_many():
    p0 = np.full(1000, 1e-3)
    counts = np.random.default_rng(0).multinomial(5000, p0)
    chk = lossy_tv_check(counts, p0, false_fail_rate=1e-6, min_expected=200, name="lossy_tv")
    assert chk.details["lossy_tv"]["law"] == "binned" and chk.passed and chk.pvalue == 1.0


# A lossy chain sampler on a chain case: its sequence law is measured, its independence is
# still tested (4 checks per class, 2 of them tests).
@pytest.mark.statistical(checks=4)
def test_a_lossy_chain_sampler_is_measured_on_chain_cases_and_reported(alpha, tmp_path, capsys):
    from specexact.audit import quick_cases, run_audit
    from specexact.cli import main
    from specexact.reports import render_html, render_markdown, validate_report

    v8 = next(c for c in quick_cases() if c.name == "v8-plain")
    report = run_audit(REFERENCE_SAMPLERS["typical_chain"], cases=[v8], false_fail_rate=alpha * 8, num_batches=2,
                       budget_s=None, seed=0)
    assert report["verdict"] == "pass", report["findings"]
    rows = report["lossy_measurements"]
    assert [r["check"] for r in rows] == ["lossy_tv[class 0]", "lossy_tv[class 1]"]
    assert all(0 <= r["lower"] <= r["estimate"] <= r["upper"] <= 1 and r["delta"] == lossy.LOSSY_DELTA for r in rows)
    assert all(r["measured"] for r in report["acceptance"])
    validate_report(report)
    assert "## Lossy measurements" in render_markdown(report) and "Lossy measurements" in render_html(report)
    code = main(["audit", "--sampler", "typical-chain", "--case", "v8-plain", "--quick", "--batches", "2", "--quiet",
                 "--false-fail-rate", str(alpha * 8), "--report-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and "lossy: v8-plain / lossy_tv[class 0]: TV from the target" in out
