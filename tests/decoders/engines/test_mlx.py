"""mlx-lm's own generation behind the end-to-end engine protocol, on the installed mlx-lm (no
mocks; ``tox -e mlx-e2e``) and the ``llama-v64`` tiny models. Skips when mlx-lm is not
installed."""

import numpy as np
import pytest

pytest.importorskip("mlx_lm")

from specexact.decoders.engines import EndToEndEngine, GenerationRequest, check_generation_results  # noqa: E402
from specexact.decoders.engines.mlx import MLX_PROCESSING, MlxEngine, processor_kwargs, sampler_kwargs  # noqa: E402
from specexact.decoders.params import SamplingParams  # noqa: E402
from specexact.decoders.tiny_models import exact_sequence_law, expected_acceptance, load_model  # noqa: E402
from specexact.exactness.goodness_of_fit import chisquare_gof  # noqa: E402
from specexact.strategies import RequestShape, Scenario  # noqa: E402

V, GAMMA = 64, 3
PROMPT = (5, 6, 7, 8, 5, 6)


@pytest.fixture(scope="module")
def engine(llama_dirs):
    e = MlxEngine()
    e.load(*llama_dirs, method="draft_model", num_speculative_tokens=GAMMA)
    yield e
    e.close()


def first_token_law(model, params, prompt=PROMPT):
    law = exact_sequence_law(model, prompt, params, MLX_PROCESSING, max_tokens=1)
    probs = np.zeros(V)
    probs[law.sequences[:, 0]] = law.probs
    return probs


def test_capabilities_declare_what_runs():
    e = MlxEngine()
    assert isinstance(e, EndToEndEngine) and e.name == "mlx"
    caps = e.capabilities()
    assert caps.methods == ("draft_model",) and caps.version == "0.32.2"
    assert caps.acceptance_scheme == "sample_compare" and caps.min_tokens is False
    assert caps.processing.order[-1] == "temperature" and caps.processing.top_p_ties == "keep_ties"
    assert caps.processing.penalty_context("repetition_penalty") == ("prompt_and_output", 20)


def test_request_maps_to_mlx_keywords():
    req = GenerationRequest(PROMPT, SamplingParams(temperature=0.7, top_k=4, top_p=0.9, min_p=0.1,
                                                   frequency_penalty=0.3))
    assert sampler_kwargs(req) == {"temp": 0.7, "top_p": 0.9, "min_p": 0.1, "top_k": 4}
    kw = processor_kwargs(req)
    assert kw["frequency_penalty"] == 0.3 and kw["repetition_penalty"] is None and kw["presence_penalty"] is None
    assert kw["frequency_context_size"] == 20


def test_bad_load_and_use_are_refused(llama_dirs, engine):
    e = MlxEngine()
    with pytest.raises(RuntimeError, match="before load"):
        e.generate([GenerationRequest(PROMPT)], speculative=False)
    with pytest.raises(ValueError, match="'ngram'"):
        e.load(*llama_dirs, method="ngram", num_speculative_tokens=GAMMA)
    with pytest.raises(ValueError, match="needs draft_dir"):
        e.load(llama_dirs[0], None, method="draft_model", num_speculative_tokens=GAMMA)
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


def test_same_seed_same_output_other_seed_other_output(engine):
    reqs = [GenerationRequest(PROMPT, SamplingParams(), max_tokens=6, seed=s) for s in (3, 3, 4)]
    for speculative in (True, False):
        a, b, c = (r.token_ids for r in engine.generate(reqs, speculative=speculative))
        assert a == b and a != c, speculative


def test_acceptance_is_read_from_the_generator(engine):
    # A greedy target and draft: the draft is kept exactly while the two argmaxes agree, so the
    # first round's count is determined; it is read from mlx-lm's from_draft flags.
    req = GenerationRequest(PROMPT, SamplingParams(temperature=0.0), max_tokens=GAMMA + 1)
    res = engine.generate([req], speculative=True)[0]
    assert 0 <= res.first_round_accepted <= GAMMA and res.num_accepted_tokens >= res.first_round_accepted
    short = GenerationRequest(PROMPT, SamplingParams(), max_tokens=GAMMA)
    assert engine.generate([short], speculative=True)[0].first_round_accepted is None
    assert engine.generate([req], speculative=False)[0].first_round_accepted is None


N_LAW = 400


@pytest.mark.statistical(checks=2)
def test_first_token_law_and_first_round_acceptance(engine, llama_dirs, llama_target, alpha):
    # Temperature, top-p and top-k in mlx-lm's own order: a sampler built without one of
    # them, or in vLLM's order, puts mass where the declared law has none or too little.
    params = SamplingParams(temperature=0.6, top_p=0.9, top_k=12)
    reqs = [GenerationRequest(PROMPT, params, max_tokens=GAMMA + 1, seed=s) for s in range(N_LAW)]
    results = engine.generate(reqs, speculative=True)
    counts = np.bincount([r.token_ids[0] for r in results], minlength=V)
    law = chisquare_gof(counts, first_token_law(llama_target, params), false_fail_rate=alpha)
    assert law.passed, law
    # First-round accepted counts against their exact law under sample-and-compare.
    at_least = expected_acceptance(llama_target, load_model(llama_dirs[1]), PROMPT, params, processing=MLX_PROCESSING,
                                   num_speculative_tokens=GAMMA, scheme="sample_compare")
    probs = -np.diff(np.concatenate([[1.0], at_least, [0.0]]))
    accepted = np.bincount([r.first_round_accepted for r in results], minlength=GAMMA + 1)
    acc = chisquare_gof(accepted, probs, false_fail_rate=alpha, min_expected=5.0, name="first_round_acceptance")
    assert acc.passed, acc


