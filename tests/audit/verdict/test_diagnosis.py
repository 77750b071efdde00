"""The diagnosis of a report (audit/diagnosis.py), on hand-built check lists."""

import pytest

from specexact.audit.verdict.diagnosis import PARTS, diagnose


def chk(name, case="c", passed=True, n=1000, method="asymptotic", pvalue=None, **details):
    return {"case": case, "name": name, "passed": passed, "n": n, "method": method,
            "pvalue": (0.5 if passed else 1e-30) if pvalue is None else pvalue,
            "detectable_tv": 0.01, "details": details, "description": ""}


def report(checks, level="probability"):
    return {"checks": checks, "sampler": {"name": "s"},
            "settings": {"processing": {"level": level}, "case_set": "default"}}


def alt(next_gain=-100.0, prev_gain=-100.0, n=1000, imp_next=0, imp_prev=0, pit_next=0.5):
    return {"alternatives": {"ll_gain_next": next_gain, "ll_gain_prev": prev_gain, "pit_next": {"pvalue": pit_next},
                             "log_likelihood": {"n_next": n, "n_prev": n, "impossible_next": imp_next,
                                                "impossible_prev": imp_prev}}}


CLEAN = [chk("sequence_law[class 0]"), chk("accepted_length[class 0]"), chk("independent_rows[class 0]"),
         chk("independent_calls[class 0]"), chk("acceptance_exact", method="exact"), chk("acceptance", **alt()),
         chk("recovered_support", method="exact"), chk("recovered_token_law", **alt()),
         chk("bonus_token_law", **alt()), chk("eos_cut", method="exact")]


def parts(d):
    return {p["part"]: p for p in d["parts"]}


def replace(checks, name, details=None, **fields):
    out = []
    for c in checks:
        if c["name"] == name:
            c = {**c, **fields, "details": {**c["details"], **(details or {})}}
        out.append(c)
    return out


def test_all_pass_every_part_has_a_line():
    d = diagnose(report(CLEAN))
    assert [p["part"] for p in d["parts"]] == [k for k, _ in PARTS]
    assert d["culprits"] == [] and d["summary"] == "no part found faulty"
    st = {k: p["status"] for k, p in parts(d).items()}
    assert st["acceptance_rule"] == st["bonus_token"] == st["protocol"] == st["position_alignment"] == "pass"
    assert st["per_prefix_processing"] == "not_tested"  # probability level: the decoder processes


def test_bonus_from_the_previous_position():
    checks = replace(CLEAN, "bonus_token_law", passed=False, details=alt(prev_gain=5000.0))
    checks = replace(checks, "sequence_law[class 0]", passed=False)
    d = diagnose(report(checks))
    assert d["culprits"] == ["bonus_token"]
    assert "wrong position" in parts(d)["bonus_token"]["evidence"]
    assert parts(d)["emitted_law"]["explained_by"] == "bonus_token"
    assert parts(d)["position_alignment"]["status"] == "pass"


def test_alignment_needs_position_zero_to_fail_and_the_neighbour_to_fit():
    bad_acc = dict(alt(next_gain=9000.0), per_position=[{"position": 0, "pvalue": 1e-40}, {"position": 1, "pvalue": 1e-30}])
    checks = replace(CLEAN, "acceptance", passed=False, details=bad_acc)
    d = diagnose(report(checks))
    assert d["culprits"] == ["position_alignment"]
    assert parts(d)["acceptance_rule"]["explained_by"] == "position_alignment"
    # the neighbour makes some events impossible: it does not explain them
    d = diagnose(report(replace(CLEAN, "acceptance", passed=False, details={**bad_acc, **alt(next_gain=9000.0,
                                                                                          imp_next=3)})))
    assert d["culprits"] == ["acceptance_rule"]
    # position 0 clean: not misalignment
    clean0 = dict(bad_acc, per_position=[{"position": 0, "pvalue": 0.4}, {"position": 1, "pvalue": 1e-30}])
    d = diagnose(report(replace(CLEAN, "acceptance", passed=False, details=clean0)))
    assert d["culprits"] == ["acceptance_rule"]


# Issue 23: the recovered token drawn from the next position's residual while the decisions
# are right is a fault of the recovered token ("drawn from the wrong position"), not a
# misaligned target law; and the alignment part states what it measured, never "fit their
# own position's law better" regardless of the figures.
def test_recovered_tokens_alone_fitting_the_next_position_are_the_recovered_tokens_fault():
    bad_rec = dict(alt(next_gain=9000.0), per_position=[{"position": 0, "pvalue": 1e-40}])
    checks = replace(CLEAN, "recovered_token_law", passed=False, details=bad_rec)
    checks = replace(checks, "recovered_support", passed=False, method="exact", pvalue=0.0,
                     details={"violations": 7, "violations_by_position": [4, 3]})
    d = diagnose(report(checks))
    assert d["culprits"] == ["recovered_token"]
    rec, align = parts(d)["recovered_token"], parts(d)["position_alignment"]
    assert "fit the residual of position i+1" in rec["evidence"] and "wrong position" in rec["evidence"]
    assert align["status"] == "pass" and "fit their own position's law better" not in align["evidence"]
    assert "only the recovered tokens fit a neighbour's residual" in align["evidence"]
    # the same figures with the decisions failing too: the target law is misaligned
    both = replace(checks, "acceptance", passed=False, details=dict(alt(next_gain=9000.0),
                                                                     per_position=[{"position": 0, "pvalue": 1e-40}]))
    assert diagnose(report(both))["culprits"] == ["position_alignment"]


