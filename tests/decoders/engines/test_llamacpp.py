"""llama.cpp's generation through llama-cpp-python behind the end-to-end engine protocol, on the
installed llama-cpp-python (no mocks; ``tox -e llamacpp-e2e``) and the ``llama-v64`` tiny
models written as GGUF. Skips when llama-cpp-python is not installed."""

import numpy as np
import pytest
import torch

pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")

from specexact.audit import run_case  # noqa: E402
from specexact.audit.cases.e2e.scenarios import scenario_case  # noqa: E402
from specexact.decoders.engines import EndToEndEngine, GenerationRequest, check_generation_results  # noqa: E402
from specexact.decoders.engines.llamacpp import LLAMACPP_PROCESSING, LlamaCppEngine, greedy_draft_model  # noqa: E402
from specexact.decoders.params import SamplingParams  # noqa: E402
from specexact.decoders.tiny_models import CATALOG, exact_sequence_law, load_model  # noqa: E402
from specexact.decoders.tiny_models.gguf_export import gguf_model, write_gguf  # noqa: E402
from specexact.exactness.goodness_of_fit import chisquare_gof  # noqa: E402
from specexact.strategies import RequestShape, Scenario  # noqa: E402

V, GAMMA = 64, 3
PROMPT = (5, 6, 7, 8, 5, 6)
PROMPTS = [(0,), (5, 6, 7, 8, 5, 6), tuple(range(2, 40)), (9, 3, 9, 3, 9, 3, 9, 3, 60, 61, 62, 63),
           tuple((7 * i + 3) % 62 + 2 for i in range(90))]  # past the GGUF's 64-token context, as the long case


@pytest.fixture(scope="module", params=["prompt_lookup", "draft_model_greedy"])
def engine(llama_dirs, request):
    e = LlamaCppEngine()
    e.load(*llama_dirs, method=request.param, num_speculative_tokens=GAMMA)
    e.method = request.param
    yield e
    e.close()


def llama_logits(path, prompt):
    """llama.cpp's float32 logits at every position of ``prompt`` (float32 KV cache): ``[len(prompt), V]``."""
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(path), n_ctx=128, n_threads=1, logits_all=True, verbose=False,
                          type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32)  # as the engine
    try:
        llm.eval(list(prompt))
        return np.array(llm.scores[: len(prompt)], dtype=np.float64)
    finally:
        llm.close()


def max_prob_difference(model, path) -> float:
    """The largest |p_llama.cpp - p_specexact| over every position of :data:`PROMPTS` (softmax of
    the logits, float64 reference)."""
    worst = 0.0
    for prompt in PROMPTS:
        ids = torch.tensor([prompt])
        positions = torch.arange(len(prompt)).unsqueeze(0)
        ref = torch.softmax(model(ids, positions)[0], -1).numpy()
        got = torch.softmax(torch.from_numpy(llama_logits(path, prompt)), -1).numpy()
        worst = max(worst, float(np.abs(got - ref).max()))
    return worst


@pytest.mark.parametrize("pair", ["llama-v64", "qwen2-v64-h2"])
def test_gguf_logits_equal_the_float64_reference(pair, tmp_path_factory):
    # The same weights through llama.cpp's loader and graph: Llama's q / k rows permuted for its
    # interleaved rope, Qwen2's as they are (NeoX rope). float32 rounding only.
    target_dir, _ = CATALOG[pair].make(tmp_path_factory.mktemp(f"gguf-{pair}"))
    diff = max_prob_difference(load_model(target_dir), gguf_model(target_dir))
    assert diff < 1e-5, diff


def test_gguf_without_the_rope_permutation_does_not_match(llama_dirs, llama_target, tmp_path, monkeypatch):
    # The permutation matters: written without it, llama.cpp's Llama rope rotates other pairs.
    from safetensors.torch import load_file

    import specexact.decoders.tiny_models.gguf_export as ge

    monkeypatch.setattr(ge, "permute_rope_rows", lambda w, n_head: w)
    write_gguf(tmp_path / "model.gguf", llama_target.config, load_file(str(llama_dirs[0] / "model.safetensors")))
    assert max_prob_difference(llama_target, tmp_path / "model.gguf") > 1e-3


