"""The pytest plugin, run as an engine would run it (``pytester``): the documented example
passes a correct sampler and fails a planted one with the finding in the message; the
session's false-fail budget is split identically under ``-n 1`` and ``-n 2``.

The example holds three kinds of test: one probability-level test per quick case, the
logits-level one and the numbers one. In CI each kind runs once (the v8-plain case, or
v12-eos-cut for the planted sampler: ``-k`` selects them, about 12 s a run instead of 33 s);
the nightly profile runs the whole file as pasted (``@pytest.mark.nightly``), as does
``pytest -m venv`` in a fresh virtualenv (``tests/testing/test_fresh_venv.py``).
"""

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from specexact.testing import case_names

pytest_plugins = ["pytester"]

EXAMPLE = Path(__file__).parents[2] / "examples" / "test_engine_exactness.py"
ENGINE_LINE = "from specexact.decoders import verify as engine_verify  # <- your engine"
PLANTED_LINE = "from specexact.audit.zoo import resample_from_target as engine_verify"
#: Audits in the example file: one per quick case, the logits-level one and the numbers one.
EXAMPLE_AUDITS = len(case_names("quick")) + 2


def example_text(planted: bool = False) -> str:
    text = EXAMPLE.read_text()
    assert ENGINE_LINE in text, "the example's marked line moved: update this test"
    if planted:
        line = next(ln for ln in text.splitlines() if ln.startswith(ENGINE_LINE))
        text = text.replace(line, PLANTED_LINE)
    return text


def test_this_suite_runs_with_the_plugin_beside_its_conftest(request):
    """pytest loads the entry-point plugin for specexact's own run too: both coexist."""
    config = request.config
    assert config.pluginmanager.has_plugin("specexact")
    markers = "\n".join(config.getini("markers"))
    assert "statistical(checks)" in markers and "specexact(cases=" in markers
    assert config.getoption("specexact_false_fail_rate") is None  # our suite never sets it


#: ``-k`` expressions selecting one test of each kind in the example (see the module docstring).
ONE_OF_EACH_KIND = "plain or logits_adapter or power"
#: With the planted line the logits-level test is unchanged (it audits the built-in adapter,
#: the file's other marked line): it is the same run as in the correct sampler's test above, so
#: the planted run leaves it out (the whole file, it included, runs nightly).
ONE_OF_EACH_KIND_PLANTED = "eos or power"


def run_example(pytester, planted: bool, *args: str):
    pytester.makepyfile(test_engine_exactness=example_text(planted=planted))
    return pytester.runpytest_inprocess("-p", "no:xdist", "-p", "no:cacheprovider", *args)


def check_passes(result, alpha, n):
    result.assert_outcomes(passed=n, deselected=EXAMPLE_AUDITS - n)
    result.stdout.fnmatch_lines([f"specexact: session false-fail rate {alpha:g} split over {n} audit(s): *",
                                 f"specexact: {n} test(s) audited at session false-fail rate {alpha:g} split over {n} "
                                 "audit(s): *"])


@pytest.mark.statistical(checks=1)
def test_each_kind_of_test_in_the_documented_example_passes_a_correct_sampler(pytester, alpha):
    result = run_example(pytester, False, "-v", "-k", ONE_OF_EACH_KIND, f"--specexact-false-fail-rate={alpha}")
    check_passes(result, alpha, 3)
    out = result.stdout.str()
    for name in ("test_verifier_is_exact[v8-plain]", "test_logits_adapter_is_exact",
                 "test_verifier_power_at_this_sample_size"):
        assert f"::{name} PASSED" in out, out


@pytest.mark.nightly
@pytest.mark.statistical(checks=1)
def test_documented_example_passes_a_correct_sampler(pytester, alpha):
    check_passes(run_example(pytester, False, f"--specexact-false-fail-rate={alpha}"), alpha, EXAMPLE_AUDITS)


@pytest.mark.statistical(checks=0)
def test_each_kind_of_test_in_the_documented_example_fails_a_planted_sampler_with_the_finding(pytester):
    # Each kind the planted line reaches: a quick case's test and the numbers test. The
    # logits-level test audits the built-in adapter, not the planted line: it passes, as in
    # test_each_kind_of_test_in_the_documented_example_passes_a_correct_sampler (ONE_OF_EACH_KIND_PLANTED).
    # The finding is the quick case's law check: the fixture's fuzz phase is left out by the
    # ini option (the numbers test, a plain call, still runs its own; the fixture's fuzz phase
    # by default: the correct sampler's run above).
    result = run_example(pytester, True, "-v", "-k", ONE_OF_EACH_KIND_PLANTED, "-o", "specexact_fuzz=false")
    result.assert_outcomes(failed=2, deselected=EXAMPLE_AUDITS - 2)
    out = result.stdout.str()
    assert "::test_verifier_power_at_this_sample_size FAILED" in out and "test_logits_adapter_is_exact" not in out
    check_planted_failures(result)


