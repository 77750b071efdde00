"""Tree-level audit cases: which samplers they serve, their reference laws, and the references
of every scheme passing them through the audit (and the CLI)."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from specexact.audit import AuditSettings, default_cases, run_audit
from specexact.audit.cases.catalog import all_cases, default_cases_for, find_case
from specexact.audit.run.pilot import pilot_costs
from specexact.audit.cases.dispatch import checks_per_case, restrict_to_sampler, run_case, unsupported_reason
from specexact.audit.cases.tree_case import (
    TREE_CHECKS_PER_CLASS,
    restrict_tree_case,
    tree_cases,
)
from specexact.audit.cases.tree_kind import reference_accepted_length_law
from specexact.audit.cases.verify_case import verify_cases
from specexact.cli import main
from specexact.decoders import verify
from specexact.decoders.adapters.builtin_logits import LogitsLevelVerifier
from specexact.decoders.tree import REFERENCE_SAMPLERS, TreeSampler, TreeVerifyOutput
from specexact.exactness.tree_laws import (
    target_only_accepted_length_law,
    tokenwise_accepted_length_law,
)

CASES = {c.name: c for c in tree_cases()}
QUICK = {c.name: c for c in tree_cases(quick=True)}


def test_tree_cases_are_listed_and_found_by_name():
    names = [c.name for c in all_cases()]
    assert set(CASES) <= set(names) and len(names) == len(set(names))
    assert find_case("tree-rrs-v4") == CASES["tree-rrs-v4"]
    assert find_case("tree-rrs-v4", quick=True).batch_size == CASES["tree-rrs-v4"].batch_size // 4
    for case in CASES.values():
        assert checks_per_case(case) == TREE_CHECKS_PER_CLASS * len(case.row_classes)
        d = case.to_dict()
        assert d["kind"] == "tree" and d["exact"] is True and d["num_draft_tokens"] == case.depth


@pytest.mark.parametrize("change, match", [
    ({"row_classes": ()}, "row_classes is empty"),
    ({"batch_size": 6}, "multiple of"),
    ({"branching": ()}, "branching"),
    ({"branching": (2, 0)}, "branching"),
    ({"length": 3}, "must exceed depth"),
    ({"drafting": "beam"}, "drafting"),
    ({"protocol": "graph"}, "protocol"),
    ({"protocol": "chain"}, "branching \\(1, ..., 1\\)"),
    ({"schemes": ("block",)}, "schemes"),
    ({"schemes": ()}, "schemes"),
    ({"kind": "chain"}, "kind"),
    ({"class_ids": (0,)}, "class_ids"),
])
def test_tree_case_validation_names_the_field(change, match):
    with pytest.raises(ValueError, match=match):
        replace(CASES["tree-rrs-v4"], **change)


def test_restricted_keeps_name_and_class_numbers():
    case = CASES["tree-rrs-v4"].restricted([1])
    assert case.name == "tree-rrs-v4" and case.class_id(0) == 1 and case.batch_size % 4 == 0
    with pytest.raises(ValueError, match="keep"):
        CASES["tree-rrs-v4"].restricted([])


REASONS = [  # (sampler, case name, fragment of the reason); None: runs
    ("tree_rrs", "tree-rrs-v4", None),
    ("tree_rrs", "tree-topk-v8", None),
    ("tree_rrs", "block-v3", "chain-protocol case"),
    ("tree_rrs", "typical-v3", "judges schemes lossy"),
    ("multi_draft", "multi-draft-v4", None),
    ("multi_draft", "tree-rrs-v4", "declares 'multi_draft'"),
    ("tree_target_only", "tree-topk-v8", None),
    ("tree_target_only", "tree-wor-v4", "without_replacement drafting"),
    ("typical", "typical-v3", None),
    ("typical", "tree-rrs-v4", None),
    ("block", "block-v3", None),
    ("block", "tree-rrs-v4", "tree-protocol case"),
    ("typical_chain", "block-v3", "judges schemes block"),
]


@pytest.mark.parametrize("sampler, case, fragment", REASONS)
def test_a_tree_case_serves_the_samplers_of_its_protocol_scheme_and_drafting(sampler, case, fragment):
    runnable, reason = restrict_tree_case(CASES[case], REFERENCE_SAMPLERS[sampler])
    assert restrict_to_sampler(CASES[case], REFERENCE_SAMPLERS[sampler]) == (runnable, reason)
    if fragment is None:
        assert runnable is CASES[case] and reason is None
    else:
        assert runnable is None and fragment in reason


def test_chain_cases_refuse_tree_samplers_and_measure_lossy_ones_only_on_exact_laws():
    v8 = next(c for c in default_cases() if c.name == "v8-plain")
    v4096 = next(c for c in default_cases() if not c.exact)
    tree = REFERENCE_SAMPLERS["tree_rrs"]
    assert restrict_to_sampler(v8, tree)[0] is None and "protocol 'tree'" in unsupported_reason(v8, tree)
    lossy = REFERENCE_SAMPLERS["typical_chain"]
    assert restrict_to_sampler(v8, lossy) == (v8, None)
    assert restrict_to_sampler(v4096, lossy)[0] is None and "lossy" in unsupported_reason(v4096, lossy)
    assert restrict_to_sampler(verify_cases()[0], lossy)[0] is None
    logits = LogitsLevelVerifier()
    assert "logits-level" in restrict_tree_case(CASES["tree-rrs-v4"], logits)[1]
    # A tree sampler has no chain call: an audit of only chain cases cannot run.
    with pytest.raises(ValueError, match="no audit case can drive this sampler"):
        run_audit(tree, AuditSettings(cases=(v8,), num_batches=2))


def test_the_default_cases_follow_the_samplers_protocol_and_scheme():
    tree_defaults = [c.name for c in default_cases_for(REFERENCE_SAMPLERS["tree_rrs"])]
    assert tree_defaults == [c.name for c in tree_cases() if c.protocol == "tree"]
    assert [c.name for c in default_cases_for(verify)] == [c.name for c in default_cases()]
    block = [c.name for c in default_cases_for(REFERENCE_SAMPLERS["block"])]
    assert block == [c.name for c in default_cases()] + ["block-v3"]
    assert default_cases_for(verify, quick=True)[0].batch_size == default_cases()[0].batch_size // 4


def test_reference_laws_match_the_closed_forms():
    topk = CASES["tree-topk-v8"]
    for c in range(2):
        from specexact.audit.cases.tree_kind import _laws

        law, tokenwise = reference_accepted_length_law(topk, c, "tree")
        assert tokenwise is None
        assert np.allclose(law, target_only_accepted_length_law(_laws(topk, c), topk.branching), atol=1e-14)
    block = CASES["block-v3"]
    for c in range(2):
        law, tokenwise = reference_accepted_length_law(block, c, "block")
        assert np.allclose(tokenwise, tokenwise_accepted_length_law(_laws(block, c), 3), atol=1e-14)
        # Block verification's tail dominates token-wise's: P(N >= i) at least as large.
        assert np.all(np.cumsum(law[::-1])[::-1] >= np.cumsum(tokenwise[::-1])[::-1] - 1e-12)
        assert np.dot(np.arange(4), law) > np.dot(np.arange(4), tokenwise) + 0.01
    assert reference_accepted_length_law(CASES["typical-v3"], 0, "lossy")[0] is None


REFERENCE_RUNS = {name: [c for c in QUICK.values() if restrict_tree_case(c, REFERENCE_SAMPLERS[name])[0]]
                  for name in ("tree_rrs", "multi_draft", "tree_target_only", "block")}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.statistical(
    checks=sum(checks_per_case(c) for c in cases))) for n, cases in REFERENCE_RUNS.items()])
def test_every_lossless_reference_passes_its_tree_level_cases(name, alpha):
    cases = REFERENCE_RUNS[name]
    checks = sum(checks_per_case(c) for c in cases)
    report = run_audit(REFERENCE_SAMPLERS[name], cases=cases, false_fail_rate=alpha * checks, num_batches=4,
                       budget_s=None, seed=1)
    assert report["verdict"] == "pass", report["findings"]
    assert {c["name"] for c in report["cases"]} == {c.name for c in cases}
    acc = [c for c in report["checks"] if c["name"].startswith("accepted_length")]
    assert acc and all(c["details"]["scheme"] == REFERENCE_SAMPLERS[name].capabilities.scheme for c in acc)
    laws = [c for c in report["checks"] if c["name"].startswith("sequence_law")]
    assert laws and all("certified_tv" in c["details"] for c in laws)


def _bad_tree_verifier(draft_token_ids, parent_ids, draft_probs, target_probs, generator=None):
    B = draft_token_ids.shape[0]
    return TreeVerifyOutput(torch.full((B, 3), 99), torch.full((B, 2), -1))  # ids out of range


BAD = TreeSampler("bad", REFERENCE_SAMPLERS["tree_rrs"].capabilities, _bad_tree_verifier)


def test_a_protocol_violation_in_the_tree_decoder_is_a_defect():
    res = run_case(QUICK["tree-topk-v8"], BAD, false_fail_rate=1e-6, num_batches=2)
    assert res.defect and res.defect.startswith("protocol violation") and not res.passed
    assert [c.name for c in res.checks] == ["defect"]


def test_the_pilot_times_tree_cases_and_falls_back_when_the_sampler_raises():
    cases = [QUICK["tree-topk-v8"], QUICK["block-v3"]]
    assert all(t > 0 for t in pilot_costs(cases, verifier=BAD))
    assert all(t > 0 for t in pilot_costs(cases))


def test_cli_runs_a_tree_reference_and_exits_2_without_a_runnable_case(tmp_path, capsys):
    assert main(["audit", "--sampler", "tree-rrs", "--case", "v8-plain", "--batches", "2", "--quiet",
                 "--report-dir", str(tmp_path)]) == 2
    assert "protocol 'tree'" in capsys.readouterr().err.replace("\n", " ")
    assert main(["audit", "--list-cases"]) == 0
    assert "tree-rrs-v4 (tree-protocol samplers" in capsys.readouterr().out


@pytest.mark.statistical(checks=8)
def test_cli_audits_a_tree_reference_by_its_entry_point(tmp_path, alpha, capsys):
    code = main(["audit", "--sampler", "tree-target-only", "--case", "tree-topk-v8", "--quick", "--batches", "2",
                 "--quiet", "--false-fail-rate", str(alpha * 8), "--report-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "tree-topk-v8 / sequence_law[class 0]" in out and "certified TV" in out
