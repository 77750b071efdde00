"""Minimal reproductions: shrink a real finding of a planted bug, print and replay its script."""

import contextlib
import io

import pytest

from specexact.audit import quick_cases, resolve_sampler, run_audit
from specexact.audit.verdict.reproduce import Reproduction, minimise, reproduction_script

SAMPLER = "specexact.audit.zoo:always_accept"  # accepts every draft: fails by a wide margin
CASES = [c for c in quick_cases() if c.name == "v8-plain"]


# A planted bug risks only a false pass, which the false-fail ledger does not count.
@pytest.mark.statistical(checks=0)
def test_minimise_shrinks_a_finding_and_the_script_replays_it(alpha):
    verifier, _ = resolve_sampler(SAMPLER)
    report = run_audit(verifier, sampler_name=SAMPLER, cases=CASES, false_fail_rate=alpha * 8,
                       num_batches=2, budget_s=None, seed=0)
    finding = next(f for f in report["findings"] if f["check"] == "sequence_law[class 1]")
    rep = minimise(verifier, finding, seed=0, false_fail_rate=alpha, cases=CASES, sampler=SAMPLER, max_trials=5)
    assert isinstance(rep, Reproduction)
    assert rep.row_classes == (1,) and rep.check == "sequence_law[class 0]"  # the class alone fails
    assert rep.batch_size < CASES[0].batch_size and rep.num_batches >= 2  # it shrank
    assert rep.pvalue <= rep.false_fail_rate
    script = reproduction_script(rep)
    assert len(script.splitlines()) <= 10 and SAMPLER in script
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(script, "<repro>", "exec"), {})  # quick cases differ from default ones in size only
    assert "sequence_law[class 0]: FAIL" in out.getvalue()


def test_reproduction_needs_a_rate_and_a_known_kind():
    with pytest.raises(ValueError, match="false_fail_rate"):
        minimise(lambda *a: None, {"case": "v8-plain", "check": "x", "reproduction": {}})
    with pytest.raises(ValueError, match="deterministic"):
        reproduction_script({"kind": "statistical"})
