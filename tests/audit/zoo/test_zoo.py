"""Self-check: the default audit cases catch every planted bug and pass every correct
verifier written differently.

Each verifier runs the default cases with a fixed number of decoder calls (4 per case), at
the suite's per-check false-fail rate (``alpha``) for every check it runs: the correct
verifiers spend their number of checks of the session's ledger each.

In CI every verifier runs the default cases but the tile-edge one (V=8193, 2048 rows: it
cost half of each audit; every planted bug is caught without it, with its parts, as the
CI test asserts on those seven cases); the built-in verifier runs all of them, so the
decoder's large-vocabulary path is still audited on every build. The diagnosis on the full
default set is checked by the nightly test. The planted bugs run on the quick cases (the
six small ones: V <= 12) and the fuzz phase: the V=4096 case cost a third of each planted
bug's audit, and every planted bug is caught with its parts without it; the correct
verifiers still run it. The nightly profile (``tox -e nightly``) runs every
verifier on every default case (``@pytest.mark.nightly``). A run at a per-check rate
``alpha`` finds what the default audit finds: the default audit's per-check rate is the
same whatever subset of its cases runs.

In CI the planted bugs run 2 decoder calls per case (the nightly test: 4). Each is caught
at 2 calls with a wide margin at the suite's per-check rate (about 1.7e-10 here), seed 0,
measured on the quick cases: every bug but two has a finding at p = 0 (an exact check, a
broken decision rule or a token outside the support, fails at any size; or a p-value
below float range); the other two fail at reseeded_each_call's sequence_law p = 7.9e-54
and one_uniform_per_row's accepted_length p = 2.5e-171. Halving the calls roughly halves
-log p of a chi-square check, so each stays > 40 orders of magnitude below the rate.

The textbook ``loop_reference`` (a Python loop per row and position, 11 s of one thread
on the CI cases) runs in the nightly test only. Its property, "a correct verifier written
differently passes the audit", stays in CI with ``exponential_race`` and
``division_form`` (``test_correct_verifier_passes``) and the built-in verifier on every
default case; ``loop_reference`` itself passes the fuzz phase's exact rules in CI
(``tests/audit/zoo/test_floats.py::test_every_correct_verifier_of_the_zoo_passes``).
"""

import pytest

from specexact.audit import default_cases, run_audit
from specexact.audit.checks.combined import COMBINED_SHARE
from specexact.audit.cases.dispatch import checks_per_case
from specexact.audit.zoo import CORRECT, WRONG
from specexact.audit.zoo.law_cache import cached_exact_laws
from specexact.testing import case_names

NUM_BATCHES = 4
PLANTED_BATCHES = 2  # planted bugs in CI (module docstring)
#: Correct verifiers whose audit runs in the nightly test only (module docstring).
NIGHTLY_ONLY = {"loop_reference"}
ALL_CASES = tuple(default_cases())
CI_CASES = tuple(c for c in ALL_CASES if c.model.vocab_size <= 8192)
PLANTED_CASES = tuple(c for c in ALL_CASES if c.name in case_names("quick"))  # see the module docstring
NUM_CHECKS = sum(checks_per_case(c) for c in ALL_CASES)
CI_CHECKS = sum(checks_per_case(c) for c in CI_CASES)


@pytest.fixture(scope="module", autouse=True)
def exact_laws_once():
    """The exact reference laws depend on the case only, not on the verifier or the seed:
    enumerated once per module and worker (about 0.6 of a planted bug's 1.4 s audit),
    verdicts and p-values unchanged (tests/audit/zoo/test_selfcheck.py::test_cached_exact_laws_change_no_result)."""
    with cached_exact_laws():
        yield


def audit(verifier, alpha, cases=CI_CASES, num_batches=NUM_BATCHES):
    checks = sum(checks_per_case(c) for c in cases)
    return run_audit(verifier, cases=list(cases), false_fail_rate=alpha * checks, num_batches=num_batches,
                     budget_s=None, seed=0)


def test_ci_cases_leave_out_only_the_tile_edge_case():
    assert [c.name for c in ALL_CASES if c not in CI_CASES] == ["v8193-tile-trunc-penalties"]
    assert [c.name for c in CI_CASES if c not in PLANTED_CASES] == ["v4096-zipf"]
    assert max(c.model.vocab_size for c in PLANTED_CASES) <= 12
    # the property loop_reference's audit checks stays in CI with two other correct verifiers
    assert NIGHTLY_ONLY < set(CORRECT) and len(set(CORRECT) - {"builtin"} - NIGHTLY_ONLY) >= 2


