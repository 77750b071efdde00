"""The suite's false-fail ledger: an overflow is one clear line, under xdist too
(tests/conftest.py: a worker's UsageError showed only as "Unexpectedly no active workers
available")."""

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py").read_text()
REAL = 'LEDGER_CAPACITY = {"ci": 3_000, "dev": 3_000, "nightly": 200_000}'


@pytest.mark.parametrize("workers", ["1"])  # one worker is xdist (-n 0 said it already: a UsageError)
def test_a_ledger_overflow_says_how_many_checks_against_the_capacity(pytester, workers):
    assert REAL in CONFTEST  # the capacity this test shrinks
    pytester.makeconftest(CONFTEST.replace(REAL, 'LEDGER_CAPACITY = {"ci": 4, "dev": 4, "nightly": 4}'))
    pytester.makepyfile(test_spends="""
        import pytest

        @pytest.mark.statistical(checks=3)
        def test_a(alpha):
            pass

        @pytest.mark.statistical(checks=3)
        def test_b(alpha):
            pass
    """)
    result = pytester.runpytest_subprocess("-n", workers, "-p", "no:cacheprovider", "-p", "no:randomly")
    out = result.stdout.str() + result.stderr.str()
    assert result.ret != 0
    assert "Unexpectedly no active workers" not in out and "INTERNALERROR" not in out, out
    lines = [line for line in out.splitlines() if "declare 6 checks" in line and "holds 4" in line]
    assert lines, out
