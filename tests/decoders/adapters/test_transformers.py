"""The Hugging Face transformers adapter, on the installed transformers (no mocks)."""

import contextlib
import io

import pytest
import torch

transformers = pytest.importorskip("transformers")

from specexact.audit import quick_cases, resolve_sampler, run_audit  # noqa: E402
from specexact.audit.verdict.reproduce import reproduction_script  # noqa: E402
from specexact.audit.cases.dispatch import checks_per_case  # noqa: E402
from specexact.audit.sampler.samplers import sampler_metadata  # noqa: E402
from specexact.decoders import check_verifier_output  # noqa: E402
from specexact.decoders.adapters import SamplerAdapter  # noqa: E402
from specexact.decoders.adapters.transformers import (  # noqa: E402
    FINDINGS,
    TESTED_VERSIONS,
    ZERO_MASS_RESIDUAL_CRASH,
    ZERO_PROBABILITY_ACCEPTANCE,
    TransformersSpeculativeSampling,
    adapter_version,
    affects,
    verify,
)


def point(v, V, n=1):
    out = torch.zeros(n, V)
    out[:, v] = 1.0
    return out


def test_entry_point_resolves_to_the_adapter_with_metadata():
    obj, target = resolve_sampler("transformers")
    assert obj is verify and target == "specexact.decoders.adapters.transformers:verify"
    assert isinstance(verify, SamplerAdapter)
    meta = sampler_metadata(obj)
    assert meta == adapter_version()
    assert meta["library"] == "transformers" and meta["version"] == transformers.__version__
    assert meta["function"] == "transformers.generation.utils._speculative_sampling"
    assert meta["variant"] in ("is_done_candidate", "is_done_candidate+assistant_ensemble_weight",
                               "assistant_ensemble_weight")
    assert meta["fixed_arguments"] == ({"is_done_candidate": False} if "is_done" in meta["variant"] else {})
    assert meta["version_tested"] == (transformers.__version__ in TESTED_VERSIONS)
    caps = verify.capabilities
    assert (caps.max_batch_size, caps.randomness, caps.logits_level) == (1, "global_rng", False)


def test_unknown_signature_is_refused():
    def other(candidate_input_ids, candidate_logits, new_logits):
        raise AssertionError("never called")

    with pytest.raises(TypeError, match="unsupported signature"):
        TransformersSpeculativeSampling(other)


def test_full_acceptance_emits_the_bonus_token():
    # Target and draft agree on point masses: every draft accepted, bonus from row K.
    V = 5
    ids = torch.tensor([[1, 2], [3, 3], [0, 4]])
    dp = torch.stack([torch.stack([point(int(t), V)[0] for t in row]) for row in ids])
    bonus = torch.tensor([4, 0, 2])
    tp = torch.cat([dp, torch.stack([point(int(b), V)[0] for b in bonus])[:, None]], 1)
    out = verify(ids, dp, tp, torch.Generator().manual_seed(0))
    assert out.tolist() == [[1, 2, 4], [3, 3, 0], [0, 4, 2]]
    assert check_verifier_output(out, ids, V).tolist() == [3, 3, 3]


def test_rejection_recovers_from_the_residual_and_pads():
    # Row 0's first draft has target probability 0 and draft probability 1: rejected, the
    # recovered token comes from max(p - q, 0) = p (point mass on 3); row 1 accepts both.
    V = 4
    ids = torch.tensor([[1, 1], [2, 2]])
    dp = torch.stack([point(1, V, 2), point(2, V, 2)])
    tp = torch.stack([torch.cat([point(3, V), point(1, V), point(0, V)]),
                      torch.cat([point(2, V), point(2, V), point(0, V)])])
    out = verify(ids, dp, tp, torch.Generator().manual_seed(1))
    assert out.tolist() == [[3, -1, -1], [2, 2, 0]]
    # K = 1 works too (transformers squeezes its [1, 1] ratio to a 0-d tensor).
    out1 = verify(ids[:, :1], dp[:, :1], tp[:, :2], torch.Generator().manual_seed(1))
    assert out1.tolist() == [[3, -1], [2, 2]]


