"""Accepted length judged by the declared scheme's own law: block passes, sample-and-compare is
noted (not failed), an exact sampler declared token-wise that accepts less is under-accepting."""

import numpy as np
import pytest
import torch

from specexact.audit import default_cases, run_audit
from specexact.audit.checks.acceptance import accepted_length_check, chain_accepted_length_laws, mean_of_law
from specexact.audit.cases.dispatch import checks_per_case
from specexact.decoders import SamplingParams, ToyLM, ToyLMConfig
from specexact.decoders.adapters import Capabilities
from specexact.decoders.tree import REFERENCE_SAMPLERS, TreeSampler, verify_block
from specexact.reports import render_html, render_markdown, validate_report

V8 = next(c for c in default_cases() if c.name == "v8-plain")
# Class 0 of v7-rep-order: block's accepted-length law is 0.099 (TV) from token-wise's.
V7 = next(c for c in default_cases() if c.name == "v7-rep-order")
CHECKS = checks_per_case(V8)


def caps(scheme):
    return Capabilities(max_batch_size=None, dtypes=(torch.float64,), devices=("cpu",), randomness="generator",
                        scheme=scheme)


def sample_compare(draft_token_ids, draft_probs, target_probs, generator=None):
    """Exact sample-and-compare verification: the target samples its own token at every
    position; drafts are kept while they equal it; then the target's token (mlx-lm style)."""
    B, K = draft_token_ids.shape
    V = target_probs.shape[-1]
    y = torch.multinomial(target_probs.double().reshape(-1, V), 1, generator=generator).reshape(B, K + 1)
    n = (y[:, :K] == draft_token_ids).long().cumprod(1).sum(1)
    out = torch.full((B, K + 1), -1, dtype=torch.int64)
    pos = torch.arange(K)[None, :]
    out[:, :K] = torch.where(pos < n[:, None], draft_token_ids, -1)
    out[torch.arange(B), n] = y[torch.arange(B), n]
    return out


def laws_of(scheme, V=6, gamma=3):
    target = ToyLM(ToyLMConfig(vocab_size=V, seed=3, context_strength=2.0))
    draft = target.draft(1.0)
    sp = SamplingParams(repetition_penalty=1.3)
    return chain_accepted_length_laws(target, draft, torch.tensor([1, 2]), sp, SamplingParams(temperature=0.8),
                                      num_draft_tokens=gamma, scheme=scheme)


def test_each_scheme_gets_its_own_law_and_the_tokenwise_optimum():
    tokenwise, tw = laws_of("tokenwise")
    assert tokenwise is tw and tokenwise.sum() == pytest.approx(1.0)
    compare, tw2 = laws_of("sample_compare")
    block, tw3 = laws_of("block")
    assert np.allclose(tw, tw2) and np.allclose(tw, tw3)
    assert mean_of_law(compare) < mean_of_law(tokenwise) < mean_of_law(block)
    assert np.all(np.cumsum(block[::-1])[::-1] >= np.cumsum(tokenwise[::-1])[::-1] - 1e-12)
    lossy, tw4 = laws_of("lossy")
    assert lossy is None and np.allclose(tw4, tw)
    with pytest.raises(ValueError, match="chain case"):
        laws_of("tree")


def test_block_law_on_a_large_vocabulary_keeps_only_the_first_acceptance():
    block, tokenwise = laws_of("block", V=300, gamma=3)
    assert np.isnan(block[2:]).all() and block[0] == pytest.approx(tokenwise[0])
    assert block[1] == pytest.approx(1 - tokenwise[0])  # P(N >= 1) = sum min(p, q), as token-wise


def test_the_check_records_both_means_and_measures_a_lossy_sampler():
    law, tw = laws_of("block")
    rng = np.random.default_rng(0)
    acc = rng.choice(4, size=5000, p=law)
    chk = accepted_length_check(acc, law, scheme="block", false_fail_rate=1e-3, min_expected=50,
                                name="accepted_length[class 0]", tokenwise_law=tw)
    d = chk.details
    assert d["scheme"] == "block" and d["expected_mean_accepted_length"] == pytest.approx(mean_of_law(law))
    assert d["tokenwise_optimum_mean_accepted_length"] == pytest.approx(mean_of_law(tw))
    assert d["observed_counts"] == np.bincount(acc, minlength=4).tolist()
    measured = accepted_length_check(acc, None, scheme="lossy", false_fail_rate=1e-3, min_expected=50,
                                     name="accepted_length[class 0]", max_accepted=3)
    assert measured.passed and measured.details["measured"] and "expected_probs" not in measured.details
    with pytest.raises(ValueError, match="max_accepted"):
        accepted_length_check(acc, None, scheme="lossy", false_fail_rate=1e-3, min_expected=50, name="x")


