"""Small audit reports shared by the report tests (computed once per worker)."""

import json

import pytest

from specexact.audit import quick_cases, run_audit
from specexact.audit.zoo import resample_from_target
from specexact.decoders import verify


def _cases(*names):
    return [c for c in quick_cases() if c.name in names]


@pytest.fixture(scope="session")
def passing_report() -> dict:
    """The built-in verifier on v8-plain (quick, 2 calls). Not asserted to pass."""
    report = run_audit(verify, cases=_cases("v8-plain"), num_batches=2, budget_s=None, false_fail_rate=1e-6)
    return json.loads(json.dumps(report))


@pytest.fixture(scope="session")
def failing_report() -> dict:
    """A planted bug (resample from the target) on v12-eos-cut: fails sequence_law."""
    report = run_audit(resample_from_target, sampler_name="specexact.audit.zoo:resample_from_target",
                       sampler_target="specexact.audit.zoo:resample_from_target", cases=_cases("v12-eos-cut"),
                       num_batches=4, budget_s=None, false_fail_rate=1e-6)
    return json.loads(json.dumps(report))
