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
    assert report["diagnosis"]["culprits"] == [] and report["diagnosis"]["summary"] == "no part found faulty"
    names = {c["name"] for c in report["checks"]}
    assert {"acceptance_exact", "acceptance", "recovered_support", "recovered_token_law", "bonus_token_law",
            "eos_cut"} <= names


# The parts the diagnosis may name for each planted bug (audit/diagnosis.py). The first
# three are the issue-12 faults whose diagnosis must be exactly right.
PARTS = {
    "draft_law_bfloat16": {"acceptance_rule", "recovered_token"},
    "under_accept_1pct": {"acceptance_rule"},
    "bonus_from_last_draft_position": {"bonus_token"},
    "resample_from_target": {"recovered_token"},
    "residual_absolute": {"recovered_token"},
    "inverted_ratio": {"acceptance_rule"},
    "always_accept": {"acceptance_rule"},
    "shifted_alignment": {"position_alignment"},
    "under_accept": {"acceptance_rule"},
    "residual_from_first_position": {"recovered_token"},
    "first_row_target": {"acceptance_rule", "recovered_token", "bonus_token"},
    "shared_uniforms_across_rows": {"independence"},
    "reseeded_each_call": {"reproducibility"},
    "one_uniform_per_row": {"acceptance_rule", "independence"},
    "half_precision_sampling": {"recovered_token", "bonus_token"},
}


def test_every_planted_bug_has_its_parts():
    assert set(PARTS) == set(WRONG)


# A planted bug risks only a false pass, which the false-fail ledger does not count.
@pytest.mark.statistical(checks=0)
@pytest.mark.parametrize("name", sorted(WRONG))
def test_planted_bug_is_caught(name, alpha):
    report = audit(WRONG[name], alpha)
    assert report["verdict"] == "fail"
    assert report["findings"], "a failing audit must name its failing checks"
    culprits = report["diagnosis"]["culprits"]
    assert culprits and set(culprits) <= PARTS[name], report["diagnosis"]["summary"]
    if name == "bonus_from_last_draft_position":
        assert culprits == ["bonus_token"]
        bonus = next(p for p in report["diagnosis"]["parts"] if p["part"] == "bonus_token")
        assert "wrong position" in bonus["evidence"] and bonus["replay"]
    if name == "under_accept_1pct":
        assert culprits == ["acceptance_rule"]
        assert any("scaled-down acceptance" in n for n in report["diagnosis"]["notes"])
    if name == "draft_law_bfloat16":
        assert any("near tie" in n for n in report["diagnosis"]["notes"])
        assert {f["check"] for f in report["findings"]} & {"acceptance_exact", "recovered_support"}
