"""A planted fault only the long case reaches (audit/zoo/e2e.py E2E_WRONG_LONG): the target's
temperature lost from output position 16 on; the per-token checks place it there."""

import pytest

from specexact.audit import run_audit
from specexact.audit.cases.dispatch import checks_per_case
from specexact.audit.cases.e2e.catalog import long_case
from specexact.audit.zoo.e2e import E2E_WRONG_LONG, TemperatureLostFromPosition16

#: The checks that must pass on the faulty engine (positions before 16, and the plain path): a
#: correct law each, so each risks a false fail.
MUST_PASS = ("token_law[positions 0-7]", "token_law[positions 8-15]", "plain_token_law[positions 0-7]",
             "plain_token_law[positions 8-15]", "plain_token_law[positions 16-31]", "plain_token_law[positions 32-47]")


def test_the_long_faults_are_listed():
    assert E2E_WRONG_LONG == {"temperature_lost_from_position_16": TemperatureLostFromPosition16}


@pytest.mark.statistical(checks=len(MUST_PASS))
def test_temperature_lost_from_position_16_fails_the_bands_from_16_on_and_passes_before(alpha):
    engine = TemperatureLostFromPosition16()
    case = long_case(engine, "draft_model", requests_per_class=8)
    report = run_audit(engine, cases=[case], num_batches=2, budget_s=None,
                       false_fail_rate=alpha * checks_per_case(case), sampler_name=engine.name, fuzz=False,
                       threads=1)
    assert report["verdict"] == "fail"
    (rep,) = report["cases"]
    checks = {c["name"]: c for c in rep["checks"]}
    for name in ("token_law[positions 16-31]", "token_law[positions 32-47]"):
        assert not checks[name]["passed"], checks[name]
    for name in MUST_PASS:
        assert checks[name]["passed"], checks[name]
    failed = {(f["check"], f["tier"]) for f in report["findings"]}
    assert failed == {("token_law[positions 16-31]", "inexact"), ("token_law[positions 32-47]", "inexact")}, failed
    # the diagnosis places it by position, on the speculative path only
    diagnosis = report["diagnosis"]
    assert diagnosis["level"] == "e2e"
    assert any("token_law fails in positions 16-31, 32-47 and passes in 0-7, 8-15: the fault shows from output "
               "position 16 on" in n for n in diagnosis["notes"]), diagnosis["notes"]
    assert not any("plain_token_law fails" in n for n in diagnosis["notes"])
    assert "per_prefix_processing" in diagnosis["suspects"], diagnosis["summary"]
    # its replay selects the long case by name
    command = report["findings"][0]["reproduction"]["command"]
    assert f"--case {case.name}" in command and "--requests-per-class" not in command, command
    python = report["findings"][0]["reproduction"]["python"]
    assert "long_case_too=True, long_requests_per_class=8" in python and repr(case.name) in python, python
