"""Calibration of the per-event PIT checks on a correct verifier (audit/decisions_calibration.py).

The three PIT checks (acceptance, recovered_token_law, bonus_token_law) run on groups of 32
rows of the twelve-class calibration case, 48 independent trials per seed and check; at
the relaxed level 0.2 each check's pooled rejection frequency must be within [0.5, 2] of
nominal (one calibration_ratio_check per check, the number of seeds sized for the session's
per-check rate). The report's figures at 0.1 .. 0.01 come from the same function with more
seeds.
"""

from collections import Counter

import pytest
import torch

from specexact.audit.zoo.decisions_calibration import PIT_CHECKS, decision_null_pvalues
from specexact.audit.zoo.selfcheck import calibration_case, calibration_table, seeds_for_calibration
from specexact.audit.zoo import CORRECT

LEVEL = 0.2
RATE_TOLERANCE = 1.25  # as tests/audit/zoo/test_selfcheck.py: asymptotic p-values on cells of >= 20
GROUP_ROWS = 32


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.statistical(checks=len(PIT_CHECKS))
def test_pit_checks_are_calibrated_on_a_correct_verifier(alpha, one_thread):
    case = calibration_case()
    records = decision_null_pvalues(case, CORRECT["builtin"], seeds=[0], num_batches=2, group_rows=GROUP_ROWS)
    per_seed = Counter(r.type for r in records if r.has_power)
    assert per_seed == {t: case.batch_size // GROUP_ROWS for t in PIT_CHECKS}
    seeds = seeds_for_calibration(per_seed, LEVEL, false_fail_rate=alpha, rate_tolerance=RATE_TOLERANCE)
    records += decision_null_pvalues(case, CORRECT["builtin"], seeds=range(1, seeds), num_batches=2,
                                     group_rows=GROUP_ROWS)
    rows = calibration_table(records, [LEVEL], false_fail_rate=alpha, rate_tolerance=RATE_TOLERANCE)
    assert [r.check_type for r in rows] == sorted(PIT_CHECKS)
    for row in rows:
        print(row.check_type, row.trials, row.rejections, round(row.ratio, 3))
        assert row.trials == seeds * per_seed[row.check_type]
        assert row.result.passed, row.result


def test_groups_must_divide_the_batch():
    with pytest.raises(ValueError, match="divide"):
        decision_null_pvalues(calibration_case(), CORRECT["builtin"], seeds=[0], num_batches=1, group_rows=100)


@pytest.mark.statistical(checks=0)  # a planted bug: only a false pass is at stake
def test_a_verifier_that_breaks_an_exact_rule_is_refused():
    from specexact.audit.zoo import WRONG

    with pytest.raises(RuntimeError, match="violation"):
        decision_null_pvalues(calibration_case(rows_per_class=8), WRONG["always_accept"], seeds=[0], num_batches=1,
                              group_rows=32)