def first_token_law(model, params, prompt=PROMPT):
    law = exact_sequence_law(model, prompt, params, LLAMACPP_PROCESSING, max_tokens=1)
    probs = np.zeros(V)
    probs[law.sequences[:, 0]] = law.probs
    return probs


def test_capabilities_declare_what_runs():
    e = LlamaCppEngine()
    assert isinstance(e, EndToEndEngine) and e.name == "llamacpp"
    caps = e.capabilities()
    assert caps.methods == ("prompt_lookup", "draft_model_greedy") and caps.version == "0.3.16"
    assert caps.acceptance_scheme == "sample_compare" and caps.min_tokens is False and caps.max_batch_size == 1
    assert caps.processing.order == ("repetition_penalty", "frequency_penalty", "presence_penalty", "top_k", "top_p",
                                     "min_p", "temperature")
    assert caps.processing.penalty_context("repetition_penalty") == ("output", 64)
    assert caps.seeds.other_mix and caps.seeds.unseeded_independent


def test_bad_load_and_use_are_refused(llama_dirs, engine):
    e = LlamaCppEngine()
    with pytest.raises(RuntimeError, match="before load"):
        e.generate([GenerationRequest(PROMPT)], speculative=False)
    with pytest.raises(ValueError, match="'draft_model'"):
        e.load(*llama_dirs, method="draft_model", num_speculative_tokens=GAMMA)
    with pytest.raises(ValueError, match="needs draft_dir"):
        e.load(llama_dirs[0], None, method="draft_model_greedy", num_speculative_tokens=GAMMA)
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        e.load(*llama_dirs, method="prompt_lookup", num_speculative_tokens=0)
    with pytest.raises(ValueError, match="min_tokens=2"):
        engine.generate([GenerationRequest(PROMPT, max_tokens=4, min_tokens=2, eos_token_id=1)], speculative=True)


@pytest.mark.parametrize("speculative", [True, False])
def test_outputs_follow_the_protocol_with_eos(engine, llama_target, speculative):
    params = [SamplingParams(temperature=0.8), SamplingParams(temperature=0.0),
              SamplingParams(temperature=1.2, top_k=5, top_p=0.9, min_p=0.05, presence_penalty=0.4)]
    eos = int(np.argmax(first_token_law(llama_target, params[1])))  # the greedy request ends at once
    reqs = [GenerationRequest(PROMPT, params[i % 3], max_tokens=5, eos_token_id=eos, seed=i) for i in range(24)]
    results = engine.generate(reqs, speculative=speculative)
    assert check_generation_results(reqs, results, V) is None
    assert results[1].token_ids == (eos,)


def test_greedy_draft_model_proposes_the_drafts_argmax(llama_dirs):
    # specexact's LlamaDraftModel: γ argmax tokens of the draft GGUF, those of the float64 draft.
    import llama_cpp

    draft_ref = load_model(llama_dirs[1])
    llm = llama_cpp.Llama(model_path=str(gguf_model(llama_dirs[1])), n_ctx=64, n_threads=1, verbose=False,
                          type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32)
    try:
        drafter = greedy_draft_model(llm, GAMMA)
        for prompt in PROMPTS[:3]:
            got = drafter(np.array(prompt, dtype=np.intc))
            ctx = list(prompt)
            for _ in range(GAMMA):
                ctx.append(int(draft_ref(torch.tensor([ctx]), torch.tensor([[len(ctx) - 1]]))[0, 0].argmax()))
            assert got.dtype == np.intc and got.tolist() == ctx[len(prompt):], prompt
    finally:
        llm.close()


def test_same_seed_same_output_other_seed_other_output(engine):
    reqs = [GenerationRequest(PROMPT, SamplingParams(), max_tokens=6, seed=s) for s in (3, 3, 4)]
    for speculative in (True, False):
        a, b, c = (r.token_ids for r in engine.generate(reqs, speculative=speculative))
        assert a == b and a != c, speculative


