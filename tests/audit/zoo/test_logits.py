"""Self-check at the logits level: the default audit cases catch every planted processing
bug and pass every correct logits-level sampler, whatever order it declares.

As in test_zoo.py: 4 decoder calls per case, each check at the suite's per-check rate;
classes a sampler does not implement are dropped. And as there, CI leaves out the
tile-edge case (V=8193): ~20 s for the built-in order, ~40 s for a sampler with another
declared order (processed by the readable per-operation reference), and every planted bug
is caught without it. The decoder's logits-level path gives the probability-level tokens
bit for bit (tests/decoders/adapters/test_builtin_logits.py), the probability level is
audited on the tile-edge case in CI (test_zoo.py), and the per-operation reference is
compared with the built-in pipeline at V=8193 (tests/decoders/test_processing.py); the
nightly profile runs every sampler here on every default case.

The V=4096 case cost 7 of the 10 s of an audit by the per-operation reference: in CI the
planted bugs run on the quick cases (the six with V <= 12; each is caught there), and so
does the prompt-scope sampler (the built-in order, with the prompt in the penalties'
scope); the built-in order, the lean sampler and the transformers order (the per-operation
reference in another declared order) still run the V=4096 case.

In CI the planted bugs run 2 decoder calls per case, but lean_stale_penalty_history, which
runs 4 (the nightly test: 4 for each). Measured at seed 0 on the quick cases, at the
per-check rate 1.7e-10: the five at 2 calls each fail a sequence_law check at p = 0 (below
float range); lean_stale_penalty_history fails none of the law checks at 2 calls and its
sequence_law at p = 1.7e-20 at 4.
"""

import pytest

from specexact.audit import default_cases, run_audit
from specexact.audit.cases.dispatch import checks_per_case, restrict_to_sampler
from specexact.audit.zoo.law_cache import cached_exact_laws
from specexact.audit.zoo.logits import CORRECT_LOGITS, WRONG_LOGITS
from specexact.testing import case_names

NUM_BATCHES = 4
#: Decoder calls per case of each planted bug in CI (module docstring).
PLANTED_BATCHES = {name: 4 if name == "lean_stale_penalty_history" else 2 for name in WRONG_LOGITS}
ALL_CASES = tuple(default_cases())
CI_CASES = tuple(c for c in ALL_CASES if c.model.vocab_size <= 8192)
QUICK_CASES = tuple(c for c in ALL_CASES if c.name in case_names("quick"))
#: Correct samplers that run CI_CASES in CI; the others run QUICK_CASES (module docstring).
CI_CASES_SAMPLERS = {"builtin_order", "lean", "transformers_order"}


@pytest.fixture(scope="module", autouse=True)
def exact_laws_once():
    """The exact reference laws depend on the case only, not on the sampler or the seed:
    enumerated once per module and worker, verdicts and p-values unchanged
    (tests/audit/zoo/test_selfcheck.py::test_cached_exact_laws_change_no_result)."""
    with cached_exact_laws():
        yield


def checks_for(verifier, cases=CI_CASES):
    return sum(checks_per_case(r) for c in cases if (r := restrict_to_sampler(c, verifier)[0]) is not None)


def audit(verifier, alpha, cases=CI_CASES, num_batches=NUM_BATCHES):
    return run_audit(verifier, sampler_name=verifier.name, cases=list(cases),
                     false_fail_rate=alpha * checks_for(verifier, cases), num_batches=num_batches,
                     budget_s=None, seed=0)


# The statistical marker needs a constant: the largest number of checks any correct one runs.
MAX_CHECKS = max(checks_for(v) for v in CORRECT_LOGITS.values())
MAX_CHECKS_ALL = max(checks_for(v, ALL_CASES) for v in CORRECT_LOGITS.values())


def check_correct(v, report, cases):
    assert report["verdict"] == "pass", report["findings"]
    assert report["settings"]["processing"]["order"] == list(v.processing.order)
    skipped = {s["case"] for s in report["settings"]["skipped_cases"]}
    assert skipped == {c.name for c in cases if restrict_to_sampler(c, v)[1] is not None}
    assert report["settings"]["num_checks"] == checks_for(v, cases)