def test_randomness_comes_from_the_generator_only_and_global_rng_is_restored():
    g = torch.Generator().manual_seed(3)
    V, B, K = 6, 64, 3
    dp = torch.rand(B, K, V, generator=g) + 0.1
    dp /= dp.sum(-1, keepdim=True)
    tp = torch.rand(B, K + 1, V, generator=g) + 0.1
    tp /= tp.sum(-1, keepdim=True)
    ids = torch.multinomial(dp.reshape(-1, V), 1, generator=g).reshape(B, K)
    torch.manual_seed(99)
    state = torch.get_rng_state()
    a = verify(ids, dp, tp, torch.Generator().manual_seed(5))
    assert torch.equal(torch.get_rng_state(), state)
    b = verify(ids, dp, tp, torch.Generator().manual_seed(5))
    assert torch.equal(a, b)
    gen = torch.Generator().manual_seed(5)
    verify(ids, dp, tp, gen)
    assert not torch.equal(verify(ids, dp, tp, gen), a), "the generator advances between calls"


def test_zero_probabilities_stay_out_of_the_residual():
    # -inf logits from zero probabilities: the recovered token never has p == 0 and the
    # outputs are well-formed (fixed seed: deterministic).
    V, B = 5, 400
    tp = torch.tensor([[0.0, 0.5, 0.5, 0.0, 0.0], [0.2, 0.2, 0.2, 0.2, 0.2]]).expand(B, 2, V).contiguous()
    dp = torch.tensor([[[0.0, 0.0, 0.4, 0.6, 0.0]]]).expand(B, 1, V).contiguous()
    ids = torch.multinomial(dp[:, 0], 1, replacement=True, generator=torch.Generator().manual_seed(2))
    out = verify(ids, dp, tp, torch.Generator().manual_seed(4))
    check_verifier_output(out, ids, V)
    first = out[:, 0]
    assert set(first.tolist()) <= {1, 2}, "position 0 must lie in the target's support {1, 2}"
    assert (first == 1).any() and (first == 2).any()


# Truncation and penalties (zeros, hence -inf logits) and EOS / max_new_tokens cuts.
QUICK = [c for c in quick_cases() if c.name in ("v6-trunc-penalties", "v12-eos-cut")]
QUICK_CHECKS = sum(checks_per_case(c) for c in QUICK)


@pytest.mark.statistical(checks=QUICK_CHECKS)
def test_transformers_passes_the_quick_audit(alpha):
    report = run_audit(verify, sampler_name="transformers", sampler_target="specexact.decoders.adapters.transformers:verify",
                       cases=QUICK, false_fail_rate=alpha * QUICK_CHECKS, num_batches=2, budget_s=None, seed=0)
    assert report["verdict"] == "pass", report["findings"]
    assert all(c["defect"] is None for c in report["cases"])


ZERO_ACCEPTANCE_HERE = affects(ZERO_PROBABILITY_ACCEPTANCE)


def test_a_finding_affects_the_versions_before_its_fix():
    assert affects(ZERO_PROBABILITY_ACCEPTANCE, "5.24.0") and affects(ZERO_PROBABILITY_ACCEPTANCE, "4.45.2")
    assert not affects(ZERO_PROBABILITY_ACCEPTANCE, "5.25.0") and not affects(ZERO_PROBABILITY_ACCEPTANCE, "6.0.0")
    assert affects(ZERO_MASS_RESIDUAL_CRASH, "5.25.0")  # not fixed