def test_alignment_evidence_states_the_measured_gain():
    checks = replace(CLEAN, "acceptance", passed=False, details=dict(alt(next_gain=12.0, prev_gain=-50.0),
                                                                       per_position=[{"position": 0, "pvalue": 1e-40}]))
    align = parts(diagnose(report(checks)))["position_alignment"]
    assert align["status"] == "pass"
    assert "no neighbouring position's law explains" in align["evidence"] and "+12 nats over 1000" in align["evidence"]
    unmeasured = [c for c in CLEAN if c["name"] != "acceptance"] + [
        chk("acceptance", passed=False, per_position=[{"position": 0, "pvalue": 1e-40}])]
    assert "not measured" in parts(diagnose(report(unmeasured)))["position_alignment"]["evidence"]


def test_per_prefix_processing_at_the_logits_level():
    exact = {"violations": 5, "violations_by_position": [0, 3, 2], "checked_by_position": [500, 400, 300],
             "violation_events": [{"kind": "decision", "drafts": [1, 2], "history": [], "position": 1, "class": 0,
                                   "token": 1, "p_draft": 0.0, "q_draft": 0.2}]}
    checks = replace(CLEAN, "acceptance_exact", passed=False, pvalue=0.0, details=exact)
    d = diagnose(report(checks, level="logits"))
    assert d["culprits"] == ["per_prefix_processing"]
    assert "position 0 clean" in parts(d)["per_prefix_processing"]["evidence"]
    assert parts(d)["acceptance_rule"]["explained_by"] == "per_prefix_processing"
    assert parts(d)["acceptance_rule"]["replay"].startswith("from specexact.audit.decisions_replay")
    # the same at the probability level is the acceptance rule's fault
    assert diagnose(report(checks))["culprits"] == ["acceptance_rule"]
    # only the sequence law failing: processing, heuristically, at the logits level
    seq = replace(CLEAN, "sequence_law[class 0]", passed=False)
    assert diagnose(report(seq, level="logits"))["culprits"] == ["per_prefix_processing"]
    assert diagnose(report(seq))["culprits"] == ["emitted_law"]


def test_dependence_explains_statistical_per_event_failures():
    checks = replace(CLEAN, "independent_rows[class 0]", passed=False, method="exact")
    checks = replace(checks, "recovered_token_law", passed=False)
    d = diagnose(report(checks))
    assert d["culprits"] == ["independence"]
    assert parts(d)["recovered_token"]["explained_by"] == "independence"
    # an exact violation is not explained by dependence
    checks = replace(checks, "recovered_support", passed=False, method="exact", pvalue=0.0)
    assert diagnose(report(checks))["culprits"] == ["independence", "recovered_token"]


@pytest.mark.parametrize("events,needle", [
    ([{"p_token": 0.3001, "q_token": 0.3, "kind": "recovered"}], "near tie"),
])
def test_near_tie_hint(events, needle):
    checks = replace(CLEAN, "recovered_support", passed=False, method="exact", pvalue=0.0,
                     details={"violations": 1, "violation_events": events})
    assert any(needle in n for n in diagnose(report(checks))["notes"])


def test_scaled_acceptance_hint_and_defects():
    ev = [{"kind": "decision", "p_draft": 0.3015, "q_draft": 0.3, "rule": "rejected"}]
    checks = replace(CLEAN, "acceptance_exact", passed=False, method="exact", pvalue=0.0,
                     details={"violations": 1, "violation_events": ev})
    assert any("scaled-down" in n for n in diagnose(report(checks))["notes"])
    d = diagnose(report(CLEAN + [chk("defect", passed=False, method="exact", pvalue=0.0, n=0, message="boom")]))
    assert d["culprits"][0] == "protocol" and "boom" in parts(d)["protocol"]["evidence"]


def _fuzz_finding(family, rule, message, known=None):
    return {"family": family, "rule": rule, "message": message, "example": "ProbExample(...)", "known_as": known}


def test_fuzz_findings_fail_their_parts_and_are_never_explained_away():
    """All statistical checks pass, the fuzz phase found exact violations: the diagnosis
    names their parts (not "no part found faulty"), even beside a reproducibility culprit."""
    r = report(CLEAN)
    r["fuzz"] = {"findings": [
        _fuzz_finding("acceptance_probes", "zero_probability_token",
                      "emitted token 0 at row 0, position 0 (an accepted draft), whose target probability there is 0",
                      known="transformers-zero-probability-acceptance"),
        _fuzz_finding("acceptance_probes", "no_crash", "RuntimeError: probability tensor contains nan"),
        _fuzz_finding("verify_calls", "zero_probability_token",
                      "emitted token 3 at row 1, position 2 (the last (recovered or bonus) token), whose target ..."),
        _fuzz_finding("verify_calls", "same_generator_same_output", "two calls with the same generator state ..."),
    ]}
    d = diagnose(r)
    p = parts(d)
    assert p["acceptance_rule"]["status"] == "fail" and p["acceptance_rule"]["explained_by"] is None
    assert "transformers-zero-probability-acceptance" in p["acceptance_rule"]["evidence"]
    assert p["acceptance_rule"]["failed"] == ["fuzz / acceptance_probes / zero_probability_token"]
    assert p["recovered_token"]["status"] == "fail" and p["protocol"]["status"] == "fail"
    assert p["reproducibility"]["status"] == "fail"
    assert set(d["culprits"]) == {"protocol", "reproducibility", "acceptance_rule", "recovered_token"}
    assert d["summary"].startswith("faulty:")
    # Without fuzz findings the same report is clean.
    assert diagnose({**r, "fuzz": {"findings": []}})["summary"] == "no part found faulty"
