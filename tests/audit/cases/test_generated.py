"""Generated statistical cases: drawn from the seed, within the sampler's operations, counted
before sampling, and passed by a correct verifier."""

import pytest
import torch

from specexact.audit import AuditSettings, default_cases, resolve_audit, run_case
from specexact.audit.cases.dispatch import checks_per_case
from specexact.audit.zoo.logits import lean
from specexact.decoders import verify
from specexact.fuzz import FuzzSettings
from specexact.audit.cases.generated import FUZZ_TAG, PairLawsCase, generated_case, generated_cases, law_cases

CASES = generated_cases(verify, FuzzSettings(seed=0))
CHECKS = sum(checks_per_case(c) for c in CASES)


def test_the_cases_are_a_function_of_the_seed():
    assert [c.name for c in CASES] == ["fuzz-rows-1", "fuzz-laws-1"]
    assert generated_cases(verify, FuzzSettings(seed=0)) == CASES
    other = generated_cases(verify, FuzzSettings(seed=1))
    assert [c.name for c in other] == [c.name for c in CASES] and other != CASES
    assert all(FUZZ_TAG in c.tags for c in CASES)
    nightly = generated_cases(verify, FuzzSettings(seed=0, profile="nightly"))
    assert [c.name for c in nightly] == [f"fuzz-rows-{k}" for k in (1, 2, 3)] + [f"fuzz-laws-{k}" for k in (1, 2, 3)]
    assert generated_case("fuzz-laws-1", verify, seed=0) == CASES[1]
    with pytest.raises(KeyError, match="fuzz-rows-9"):
        generated_case("fuzz-rows-9", verify)


def test_row_classes_stay_within_the_declared_operations_and_laws_come_from_the_pair():
    (rows,) = generated_cases(lean, FuzzSettings(seed=0))  # logits level: no per-example law case
    for rc in rows.row_classes:
        assert not lean.processing.unsupported(rc.target_params), rc.target_params
    rows0 = CASES[0]
    assert rows0.exact and rows0.model.vocab_size ** rows0.length <= 20_000 and len(rows0.row_classes) == 3
    laws_case = CASES[1]
    assert isinstance(laws_case, PairLawsCase)
    laws = laws_case.laws()
    given = laws_case.pair.draft_probs.dtype  # handed over as drawn: float32, float16 or bfloat16
    assert laws.draft32.dtype == laws.target32.dtype == (given if given != torch.float64 else torch.float32)
    assert torch.equal(laws.draft32, laws_case.pair.draft_probs[0].to(laws.draft32.dtype))
    assert torch.equal(laws.target32, laws_case.pair.target_probs[0].to(laws.draft32.dtype))
    d = laws_case.to_dict()
    assert d["kind"] == "verify" and "VerifyCase(" in d["pair"]


def test_the_audit_counts_their_checks_before_sampling():
    base = AuditSettings(cases=tuple(default_cases()), num_batches=2, budget_s=None)
    plain = resolve_audit(verify, base)
    fuzzed = resolve_audit(verify, base.with_(fuzz=True))
    assert fuzzed.num_checks == plain.num_checks + CHECKS
    assert [c.name for c in fuzzed.cases][-2:] == ["fuzz-rows-1", "fuzz-laws-1"]
    assert fuzzed.key != plain.key


@pytest.mark.statistical(checks=CHECKS)
def test_the_builtin_verifier_passes_them(alpha):
    for case in CASES:
        res = run_case(case, verify, false_fail_rate=alpha, seed=0, num_batches=2)
        assert res.passed, [str(c) for c in res.checks]
        assert len(res.checks) == checks_per_case(case)


def _law_case_tags(dtypes, seeds=range(12)):
    """Tags of the law cases of a seeded sample of audit seeds (3 cases each, the nightly count)."""
    seen = set()
    for seed in seeds:
        for case in law_cases(seed, 3, dtypes):
            K, V = case.num_draft_tokens, case.model.vocab_size
            assert (K + 1) * V <= 4 * 4096 and 1 <= K <= 15, (K, V)
            seen |= {str(case.pair.dtype), *(["γ>=8"] if K >= 8 else []), *(["γ=15"] if K == 15 else []),
                     *(["γ<=3"] if K <= 3 else [])}
    return seen


def test_law_cases_reach_long_gamma_and_half_precision_where_declared():
    seen = _law_case_tags(("float32", "float16", "bfloat16"))
    assert {"γ>=8", "γ=15", "γ<=3", "float16", "bfloat16", "float32"} <= seen, seen
    assert {"float16", "bfloat16"}.isdisjoint(_law_case_tags(("float32",), range(4)))
    # the verify protocol (no declared capabilities) takes every floating dtype
    drawn = set()
    for seed in range(40):
        drawn |= {str(c.pair.dtype) for c in generated_cases(verify, FuzzSettings(seed=seed, profile="nightly"))
                  if isinstance(c, PairLawsCase)}
        if {"float16", "bfloat16"} <= drawn:
            break
    assert {"float16", "bfloat16"} <= drawn, drawn
