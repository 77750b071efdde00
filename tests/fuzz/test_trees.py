"""Tree-protocol samplers are fuzzed (issue 23): generated draft trees, the chain rules that
apply; planted defects caught, the reference tree samplers pass."""

import contextlib
import io

import pytest

from specexact.decoders.tree import REFERENCE_SAMPLERS
from specexact.fuzz import FuzzSettings, run_fuzz
from specexact.fuzz.subject import Subject
from specexact.fuzz.trees import TREE_CORRUPTIONS, TreeExample, check_tree_call, corrupt_tree
from specexact.strategies import TreeVerifyCase

SMALL = FuzzSettings(examples=8, seed=3)


@pytest.fixture
def tree_faulty(monkeypatch):
    """The planted samplers (tests/fuzz/tree_faulty.py), importable by name (the replays
    resolve ``tree_faulty:NAME``)."""
    import importlib
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    return importlib.import_module("tree_faulty")


@pytest.mark.parametrize("name", ["tree_rrs", "multi_draft", "tree_target_only", "typical"])
def test_the_reference_tree_samplers_pass(name):
    result = run_fuzz(REFERENCE_SAMPLERS[name], SMALL, name=name)
    assert result.passed, [(f.rule, f.message) for f in result.findings]
    d = result.to_dict()
    assert [f["name"] for f in d["families"]] == ["tree_calls", "tree_invalid_inputs"]
    assert all(f["examples"] == 8 for f in d["families"])
    assert all(n["what"] != "every family" for n in d["not_applicable"])
    uses = "uses_generator" in d["families"][0]["rules"]
    assert uses == (name != "typical")  # lossy typical acceptance: deterministic decisions


@pytest.mark.parametrize("sampler, rules", [
    ("GLOBAL_RNG", {"uses_generator", "same_generator_same_output"}),
    ("OWN_GENERATOR", {"uses_generator"}),
    ("MODIFIES_INPUTS", {"inputs_unmodified"}),
    ("ZERO_PROBABILITY_BONUS", {"zero_probability_token"}),
])
def test_planted_tree_samplers_are_caught(sampler, rules, tree_faulty):
    result = run_fuzz(getattr(tree_faulty, sampler), SMALL, name=f"tree_faulty:{sampler}")
    found = {f.rule for f in result.findings if f.family == "tree_calls"}
    assert found and found <= rules, [(f.rule, f.message) for f in result.findings]
    finding = next(f for f in result.findings if f.family == "tree_calls")
    assert finding.call["entry"] == "verify_tree" and finding.example.startswith("TreeExample(")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(finding.replay, "replay", "exec"), {})
    assert "REPRODUCED" in out.getvalue(), finding.replay


def test_the_rules_on_one_tree_by_hand(tree_faulty):
    """A tree whose root law has two likely tokens: the reference passes every rule; the
    global-RNG sampler leaves its generator untouched."""
    ex = TreeExample(TreeVerifyCase(vocab_size=5, batch_size=2, branching=(2, 2), target_family="flat", seed=1))
    from specexact.fuzz.rules import RuleBroken
    from specexact.fuzz.subject import Call

    def call(e):
        return Call(entry="verify_tree", inputs=e.inputs, generator_seed=e.generator_seed, source=f"{e!r}.inputs")

    check_tree_call(Subject.of(REFERENCE_SAMPLERS["tree_rrs"], "tree-rrs"), call(ex))
    with pytest.raises(RuleBroken, match="uses_generator"):
        check_tree_call(Subject.of(tree_faulty.GLOBAL_RNG, "g"), call(ex))


def test_every_tree_corruption_is_refused_by_the_reference():
    ex = TreeExample(TreeVerifyCase(vocab_size=4, batch_size=2, branching=(2, 1), seed=2))
    from specexact.fuzz.trees import check_tree_refused

    subject = Subject.of(REFERENCE_SAMPLERS["tree_rrs"], "tree-rrs")
    for kind in TREE_CORRUPTIONS:
        check_tree_refused(subject, ex.inputs, kind, seed=5)  # raises if not refused
    with pytest.raises(ValueError, match="unknown tree corruption"):
        corrupt_tree(ex.inputs, "nope")
