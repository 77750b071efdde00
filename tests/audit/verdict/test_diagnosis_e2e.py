"""The end-to-end diagnosis (audit/verdict/diagnosis_e2e.py): the parts of an engine's generate
loop, each with the checks that tested it; on a real audit of the built-in engine and on
hand-built check lists."""

import pytest

from specexact.audit import run_audit
from specexact.audit.cases.dispatch import checks_per_case
from specexact.audit.cases.e2e.catalog import e2e_cases
from specexact.audit.verdict.diagnosis import diagnose
from specexact.audit.verdict.diagnosis_e2e import E2E_PARTS, coverage, is_e2e_report
from specexact.decoders.engines.builtin import BuiltinEngine
from specexact.reports.diagnosis_text import diagnosis_rows
from specexact.reports.markdown import render_markdown
from specexact.reports.schema import validate_report

CASE = e2e_cases(BuiltinEngine(), "draft_model", requests_per_class=256)[0]  # the CLI's default size
CHECKS = checks_per_case(CASE)
CLASSES = [rc.describe() for rc in CASE.row_classes]


@pytest.mark.statistical(checks=CHECKS)
def test_the_builtin_engines_diagnosis_names_every_part_of_the_loop_with_the_checks_that_tested_it(alpha):
    engine = BuiltinEngine()
    report = run_audit(engine, cases=[CASE], num_batches=2, budget_s=None, false_fail_rate=alpha * CHECKS,
                       sampler_name=f"engine:{engine.name}", fuzz=False)
    assert report["verdict"] == "pass", report["findings"]
    d = report["diagnosis"]
    assert d["level"] == "e2e" and d["summary"] == "no part found faulty" and d["culprits"] == d["suspects"] == []
    parts = {p["part"]: p for p in d["parts"]}
    assert list(parts) == [k for k, _ in E2E_PARTS]
    assert {"drafting", "target_forward", "per_prefix_processing", "acceptance_rule", "recovered_token",
            "bonus_token", "eos_cut", "seeds", "batching", "protocol"} <= set(parts)
    for key, p in parts.items():  # every part tested, none "not tested"
        assert p["status"] == "pass" and p["checks_run"] > 0 and p["tested_by"], (key, p)
    name = CASE.name
    assert parts["seeds"]["tested_by"] == [f"{name} / {t}" for t in ("reproducible", "reproducible_in_mix",
                                                                       "independent_requests")]
    # the plain class (0) has no processing: per-prefix processing is tested by the others
    assert f"{name} / sequence_law[class 0]" not in parts["per_prefix_processing"]["tested_by"]
    assert f"{name} / sequence_law[class 7]" in parts["per_prefix_processing"]["tested_by"]  # min_tokens
    assert f"{name} / accepted_length[class 0]" in parts["acceptance_rule"]["tested_by"]
    assert not any("plain_sequence_law" in t for t in parts["acceptance_rule"]["tested_by"])
    validate_report(report)
    md = render_markdown(report)
    section = md.split("## Diagnosis", 1)[1].split("\n## ", 1)[0]
    assert "not tested" not in section and "probability-level sampler" not in section
    assert "tested by " + name + ": sequence_law[class 0-7]" in section


def chk(name, case="e2e-x", passed=True, n=512, pvalue=None, **details):
    return {"case": case, "name": name, "passed": passed, "n": n, "method": "asymptotic",
            "pvalue": (0.5 if passed else 0.0) if pvalue is None else pvalue, "detectable_tv": 0.2,
            "details": details, "description": ""}


ROWS = ["prompt [1, 2]; default; max_tokens=3; eos off", "prompt [3, 4]; T=0.6 top_k=8; max_tokens=4; eos off",
        "prompt [5, 6]; top_k=8 repetition_penalty=1.5; max_tokens=4; eos off",
        "prompt [7, 8]; T=2 top_k=8; max_tokens=4; eos on"]


def e2e_report(fail=(), accepted_fail=()):
    checks = [chk("reproducible", n=2048)]
    for c in range(len(ROWS)):
        checks += [chk(f"sequence_law[class {c}]", passed=c not in fail),
                   chk(f"plain_sequence_law[class {c}]"),
                   chk(f"sequences_vs_plain[class {c}]", passed=c not in fail)]
        if c < 3:
            checks.append(chk(f"accepted_length[class {c}]", passed=c not in accepted_fail))
    return {"checks": checks, "sampler": {"name": "e"}, "settings": {},
            "cases": [{"name": "e2e-x", "config": {"kind": "e2e", "num_speculative_tokens": 2, "row_classes": ROWS,
                                                   "class_ids": None}}]}


def test_a_report_of_end_to_end_cases_gets_the_generate_loops_parts_and_others_keep_theirs():
    assert is_e2e_report(e2e_report())
    verify_level = {"checks": [chk("acceptance_exact", case="v8")], "sampler": {"name": "s"}, "settings": {},
                    "cases": [{"name": "v8", "config": {"name": "v8"}}]}
    assert not is_e2e_report(verify_level)
    d = diagnose(verify_level)
    assert "level" not in d and [p["part"] for p in d["parts"]][0] == "acceptance_rule"
    assert "drafting" not in {p["part"] for p in d["parts"]}


def test_failures_that_follow_a_processing_operation_are_named_per_prefix_processing():
    d = diagnose(e2e_report(fail={1, 3}))  # the classes with a temperature
    assert d["culprits"] == ["per_prefix_processing"] and d["suspects"] == []
    parts = {p["part"]: p for p in d["parts"]}
    assert "the fault follows temperature" in parts["per_prefix_processing"]["evidence"]
    assert parts["acceptance_rule"]["explained_by"] == "per_prefix_processing"
    assert parts["seeds"]["status"] == "pass"


