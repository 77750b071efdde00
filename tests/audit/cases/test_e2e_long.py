"""The long end-to-end case (audit/cases/e2e/catalog.py long_case): 48-token outputs, mixed
prompt lengths in one call, γ = 4, every emitted token checked by position band
(audit/cases/e2e/token_checks.py)."""

from dataclasses import replace

import pytest
import torch

from specexact.audit import run_audit
from specexact.audit.cases.dispatch import checks_per_case
from specexact.audit.cases.e2e.case import E2ECase
from specexact.audit.cases.e2e.catalog import LONG_BANDS, e2e_cases, long_case
from specexact.audit.cases.e2e.laws import case_models
from specexact.audit.cases.e2e.token_checks import band_checks, band_name
from specexact.decoders.engines.builtin import BuiltinEngine
from specexact.decoders.tiny_models import conditional_laws

CASE = long_case(BuiltinEngine(), "draft_model", requests_per_class=8)
BANDS = [band_name(p, b) for p in ("token_law", "plain_token_law") for b in LONG_BANDS]
CHECKS = checks_per_case(CASE)


def test_the_long_case_has_long_outputs_mixed_prompts_gamma_4_and_eos_inside_a_window():
    assert CASE.name == "e2e-llama-v64-draft_model-long-g4" and CASE.num_speculative_tokens == 4
    assert CASE.position_bands == ((0, 8), (8, 16), (16, 32), (32, 48))
    assert {rc.max_tokens for rc in CASE.row_classes} == {48}
    assert sorted(len(rc.prompt) for rc in CASE.row_classes) == [1, 7, 19, 41]  # past two 16-token blocks
    set_params = [{k for k, v in vars(rc.params).items() if v not in (None, 0, 0.0, 1.0)} for rc in CASE.row_classes]
    assert all(len(s) >= 2 for s in set_params), set_params  # several parameters in one request
    used = set().union(*set_params)
    assert {"temperature", "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty",
            "frequency_penalty"} <= used, used
    (eos,) = [rc for rc in CASE.row_classes if rc.eos]
    assert eos.min_tokens == 6 and eos.min_tokens % (CASE.num_speculative_tokens + 1)  # not at a round's edge
    # + the two logprob checks and the two seed checks
    assert CHECKS == 2 * 4 + 1 + 2 + 2 and CASE.check_acceptance == (False,) * 4
    # not among the default cases of the API; the CLI asks for it (long_case_too)
    assert not any(c.position_bands for c in e2e_cases(BuiltinEngine()))
    cases = e2e_cases(BuiltinEngine(), long_case_too=True)
    assert [c.name for c in cases if c.position_bands] == [CASE.name]
    assert [c.requests_per_class for c in cases if c.position_bands] == [8]


def test_band_layout_errors_name_the_field():
    with pytest.raises(ValueError, match="position_bands must be ascending"):
        replace(CASE, position_bands=((8, 16), (0, 8)))
    with pytest.raises(ValueError, match="position_bands must be ascending"):
        replace(CASE, position_bands=((4, 4),))
    assert isinstance(CASE, E2ECase)


def _likeliest(c: int, length: int = 48) -> torch.Tensor:
    """Class ``c``'s output of the likeliest non-EOS token at every position: ``[length]``,
    every token of positive probability."""
    rc = CASE.row_classes[c]
    target, _ = case_models(CASE)
    seq = torch.zeros((1, length), dtype=torch.int64)
    for j in range(length):
        probs = conditional_laws(target, rc.prompt, seq[:, : j + 1], rc.params, min_tokens=rc.min_tokens,
                                 eos_token_id=target.eos_token_id if rc.eos else None).probs[0, j].clone()
        probs[target.eos_token_id] = 0.0
        seq[0, j] = int(probs.argmax())
    return seq[0]


def test_a_token_of_probability_zero_fails_its_band_exactly():
    # class 0 truncates to top-k 16: an output whose token at position 10 is the least likely
    # one under its law is outside the support, whatever the PIT of the others
    c = 0
    rc = CASE.row_classes[c]
    target, _ = case_models(CASE)
    outputs = torch.stack([_likeliest(k) for k in range(len(CASE.row_classes))])  # [C, 48], all in the support
    laws = conditional_laws(target, rc.prompt, outputs[c : c + 1], rc.params)
    assert bool((laws.token_probs() > 0).all())
    outputs[c, 10] = int(laws.probs[0, 10].argmin())
    assert float(conditional_laws(target, rc.prompt, outputs[c : c + 1], rc.params).token_probs()[0, 10]) == 0.0
    checks = {chk.name: chk for chk in band_checks(CASE, BuiltinEngine().capabilities(), outputs, outputs, seed=3,
                                                    alpha=1e-6, min_expected=5.0)}
    assert list(checks) == BANDS
    bad = checks["token_law[positions 8-15]"]
    assert not bad.passed and bad.pvalue == 0.0 and bad.method == "exact"
    assert bad.details["support_failures"] == 1 and "class 0, request 0, position 10" in bad.details["message"]
    assert checks["plain_token_law[positions 8-15]"].details["support_failures"] == 1
    assert "support_failures" not in checks["token_law[positions 0-7]"].details


def test_the_pit_uniforms_come_from_the_case_seed_not_the_engine():
    outputs = torch.full((len(CASE.row_classes), 48), 9, dtype=torch.int64)
    caps = BuiltinEngine().capabilities()
    a = band_checks(CASE, caps, outputs, outputs, seed=11, alpha=1e-6, min_expected=5.0)
    b = band_checks(CASE, caps, outputs, outputs, seed=11, alpha=1e-6, min_expected=5.0)
    c = band_checks(CASE, caps, outputs, outputs, seed=12, alpha=1e-6, min_expected=5.0)
    assert [x.details["cell_counts"] for x in a] == [x.details["cell_counts"] for x in b]
    assert [x.details["cell_counts"] for x in a] != [x.details["cell_counts"] for x in c]


@pytest.mark.statistical(checks=CHECKS)
def test_the_builtin_engine_passes_the_long_case_with_every_band_reported(alpha):
    report = run_audit(BuiltinEngine(), cases=[CASE], num_batches=2, budget_s=None, false_fail_rate=alpha * CHECKS,
                       sampler_name="engine:builtin", fuzz=False, threads=1)
    assert report["verdict"] == "pass", report["findings"]
    (case,) = report["cases"]
    assert case["num_sequences"] == 2 * CASE.batch_size and case["config"]["position_bands"] == [list(b) for b in
                                                                                                 LONG_BANDS]
    checks = {c["name"]: c for c in case["checks"]}
    assert sorted(checks) == sorted(["reproducible", "token_logprobs", "plain_token_logprobs", *BANDS,
                                     "reproducible_in_mix", "independent_requests"])
    assert len(case["checks"]) == CHECKS
    n = 2 * CASE.batch_size
    for band, (a, b) in zip(BANDS, [*LONG_BANDS, *LONG_BANDS]):
        chk = checks[band]
        # every band generated: its slots fixed in advance, most of them emitted tokens (EOS ends some)
        assert chk["n"] == n * (b - a) and chk["details"]["num_events"] > 0.8 * chk["n"], chk
        assert 0 < chk["detectable_tv"] < 0.3 and chk["false_fail_rate"] < alpha, chk
    assert report["settings"]["num_checks"] == CHECKS
