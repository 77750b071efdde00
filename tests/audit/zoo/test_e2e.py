"""Planted end-to-end faults (audit/zoo_e2e.py): each is caught, by the check and in the tier
that name it, at the suite's per-check rate."""

import pytest

from specexact.audit import run_audit
from specexact.audit.cases.e2e.catalog import e2e_cases
from specexact.audit.cases.dispatch import checks_per_case
from specexact.audit.zoo.e2e import E2E_WRONG

EXPECTED = {  # the check type that must fail, its tier, and the diagnosis part: a culprit, or a
    # likelier suspect where the end-to-end checks cannot tell the parts apart (audit/verdict/diagnosis_e2e.py)
    "logits_one_position_off": ("sequence_law", "inexact", "target_forward", "suspects"),
    "temperature_on_drafts_only": ("sequence_law", "inexact", "per_prefix_processing", "culprits"),
    "seed_ignored": ("reproducible", "defect", "seeds", "culprits"),
    "bonus_from_wrong_position": ("sequence_law", "inexact", "bonus_token", "suspects"),
    "crashes_on_top_k": ("defect", "defect", "protocol", "culprits"),
    "logprobs_of_draft_law": ("token_logprobs", "defect", "logprobs", "culprits"),
    "shared_unseeded_stream": ("independent_requests", "inexact", "seeds", "culprits"),
    "seed_stream_by_place": ("reproducible_in_mix", "defect", "seeds", "culprits"),
    "seeded_stream_of_the_batch": ("reproducible_alone", "defect", "seeds", "culprits"),
}


REQUESTS_PER_CLASS = 32
"""Requests per class of each planted fault's case (was 128, and 64 for the crash test: a
quarter of the engine's work). Measured at seed 0 with 32, at the per-check rate 1.7e-10:
each fault's expected check fails by an exact test at p = 0, an event impossible under the
correct law seen (a token outside its law's support in ``sequence_law``, a logprob off its
law, a seeded request that does not reproduce, ``independent_requests``' exact test, the
crash); at 128 the same checks failed at p = 0 too. The diagnosis assertions hold at 32."""


def test_every_planted_fault_has_its_expectation():
    assert set(EXPECTED) == set(E2E_WRONG)


@pytest.mark.statistical(checks=0)  # a planted fault risks only a false pass
@pytest.mark.parametrize("name", sorted(E2E_WRONG))
def test_planted_end_to_end_fault_is_caught(name, alpha):
    engine = E2E_WRONG[name]()
    (case,) = e2e_cases(engine, "draft_model", requests_per_class=REQUESTS_PER_CLASS)
    report = run_audit(engine, cases=[case], num_batches=2, budget_s=None, false_fail_rate=alpha * checks_per_case(case),
                       sampler_name=engine.name, fuzz=False)
    check, tier, part, where = EXPECTED[name]
    assert report["verdict"] == "fail"
    failed = {(f["check"].split("[")[0], f["tier"]) for f in report["findings"]}
    assert (check, tier) in failed, failed
    diagnosis = report["diagnosis"]
    assert diagnosis["level"] == "e2e"
    assert part in diagnosis[where], diagnosis["summary"]
    parts = {p["part"]: p for p in diagnosis["parts"]}
    assert parts[part]["status"] == ("fail" if where == "culprits" else "suspect"), parts[part]
    if where == "culprits":
        assert diagnosis["culprits"][0] == part and not diagnosis["suspects"], diagnosis["summary"]
        assert parts[part]["tested_by"]
    if name == "temperature_on_drafts_only":  # located by the classes: those with a temperature fail
        assert "temperature" in parts[part]["evidence"].split("the fault follows ")[1], parts[part]["evidence"]
    if name not in ("seed_ignored", "shared_unseeded_stream"):  # the engine's plain sampling is right: only
        # speculation changed the law (the seed faults are in both paths)
        assert not any(f["check"].startswith("plain_sequence_law") for f in report["findings"])


