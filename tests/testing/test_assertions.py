"""specexact.testing: the assertions, their messages, the result object, bad input; the
fuzz phase by default, the per-call time limit, a crash's traceback and diagnosis."""

import threading
import time

import pytest
import torch

from specexact.audit.cases.catalog import find_case
from specexact.audit.checks.combined import COMBINED_SHARE
from specexact.audit.cases.dispatch import checks_per_case
from specexact.audit.zoo import resample_from_target
from specexact.audit.zoo.floats import global_rng_draws
from specexact.audit.zoo.logits import stale_penalty_history
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
    result = assert_verifier_exact(verify, cases=["v8-plain"], batches=4, false_fail_rate=alpha * V8_CHECKS,
                                   fuzz=False)
    assert isinstance(result, AuditResult) and result.passed and result.findings == []
    assert result.report.get("fuzz") is None
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
    # The Python line replays the same samples at the same per-check rate: the same p-values
    # as the assertion's own message (AuditResult.message of that audit: no second audit).
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(python, {})
    assert out.getvalue().strip() != ""
    # (the case alone: the fuzz phase's own findings and generated cases are not replayed)
    again = [ln for ln in out.getvalue().splitlines() if ln.startswith("- ")]
    assert again and again == [ln for ln in rest if ln.startswith("- v12-eos-cut / ")]


@pytest.mark.statistical(checks=12)
def test_logits_level_twin_passes_a_correct_adapter_and_fails_a_planted_one(alpha):
    # The level and the case are the subject, not the fuzz phase: no fuzz phase in either audit
    # (3 s of the good one's 5 s of CPU). The built-in adapter passing the logits-level fuzz
    # phase stays in the default run: the plugin's example, test_logits_adapter_is_exact
    # (tests/testing/test_plugin.py, fuzz on by default).
    good = assert_logits_verifier_exact(LogitsLevelVerifier(), cases=["v6-trunc-penalties"], batches=4,
                                        false_fail_rate=alpha * 12, fuzz=False)
    assert good.passed and good.report["settings"]["processing"]["level"] == "logits"
    # the planted bug is in the case's processing
    bad = audit_logits_verifier(stale_penalty_history, cases=["v6-trunc-penalties"], batches=8, threads=1, fuzz=False)
    assert not bad.passed
    with pytest.raises(AssertionError, match="v6-trunc-penalties / "):
        assert_logits_verifier_exact(stale_penalty_history, cases=["v6-trunc-penalties"], batches=8, threads=1,
                                     fuzz=False)


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
    assert sampler_name_of(stale_penalty_history) == "specexact.audit.zoo.logits:stale_penalty_history"
    assert sampler_name_of(lambda *a: None).endswith("instance>")


@pytest.mark.statistical(checks=V8_CHECKS)
def test_threads_are_restored_and_recorded(alpha):
    # The thread choice is the subject, not the fuzz phase (its own tests: test_the_fuzz_phase_*
    # below): fuzz=False, the audit's V8_CHECKS checks at the per-check rate alpha each.
    torch.set_num_threads(1)
    result = audit_verifier(verify, cases=["v8-plain"], batches=2, threads=2, fuzz=False,
                            false_fail_rate=alpha * V8_CHECKS)
    assert torch.get_num_threads() == 1
    assert result.report["settings"]["threads"] == {"threads": 2, "chosen_by": "set", "seconds": {},
                                                    "cases_timed": 0}
    assert result.report["environment"]["torch_num_threads"] == 2


@pytest.mark.statistical(checks=V8_CHECKS)
def test_the_fuzz_phase_runs_by_default_and_fails_a_verifier_drawing_from_the_global_rng(alpha):
    # global_rng_draws is exact in law (the statistical cases pass it) but ignores its
    # generator: only the fuzz phase's exact rules see it, and it now runs by default.
    alone = assert_verifier_exact(global_rng_draws, cases=["v8-plain"], batches=2, threads=1, fuzz=False,
                                  false_fail_rate=alpha * V8_CHECKS)
    assert alone.passed and alone.report.get("fuzz") is None
    # fuzz left at its default (on); 3 examples per family, seed 0, find both exact rules'
    # findings (1 finds none; the ci profile's count, 2.4x the CPU, finds the same two)
    with pytest.raises(AssertionError) as exc:
        assert_verifier_exact(global_rng_draws, cases=["v8-plain"], batches=2, threads=1, fuzz_examples=3)
    message = str(exc.value)
    assert message.startswith("sampler specexact.audit.zoo.floats:global_rng_draws is not exact: ")
    assert "defect on valid input" in message and "(fuzz, exact rule)" in message
    assert "verify_calls / same_generator_same_output" in message or "verify_calls / uses_generator" in message


