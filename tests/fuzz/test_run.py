"""run_fuzz end to end: the result object, the families that apply, an error of the phase."""

import pytest
import torch

from specexact.decoders import verify
from specexact.decoders.adapters.builtin_logits import verify_logits_level
from specexact.fuzz import FuzzSettings, run_fuzz
from specexact.fuzz import run as run_module
from specexact.fuzz.families import Family
from specexact.audit.zoo import loop_reference

SMALL = FuzzSettings(examples=6, max_vocab=300)


def test_a_correct_sampler_passes_and_the_result_says_what_was_tried():
    threads = torch.get_num_threads()
    result = run_fuzz(verify, SMALL, name="builtin")
    assert torch.get_num_threads() == threads, "the thread setting is restored"
    assert result.passed and result.findings == [] and result.error is None
    d = result.to_dict()
    assert d["verdict"] == "pass" and d["level"] == "probability"
    assert [f["name"] for f in d["families"]] == ["verify_calls", "acceptance_probes", "invalid_inputs"]
    assert all(f["examples"] == 6 and sum(f["tried"].values()) == 6 for f in d["families"])
    assert d["subject"]["uniforms_dtype"] == "float64" and d["subject"]["declared"] is False


def test_the_families_follow_the_sampler():
    assert [f.name for f in run_fuzz(loop_reference, SMALL, name="loop").families] == [
        "verify_calls", "invalid_inputs"]  # no supplied uniforms: no probes
    logits = run_fuzz(verify_logits_level, FuzzSettings(examples=3, max_vocab=64), name="builtin-logits")
    assert logits.passed and logits.level == "logits"
    assert [f.name for f in logits.families] == ["logits_calls", "logits_acceptance_probes", "logits_invalid_inputs"]


def test_an_error_of_the_fuzz_phase_is_reported_not_a_pass(monkeypatch):
    from hypothesis import strategies as st

    def families(subject, max_vocab=None):
        return [Family("broken", "", ("no_crash",), st.integers(), lambda x: 1 / 0, 1.0, lambda x: {})]

    monkeypatch.setattr(run_module, "families_for", families)
    result = run_fuzz(verify, SMALL, name="builtin")
    assert not result.passed and result.findings == [] and "ZeroDivisionError" in result.error
    assert result.to_dict()["verdict"] == "error"


def test_a_non_sampler_is_refused():
    with pytest.raises(TypeError, match="not callable"):
        run_fuzz(42, SMALL)


def test_the_same_seed_gives_the_same_examples_in_another_process():
    import json
    import subprocess
    import sys

    code = ("import json\nfrom specexact.decoders import verify\nfrom specexact.fuzz import FuzzSettings, run_fuzz\n"
            "r = run_fuzz(verify, FuzzSettings(examples=5, max_vocab=64, seed=2), name='builtin')\n"
            "print(json.dumps([[f.name, dict(f.tried), list(f.vocab)] for f in r.families]))")
    here = run_fuzz(verify, FuzzSettings(examples=5, max_vocab=64, seed=2), name="builtin")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == [[f.name, dict(f.tried), list(f.vocab)] for f in here.families]


def test_what_does_not_apply_to_a_scheme_or_protocol_is_not_run_and_is_said():
    """The probes and ``uses_generator`` judge the token-wise rule; a lossy chain sampler
    (typical acceptance: deterministic decisions) is held to the other rules only, and a
    tree-protocol sampler gets the tree families, not the chain probes. Both are said in the result."""
    from dataclasses import replace

    from specexact.decoders.tree import REFERENCE_SAMPLERS
    from specexact.fuzz.families import families_for, not_applicable
    from specexact.fuzz.subject import Subject

    lossy = run_fuzz(REFERENCE_SAMPLERS["typical_chain"], SMALL, name="typical-chain")
    assert lossy.passed, [f.message for f in lossy.findings]
    assert [f.name for f in lossy.families] == ["verify_calls", "invalid_inputs"]
    assert "uses_generator" not in lossy.families[0].rules
    assert [n["what"] for n in lossy.to_dict()["not_applicable"]] == ["uses_generator"]
    assert lossy.to_dict()["subject"]["scheme"] == "lossy"

    tree = run_fuzz(REFERENCE_SAMPLERS["tree_target_only"], SMALL, name="tree-target-only")
    assert tree.passed and [f.name for f in tree.families] == ["tree_calls", "tree_invalid_inputs"]
    assert [n["what"] for n in tree.to_dict()["not_applicable"]] == ["acceptance_probes"]

    # The same correct token-wise verifier declared sample-compare: its supplied uniforms
    # are not probed against min(1, p/q); declared token-wise, they are.
    subject = Subject.of(verify, "builtin")
    assert [f.name for f in families_for(subject)] == ["verify_calls", "acceptance_probes", "invalid_inputs"]
    other = replace(subject, scheme="sample_compare")
    assert [f.name for f in families_for(other)] == ["verify_calls", "invalid_inputs"]
    assert [n["what"] for n in not_applicable(other)] == [
        "acceptance_probes", "uses_generator", "invalid_inputs[nan_draft_prob, negative_draft_prob]"]
    assert [n["what"] for n in not_applicable(replace(subject, scheme="block"))] == [
        "acceptance_probes", "uses_generator"]
    assert not_applicable(subject) == []


def test_a_sample_compare_sampler_is_not_asked_to_refuse_a_corrupted_draft_law():
    """A sampler that never reads ``draft_probs`` (here: the built-in verify fed a flat draft
    law instead) returns output on a NaN draft law; declared sample-and-compare that is no
    finding, declared token-wise it is."""
    from specexact.decoders.adapters.protocol import Capabilities
    from specexact.decoders.tree import TreeSampler

    def ignores_draft_probs(ids, draft_probs, target_probs, generator=None):
        flat = torch.full_like(draft_probs, 1.0 / max(draft_probs.shape[-1], 1))  # shapes kept, values not read
        return verify(ids, flat, target_probs, generator)

    def declared(scheme):
        return TreeSampler(f"ignores-q-{scheme}", Capabilities(max_batch_size=None, dtypes=(torch.float32,),
                                                               devices=("cpu",), randomness="generator",
                                                               scheme=scheme), ignores_draft_probs)

    small = FuzzSettings(examples=40, max_vocab=64)
    sc = run_fuzz(declared("sample_compare"), small, name="ignores-q-sc")
    assert not [f for f in sc.findings if f.family == "invalid_inputs"], [f.message for f in sc.findings]
    tw = run_fuzz(declared("tokenwise"), small, name="ignores-q-tw")
    assert any(f.rule == "refuses_invalid_input" and "draft_prob" in f.message for f in tw.findings)
