"""The logprob checks of an end-to-end case (audit/cases/e2e/logprob_checks.py): an engine's
reported logprobs against the exact law at each prefix — exact, no sampling."""

import math
from dataclasses import replace

import pytest
import torch

from specexact.audit.cases.e2e.catalog import e2e_cases, long_case
from specexact.audit.cases.e2e.engine_call import ensure_loaded, generate_call
from specexact.audit.cases.e2e.logprob_checks import (
    LOGPROB_TOLERANCE,
    exact_logprobs,
    logprob_checks,
    padded_logprobs,
    padded_tokens as _padded,
)
from specexact.decoders.engines.builtin import BuiltinEngine
from specexact.decoders.engines.protocol import GenerationRequest, GenerationResult, check_generation_results
from specexact.decoders.params import SamplingParams


@pytest.fixture(scope="module")
def long_call():
    """One speculative and one plain call of the built-in engine's long case (γ = 4, 48
    tokens, EOS and min_tokens in one class), every request asking for logprobs."""
    engine = BuiltinEngine()
    case = long_case(engine, "draft_model", requests_per_class=2)
    assert case.check_logprobs  # the built-in engine declares logprobs
    ensure_loaded(engine, case)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: one thread is the fastest on a busy machine
    try:
        _, spec = generate_call(engine, case, 7, speculative=True, logprobs=True)
        _, plain = generate_call(engine, case, 7, speculative=False, logprobs=True)
    finally:
        torch.set_num_threads(threads)
    return engine, case, spec, plain


def _checks(engine, case, spec, plain, spec_lp=None, plain_lp=None):
    L = case.length
    return logprob_checks(case, engine.capabilities(), _padded(spec, L), _padded(plain, L),
                          padded_logprobs(spec, L) if spec_lp is None else spec_lp,
                          padded_logprobs(plain, L) if plain_lp is None else plain_lp, 1e-3)


def test_the_builtin_engines_logprobs_are_the_exact_law_on_both_paths(long_call):
    engine, case, spec, plain = long_call
    checks = _checks(engine, case, spec, plain)
    assert [c.name for c in checks] == ["token_logprobs", "plain_token_logprobs"]
    for chk in checks:
        assert chk.passed and chk.method == "exact" and chk.statistic < 1e-6, chk
        assert chk.n == sum(len(r.token_ids) for r in (spec if chk.details["speculative"] else plain)) > 50


def test_one_logprob_off_by_more_than_the_tolerance_fails_and_is_named(long_call):
    engine, case, spec, plain = long_call
    lp = padded_logprobs(spec, case.length)
    C = len(case.row_classes)
    lp[C + 1, 20] += 2 * LOGPROB_TOLERANCE  # request 1 of class 1, output position 20
    checks = _checks(engine, case, spec, plain, spec_lp=lp)
    bad, ok = checks
    assert not bad.passed and bad.pvalue == 0.0 and bad.details["differ"] == 1 and ok.passed
    assert bad.worst[0][0].startswith(f"class {case.class_id(1)} request 1 position 20 token ")
    assert bad.statistic == pytest.approx(2 * LOGPROB_TOLERANCE, rel=1e-3)
    lp[C + 1, 20] -= 1.5 * LOGPROB_TOLERANCE  # within the tolerance: passes
    assert _checks(engine, case, spec, plain, spec_lp=lp)[0].passed


def test_a_missing_logprob_of_an_emitted_token_fails(long_call):
    engine, case, spec, plain = long_call
    lp = padded_logprobs(plain, case.length)
    lp[0, 0] = math.nan
    assert not _checks(engine, case, spec, plain, plain_lp=lp)[1].passed


def test_the_raw_law_is_the_unprocessed_models(long_call):
    engine, case, spec, plain = long_call
    caps = engine.capabilities()
    outputs = _padded(plain, case.length)[0 :: len(case.row_classes)]  # class 0: temperature 0.5, top-k 16
    processed = exact_logprobs(case, 0, caps, outputs)
    raw = exact_logprobs(case, 0, replace(caps, logprobs="raw"), outputs)
    emitted = ~torch.isnan(processed)
    assert bool(emitted.any()) and bool((~torch.isnan(raw) == emitted).all())
    assert float((processed - raw)[emitted].abs().max()) > 0.1  # temperature 0.5 changes every logprob
    # so the engine's processed logprobs fail a check that expects the raw law
    raw_caps = replace(caps, logprobs="raw")
    L = case.length
    chk = logprob_checks(case, raw_caps, _padded(spec, L), _padded(plain, L), padded_logprobs(spec, L),
                         padded_logprobs(plain, L), 1e-3)
    assert not chk[0].passed and not chk[1].passed


def test_a_greedy_class_is_not_compared():
    engine = BuiltinEngine()
    (case,) = e2e_cases(engine, "draft_model", requests_per_class=2)
    rc = replace(case.row_classes[0], params=SamplingParams(temperature=0.0))
    greedy = replace(case, row_classes=(rc,), check_acceptance=None, class_ids=None)
    out = torch.tensor([[3, 4, 5], [3, 4, 5]])
    assert bool(torch.isnan(exact_logprobs(greedy, 0, engine.capabilities(), out)).all())


def test_the_protocol_refuses_missing_or_malformed_logprobs():
    req = GenerationRequest((1, 2), max_tokens=2, logprobs=True)
    good = GenerationResult(token_ids=(3, 4), logprobs=(-1.0, -0.5))
    assert check_generation_results([req], [good], 8) is None
    assert "asked for logprobs, got none" in check_generation_results([req], [replace(good, logprobs=None)], 8)
    assert "1 for 2 tokens" in check_generation_results([req], [replace(good, logprobs=(-1.0,))], 8)
    assert "not floats <= 0" in check_generation_results([req], [replace(good, logprobs=(-1.0, 0.5))], 8)
    assert "not floats <= 0" in check_generation_results([req], [replace(good, logprobs=(-1.0, math.nan))], 8)
    # a request that did not ask: whatever the engine returns is not read
    assert check_generation_results([replace(req, logprobs=False)], [replace(good, logprobs=None)], 8) is None
    assert GenerationRequest.from_dict(req.to_dict()) == req


def test_only_the_first_call_and_its_repeat_ask_for_logprobs():
    asked = []

    class Recording(BuiltinEngine):
        def generate(self, requests, *, speculative):
            asked.append({r.logprobs for r in requests})
            return super().generate(requests, speculative=speculative)

    from specexact.audit.cases.e2e.sampling import run_e2e_case

    engine = Recording()
    (case,) = e2e_cases(engine, "draft_model", requests_per_class=2)
    case = case.restricted([0])  # one class: its exact law is quick
    result = run_e2e_case(case, engine, false_fail_rate=1e-3, num_batches=4)
    # (then the in-mix pair of the seeded requests, which asks for none)
    assert asked == [{True}, {True}] + [{False}] * 6 + [{True}, {True}] + [{False}] * 2
    names = [c.name for c in result.checks]
    assert names.count("token_logprobs") == 1 and names.count("plain_token_logprobs") == 1