@pytest.mark.xfail(strict=True, reason="finding: speculative_generate_step's penalties do not see the prompt "
                   "(scripts/replays/mlx_speculative_penalty_context.py)")
def test_speculative_greedy_with_a_penalty_is_plain_greedy(engine):
    # Greedy: both must give the target's argmax sequence under the same penalties.
    rng = np.random.default_rng(0)
    reqs = [GenerationRequest(tuple(int(t) for t in rng.integers(2, V, size=6)),
                              SamplingParams(temperature=0.0, repetition_penalty=5.0), max_tokens=4)
            for _ in range(20)]
    spec = [r.token_ids for r in engine.generate(reqs, speculative=True)]
    plain = [r.token_ids for r in engine.generate(reqs, speculative=False)]
    assert spec == plain


# One generated-scenario case (the audit's kind: audit/cases/e2e/scenarios.py), by hand: γ = 3,
# two prompt lengths in one call, 16 new tokens (two position bands), temperature with top-k,
# EOS reachable (mlx-lm has no min_tokens), top-p with min-p. No penalty: with one, speculative
# generation follows another law than plain (the finding above), which the penalty test shows.
SCENARIO = Scenario(gamma=GAMMA, seed=0, shapes=(
    RequestShape(prompt_len=3, prompt_seed=1, params=SamplingParams(temperature=0.8, top_k=20), max_tokens=16,
                 eos=True),
    RequestShape(prompt_len=20, prompt_seed=2, params=SamplingParams(top_p=0.9, min_p=0.05), max_tokens=16)))


@pytest.mark.statistical(checks=8)  # token_law and plain_token_law in two bands, reproducible, the three seed checks
def test_a_generated_scenario_case_passes_token_by_token(engine, run_scenario, alpha):
    result, checks = run_scenario(engine, SCENARIO, alpha)
    assert len(checks) == 8 and all(c.passed for c in checks.values()), [str(c) for c in result.checks]


# Stop tokens (EngineCapabilities.stop_tokens): mlx-lm's stream_generate ends at any id in
# tokenizer.eos_token_ids, so the generated scenarios end each EOS shape at its law's most
# likely first token (the tiny models' own EOS, below 0.01, almost never ends a request inside
# a verify window). Two EOS shapes (mlx-lm has no min_tokens), 16 requests each, γ = 3.
STOP_SCENARIO = Scenario(gamma=GAMMA, seed=0, shapes=(
    RequestShape(prompt_len=3, prompt_seed=1, params=SamplingParams(), max_tokens=16, eos=True),
    RequestShape(prompt_len=6, prompt_seed=2, params=SamplingParams(temperature=0.8, top_k=20), max_tokens=16,
                 eos=True)))


def test_requests_stop_inside_a_verify_window_at_the_scenarios_stop_token(engine, llama_target, monkeypatch):
    # Every (token, from_draft) speculative_generate_step yields (read, not changed): a round
    # yields its accepted drafts, then the token the target sampled, so a stop yielded as a
    # draft is inside its window, not the window's last. Fails where `stop_tokens` is dropped
    # (the shapes then stop at the model's EOS, which no window of these requests holds).
    import importlib

    from specexact.audit.cases.e2e.scenarios import scenario_case

    module = importlib.import_module("mlx_lm.generate")  # the package's `generate` attribute is a function
    yielded = []
    real = module.speculative_generate_step

    def spy(*args, **kwargs):
        for step in real(*args, **kwargs):
            yielded.append((int(step[0]), bool(step[2])))
            yield step

    monkeypatch.setattr(module, "speculative_generate_step", spy)
    case = scenario_case(engine, STOP_SCENARIO, "draft_model", requests_per_class=16)
    inside = 0
    for c, rc in enumerate(case.row_classes):
        stop = rc.eos_id(llama_target.eos_token_id)
        assert stop == rc.stop_token != llama_target.eos_token_id
        for i in range(16):
            request = rc.request(llama_target.eos_token_id, seed=1000 * c + i)
            yielded.clear()
            (result,) = engine.generate([request], speculative=True)
            check_generation_results([request], [result], V)
            tokens = result.token_ids
            assert stop not in tokens[:-1] and [t for t, _ in yielded[:len(tokens)]] == list(tokens)
            if tokens[-1] == stop and yielded[len(tokens) - 1][1]:  # the stop was an accepted draft
                inside += 1
    assert inside >= 1, inside  # 3 of the 32 seeded requests with mlx-lm 0.32.2