# Finding (transformers 4.45.2, 4.57.6, 5.17.0, 5.24.0): `r <= p/q` with a float32 uniform r that
# is 0 with probability 2**-24 accepts a draft whose target probability is 0; 5.25.0 tests
# `r < p/q` (fixed_in). These used to be strict xfails pinned by reading the code; the fuzz
# phase now finds both by itself (below). The recorded evidence stays: on an affected version
# the defect must show, on a fixed one it must stay fixed; when transformers changes the rule
# again the evidence tests fail, so the record gets updated.
def test_evidence_zero_target_probability_draft_is_accepted_when_its_uniform_is_0():
    f = ZERO_PROBABILITY_ACCEPTANCE
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(f["global_seed"])
        assert torch.rand(1).item() == 0.0, "the recorded seed's first float32 uniform is 0"
        torch.manual_seed(f["global_seed"])
        out = verify.verify_rows(torch.tensor(f["draft_token_ids"]), torch.tensor(f["draft_probs"]),
                                 torch.tensor(f["target_probs"]))
    bad = f["forbidden"]
    if ZERO_ACCEPTANCE_HERE:
        assert int(out[bad["row"], bad["position"]]) == bad["token"], \
            f"the defect is gone ({out.tolist()}): update the record"
    else:  # fixed in this version: the forbidden token is rejected at r = 0
        assert int(out[bad["row"], bad["position"]]) != bad["token"], f"the fixed defect is back ({out.tolist()})"


# Finding (same versions): when the draft law exceeds the target law by one ulp on the drafted
# token, a rejection (probability about 2**-23) leaves max(p - q, 0) with no mass; the lossless
# path divides 0 by 0 and torch.multinomial raises.
def test_evidence_empty_residual_crashes():
    f = ZERO_MASS_RESIDUAL_CRASH
    args = [torch.tensor(x) for x in (f["draft_token_ids"], f["draft_probs"], f["target_probs"])]
    p = torch.log(args[2][0, 0]).softmax(-1)
    q = torch.log(args[1][0, 0]).softmax(-1)
    assert (p <= q).all() and (p - q).clamp_min(0).sum() == 0 and p[0] / q[0] <= 1 - 2**-23
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(f["global_seed"])
        assert torch.rand(1).item() == 1 - 2**-24
        torch.manual_seed(f["global_seed"])
        with pytest.raises(RuntimeError, match="probability tensor contains"):
            verify.verify_rows(*args)


def test_supplied_uniforms_reach_transformers_own_rule_and_only_its_acceptance_draw():
    f = ZERO_PROBABILITY_ACCEPTANCE
    ids, q, p = (torch.tensor(x) for x in (f["draft_token_ids"], f["draft_probs"], f["target_probs"]))
    u0 = torch.zeros(1, 1, dtype=torch.float64)
    # r <= 0 accepts the token of target probability 0; r < 0 (fixed versions) does not
    accepted = 1 if ZERO_ACCEPTANCE_HERE else 0
    assert verify.verify_with_uniforms(ids, q, p, u0, torch.Generator().manual_seed(0)).tolist()[0][0] == accepted
    tiny = torch.full((1, 1), 2.0**-24, dtype=torch.float64)
    assert verify.verify_with_uniforms(ids, q, p, tiny, torch.Generator().manual_seed(0)).tolist() == [[0, -1]]
    # At u = the float32 ratio exactly, transformers <= 5.24 accepts (r <= p/q) and 5.25 rejects
    # (r < p/q); just above, both reject.
    V, B = 3, 6
    qq = torch.tensor([[[0.25, 0.25, 0.5]]]).expand(B, 1, V).contiguous()
    pp = torch.tensor([[[0.2, 0.3, 0.5], [0.1, 0.2, 0.7]]]).expand(B, 2, V).contiguous()
    # transformers' own ratio: softmax of the log-probabilities the adapter feeds it, in float32
    ratio = float(torch.log(pp[0, 0]).softmax(-1)[0] / torch.log(qq[0, 0]).softmax(-1)[0])
    above = float(torch.nextafter(torch.tensor(ratio, dtype=torch.float32), torch.tensor(1.0)))
    u = torch.tensor([[ratio], [above], [0.0], [1 - 2**-24], [ratio], [above]], dtype=torch.float64)
    out = verify.verify_with_uniforms(torch.zeros(B, 1, dtype=torch.int64), qq, pp, u, torch.Generator().manual_seed(3))
    at_ratio = ZERO_ACCEPTANCE_HERE
    assert ((out >= 0).sum(1) == 2).tolist() == [at_ratio, False, True, False, at_ratio, False]
    # the recovered / bonus tokens still come from the generator (seeded global RNG): same seed, same tokens
    again = verify.verify_with_uniforms(torch.zeros(B, 1, dtype=torch.int64), qq, pp, u, torch.Generator().manual_seed(3))
    assert torch.equal(out, again)
    with pytest.raises(ValueError, match="shape"):
        verify.verify_with_uniforms(ids, q, p, torch.zeros(2, 1, dtype=torch.float64))


