"""Self-checks of the audit (audit/selfcheck.py): calibration on a correct verifier, and the
kill table of planted bugs.

The calibration test runs the real case runner with the built-in (correct) verifier on a
twelve-class case over many seeds at a relaxed per-check rate, pools the verdicts of each
check type (independent across classes and seeds for a correct sampler) and asserts that
the rejection frequency at nominal 0.2 is within [0.5, 2] of nominal, one statistical check
per type, with the number of seeds sized by min_replicates_for_ratio at the per-check rate
(nominal 0.2 needs half the seeds of 0.1; the nightly script measures 0.1 to 0.01).
The nightly, larger version is ``scripts/calibration.py`` (``tox -e calibration``).
"""

import json
from collections import Counter

import pytest
import torch

from specexact.audit import quick_cases
from specexact.audit.cases.dispatch import checks_per_case, run_case
from specexact.audit.zoo.selfcheck import (
    KillRow,
    cached_exact_laws,
    calibration_case,
    calibration_table,
    calibration_table_markdown,
    check_type,
    kill_table,
    kill_table_markdown,
    null_pvalues,
    seeds_for_calibration,
)
from specexact.audit.zoo import CORRECT, WRONG
from specexact.exactness.calibration import ratio_outside_probability

LEVEL = 0.2
TYPES = ("accepted_length", "independent_calls", "independent_rows", "sequence_law")
# Fisher's exact test on the pair counts is conservative (discrete, conditional): only an
# excess of rejections (ratio > 2) counts against it, valid for any true rate <= nominal.
ONE_SIDED = ("independent_calls", "independent_rows")
# Asymptotic chi-square p-values on a few bins of >= 20-50 expected counts: the Pearson
# statistic is discrete, and the actual rate of one check can sit well off nominal (the
# nightly run measures the pooled ratio per type); the design covers true pooled rates
# within a factor 1.25 of nominal.
RATE_TOLERANCE = 1.25
NUM_BATCHES = 2


@pytest.fixture
def one_thread():
    """Tiny tensors: one torch thread is fastest (xdist workers already run with one)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_check_type_strips_the_class():
    assert check_type("sequence_law[class 3]") == "sequence_law"
    assert check_type("defect") == "defect"


def test_cached_exact_laws_change_no_result(one_thread):
    case = calibration_case(rows_per_class=32)
    plain = run_case(case, CORRECT["builtin"], false_fail_rate=0.1, seed=3, num_batches=2)
    with cached_exact_laws() as laws:
        cached = [run_case(case, CORRECT["builtin"], false_fail_rate=0.1, seed=3, num_batches=2)
                  for _ in range(2)]
        assert len(laws) == 2 * len(case.row_classes)  # one sequence and one acceptance law each
    for again in cached:
        assert [c.to_dict() for c in again.checks] == [c.to_dict() for c in plain.checks]


def test_seeds_for_calibration_covers_every_type():
    per_seed = {"a": 12, "b": 11, "c": 0}
    seeds = seeds_for_calibration(per_seed, 0.1, false_fail_rate=1e-6, one_sided_types=("b",),
                                  rate_tolerance=1.1)
    assert ratio_outside_probability(seeds * 12, 0.1, rate_tolerance=1.1) <= 1e-6
    assert ratio_outside_probability(seeds * 11, 0.1, low=0.0) <= 1e-6
    assert ratio_outside_probability((seeds - 1) * 12, 0.1, rate_tolerance=1.1) > 1e-6


@pytest.mark.statistical(checks=len(TYPES))
def test_audit_checks_are_calibrated_on_a_correct_verifier(alpha, one_thread):
    case = calibration_case()
    # At the relaxed level used here (0.2) bins of 50 expected counts are accurate; the
    # audit's own 200 would leave this small case's laws in one bin (no test at all).
    # The per-case per-event checks (one trial per seed) are calibrated in test_decisions_calibration.py.
    records = [r for r in null_pvalues([case], CORRECT["builtin"], seeds=[0], num_batches=NUM_BATCHES,
                                       min_expected=50.0) if r.type in TYPES]
    # Which checks have power depends on the reference laws and n only, not on the seed.
    per_seed = Counter(r.type for r in records if r.has_power)
    assert set(per_seed) == set(TYPES) and min(per_seed.values()) >= 11
    seeds = seeds_for_calibration(per_seed, LEVEL, false_fail_rate=alpha, one_sided_types=ONE_SIDED,
                                  rate_tolerance=RATE_TOLERANCE)
    records += [r for r in null_pvalues([case], CORRECT["builtin"], seeds=range(1, seeds), num_batches=NUM_BATCHES,
                                        min_expected=50.0) if r.type in TYPES]
    rows = calibration_table(records, [LEVEL], false_fail_rate=alpha, one_sided_types=ONE_SIDED,
                             rate_tolerance=RATE_TOLERANCE)
    print(f"seeds={seeds}\n" + calibration_table_markdown(rows))
    assert [row.check_type for row in rows] == sorted(TYPES)
    for row in rows:
        assert row.trials == seeds * per_seed[row.check_type]
        json.dumps(row.to_dict())
        assert row.result.passed, row.result


# Planted bugs risk only a false pass: always_accept emits sequences whose first round
# accepts every draft, an accepted length of probability < 1 for every class with a
# mismatched draft, so accepted_length fails exactly (support violation) at any size.
@pytest.mark.statistical(checks=0)
def test_kill_table_on_a_bug_and_a_correct_verifier(alpha, one_thread):
    cases = quick_cases()
    num_checks = sum(checks_per_case(c) for c in cases)
    verifiers = {"always_accept": WRONG["always_accept"], "builtin": CORRECT["builtin"]}
    rows = kill_table(verifiers, batches=(1, 2), seed=0, false_fail_rate=alpha * num_checks,
                      cases=cases)
    killed, correct = rows
    assert isinstance(killed, KillRow) and killed.name == "always_accept"
    assert killed.expected == "fail" and killed.verdict == "fail"
    assert killed.batches == 1 and killed.tried == [1]
    assert killed.sequences == 2 * sum(c.batch_size for c in cases)  # 1 call runs as 2
    assert any("accepted_length" in check for check in killed.failing_checks)
    # A correct verifier runs once, at the largest size (its verdict is the audit's; the
    # pass assertions of correct verifiers live in test_zoo.py).
    assert correct.expected == "pass" and correct.tried == [2] and correct.batches == 2
    assert correct.verdict in ("pass", "fail")
    table = kill_table_markdown(rows)
    assert table.splitlines()[0].startswith("| verifier |") and "always_accept" in table
    json.dumps([row.to_dict() for row in rows])


def test_kill_table_markdown_marks_survivors():
    rows = [KillRow("sneaky", "fail", "pass", None, 1000, [], 1.0, [1, 2]),
            KillRow("gross", "fail", "fail", 1, 512, ["c: a", "c: b", "c: d", "c: e", "c: f"], 2.0, [1])]
    table = kill_table_markdown(rows, max_checks=2)
    assert "not killed by 2" in table and "c: a; c: b; +3 more" in table
