"""specexact.testing: the assertions, their messages, the result object, bad input."""

import pytest
import torch

from specexact.audit.catalog import find_case
from specexact.audit.combined import COMBINED_SHARE
from specexact.audit.runner import checks_per_case
from specexact.audit.zoo import resample_from_target
from specexact.audit.zoo_logits import stale_penalty_history
from specexact.decoders import verify
from specexact.decoders.adapters.builtin_logits import LogitsLevelVerifier
from specexact.testing import (
    AuditResult,
    assert_logits_verifier_exact,
    assert_verifier_exact,
    audit_logits_verifier,
    audit_verifier,
    case_names,
    sampler_name_of,
)

V8_CHECKS = checks_per_case(find_case("v8-plain", quick=True))


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.statistical(checks=V8_CHECKS)
def test_a_correct_verifier_passes_and_the_result_has_the_numbers(alpha):
    result = assert_verifier_exact(verify, cases=["v8-plain"], batches=4, false_fail_rate=alpha * V8_CHECKS)
    assert isinstance(result, AuditResult) and result.passed and result.findings == []
    assert len(result.checks) == V8_CHECKS and result.num_sequences == 4 * 512
    assert result.false_fail_rate == pytest.approx(alpha * V8_CHECKS)
    assert result.per_check_false_fail_rate == pytest.approx((1 - COMBINED_SHARE) * alpha)
    assert 0 < result.worst_detectable_tv <= 1
    assert result.report["settings"]["case_set"] == "quick"
    assert result.detectable_tv("v8-plain", "sequence_law[class 0]") <= result.worst_detectable_tv
    assert "passed" in result.message


@pytest.mark.statistical(checks=0)
def test_a_planted_bug_raises_with_the_findings_and_a_replay_that_reproduces_them():
    with pytest.raises(AssertionError) as exc:
        assert_verifier_exact(resample_from_target, cases=["v12-eos-cut"], batches=4, threads=1)
    message = str(exc.value)
    first, *rest = message.splitlines()
    assert first.startswith("sampler specexact.audit.zoo:resample_from_target is not exact: ")
    assert "1 torch thread(s)" in first
    finding = next(line for line in rest if line.startswith("- v12-eos-cut / sequence_law"))
    assert "(inexactness): p-value " in finding and "detectable TV 0." in finding
    replay = next(line for line in rest if line.strip().startswith("replay: "))
    assert ("specexact audit --sampler specexact.audit.zoo:resample_from_target --seed 0 --case v12-eos-cut "
            "--batches 4") in replay and "--quick" in replay and "--threads 1" in replay
    python = next(line for line in rest if line.strip().startswith("python: ")).split("python: ", 1)[1]
    # The Python line replays the same samples at the same per-check rate: the same p-values.
    original = audit_verifier(resample_from_target, cases=["v12-eos-cut"], batches=4, threads=1)
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(python, {})
    assert out.getvalue().strip() != ""
    again = [ln for ln in out.getvalue().splitlines() if ln.startswith("- ")]
    assert again == [ln for ln in original.message.splitlines() if ln.startswith("- ")]


@pytest.mark.statistical(checks=12)
def test_logits_level_twin_passes_a_correct_adapter_and_fails_a_planted_one(alpha):
    good = assert_logits_verifier_exact(LogitsLevelVerifier(), cases=["v6-trunc-penalties"], batches=4,
                                        false_fail_rate=alpha * 12)
    assert good.passed and good.report["settings"]["processing"]["level"] == "logits"
    bad = audit_logits_verifier(stale_penalty_history, cases=["v6-trunc-penalties"], batches=8, threads=1)
    assert not bad.passed
    with pytest.raises(AssertionError, match="v6-trunc-penalties / "):
        assert_logits_verifier_exact(stale_penalty_history, cases=["v6-trunc-penalties"], batches=8, threads=1)


def test_wrong_level_wrong_arguments_are_named():
    with pytest.raises(TypeError, match="audit_logits_verifier"):
        audit_verifier(LogitsLevelVerifier(), cases=["v8-plain"])
    with pytest.raises(TypeError, match="logits-level adapter"):
        audit_logits_verifier(verify, cases=["v8-plain"])
    with pytest.raises(ValueError, match="batches or budget_s"):
        audit_verifier(verify, cases=["v8-plain"], batches=2, budget_s=5)
    with pytest.raises(ValueError, match="unknown case name"):
        audit_verifier(verify, cases=["no-such-case"])
    with pytest.raises(ValueError, match="cases must be one of"):
        audit_verifier(verify, cases="everything")
    with pytest.raises(ValueError, match="false_fail_rate"):
        audit_verifier(verify, cases=["v8-plain"], false_fail_rate=2.0)
    with pytest.raises(ValueError, match="threads"):
        audit_verifier(verify, cases=["v8-plain"], threads=0)


def test_case_names_and_sampler_names():
    assert case_names("quick")[0] == "v8-plain" and "v4096-zipf" in case_names("default")
    assert "v32000-verify" in case_names("all") and "v32000-verify" not in case_names("default")
    assert sampler_name_of(verify) == "specexact.decoders.rejection_sampling:verify"
    assert sampler_name_of(stale_penalty_history) == "specexact.audit.zoo_logits:stale_penalty_history"
    assert sampler_name_of(lambda *a: None).endswith("instance>")


@pytest.mark.statistical(checks=V8_CHECKS)
def test_threads_are_restored_and_recorded(alpha):
    torch.set_num_threads(1)
    result = audit_verifier(verify, cases=["v8-plain"], batches=2, threads=2, false_fail_rate=alpha * V8_CHECKS)
    assert torch.get_num_threads() == 1
    assert result.report["settings"]["threads"] == {"threads": 2, "chosen_by": "set", "seconds": {},
                                                    "cases_timed": 0}
    assert result.report["environment"]["torch_num_threads"] == 2