def test_invalid_inputs_are_refused_before_transformers_sees_them():
    V = 3
    ids = torch.tensor([[0]])
    q = torch.full((1, 1, V), 1 / 3)
    p = torch.full((1, 2, V), 1 / 3)
    with pytest.raises(ValueError, match="NaN"):
        verify(ids, q, torch.full((1, 2, V), float("nan")), torch.Generator())
    with pytest.raises(ValueError, match="draft_token_ids must lie"):
        verify(ids + 3, q, p, torch.Generator())
    with pytest.raises(TypeError, match="generator"):
        verify(ids, q, p, 5)


def _fuzzed(name, sampler, examples=None):
    from specexact.fuzz import FuzzSettings, run_fuzz

    return run_fuzz(sampler, FuzzSettings(examples=examples), name=name)


def _replay(script: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(script, "replay", "exec"), {})
    return out.getvalue()


#: Examples per fuzz family in the default run: 5 (seed 0) find the installed version's
#: findings as the ci profile's 25 do (3.6 s of CPU instead of 8.9 s); the ci profile's count
#: runs in the nightly tier (the next test).
DEFAULT_RUN_EXAMPLES = 5


def test_the_fuzz_phase_finds_both_findings_with_small_shrunk_examples_and_working_replays():
    check_the_transformers_findings(_fuzzed("transformers", verify, examples=DEFAULT_RUN_EXAMPLES))


@pytest.mark.nightly
def test_the_fuzz_phase_at_the_ci_profiles_size_finds_both_findings_and_no_other():
    check_the_transformers_findings(_fuzzed("transformers", verify))


def check_the_transformers_findings(result):
    found = {f.known_as: f for f in result.findings if f.known_as}
    # the findings of the installed version, and no other finding (a fixed one is not found)
    assert set(found) == {f["id"] for f in FINDINGS if affects(f)}, [(f.rule, f.message) for f in result.findings]
    assert all(f.known_as for f in result.findings), [(f.rule, f.message) for f in result.findings]
    for f in found.values():
        assert f.family == "acceptance_probes" and f.call["vocab_size"] <= 8, f.example
        assert "REPRODUCED" in _replay(f.replay)
    assert found["transformers-zero-mass-residual-crash"].rule == "no_crash"
    if ZERO_ACCEPTANCE_HERE:
        assert found["transformers-zero-probability-acceptance"].rule == "zero_probability_token"
        assert found["transformers-zero-probability-acceptance"].call["uniforms"] == [[0.0]]


@pytest.mark.parametrize("finding", FINDINGS, ids=lambda f: f["id"])
def test_reproduction_script_of_each_finding_runs(finding):
    script = reproduction_script(finding)
    assert len(script.splitlines()) <= 14
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(script, finding["id"], "exec"), {})
    assert "REPRODUCED" in out.getvalue() or "not reproduced" in out.getvalue()
