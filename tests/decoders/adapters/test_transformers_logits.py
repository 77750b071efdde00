"""transformers at the logits level: its own processors per candidate prefix, then its
``_speculative_sampling``, on the installed transformers (no mocks)."""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from specexact.audit import quick_cases, resolve_sampler, run_audit  # noqa: E402
from specexact.audit.cases.dispatch import checks_per_case, restrict_to_sampler, unsupported_reason  # noqa: E402
from specexact.cli import main  # noqa: E402
from specexact.decoders import SamplingParams, ToyLM, ToyLMConfig, check_verifier_output, speculative_generate  # noqa: E402
from specexact.decoders.adapters import Capabilities, LogitsSamplerAdapter, LogitsVerifyInputs  # noqa: E402
from specexact.decoders.adapters.builtin_logits import LogitsLevelVerifier  # noqa: E402
from specexact.decoders.adapters.transformers_logits import (  # noqa: E402
    TRANSFORMERS_PROCESSING,
    TransformersAssistedVerification,
    verify_logits_level,
)
from specexact.decoders.processing import BUILTIN_PROCESSING  # noqa: E402

HF_CLASS_OF = {"repetition_penalty": "RepetitionPenaltyLogitsProcessor", "temperature": "TemperatureLogitsWarper",
               "top_k": "TopKLogitsWarper", "top_p": "TopPLogitsWarper", "min_p": "MinPLogitsWarper"}

SUPPORTED = [SamplingParams(temperature=0.8, top_k=5, top_p=0.9, min_p=0.1, repetition_penalty=1.3),
             SamplingParams(temperature=1.3, top_p=0.85, min_p=0.2, repetition_penalty=0.7),
             SamplingParams(top_k=3),
             SamplingParams()]


def test_entry_point_and_protocol():
    obj, target = resolve_sampler("transformers-logits")
    assert obj is verify_logits_level and target.endswith("transformers_logits:verify_logits_level")
    assert isinstance(obj, LogitsSamplerAdapter)
    meta = obj.metadata()
    assert meta["version"] == transformers.__version__ and meta["capabilities"]["logits_level"] is True
    assert meta["capabilities"]["order_of_operations"] == list(TRANSFORMERS_PROCESSING.order)


def test_the_zoo_restates_this_processing():
    from specexact.audit.zoo.logits import TRANSFORMERS_LIKE

    assert TRANSFORMERS_LIKE == TRANSFORMERS_PROCESSING


def test_declared_order_is_the_order_transformers_builds():
    """The processors come from transformers' own _get_logits_processor; their classes, in
    order, are the operations the adapter declares."""
    adapter = TransformersAssistedVerification()
    names = [type(p).__name__ for p in adapter.logits_processor(SUPPORTED[0])]
    assert names == [HF_CLASS_OF[op] for op in TRANSFORMERS_PROCESSING.order]
    assert [type(p).__name__ for p in adapter.logits_processor(SamplingParams())] == []


def test_unsupported_parameters_are_refused_by_name():
    adapter = TransformersAssistedVerification()
    with pytest.raises(ValueError, match="presence_penalty=0.5"):
        adapter.logits_processor(SamplingParams(presence_penalty=0.5))
    with pytest.raises(ValueError, match="greedy"):
        adapter.logits_processor(SamplingParams(temperature=0))


def random_inputs(seed, B=24, K=3, V=11):
    g = torch.Generator().manual_seed(seed)
    out = torch.randint(0, V, (B, 4), generator=g)
    out[torch.arange(B) % 3 == 0, 2:] = -1
    draft_probs = torch.softmax(torch.randn(B, K, V, generator=g), -1)
    return LogitsVerifyInputs(
        draft_token_ids=torch.randint(0, V, (B, K), generator=g), draft_probs=draft_probs,
        target_logits=2.0 * torch.randn(B, K + 1, V, generator=g), target_params=tuple(SUPPORTED[i % 4] for i in range(B)),
        prompt_token_ids=torch.randint(0, V, (B, 2), generator=g), output_token_ids=out)


