"""Self-check: the default audit cases catch every planted bug and pass every correct
verifier written differently.

Each verifier runs the default cases with a fixed number of decoder calls (4 per case), at
the suite's per-check false-fail rate times the audit's number of checks: the correct
verifiers spend ``num_checks`` checks of the session's ledger each.
"""

import pytest

from specexact.audit import default_cases, run_audit
from specexact.audit.runner import checks_per_case
from specexact.audit.zoo import CORRECT, WRONG

NUM_CHECKS = sum(checks_per_case(c) for c in default_cases())
NUM_BATCHES = 4


def audit(verifier, alpha):
    return run_audit(verifier, false_fail_rate=alpha * NUM_CHECKS, num_batches=NUM_BATCHES,
                     budget_s=None, seed=0)


@pytest.mark.statistical(checks=NUM_CHECKS)
@pytest.mark.parametrize("name", sorted(CORRECT))
def test_correct_verifier_passes(name, alpha):
    report = audit(CORRECT[name], alpha)
    assert report["verdict"] == "pass", report["findings"]
    assert report["settings"]["per_check_false_fail_rate"] == pytest.approx(alpha)


# A planted bug risks only a false pass, which the false-fail ledger does not count.
@pytest.mark.statistical(checks=0)
@pytest.mark.parametrize("name", sorted(WRONG))
def test_planted_bug_is_caught(name, alpha):
    report = audit(WRONG[name], alpha)
    assert report["verdict"] == "fail"
    assert report["findings"], "a failing audit must name its failing checks"