@pytest.mark.nightly
@pytest.mark.statistical(checks=0)
def test_documented_example_fails_a_planted_sampler_with_the_finding(pytester):
    result = run_example(pytester, True)
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) >= 2, result.stdout.str()
    check_planted_failures(result)


def check_planted_failures(result):
    out = result.stdout.str()
    assert "test_verifier_is_exact[v12-eos-cut] FAILED" in out or "FAILED test_engine_exactness.py::" \
        "test_verifier_is_exact[v12-eos-cut]" in out
    result.stdout.fnmatch_lines([
        "E * AssertionError: sampler specexact.audit.zoo:resample_from_target is not exact: * finding(s)*",
        "E * - v12-eos-cut / sequence_law[[]class *[]] (inexactness): p-value *, detectable TV 0.*",
        "E *   replay: specexact audit --sampler specexact.audit.zoo:resample_from_target --seed 0 --case "
        "v12-eos-cut --batches 8 --false-fail-rate * --quick --device cpu --threads 1",
    ])
    # pytest shows the test's own line, not the plugin's internals
    assert "plugin.py" not in out and "assertions.py:" not in out


SPLIT = """
import pytest

@pytest.mark.parametrize("k", range(3))
def test_fixture_only(k, specexact_false_fail_rate):
    assert specexact_false_fail_rate > 0

@pytest.mark.specexact(audits=2)
def test_two_audits(specexact_false_fail_rate):
    pass

@pytest.mark.specexact
def test_marked_without_fixture():
    pass

def test_not_an_audit():
    pass
"""


def rates(xml: Path) -> dict:
    out = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        if "specexact_false_fail_rate" in props:
            out[case.get("name")] = (float(props["specexact_false_fail_rate"]),
                                     int(props["specexact_audits_in_session"]))
    return out


def test_budget_split_is_the_same_without_xdist_and_under_n1_and_n2(pytester):
    pytester.makepyfile(test_split=SPLIT)
    got = {}
    for name, args in {"no-xdist": ["-p", "no:xdist"], "n1": ["-n", "1"], "n2": ["-n", "2"]}.items():
        xml = pytester.path / f"{name}.xml"
        result = pytester.runpytest_inprocess(*args, "-p", "no:cacheprovider", f"--junitxml={xml}",
                                              "--specexact-false-fail-rate=1e-3")
        result.assert_outcomes(passed=6)
        got[name] = rates(xml)
    # 3 fixture-only tests + 2 shares of test_two_audits + 1 marked test = 6 shares
    expected = {f"test_fixture_only[{k}]": (1e-3 / 6, 6) for k in range(3)}
    expected["test_two_audits"] = (1e-3 / 6, 6)
    assert got["no-xdist"] == expected
    assert got["n1"] == got["n2"] == got["no-xdist"]
    # Deselection changes the split (the collected audits), the same way on every worker.
    xml = pytester.path / "k.xml"
    pytester.runpytest_inprocess("-n", "2", "-p", "no:cacheprovider", f"--junitxml={xml}", "-k", "fixture_only",
                                 "--specexact-false-fail-rate=1e-3").assert_outcomes(passed=3)
    assert set(rates(xml).values()) == {(1e-3 / 3, 3)}


