"""A planted fault of the declared order (``zoo.logits.top_p_before_temperature``: top-p on
the untempered law while the built-in order is declared) is caught exactly by the fuzz
phase on an order-sensitive row, as the rule ``declared_processing``, and the diagnosis
names the per-prefix processing; the correct built-in logits-level verifier passes the
same row. The row is fixed (a Zipf row, temperature 0.5, top-p 0.7) and its laws under the
two orders are at TV >= 0.2 (exact, by enumeration over V = 8); that the fuzz phase
generates such rows is ``tests/fuzz/test_generation.py``'s test. The nightly tier runs the
whole fuzz phase on the fault (its shrinking takes minutes)."""

import pytest

from specexact.audit.verdict.diagnosis import diagnose
from specexact.audit.zoo.logits import WRONG_LOGITS, WRONG_ORDER_LOGITS, builtin_order, top_p_before_temperature
from specexact.decoders import SamplingParams
from specexact.decoders.processing import BUILTIN_PROCESSING
from specexact.fuzz import FuzzSettings, run_fuzz
from specexact.fuzz.examples import LogitsExample
from specexact.fuzz.families import families_for
from specexact.fuzz.rules import RuleBroken
from specexact.fuzz.subject import Subject
from specexact.strategies import LogitsCase, ProbsCase, order_tv

PARAMS = SamplingParams(temperature=0.5, top_p=0.7)


def example(dtype: str = "float32") -> LogitsExample:
    return LogitsExample(logits=LogitsCase(family="zipf", vocab_size=8, batch_size=2, seed=0, dtype=dtype),
                         draft=ProbsCase(family="zipf", vocab_size=8, batch_size=1, seed=0, dtype=dtype),
                         num_draft_tokens=1, target_params=(PARAMS,), prompt=((0,),), output=((),), seed=0,
                         logits_dtype=dtype, draft_dtype=dtype)


def probes(sampler):
    return next(f for f in families_for(Subject.of(sampler, sampler.name)) if f.name == "logits_acceptance_probes")


def test_the_fault_is_planted_apart_from_the_statistical_zoo():
    assert set(WRONG_ORDER_LOGITS) == {"top_p_before_temperature"} and not set(WRONG_ORDER_LOGITS) & set(WRONG_LOGITS)
    declared = top_p_before_temperature.capabilities.processing
    assert declared == BUILTIN_PROCESSING and top_p_before_temperature.processing != declared


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_the_row_is_order_sensitive(dtype):
    x = example(dtype).inputs
    assert order_tv(x.target_logits[0, 0].float(), PARAMS, BUILTIN_PROCESSING, ("temperature", "top_p")) >= 0.2


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_the_planted_order_fault_breaks_declared_processing(dtype):
    with pytest.raises(RuleBroken) as caught:
        probes(top_p_before_temperature).check(example(dtype))
    assert caught.value.rule == "declared_processing"
    assert "temperature and top_p swapped" in caught.value.message, caught.value.message


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_the_correct_builtin_logits_verifier_passes_the_same_row(dtype):
    probes(builtin_order).check(example(dtype))


def _report(findings: list) -> dict:
    return {"checks": [], "sampler": {"name": "specexact.audit.zoo_logits:top_p_before_temperature"},
            "settings": {"processing": {"level": "logits"}}, "fuzz": {"findings": findings, "families": []}}


def test_the_diagnosis_names_the_per_prefix_processing():
    with pytest.raises(RuleBroken) as caught:
        probes(top_p_before_temperature).check(example())
    finding = {"family": "logits_acceptance_probes", "rule": caught.value.rule, "message": caught.value.message,
               "example": repr(example())}
    d = diagnose(_report([finding]))
    assert d["culprits"] == ["per_prefix_processing"], d["summary"]
    part = next(p for p in d["parts"] if p["part"] == "per_prefix_processing")
    assert part["status"] == "fail" and not part["heuristic"] and "declared_processing" in part["failed"][0]


@pytest.mark.nightly
def test_the_fuzz_phase_catches_the_planted_order_fault():
    result = run_fuzz(top_p_before_temperature, FuzzSettings(max_vocab=64),
                      name="specexact.audit.zoo_logits:top_p_before_temperature")
    assert result.error is None
    rules = {f.rule for f in result.findings}
    assert "declared_processing" in rules, [f.message for f in result.findings]
    d = diagnose(_report([f.to_dict() for f in result.findings]))
    assert d["culprits"][0] == "per_prefix_processing", d["summary"]