@pytest.mark.parametrize("seed", range(3))
def test_transformers_processing_matches_the_declared_reference(seed):
    """What transformers' processors do per candidate prefix equals our reference with the
    declared order and scope (float32 rounding apart): the audit's reference law is theirs."""
    x = random_inputs(seed)
    ours = LogitsLevelVerifier(TRANSFORMERS_PROCESSING).target_probs(x)  # [B, K+1, V]
    adapter = TransformersAssistedVerification()
    theirs = torch.cat([adapter.processed_target_logits(x, b)[1] for b in range(x.batch_size)]).softmax(-1)
    assert torch.equal(ours > 0, theirs > 0)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    builtin = LogitsLevelVerifier(BUILTIN_PROCESSING).target_probs(x)
    assert (builtin - theirs).abs().amax() > 0.05  # the scope and order matter on these inputs


def test_decoder_drives_it_and_output_keeps_the_protocol():
    target = ToyLM(ToyLMConfig(vocab_size=9, seed=2, eos_token_id=8, eos_logit=-2.0))
    prompts = torch.randint(0, 8, (8, 2), generator=torch.Generator().manual_seed(0))
    out = speculative_generate(target, target.draft(0.5), prompts, [SUPPORTED[i % 4] for i in range(8)],
                               num_draft_tokens=3, max_new_tokens=7, generator=torch.Generator().manual_seed(1),
                               eos_token_id=8, verifier=verify_logits_level)
    assert out.tokens.shape == (8, 7)
    x = random_inputs(0, B=4)
    before = torch.get_rng_state()
    a = verify_logits_level.verify_logits(x, torch.Generator().manual_seed(3))
    b = verify_logits_level.verify_logits(x, torch.Generator().manual_seed(3))
    assert torch.equal(a, b) and torch.equal(torch.get_rng_state(), before)
    check_verifier_output(a, x.draft_token_ids, x.vocab_size)


QUICK = quick_cases()
RUN = [r for c in QUICK if (r := restrict_to_sampler(c, verify_logits_level)[0]) is not None]
RUN_CHECKS = sum(checks_per_case(c) for c in RUN)


def test_classes_it_cannot_run_are_dropped_and_named():
    by_name = {c.name: c for c in RUN}
    assert set(by_name) == {c.name for c in QUICK}  # every quick case keeps a class it can run
    v6 = by_name["v6-trunc-penalties"]
    assert v6.class_ids == (0,) and v6.row_classes[0].target_params.repetition_penalty == 1.5
    assert by_name["v4-greedy-mix"].class_ids == (1, 2) and by_name["v8-plain"].class_ids is None
    reason = unsupported_reason(next(c for c in QUICK if c.name == "v6-trunc-penalties"), verify_logits_level)
    assert "class 1: presence_penalty=0.7" in reason and "class 2: frequency_penalty=0.5" in reason


@pytest.mark.statistical(checks=RUN_CHECKS)
def test_transformers_logits_passes_the_quick_audit_and_reports_skips(alpha, tmp_path):
    code = main(["audit", "--sampler", "transformers-logits", "--quick", "--batches", "2", "--quiet", "--no-html", "--no-fuzz",
                 "--false-fail-rate", str(alpha * RUN_CHECKS), "--report-dir", str(tmp_path)])
    assert code == 0
    report = json.loads(next(tmp_path.glob("audit-transformers-logits-*.json")).read_text())
    assert report["verdict"] == "pass", report["findings"]
    assert report["settings"]["num_checks"] == RUN_CHECKS
    assert report["settings"]["processing"] == {"level": "logits", **TRANSFORMERS_PROCESSING.to_dict()}
    skipped = {s["case"]: s["classes"] for s in report["settings"]["skipped_cases"]}
    assert skipped == {"v6-trunc-penalties": [1, 2], "v4-greedy-mix": [0]}
    # Check names keep the original class numbers.
    names = {(c["case"], c["name"]) for c in report["checks"]}
    assert ("v6-trunc-penalties", "sequence_law[class 0]") in names
    assert ("v4-greedy-mix", "sequence_law[class 2]") in names and ("v4-greedy-mix", "sequence_law[class 0]") not in names
    assert report["sampler"]["metadata"]["version"] == transformers.__version__
    md = next(tmp_path.glob("audit-transformers-logits-*.md")).read_text()
    assert "skipped: v6-trunc-penalties classes 1, 2" in md and "declared order" in md