def audit(sampler, alpha, cases=(V8,), batches=4):
    checks = sum(checks_per_case(c) for c in cases)
    return run_audit(sampler, cases=list(cases), false_fail_rate=alpha * checks, num_batches=batches, budget_s=None,
                     seed=2)


@pytest.mark.statistical(checks=CHECKS)
def test_a_block_verifier_passes_the_chain_cases_against_the_block_law(alpha):
    report = audit(REFERENCE_SAMPLERS["block"], alpha)
    assert report["verdict"] == "pass", report["findings"]
    rows = report["acceptance"]
    assert rows and all(r["scheme"] == "block" for r in rows)
    assert all(r["expected_mean_accepted_length"] > r["tokenwise_optimum_mean_accepted_length"] for r in rows)


# Declared token-wise, the same block verifier accepts more than the token-wise law allows:
# its accepted-length check fails (an inexactness of the declaration), and so may the
# per-decision acceptance checks (a block rejects drafts whose own ratio is >= 1); its
# law checks pass.
@pytest.mark.statistical(checks=0)
def test_a_block_verifier_declared_tokenwise_fails_its_accepted_length(alpha):
    report = audit(TreeSampler("block_as_tokenwise", caps("tokenwise"), verify_block), alpha, cases=(V7,),
                   batches=8)
    assert report["verdict"] == "fail"
    failed = {f["check"] for f in report["findings"]}
    assert any(c.startswith("accepted_length") for c in failed)
    assert all(c.startswith("accepted_length") or c in ("acceptance_exact", "acceptance") for c in failed), failed
    kinds = {f["check"]: f["kind"] for f in report["findings"]}
    assert all(k == "inexactness" for c, k in kinds.items() if c.startswith("accepted_length"))  # over, not under
    assert set(kinds.values()) <= {"inexactness", "decision_rule"}


@pytest.mark.statistical(checks=CHECKS)
def test_sample_and_compare_is_exact_and_its_lower_acceptance_only_noted(alpha):
    report = audit(TreeSampler("sample_compare", caps("sample_compare"), sample_compare), alpha)
    assert report["verdict"] == "pass", report["findings"]
    assert report["notes"] and all("accepts less than token-wise" in n for n in report["notes"])
    validate_report(report)
    md, html = render_markdown(report), render_html(report)
    assert "## Notes" in md and "Accepted length by scheme" in html and "certified TV ≤" in md + html
    seq = next(c for c in report["checks"] if c["name"] == "sequence_law[class 0]")
    upper = seq["details"]["certified_tv"]["upper"]
    assert 0 < upper < 1 and f"{upper:.3g} binned" in md and f"{upper:.3g} binned" in html


# The same exact sampler declared token-wise: law checks pass, accepted length falls below the
# token-wise optimum: a finding of kind under_accepting with both figures; its decisions do
# not follow the token-wise rule either (a recovered token is the target's own sample, not a
# residual draw): per-decision findings of kind decision_rule, never inexactness.
@pytest.mark.statistical(checks=0)
def test_an_exact_sampler_declared_tokenwise_that_accepts_less_is_under_accepting(alpha):
    report = audit(TreeSampler("sample_compare_as_tokenwise", caps("tokenwise"), sample_compare), alpha)
    assert report["verdict"] == "fail"
    kinds = {f["kind"] for f in report["findings"]}
    assert "under_accepting" in kinds and kinds <= {"under_accepting", "decision_rule"}, report["findings"]
    msg = next(f for f in report["findings"] if f["kind"] == "under_accepting")["message"]
    assert "under-accepting" in msg and "mean accepted length" in msg
    validate_report(report)


def test_verify_level_cases_judge_the_tokenwise_scheme_only():
    """The verify-level laws (accepted length, recovered token after rejecting draft 0) are
    token-wise: a sample-compare or block sampler skips those cases with the reason (the
    decoder-level cases judge it against its own scheme's law), a token-wise one runs them."""
    from specexact.audit.cases.tree_case import chain_case_reason
    from specexact.audit.cases.verify_case import verify_cases

    case = verify_cases()[0]
    assert chain_case_reason(case, TreeSampler("tokenwise", caps("tokenwise"), sample_compare)) is None
    for scheme in ("sample_compare", "block"):
        reason = chain_case_reason(case, TreeSampler(scheme, caps(scheme), sample_compare))
        assert reason and "token-wise" in reason and repr(scheme) in reason
    assert chain_case_reason(V8, TreeSampler("sc", caps("sample_compare"), sample_compare)) is None