def test_failures_the_checks_cannot_locate_make_suspects_ranked_by_the_first_rounds_acceptance():
    d = diagnose(e2e_report(fail={0, 1, 2, 3}, accepted_fail={0, 1, 2}))
    assert d["culprits"] == ["emitted_law"]
    assert d["suspects"][:3] == ["drafting", "target_forward", "acceptance_rule"]
    parts = {p["part"]: p for p in d["parts"]}
    assert all(parts[k]["status"] == "suspect" for k in d["suspects"])
    rows = {r["label"]: r for r in diagnosis_rows(d)}
    assert rows["acceptance rule"]["symbol"] == "?" and rows["acceptance rule"]["text"].startswith("SUSPECT")
    # the first round right: recovered and bonus tokens are likelier than the drafts or acceptance
    d = diagnose(e2e_report(fail={0, 1, 2, 3}))
    assert d["suspects"].index("bonus_token") < d["suspects"].index("acceptance_rule")


def test_a_seed_fault_is_named_seeds_and_a_crash_protocol():
    r = e2e_report()
    r["checks"][0] = chk("reproducible", passed=False, n=0, message="same requests, same seeds, different outputs")
    d = diagnose(r)
    assert d["culprits"] == ["seeds"]
    assert d["summary"] == "faulty: seeds (same seed, same output; unseeded requests independent)"
    r["checks"].append(chk("defect", passed=False, n=0, message="crash in speculative generate call 0"))
    assert diagnose(r)["culprits"] == ["protocol", "seeds"]


@pytest.mark.parametrize("violation, part", [
    ("request 11: tokens continue after EOS 37 at index 0", "eos_cut"),
    ("request 2: 3 tokens for max_tokens=5 without EOS at the end", "eos_cut"),
    ("request 0: EOS at index 1 before min_tokens=3", "per_prefix_processing"),
])
def test_a_protocol_violation_that_names_a_part_of_the_loop_blames_it_directly(violation, part):
    # an output that continues after its EOS is the loop's EOS bookkeeping, not only "the protocol"
    r = e2e_report()
    message = f"protocol violation in speculative generate call 0: VerifierProtocolError: speculative generate: {violation}"
    r["checks"].append(chk("defect", passed=False, n=0, message=message))
    d = diagnose(r)
    parts = {p["part"]: p for p in d["parts"]}
    assert d["culprits"][:1] == ["protocol"] and part in d["culprits"], d["summary"]
    assert parts[part]["status"] == "fail" and not parts[part]["heuristic"] and violation in parts[part]["evidence"]
    # a crash names the protocol only
    r["checks"][-1] = chk("defect", passed=False, n=0, message="crash in speculative generate call 0")
    assert diagnose(r)["culprits"] == ["protocol"]


def test_dependent_unseeded_requests_are_named_seeds_and_explain_the_laws_that_pool_them():
    # a shared stream: independent_requests fails, and the law checks that pool the dependent
    # draws as independent fail with it; they name no suspect
    r = e2e_report(fail={0, 1, 2, 3})
    r["checks"].append(chk("independent_requests", passed=False, pvalue=1e-40, n=256))
    d = diagnose(r)
    assert d["culprits"] == ["seeds"] and d["suspects"] == [], d["summary"]
    parts = {p["part"]: p for p in d["parts"]}
    assert parts["emitted_law"]["explained_by"] == "seeds" and parts["drafting"]["explained_by"] == "seeds"
    assert any("not independent" in n for n in d["notes"])
    # a seeded request that does not reproduce in another mix: seeds, a defect
    r = e2e_report()
    r["checks"].append(chk("reproducible_in_mix", passed=False, n=0))
    assert diagnose(r)["culprits"] == ["seeds"]
    assert coverage(chk("independent_requests"), {}) == coverage(chk("reproducible_in_mix"), {}) == {"seeds"}


def test_what_each_check_covers():
    classes = {0: {"features": set(), "bonus": True}, 1: {"features": {"temperature"}, "bonus": False}}
    assert "per_prefix_processing" not in coverage(chk("sequence_law[class 0]"), classes)
    assert {"per_prefix_processing", "drafting"} <= coverage(chk("sequence_law[class 1]"), classes)
    assert "bonus_token" not in coverage(chk("sequence_law[class 1]"), classes)
    assert "acceptance_rule" not in coverage(chk("plain_sequence_law[class 0]"), classes)
    assert coverage(chk("reproducible"), classes) == {"seeds"}
    assert coverage(chk("defect"), classes) == {"protocol"}


def test_failing_logprobs_beside_a_failing_law_give_both_readings():
    # logprobs wrong, emitted law right (LogprobsOfDraftLaw): the logprobs, no second reading
    r = e2e_report()
    r["checks"].append(chk("token_logprobs", passed=False, n=0))
    d = diagnose(r)
    assert d["culprits"] == ["logprobs"] and not any("report the engine's own wrong law" in n for n in d["notes"])
    # the emitted law wrong too (a processing fault the logprobs report faithfully): both readings
    r = e2e_report(fail={3})
    r["checks"].append(chk("token_logprobs", passed=False, n=0))
    notes = [n for n in diagnose(r)["notes"] if "report the engine's own wrong law" in n]
    assert len(notes) == 1 and "sequence_law[class 3]" in notes[0], diagnose(r)["notes"]
