"""End-to-end cases (audit/cases/e2e/): an engine's own generate loop, checked against the
exact laws of the tiny models it loads."""

from dataclasses import replace

import numpy as np
import pytest

from specexact.audit import run_audit
from specexact.audit.cases.e2e.case import E2ECase
from specexact.audit.cases.e2e.catalog import e2e_cases
from specexact.audit.cases.e2e.laws import acceptance_law
from specexact.audit.cases.dispatch import checks_per_case, restrict_to_sampler
from specexact.decoders import verify
from specexact.decoders.engines.builtin import BuiltinEngine
from specexact.decoders.processing import BUILTIN_PROCESSING

CASE = e2e_cases(BuiltinEngine(), "draft_model", requests_per_class=128)[0]
CHECKS = checks_per_case(CASE)


def audit(engine, alpha, cases=(CASE,), batches=2):
    checks = sum(checks_per_case(c) for c in cases)
    return run_audit(engine, cases=list(cases), num_batches=batches, budget_s=None, false_fail_rate=alpha * checks,
                     sampler_name=f"engine:{engine.name}", fuzz=False)


def test_the_cases_cover_the_request_shapes_and_say_which_check_acceptance():
    names = [rc.describe() for rc in CASE.row_classes]
    assert len(names) == 8 and any("min_tokens=2" in n for n in names) and any("eos on" in n for n in names)
    # acceptance has an exact law where no EOS cuts the first round
    assert CASE.check_acceptance == tuple(not rc.eos for rc in CASE.row_classes)
    # and the two logprob checks (the built-in engine reports logprobs) and the two seed checks (its promise)
    assert CHECKS == 3 * 8 + 1 + 6 + 2 + 2
    with pytest.raises(ValueError, match="engine 'builtin' does not run method 'ngram'; it declares"):
        e2e_cases(BuiltinEngine(), "ngram")


@pytest.mark.statistical(checks=CHECKS)
def test_the_builtin_engine_passes_with_every_check_reported(alpha):
    report = audit(BuiltinEngine(), alpha)
    assert report["verdict"] == "pass", report["findings"]
    (case,) = report["cases"]
    assert case["num_sequences"] == 2 * CASE.batch_size and case["config"]["kind"] == "e2e"
    types = {c["name"].split("[")[0] for c in case["checks"]}
    assert types == {"reproducible", "sequence_law", "plain_sequence_law", "sequences_vs_plain", "accepted_length",
                     "token_logprobs", "plain_token_logprobs", "reproducible_in_mix", "independent_requests"}
    assert len(case["checks"]) == CHECKS
    # each check states what it can detect (None in JSON: no TV up to 1 guaranteed at this size)
    assert all("detectable_tv" in c and "false_fail_rate" in c for c in case["checks"])


def test_only_engines_run_end_to_end_cases_and_engines_run_nothing_else():
    from specexact.audit import default_cases

    assert restrict_to_sampler(CASE, verify)[0] is None
    assert "end-to-end case" in restrict_to_sampler(CASE, verify)[1]
    runnable, reason = restrict_to_sampler(default_cases()[0], BuiltinEngine())
    assert runnable is None and "audit --engine" in reason


def test_classes_an_engine_does_not_implement_are_dropped_with_the_reason():
    class NoPenalties(BuiltinEngine):
        def capabilities(self):
            caps = super().capabilities()
            return replace(caps, min_tokens=False,
                           processing=replace(BUILTIN_PROCESSING, order=tuple(
                               o for o in BUILTIN_PROCESSING.order if o not in ("presence_penalty", "frequency_penalty"))))

    restricted, reason = restrict_to_sampler(CASE, NoPenalties())
    assert len(restricted.row_classes) == len(CASE.row_classes) - 2
    assert "presence_penalty" in reason and "min_tokens" in reason
    assert restricted.class_ids == tuple(c for c in range(8) if c not in (5, 7))


def test_acceptance_after_a_target_sampled_token_is_the_mixture_over_that_token():
    from specexact.audit.cases.e2e.laws import case_models
    from specexact.decoders.tiny_models import exact_sequence_law, expected_acceptance

    caps = replace(BuiltinEngine().capabilities(), first_round_after_token=True)
    law = acceptance_law(CASE, 0, caps)
    assert law.shape == (3,) and law.sum() == pytest.approx(1.0) and (law >= 0).all()
    rc = CASE.row_classes[0]
    target, draft = case_models(CASE)
    first = exact_sequence_law(target, rc.prompt, rc.params, max_tokens=1)
    ge1 = sum(w * expected_acceptance(target, draft, (*rc.prompt, int(t)), rc.params, num_speculative_tokens=2)[0]
              for (t,), w in zip(first.sequences.tolist(), first.probs.tolist()))
    assert 1 - law[0] == pytest.approx(ge1, rel=1e-9)
    assert not np.allclose(law, acceptance_law(CASE, 0, BuiltinEngine().capabilities()))