N_LAW = 400


@pytest.mark.statistical(checks=2)
@pytest.mark.parametrize("speculative", [True, False])
def test_first_token_law(engine, llama_target, alpha, speculative):
    # Penalties do not act on the first token (they count the output only); top-k, top-p,
    # min-p on the untempered logits and the temperature last: a chain in another order, or
    # the prompt counted by the penalties, puts mass where the declared law has none or too little.
    params = SamplingParams(temperature=0.6, top_p=0.9, top_k=12, min_p=0.02, repetition_penalty=3.0)
    reqs = [GenerationRequest(PROMPT, params, max_tokens=GAMMA + 1, seed=s) for s in range(N_LAW)]
    results = engine.generate(reqs, speculative=speculative)
    counts = np.bincount([r.token_ids[0] for r in results], minlength=V)
    law = chisquare_gof(counts, first_token_law(llama_target, params), false_fail_rate=alpha)
    assert law.passed, law


# One generated-scenario case (the audit's kind: audit/cases/e2e/scenarios.py) per method, by hand: γ = 3, two prompt lengths in one call (the longer one repetitive, so the
# lookup finds n-grams), 16 new tokens (two position bands), temperature with top-k and a
# frequency penalty, EOS reachable (llama.cpp has no min_tokens), top-p with min-p.
SCENARIO = Scenario(gamma=GAMMA, seed=0, shapes=(
    RequestShape(prompt_len=3, prompt_seed=1, params=SamplingParams(temperature=0.8, top_k=20, frequency_penalty=0.5),
                 max_tokens=16, eos=True),
    RequestShape(prompt_len=20, prompt_seed=2, params=SamplingParams(top_p=0.9, min_p=0.05), max_tokens=16)))
SCENARIO_CALLS = 4


@pytest.mark.statistical(checks=8)  # token_law and plain_token_law in two bands, reproducible, the three seed checks
def test_a_generated_scenario_case_passes_token_by_token(engine, alpha):
    case = scenario_case(engine, SCENARIO, engine.method, name="scenario-test", requests_per_class=16)
    result = run_case(case, engine, false_fail_rate=alpha, seed=0, num_batches=SCENARIO_CALLS)
    checks = {c.name: c for c in result.checks}
    assert result.defect is None and len(checks) == 8, (result.defect, sorted(checks))
    for name, check in checks.items():
        if "token_law" in name:
            assert check.details["num_slots"] >= 1000 and check.detectable_tv < 1, (name, check.details)
    assert all(c.passed for c in checks.values()), [str(c) for c in result.checks]


def sixteen_tokens(path, seed):
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(path), n_ctx=64, n_threads=1, seed=seed, verbose=False)
    try:
        out = []
        for token in llm.generate([5, 6, 7, 8], top_k=0, top_p=1.0, min_p=0.0, temp=1.0):
            out.append(int(token))
            if len(out) == 16:
                return out
    finally:
        llm.close()


@pytest.mark.xfail(strict=True, reason="finding: Llama(seed=0) is not seeded, 0 becomes LLAMA_DEFAULT_SEED "
                   "(scripts/replays/llamacpp_seed_zero_unseeded.py)")
def test_constructor_seed_zero_reproduces(llama_dirs):
    # Two Llama(seed=0) objects: the same 16 tokens at temperature 1 if seeded; under the finding
    # two std::random_device seeds, which agree on 16 tokens with probability far below 1e-9
    # (a token's agreement probability sum p^2 is 0.04 to 0.3 along a sampled path here, their
    # product 4e-18): a false XPASS is out of reach.
    path = gguf_model(llama_dirs[0])
    assert sixteen_tokens(path, 1) == sixteen_tokens(path, 1)  # a nonzero seed is kept
    assert sixteen_tokens(path, 0) == sixteen_tokens(path, 0)