@pytest.mark.statistical(checks=MAX_CHECKS)
@pytest.mark.parametrize("name", sorted(CORRECT_LOGITS))
def test_correct_logits_level_sampler_passes(name, alpha):
    v = CORRECT_LOGITS[name]
    cases = CI_CASES if name in CI_CASES_SAMPLERS else QUICK_CASES
    check_correct(v, audit(v, alpha, cases), cases)


def test_ci_cases_leave_out_the_tile_edge_case_and_the_quick_cases_the_zipf_one_too():
    assert [c.name for c in ALL_CASES if c not in CI_CASES] == ["v8193-tile-trunc-penalties"]
    assert [c.name for c in CI_CASES if c not in QUICK_CASES] == ["v4096-zipf"]
    assert CI_CASES_SAMPLERS < set(CORRECT_LOGITS)
    # the per-operation reference in a declared order other than the built-in one runs V=4096
    transformers = CORRECT_LOGITS["transformers_order"]
    assert transformers.processing.order != CORRECT_LOGITS["builtin_order"].processing.order
    assert CI_CASES[-1].name == "v4096-zipf" and restrict_to_sampler(CI_CASES[-1], transformers)[0] is not None


@pytest.mark.nightly
@pytest.mark.statistical(checks=MAX_CHECKS_ALL)
@pytest.mark.parametrize("name", sorted(CORRECT_LOGITS))
def test_correct_logits_level_sampler_passes_every_default_case(name, alpha):
    v = CORRECT_LOGITS[name]
    check_correct(v, audit(v, alpha, ALL_CASES), ALL_CASES)


def check_caught(report):
    assert report["verdict"] == "fail"
    assert any(f["check"].startswith(("sequence_law", "accepted_length", "first_token_law", "sequences_vs_naive"))
               for f in report["findings"])
    # the diagnosis (heuristic at the logits level) names the processing, not the verifier's rule
    assert report["diagnosis"]["culprits"] == ["per_prefix_processing"], report["diagnosis"]["summary"]


@pytest.mark.statistical(checks=0)  # a planted bug risks only a false pass
@pytest.mark.parametrize("name", sorted(WRONG_LOGITS))
def test_planted_processing_bug_is_caught(name, alpha):
    check_caught(audit(WRONG_LOGITS[name], alpha, QUICK_CASES, PLANTED_BATCHES[name]))


@pytest.mark.nightly
@pytest.mark.statistical(checks=0)
@pytest.mark.parametrize("name", sorted(WRONG_LOGITS))
def test_planted_processing_bug_is_caught_on_every_default_case(name, alpha):
    check_caught(audit(WRONG_LOGITS[name], alpha, ALL_CASES))


@pytest.mark.statistical(checks=0)  # planted bug: only a false pass is at stake
def test_a_logits_level_finding_shrinks_to_a_replayable_script(alpha):
    import contextlib
    import io

    from specexact.audit import quick_cases, resolve_sampler
    from specexact.audit.verdict.reproduce import minimise, reproduction_script

    sampler = "specexact.audit.zoo_logits:stale_penalty_history"
    verifier, _ = resolve_sampler(sampler)
    cases = [c for c in quick_cases() if c.name == "v7-rep-order"]
    report = run_audit(verifier, sampler_name=sampler, cases=cases, false_fail_rate=alpha * 8,
                       num_batches=2, budget_s=None, seed=0)
    finding = next(f for f in report["findings"] if f["check"].startswith("sequence_law"))
    rep = minimise(verifier, finding, seed=0, false_fail_rate=alpha, cases=cases, sampler=sampler, max_trials=5)
    assert rep is not None and rep.batch_size < cases[0].batch_size
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(reproduction_script(rep), "<repro>", "exec"), {})
    assert "sequence_law[class 0]: FAIL" in out.getvalue()