def test_marker_misuse_is_a_usage_error(pytester):
    pytester.makepyfile(test_bad="""
import pytest

@pytest.mark.specexact(audits=0)
def test_zero(specexact_check):
    pass
""")
    result = pytester.runpytest_inprocess("-p", "no:xdist", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*audits=...) must be an integer >= 1, got 0*"])
    pytester.makepyfile(test_bad="""
import pytest

@pytest.mark.specexact(batch=4)
def test_typo(specexact_check):
    pass
""")
    result = pytester.runpytest_inprocess("-p", "no:xdist", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown @pytest.mark.specexact argument(s) *'batch'*; known: cases, batches*"])
    result = pytester.runpytest_inprocess("-p", "no:xdist", "-p", "no:cacheprovider",
                                          "--specexact-false-fail-rate=2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


@pytest.mark.statistical(checks=1)
def test_more_audits_than_declared_is_refused(pytester, alpha):
    # the declared count is the subject, not the fuzz phase: fuzz=False (3 s of the audit's 4)
    pytester.makepyfile(test_twice="""
import pytest
from specexact.decoders import verify

@pytest.mark.specexact(batches=2, cases=["v8-plain"], fuzz=False)
def test_twice(specexact_check):
    specexact_check(verify)
    specexact_check(verify)
""")
    result = pytester.runpytest_inprocess("-p", "no:xdist", "-p", "no:cacheprovider",
                                          f"--specexact-false-fail-rate={alpha}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*runs more audits than it declared (1): mark it @pytest.mark.specexact(audits=2)*"])


def test_hypothesis_profiles_are_registered_by_the_plugin(pytester):
    from hypothesis import settings

    before = settings._current_profile
    pytester.makepyfile(test_profiles="""
from hypothesis import given, settings, strategies as st

def test_registered():
    assert settings.get_profile("ci").derandomize is True
    assert settings.get_profile("ci").database is None and settings.get_profile("ci").deadline is None
    assert settings.get_profile("nightly").max_examples == 2000

def test_loaded():
    assert settings().derandomize is True and settings().max_examples == 30
""")
    try:
        result = pytester.runpytest_inprocess("-p", "no:xdist", "-p", "no:cacheprovider", "--hypothesis-profile=ci")
    finally:
        settings.load_profile(before)
    result.assert_outcomes(passed=2)


#: Checks of one audit of TIERS_TESTS (v4-greedy-mix and the fuzz phase's generated cases).
TIERS_CHECKS = 45

TIERS_TESTS = """
import pytest
from specexact.audit.zoo import no_input_validation, residual_absolute

KW = dict(cases=["v4-greedy-mix"], batches=2, fuzz=True, fuzz_examples=5)

def test_hardening_is_listed_not_failing(specexact_check):
    result = specexact_check(no_input_validation, **KW)
    assert result.passed and result.tiers["hardening"] >= 1 and not result.failing_findings
    assert result.report["settings"]["num_checks"] == %d
    assert "hardening" in result.message and "does not fail the audit" in result.message

@pytest.mark.specexact(strict_inputs=True)
def test_strict_inputs_marker_fails_hardening(specexact_check):
    specexact_check(no_input_validation, **KW)

def test_strict_inputs_call_fails_hardening(specexact_check):
    specexact_check(no_input_validation, strict_inputs=True, **KW)

def test_inexact_fails_without_strict_inputs(specexact_check):
    specexact_check(residual_absolute, **{**KW, "fuzz": False})  # found by the case's law checks
""" % TIERS_CHECKS


@pytest.mark.statistical(checks=TIERS_CHECKS)
def test_the_fixture_fails_on_the_failing_tiers_and_on_hardening_only_with_strict_inputs(pytester, alpha):
    """Four audits of the same samples share a session rate of ``alpha * TIERS_CHECKS``: the
    passing one may fail falsely at most at that rate."""
    pytester.makepyfile(test_tiers=TIERS_TESTS)
    result = pytester.runpytest_inprocess("-p", "no:xdist", "-p", "no:cacheprovider",
                                          f"--specexact-false-fail-rate={alpha * TIERS_CHECKS}")
    result.assert_outcomes(passed=1, failed=3)
    out = result.stdout.str()
    assert "test_hardening_is_listed_not_failing PASSED" in out or "1 passed" in out
    result.stdout.fnmatch_lines([
        "E * AssertionError: sampler specexact.audit.zoo:no_input_validation is not exact: * finding(s) of a "
        "failing tier (hardening *)",
        "E *hardening (*): fails the audit",
        "E *- fuzz / invalid_inputs / refuses_invalid_input (fuzz, exact rule) — *",
    ])
    result.stdout.fnmatch_lines(["E * AssertionError: sampler specexact.audit.zoo:residual_absolute is not exact: *"
                                 "(inexact *"])


@pytest.mark.statistical(checks=0)
def test_the_ini_option_makes_hardening_fail(pytester):
    pytester.makeini("[pytest]\nspecexact_strict_inputs = true\n")
    pytester.makepyfile(test_tiers=TIERS_TESTS.split("@pytest.mark.specexact(strict_inputs=True)")[0])
    result = pytester.runpytest_inprocess("-p", "no:xdist", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*AssertionError: sampler specexact.audit.zoo:no_input_validation is not exact: *"])


HANGS = """
import threading
import pytest

release = threading.Event()

def sleeps_forever(ids, draft_probs, target_probs, generator=None):
    release.wait()

@pytest.mark.specexact(batches=2, fuzz=False)
def test_hangs(specexact_check):
    try:
        specexact_check(sleeps_forever, cases=["v8-plain"])
    finally:
        release.set()
"""


@pytest.mark.statistical(checks=0)
def test_the_plugins_call_timeout_fails_a_hanging_verifier_in_seconds(pytester):
    import time

    pytester.makepyfile(test_hangs=HANGS)
    start = time.perf_counter()
    result = pytester.runpytest_inprocess("-p", "no:xdist", "-p", "no:cacheprovider", "--specexact-call-timeout=0.5")
    assert time.perf_counter() - start < 60
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["E * - v8-plain / defect (timeout)*no result within 0.5 s*"])


def test_the_call_timeout_option_is_checked(pytester):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest_inprocess("-p", "no:xdist", "-p", "no:cacheprovider", "--specexact-call-timeout=-1")
    assert result.ret != 0
    assert "--specexact-call-timeout must be >= 0 seconds" in result.stderr.str() + result.stdout.str()