def test_case_layout_errors_name_the_field():
    with pytest.raises(ValueError, match="method must be one of"):
        replace(CASE, method="lookahead")
    with pytest.raises(ValueError, match="check_acceptance has 1 entries for 8 classes"):
        replace(CASE, check_acceptance=(True,))
    assert isinstance(CASE, E2ECase) and CASE.batch_size == 8 * 128


def test_a_findings_reproduction_reruns_the_engines_case_at_the_same_per_check_rate(tmp_path):
    # An engine audit as the CLI runs it (sampler "engine-<NAME>"), one check planted failing:
    # its finding's command must select the same end-to-end case with --engine (no --case names
    # it) and give the same per-check rate; the combined finding's command the same audit.
    import copy
    import shlex

    from specexact.audit.verdict.build import build_report
    from specexact.cli import main

    small = e2e_cases(BuiltinEngine(), "draft_model", requests_per_class=2)[0]
    report = run_audit(BuiltinEngine(), cases=[small], num_batches=2, budget_s=None, false_fail_rate=1e-6,
                       sampler_name="engine-builtin", fuzz=False)
    cases = copy.deepcopy(report["cases"])
    chk = next(c for c in cases[0]["checks"] if c["name"].startswith("sequence_law"))
    chk.update(pvalue=1e-30, passed=False)
    new = build_report(cases, sampler=report["sampler"], settings=report["settings"],
                       environment=report["environment"], started_at=report["started_at"],
                       finished_at=report["finished_at"], wall_time_s=report["wall_time_s"])
    [finding] = new["findings"]
    command = shlex.split(finding["reproduction"]["command"])
    assert command[:4] == ["specexact", "audit", "--engine", "builtin"]
    # --case names the engine's case among its end-to-end cases (the long case is one too)
    for flag, value in [("--method", "draft_model"), ("--pair", small.pair), ("--requests-per-class", "2"),
                        ("--case", small.name)]:
        assert command[command.index(flag) + 1] == value
    out = tmp_path / "again.json"
    main(command[1:] + ["--json", str(out), "--report-dir", str(tmp_path), "--no-html", "--quiet", "--no-journal"])
    import json

    again = json.loads(out.read_text())
    assert [c["name"] for c in again["cases"]] == [small.name]
    assert again["settings"]["num_checks"] == checks_per_case(small) == report["settings"]["num_checks"]
    assert again["settings"]["per_check_false_fail_rate"] == pytest.approx(
        report["settings"]["per_check_false_fail_rate"], rel=1e-5)
    assert again["cases"][0]["num_batches"] == finding["reproduction"]["num_batches"]
    # the Python reproduction names the same engine and case
    python = finding["reproduction"]["python"]
    assert "resolve_engine('builtin')" in python and repr(small.name) in python


@pytest.mark.parametrize("method", ["ngram", "prompt_lookup", "suffix"])
def test_lookup_methods_get_prompts_that_repeat_a_2gram(method):
    # Random 4-token prompts rarely repeat a token: an n-gram method then drafts in a few
    # requests in a hundred (transformers' prompt lookup, measured) and speculation goes untested;
    # vLLM's suffix trees over the request's own context: after "5 6 7 8" none of 4,000
    # requests had a first round of K = 3 drafts (scripts/replays/vllm_e2e_second_token.py
    # --method suffix).
    class Lookup(BuiltinEngine):
        def capabilities(self):
            return replace(super().capabilities(), methods=("draft_model", method))

    [lookup] = e2e_cases(Lookup(), method)
    [drafted] = e2e_cases(Lookup(), "draft_model")
    assert len(lookup.row_classes) == len(drafted.row_classes) == 8
    for rc, plain in zip(lookup.row_classes, drafted.row_classes):
        # the same random tokens, then the first 2-gram again: the context holds it, followed by γ tokens
        assert rc.prompt == plain.prompt + plain.prompt[:2] and len(plain.prompt) == 4
        assert rc.params == plain.params and rc.max_tokens == plain.max_tokens
