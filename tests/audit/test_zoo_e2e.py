"""Planted end-to-end faults (audit/zoo_e2e.py): each is caught, by the check and in the tier
that name it, at the suite's per-check rate."""

import pytest

from specexact.audit import run_audit
from specexact.audit.e2e_case import e2e_cases
from specexact.audit.runner import checks_per_case
from specexact.audit.zoo_e2e import E2E_WRONG

EXPECTED = {  # the check type that must fail, its tier, and the diagnosis part
    "logits_one_position_off": ("sequence_law", "inexact", "emitted_law"),
    "temperature_on_drafts_only": ("sequence_law", "inexact", "emitted_law"),
    "seed_ignored": ("reproducible", "defect", "reproducibility"),
    "bonus_from_wrong_position": ("sequence_law", "inexact", "emitted_law"),
}


def test_every_planted_fault_has_its_expectation():
    assert set(EXPECTED) == set(E2E_WRONG)


@pytest.mark.statistical(checks=0)  # a planted fault risks only a false pass
@pytest.mark.parametrize("name", sorted(E2E_WRONG))
def test_planted_end_to_end_fault_is_caught(name, alpha):
    engine = E2E_WRONG[name]()
    (case,) = e2e_cases(engine, "draft_model", requests_per_class=128)
    report = run_audit(engine, cases=[case], num_batches=2, budget_s=None, false_fail_rate=alpha * checks_per_case(case),
                       sampler_name=engine.name, fuzz=False)
    check, tier, part = EXPECTED[name]
    assert report["verdict"] == "fail"
    failed = {(f["check"].split("[")[0], f["tier"]) for f in report["findings"]}
    assert (check, tier) in failed, failed
    assert part in report["diagnosis"]["culprits"], report["diagnosis"]["summary"]
    if name != "seed_ignored":  # the engine's plain sampling is right: only speculation changed the law
        assert not any(f["check"].startswith("plain_sequence_law") for f in report["findings"])
