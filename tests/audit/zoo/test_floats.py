"""The planted float / randomness faults are caught by the fuzz phase; the zoo's correct
verifiers pass it (at the CI-sized fuzz budget: the ``ci`` profile, 25 examples per family,
fixed seeds, so the outcome is the same under ``-n 1`` and ``-n auto``).

These faults are not in :data:`specexact.audit.zoo.WRONG`: the statistical cases cannot
see them (``tests/audit/zoo/test_zoo.py`` runs WRONG on those); the fuzz phase's rules are exact.
"""

import pytest

from specexact.audit.zoo import CORRECT, WRONG
from specexact.audit.zoo.floats import CORRECT_FLOAT, WRONG_FLOAT
from specexact.audit.zoo.logits import CORRECT_LOGITS
from specexact.fuzz import FuzzSettings, run_fuzz

#: The rule each planted fault must break.
EXPECTED = {
    "global_rng_draws": {"same_generator_same_output", "uses_generator"},
    "bfloat16_ratio": {"acceptance_rule"},
    "no_empty_residual_guard": {"no_crash"},
    "accepts_at_equality": {"zero_probability_token"},
}

ALL_CORRECT = {**CORRECT, CORRECT_FLOAT.name: CORRECT_FLOAT, **{f"logits:{k}": v for k, v in CORRECT_LOGITS.items()}}


def test_the_faults_are_not_in_the_statistical_zoo():
    assert set(WRONG_FLOAT) == set(EXPECTED) and not set(WRONG_FLOAT) & set(WRONG)


@pytest.mark.parametrize("name", sorted(WRONG_FLOAT))
def test_each_planted_fault_is_caught(name):
    result = run_fuzz(WRONG_FLOAT[name], FuzzSettings(), name=f"specexact.audit.zoo_float:{name}")
    assert result.error is None
    rules = {f.rule for f in result.findings}
    assert rules & EXPECTED[name], [f.message for f in result.findings]
    for f in result.findings:
        assert f.example_summary["vocab_size"] <= 8, f.example  # shrunk
        assert "REPRODUCED" in _replay(f.replay)


@pytest.mark.parametrize("name", sorted(ALL_CORRECT))
def test_every_correct_verifier_of_the_zoo_passes(name):
    result = run_fuzz(ALL_CORRECT[name], FuzzSettings(), name=name)
    assert result.passed, [(f.rule, f.message, f.example) for f in result.findings] or result.error
    assert all(run.examples == 25 for run in result.families)


def _replay(script: str) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(script, "replay", "exec"), {})
    return out.getvalue()