@pytest.mark.statistical(checks=0)  # the crash is exact; the other classes' checks run at the case's rate
def test_the_classes_that_crash_are_named_and_the_others_audited(alpha):
    from specexact.audit.zoo.e2e import CrashesOnTopK

    engine = CrashesOnTopK()
    (case,) = e2e_cases(engine, "draft_model", requests_per_class=REQUESTS_PER_CLASS)
    top_k = [case.class_id(c) for c, rc in enumerate(case.row_classes) if rc.params.top_k]
    others = [case.class_id(c) for c, rc in enumerate(case.row_classes) if not rc.params.top_k]
    assert top_k and others
    report = run_audit(engine, cases=[case], num_batches=2, budget_s=None, false_fail_rate=alpha * checks_per_case(case),
                       sampler_name=engine.name, fuzz=False)
    (rep,) = report["cases"]
    assert rep["defect"].startswith("crash in speculative generate call 0")
    first = rep["defect"].splitlines()[0]
    assert all(f"class {c} (" in first for c in top_k) and not any(f"class {c} (" in first for c in others)
    assert f"went on with classes {', '.join(map(str, others))}" in first
    # the other classes were audited: their law checks ran on sequences, and they pass
    names = {c["name"]: c for c in rep["checks"]}
    for c in others:
        assert names[f"sequence_law[class {c}]"]["passed"], names[f"sequence_law[class {c}]"]
    assert rep["num_sequences"] == 2 * REQUESTS_PER_CLASS * len(others)
    assert [f["tier"] for f in report["findings"]] == ["defect"]
    # its replay is the engine's end-to-end audit of the same case, not a verify-level one
    command = report["findings"][0]["reproduction"]["command"]
    assert command.startswith("specexact audit --engine ") and "--method draft_model --pair llama-v64" in command
    assert f"--requests-per-class {REQUESTS_PER_CLASS}" in command and f"--case {case.name}" in command
    # its calls: one past those the other classes ran (they reach the crash at call 0 and
    # sample as much as the audit did), not the plan's number (often far more than ran)
    from specexact.audit.verdict.reproduction_commands import case_reproduction

    ran = dict(rep, num_batches=568, execution={**rep["execution"], "planned_batches": 1106})
    assert " --batches 570 " in case_reproduction(ran, report["settings"], report["sampler"])["command"] + " "


@pytest.mark.statistical(checks=0)  # exact: a crash and a failed load
def test_a_load_that_fails_after_a_crash_names_the_crash(alpha):
    from specexact.audit.zoo.e2e import CrashesOnTopK

    class LoadsOnce(CrashesOnTopK):  # vLLM after numba: no second engine in the process
        loads = 0

        def load(self, *args, **kwargs):
            LoadsOnce.loads += 1
            if LoadsOnce.loads > 1:
                raise AttributeError("'_lib_fn_wrapper' object has no attribute 'get'")
            super().load(*args, **kwargs)

    engine = LoadsOnce()
    (case,) = e2e_cases(engine, "draft_model", requests_per_class=16)
    report = run_audit(engine, cases=[case], num_batches=2, budget_s=None, false_fail_rate=alpha,
                       sampler_name=engine.name, fuzz=False)
    (rep,) = report["cases"]
    first = rep["defect"].splitlines()[0]
    # the crash, then the failed load; the search for the crashing classes stopped there
    assert first.startswith("crash in speculative generate call 0: RuntimeError: index"), first
    assert "could not be loaded again after a crash (AttributeError" in first and "crashes alone" not in first, first


@pytest.mark.statistical(checks=0)  # exact: the crash; the rest's checks run at the case's rate
def test_an_engines_own_reload_is_used_and_the_crash_search_is_paid_from_the_cases_time(alpha):
    import time

    from specexact.audit.cases.e2e.sampling import run_e2e_case
    from specexact.audit.zoo.e2e import CrashesOnTopK

    RELOAD_S, CASE_TIME_S = 0.3, 0.75  # (was 0.6 and 1.5 s: the same order, half the sleeping)

    class Reloads(CrashesOnTopK):  # restarts itself after a raise (as the vLLM adapter does)
        calls: list = []

        def load(self, *args, **kwargs):
            Reloads.calls.append("load")
            super().load(*args, **kwargs)

        def reload(self):
            Reloads.calls.append("reload")
            time.sleep(RELOAD_S)  # a slow restart: the crash search outlasts the case's time
            self.broken = False

    engine = Reloads()
    (case,) = e2e_cases(engine, "draft_model", requests_per_class=8)
    crashing = sum(1 for rc in case.row_classes if rc.params.top_k)
    assert crashing >= 3
    res = run_e2e_case(case, engine, false_fail_rate=alpha, time_budget_s=CASE_TIME_S)
    # one load; after every crash (the full call's, then each crashing class's) the engine's
    # own reload, never close + load
    assert Reloads.calls == ["load"] + ["reload"] * (crashing + 1), Reloads.calls
    # the reloads took RELOAD_S each, (crashing + 1) * RELOAD_S >= 1.2 s in all, past the case's
    # 0.75 s: the other classes get what is left of it (nothing), so they run their minimum of 2 calls
    assert res.num_batches == 2, res.num_batches
    ph = res.phase_times_s
    assert {"engine_load", "crash_search", "speculative_calls", "plain_calls", "checks"} <= set(ph), ph
    assert ph["engine_load"] >= RELOAD_S * (crashing + 1)
    assert sum(ph.values()) <= res.wall_time_s + 1e-6
