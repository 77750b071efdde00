"""End-to-end assertions and the specexact_engine_check fixture."""

import pytest

from specexact.audit.cases.e2e.catalog import e2e_cases
from specexact.audit.cases.dispatch import checks_per_case
from specexact.audit.zoo.e2e import SeedIgnored
from specexact.decoders import verify
from specexact.decoders.engines.builtin import BuiltinEngine
from specexact.testing import EngineDidNotStart, assert_engine_exact, audit_engine

pytest_plugins = ["pytester"]

CHECKS = checks_per_case(e2e_cases(BuiltinEngine(), "draft_model")[0])


@pytest.mark.statistical(checks=CHECKS)
def test_a_correct_engine_passes_with_its_numbers(alpha):
    result = assert_engine_exact(BuiltinEngine(), method="draft_model", requests_per_class=64,
                                 false_fail_rate=alpha * CHECKS)
    assert result.passed and result.tiers["defect"] == 0
    assert result.report["cases"][0]["num_sequences"] == 2 * 8 * 64


@pytest.mark.statistical(checks=0)  # a planted fault risks only a false pass
def test_an_engine_ignoring_seeds_raises_with_the_defect(alpha):
    with pytest.raises(AssertionError, match="reproducible"):
        assert_engine_exact(SeedIgnored(), method="draft_model", requests_per_class=32, false_fail_rate=alpha)


def test_what_is_not_an_engine_is_refused():
    with pytest.raises(TypeError, match="EndToEndEngine"):
        audit_engine(verify)
    with pytest.raises(ValueError, match="not both"):
        audit_engine(BuiltinEngine(), batches=2, budget_s=5.0)


class NeverStarts(BuiltinEngine):
    name = "never_starts"

    def load(self, *args, **kwargs):
        raise AssertionError("Torch not compiled with CUDA enabled")  # LMDeploy's first load on a CPU


def test_an_engine_that_never_starts_here_is_not_audited_not_failed():
    """Its first load raised: no verdict on the engine (the CLI exits 2), not an AssertionError."""
    with pytest.raises(EngineDidNotStart, match=r"never_starts did not start here.*AssertionError: Torch not compiled"
                       ) as info:
        assert_engine_exact(NeverStarts(), method="draft_model", requests_per_class=8)
    (case,) = info.value.report["cases"]
    assert case["engine_not_started"] and case["num_sequences"] == 0


def test_the_fixture_follows_the_session_budget_and_fails_a_planted_fault(pytester):
    pytester.makepyfile(
        """
        import pytest
        from specexact.audit.zoo.e2e import SeedIgnored

        def test_seeds(specexact_engine_check):
            specexact_engine_check(SeedIgnored(), method="draft_model", requests_per_class=16)

        def test_rate(specexact_engine_check):
            with pytest.raises(TypeError, match="session budget"):
                specexact_engine_check(SeedIgnored(), false_fail_rate=0.1)
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:xdist", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*reproducible*"])


class _HangsOnSpeculativeGenerate(BuiltinEngine):
    """A correct engine whose speculative generate call never returns (well: after 20 s)."""

    name = "hangs"

    def generate(self, requests, *, speculative):
        if speculative:
            import time

            time.sleep(20)
        return super().generate(requests, speculative=speculative)


def test_a_hanging_generate_call_is_a_timeout_defect_and_the_audit_ends():
    import time

    from specexact.audit.sampler.call_timeout import TimedEngine, with_call_timeout
    from specexact.decoders.engines import is_engine

    engine = _HangsOnSpeculativeGenerate()
    timed = with_call_timeout(engine, 1.0)
    assert isinstance(timed, TimedEngine) and is_engine(timed) and timed.name == "hangs"
    start = time.perf_counter()
    result = audit_engine(engine, method="draft_model", requests_per_class=8, call_timeout_s=1.0)
    # the pilot's or the case's first speculative call hangs: 1 s each, not 20
    assert time.perf_counter() - start < 15
    assert not result.passed and result.tiers["defect"] >= 1
    assert "timeout" in result.message or "no result within" in result.message, result.message
    with pytest.raises(ValueError, match="call timeout"):
        audit_engine(BuiltinEngine(), call_timeout_s=-1.0)


@pytest.mark.statistical(checks=0)  # a planted fault risks only a false pass
def test_the_replays_of_an_engine_audited_from_python_name_its_class_and_rerun_its_case(alpha):
    import contextlib
    import io

    # one audit for both replays (the command and the Python line)
    result = audit_engine(SeedIgnored(), method="draft_model", requests_per_class=16, batches=2,
                          false_fail_rate=alpha)
    commands = {f["reproduction"]["command"] for f in result.report["findings"]}
    assert commands and all(c.startswith("specexact audit --engine specexact.audit.zoo.e2e:SeedIgnored ")
                            for c in commands), commands
    (line,) = {ln.strip()[len("python: "):] for ln in result.message.splitlines()
               if ln.strip().startswith("python: ")}
    assert line.startswith("from specexact.testing import audit_engine; ") and "audit_verifier" not in line, line
    assert "resolve_engine('specexact.audit.zoo.e2e:SeedIgnored')" in line and "method='draft_model'" in line
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(line, "replay", "exec"), {})
    assert "reproducible" in out.getvalue()  # the same finding again