def check_correct(report, alpha):
    assert report["verdict"] == "pass", report["findings"]
    assert report["settings"]["per_check_false_fail_rate"] == pytest.approx((1 - COMBINED_SHARE) * alpha)
    assert report["diagnosis"]["culprits"] == [] and report["diagnosis"]["summary"] == "no part found faulty"
    names = {c["name"] for c in report["checks"]}
    assert {"acceptance_exact", "acceptance", "recovered_support", "recovered_token_law", "bonus_token_law",
            "eos_cut"} <= names


@pytest.mark.statistical(checks=NUM_CHECKS)
def test_builtin_verifier_passes_every_default_case(alpha):
    report = audit(CORRECT["builtin"], alpha, ALL_CASES)
    check_correct(report, alpha)
    assert {c["case"] for c in report["checks"]} == {c.name for c in ALL_CASES}


@pytest.mark.statistical(checks=CI_CHECKS)
@pytest.mark.parametrize("name", sorted(set(CORRECT) - {"builtin"} - NIGHTLY_ONLY))
def test_correct_verifier_passes(name, alpha):
    check_correct(audit(CORRECT[name], alpha), alpha)


@pytest.mark.nightly
@pytest.mark.statistical(checks=NUM_CHECKS)
@pytest.mark.parametrize("name", sorted(set(CORRECT) - {"builtin"}))
def test_correct_verifier_passes_every_default_case(name, alpha):
    check_correct(audit(CORRECT[name], alpha, ALL_CASES), alpha)


# The parts the diagnosis may name for each planted bug (audit/diagnosis.py). The first
# three are the issue-12 faults whose diagnosis must be exactly right.
PARTS = {
    "draft_law_bfloat16": {"acceptance_rule", "recovered_token"},
    "under_accept_1pct": {"acceptance_rule"},
    "bonus_from_last_draft_position": {"bonus_token"},
    "bonus_dropped": {"bonus_token"},
    "resample_from_target": {"recovered_token"},
    "residual_absolute": {"recovered_token"},
    "inverted_ratio": {"acceptance_rule"},
    "always_accept": {"acceptance_rule"},
    "shifted_alignment": {"position_alignment"},
    "under_accept": {"acceptance_rule"},
    "residual_from_first_position": {"recovered_token"},
    "recovered_from_next_position": {"recovered_token"},
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
    check_caught(name, audit(WRONG[name], alpha, PLANTED_CASES, PLANTED_BATCHES))


@pytest.mark.nightly
@pytest.mark.statistical(checks=0)
@pytest.mark.parametrize("name", sorted(WRONG))
def test_planted_bug_is_caught_on_every_default_case(name, alpha):
    check_caught(name, audit(WRONG[name], alpha, ALL_CASES))


def check_caught(name, report):
    assert report["verdict"] == "fail"
    assert report["findings"], "a failing audit must name its failing checks"
    culprits = report["diagnosis"]["culprits"]
    assert culprits and set(culprits) <= PARTS[name], report["diagnosis"]["summary"]
    if name == "bonus_from_last_draft_position":
        assert culprits == ["bonus_token"]
        bonus = next(p for p in report["diagnosis"]["parts"] if p["part"] == "bonus_token")
        assert "wrong position" in bonus["evidence"] and bonus["replay"]
    if name == "bonus_dropped":  # read as d_K rejected and recovered as itself: named the bonus token's fault
        assert culprits == ["bonus_token"]
        parts = {p["part"]: p for p in report["diagnosis"]["parts"]}
        assert "bonus token dropped" in parts["bonus_token"]["evidence"]
        assert "two readings" in parts["bonus_token"]["evidence"]
        assert parts["acceptance_rule"]["explained_by"] == parts["recovered_token"]["explained_by"] == "bonus_token"
    if name == "recovered_from_next_position":  # the recovered token's fault, not the alignment's
        assert culprits == ["recovered_token"]
        rec = next(p for p in report["diagnosis"]["parts"] if p["part"] == "recovered_token")
        assert "residual of position i+1" in rec["evidence"]
        align = next(p for p in report["diagnosis"]["parts"] if p["part"] == "position_alignment")
        assert align["status"] == "pass" and "not of the target law's alignment" in align["evidence"]
    if name == "under_accept_1pct":
        assert culprits == ["acceptance_rule"]
        assert any("scaled-down acceptance" in n for n in report["diagnosis"]["notes"])
    if name == "draft_law_bfloat16":
        assert any("near tie" in n for n in report["diagnosis"]["notes"])
        assert {f["check"] for f in report["findings"]} & {"acceptance_exact", "recovered_support"}