class _DeclaresBuiltin(TransformersAssistedVerification):
    """transformers' real processing, declared as the built-in order (a wrong declaration)."""

    def __init__(self):
        super().__init__()
        self.capabilities = Capabilities(max_batch_size=1, dtypes=(torch.float32,), devices=("cpu",),
                                         randomness="global_rng", logits_level=True,
                                         order_of_operations=("repetition_penalty", "temperature", "min_p",
                                                              "top_k", "top_p"), greedy=False)


@pytest.mark.statistical(checks=0)  # must fail: only a false pass is at stake
def test_a_wrong_declared_order_fails_the_audit(alpha):
    case = [c for c in QUICK if c.name == "v7-rep-order"]
    report = run_audit(_DeclaresBuiltin(), cases=case, false_fail_rate=alpha * checks_per_case(case[0]),
                       num_batches=2, budget_s=None, seed=0)
    assert report["verdict"] == "fail"
    assert any(f["check"].startswith("sequence_law") for f in report["findings"])


def test_no_runnable_case_is_exit_2(tmp_path, capsys, monkeypatch):
    from specexact.audit.cases import decoder_case as cases_module

    greedy_only = [c.restricted([0]) for c in cases_module.default_cases() if c.name == "v4-greedy-mix"]
    monkeypatch.setattr("specexact.audit.default_cases", lambda: greedy_only)
    code = main(["audit", "--sampler", "transformers-logits", "--case", "v4-greedy-mix", "--batches", "2",
                 "--quiet", "--report-dir", str(tmp_path)])
    assert code == 2
    captured = capsys.readouterr()
    assert "temperature=0 (greedy)" in (captured.out + captured.err).replace("\n", " ")
    assert not list(tmp_path.glob("*.json"))


def test_supplied_uniforms_at_the_logits_level():
    from specexact.decoders.adapters import takes_uniforms, uniforms_dtype_of

    v = verify_logits_level
    assert takes_uniforms(v) and uniforms_dtype_of(v) == torch.float32
    # a one-hot target (top-k 1 keeps token 2) and a draft on token 0: p(d) = 0
    x = LogitsVerifyInputs(draft_token_ids=torch.tensor([[0]]), draft_probs=torch.full((1, 1, 3), 1 / 3),
                           target_logits=torch.tensor([[[0.0, 1.0, 2.0], [0.0, 0.0, 0.0]]]),
                           target_params=(SamplingParams(top_k=1),), prompt_token_ids=torch.tensor([[1]]),
                           output_token_ids=torch.zeros(1, 0, dtype=torch.int64))
    from specexact.decoders.adapters.transformers import ZERO_PROBABILITY_ACCEPTANCE, affects

    u = torch.zeros(1, 1, dtype=torch.float64)
    if affects(ZERO_PROBABILITY_ACCEPTANCE):
        assert v.verify_logits_with_uniforms(x, u, torch.Generator().manual_seed(0))[0, 0] == 0, \
            "transformers' r <= p/q accepts the removed token at r = 0 (the recorded finding)"
    else:  # fixed (r < p/q): the removed token is rejected and the recovered token is 2
        assert v.verify_logits_with_uniforms(x, u, torch.Generator().manual_seed(0)).tolist() == [[2, -1]]
    u = torch.full((1, 1), 0.5, dtype=torch.float64)
    assert v.verify_logits_with_uniforms(x, u, torch.Generator().manual_seed(0)).tolist() == [[2, -1]]
    with pytest.raises(ValueError, match="NaN"):
        v.verify_logits(LogitsVerifyInputs(**{**x.__dict__, "target_logits": torch.full((1, 2, 3), float("nan"))}))
    with pytest.raises(ValueError, match="does not implement"):
        v.verify_logits(LogitsVerifyInputs(**{**x.__dict__, "target_params": (SamplingParams(presence_penalty=1.0),)}))