def test_the_python_replay_of_a_case_runs_it_without_the_fuzz_phase():
    # the fuzz phase adds generated cases, hence checks: replaying one case with it would
    # change the per-check threshold (the CLI replay command says --no-fuzz too)
    from specexact.testing.assertions import _python_replay

    report = {"sampler": {"name": "m:f"}, "settings": {"seed": 3}, "cases": [
        {"name": "v8-plain", "config": {"tags": []}}, {"name": "fuzz-rows-1", "config": {"tags": ["fuzz"]}}]}
    report["settings"]["false_fail_rate"] = 1e-6
    repro = {"num_batches": 4, "false_fail_rate": 2e-7, "per_check_false_fail_rate": 1e-8, "threads": 1}
    one = _python_replay(report, {"case": "v8-plain", "reproduction": repro})
    assert "cases=['v8-plain']" in one and "false_fail_rate=2e-07" in one and one.endswith("fuzz=False).message)")
    generated = _python_replay(report, {"case": "fuzz-rows-1", "reproduction": repro})
    assert "cases=['v8-plain']" in generated and "false_fail_rate=1e-06" in generated and "fuzz=False" not in generated


@pytest.mark.statistical(checks=0)
def test_a_hanging_verifier_fails_within_seconds_with_a_timeout_defect():
    release = threading.Event()
    calls = []

    def sleeps_forever(ids, draft_probs, target_probs, generator=None):
        calls.append(1)
        release.wait()  # a hang (released when the test ends: the thread does not outlive it)

    start = time.perf_counter()
    try:
        with pytest.raises(AssertionError) as exc:
            # one fuzz example per family: the fuzz phase's first call is the hang; the rest of
            # its time is shrinking findings that never call the verifier again (3x the CPU at
            # the ci profile's count, the same message)
            assert_verifier_exact(sleeps_forever, cases=["v8-plain"], batches=2, threads=1, call_timeout_s=0.5,
                                  fuzz_examples=1)
    finally:
        release.set()
    # within seconds, whatever the machine's load (60 s of wall time failed at load 12-20): the
    # hang costs one call limit, never more, as no call is made after a hang; the wall-clock
    # bound is only a backstop against a limit that does not hold (then the call never ends)
    assert len(calls) == 1, len(calls)
    assert time.perf_counter() - start < 600
    message = str(exc.value)
    assert "- v8-plain / defect (timeout)" in message and "no result within 0.5 s" in message
    assert "no_hang" in message  # the fuzz phase calls it a hang too, not a crash


def _engine_kernel(ids):
    raise RuntimeError("boom in the engine kernel")


def crashes_in_a_helper(ids, draft_probs, target_probs, generator=None):
    return _engine_kernel(ids)


@pytest.mark.statistical(checks=0)
def test_a_crash_shows_the_verifiers_traceback_once_and_the_diagnosis():
    with pytest.raises(AssertionError) as exc:
        assert_verifier_exact(crashes_in_a_helper, cases=["v8-plain", "v12-eos-cut"], batches=2, threads=1,
                              fuzz=False)
    message = str(exc.value)
    assert "- v8-plain / defect (crash)" in message and "- v12-eos-cut / defect (crash)" in message
    assert message.count("Traceback (most recent call last):") == 1  # the same one is not repeated
    assert "in crashes_in_a_helper" in message and "in _engine_kernel" in message
    assert "RuntimeError: boom in the engine kernel" in message and "(same traceback as v8-plain / defect above)" \
        in message
    diagnosis = message[message.index("\ndiagnosis: "):]
    assert "✗ protocol (crash, hang, output): FAULTY" in diagnosis
