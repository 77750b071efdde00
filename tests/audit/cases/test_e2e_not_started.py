"""An end-to-end case whose engine's first load in the process raises did not start here
(audit/cases/e2e/sampling.py: ``engine_not_started`` in its dict); a load failing after the
engine ran here (another configuration, a fresh process after the audit's) stays a defect."""

import pytest

from specexact.audit.cases.e2e.catalog import e2e_cases
from specexact.audit.cases.e2e.engine_call import FreshProcessWork, ensure_loaded
from specexact.audit.cases.e2e.fresh_process import run_e2e_fresh
from specexact.audit.cases.e2e.sampling import run_e2e_case
from specexact.audit.verdict.verdict import NOT_STARTED
from specexact.decoders.engines.builtin import BuiltinEngine


class NeverStarts(BuiltinEngine):
    name = "never_starts"

    def load(self, *args, **kwargs):
        raise AssertionError("Torch not compiled with CUDA enabled")


class OneConfiguration(BuiltinEngine):
    """Loads the first method's configuration only (another fails in this process)."""

    name = "one_configuration"

    def load(self, target_dir, draft_dir, *, method, num_speculative_tokens, **kwargs):
        if method != TWO[0].method:
            raise RuntimeError("cannot start a second engine in this process")
        return super().load(target_dir, draft_dir, method=method, num_speculative_tokens=num_speculative_tokens,
                            **kwargs)


CASES = e2e_cases(BuiltinEngine(), "draft_model", requests_per_class=8)
CASE = CASES[0]
TWO = e2e_cases(BuiltinEngine(), requests_per_class=8)  # two methods: two configurations


@pytest.mark.statistical(checks=0)  # no call returns: only the load's defect
def test_a_first_load_that_raises_marks_the_case_not_started_with_its_error_as_the_defect(alpha):
    res = run_e2e_case(CASE, NeverStarts(), false_fail_rate=alpha, num_batches=2)
    d = res.to_dict()
    assert d[NOT_STARTED] is True and d["num_sequences"] == 0 and d["verdict"] == "fail"
    assert d["defect"].startswith("crash in engine load: AssertionError: Torch not compiled with CUDA enabled")
    assert res.fresh_process is None  # nothing to go on with elsewhere


@pytest.mark.statistical(checks=0)  # only the load's defect is looked at
def test_a_load_failing_after_another_configuration_ran_here_is_no_not_started_mark(alpha):
    assert TWO[0].method != TWO[1].method
    engine = OneConfiguration()
    ensure_loaded(engine, TWO[0])  # the engine ran here
    res = run_e2e_case(TWO[1], engine, false_fail_rate=alpha, num_batches=2)
    assert res.defect.startswith("crash in engine load (after another configuration was loaded in this process)")
    assert NOT_STARTED not in res.to_dict()


@pytest.mark.statistical(checks=0)  # only the load's defect is looked at
def test_a_first_load_failing_in_a_fresh_process_stays_the_cases_defect(alpha):
    """A fresh process runs a case only after the engine ran in the audit's process."""
    work = FreshProcessWork(call=0, speculative=True, ok=tuple(range(len(CASE.row_classes))),
                            reason="an earlier crash", whole_case=True)
    res, record = run_e2e_fresh(CASE, NeverStarts(), work, false_fail_rate=alpha, num_batches=2)
    assert res.defect.startswith("crash in engine load: AssertionError") and record["checked"] == []
    assert NOT_STARTED not in res.to_dict()
