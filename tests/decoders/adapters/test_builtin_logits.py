"""The built-in verifier at the logits level: per-prefix histories, and that the decoder
drives it to exactly the tokens of the probability-level path."""

import pytest
import torch

from specexact.decoders import (
    LogitsProcessing,
    SamplingParams,
    ToyLM,
    ToyLMConfig,
    check_verifier_output,
    speculative_generate,
)
from specexact.decoders.adapters import LogitsVerifyInputs
from specexact.decoders.adapters.builtin_logits import LogitsLevelVerifier, candidate_histories

PARAMS = [SamplingParams(temperature=0.9, top_p=0.9, repetition_penalty=1.5),
          SamplingParams(top_k=4, presence_penalty=0.6, frequency_penalty=0.4),
          SamplingParams(temperature=0, repetition_penalty=1.3),
          SamplingParams(min_p=0.1, repetition_penalty=0.7)]


@pytest.fixture(scope="module")
def models():
    target = ToyLM(ToyLMConfig(vocab_size=9, seed=4, eos_token_id=8, eos_logit=-2.0, context_strength=2.5))
    return target, target.draft(0.6)


def inputs(B=2, K=3, V=5):
    ids = torch.tensor([[1, 2, 3], [4, 0, 4]])
    return LogitsVerifyInputs(
        draft_token_ids=ids, draft_probs=torch.full((B, K, V), 1 / V), target_logits=torch.zeros(B, K + 1, V),
        target_params=(SamplingParams(),) * B, prompt_token_ids=torch.tensor([[0, 0], [1, 1]]),
        output_token_ids=torch.tensor([[2, -1, -1], [3, 3, 1]]))


def test_candidate_histories_add_one_draft_per_prefix():
    h = candidate_histories(inputs())
    assert h.shape == (2, 4, 6)
    assert h[0].tolist() == [[2, -1, -1, -1, -1, -1], [2, -1, -1, 1, -1, -1],
                             [2, -1, -1, 1, 2, -1], [2, -1, -1, 1, 2, 3]]
    assert h[1, 3].tolist() == [3, 3, 1, 4, 0, 4]


def test_inputs_helpers():
    x = inputs()
    assert (x.batch_size, x.num_draft_tokens, x.vocab_size) == (2, 3, 5)
    assert x.num_output_tokens().tolist() == [1, 3]
    assert x.candidate_token_ids(0).tolist() == [0, 0, 2, 1, 2, 3]
    assert x.candidate_token_ids(1).tolist() == [1, 1, 3, 3, 1, 4, 0, 4]


@pytest.mark.parametrize("gamma", [1, 3])
def test_logits_level_path_gives_the_probability_level_tokens(models, gamma):
    """Built-in order: the decoder hands raw logits, the adapter processes them per prefix,
    and the tokens are those of the probability-level path, bit for bit (same draws)."""
    target, draft = models
    g = torch.Generator().manual_seed(1)
    prompts = torch.randint(0, 8, (64, 2), generator=g)
    params = [PARAMS[i % 4] for i in range(64)]
    kw = dict(num_draft_tokens=gamma, max_new_tokens=9, eos_token_id=8)
    a = speculative_generate(target, draft, prompts, params, generator=torch.Generator().manual_seed(5), **kw)
    b = speculative_generate(target, draft, prompts, params, generator=torch.Generator().manual_seed(5),
                             verifier=LogitsLevelVerifier(), **kw)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.accepted_lengths, b.accepted_lengths)
    assert (a.num_tokens < 9).any()  # EOS cuts some rows


class Recorder(LogitsLevelVerifier):
    def __init__(self):
        super().__init__()
        self.seen = []

    def verify_logits(self, inputs, generator=None):
        self.seen.append(inputs)
        return super().verify_logits(inputs, generator)


def test_decoder_passes_raw_logits_params_and_histories(models):
    target, draft = models
    rec = Recorder()
    prompts = torch.tensor([[1, 2], [3, 4], [5, 6]])
    params = [PARAMS[0], PARAMS[1], PARAMS[3]]
    speculative_generate(target, draft, prompts, params, num_draft_tokens=2, max_new_tokens=6,
                         generator=torch.Generator().manual_seed(0), verifier=rec)
    first, later = rec.seen[0], rec.seen[-1]
    assert first.target_params == tuple(params) and torch.equal(first.prompt_token_ids, prompts)
    assert first.output_token_ids.shape[0] == 3 and bool((first.output_token_ids == -1).all())
    # Raw logits: the target's own output after the prompt, unprocessed.
    raw = target(torch.cat([prompts, first.draft_token_ids], 1), torch.tensor([[1, 2, 3]] * 3))
    torch.testing.assert_close(first.target_logits, raw)
    assert bool((later.num_output_tokens() > 0).all())
    out = rec.verify_logits(first, torch.Generator().manual_seed(0))
    check_verifier_output(out, first.draft_token_ids, target.vocab_size)


def test_other_orders_run_and_declare_themselves():
    proc = LogitsProcessing(order=("repetition_penalty", "temperature", "top_k", "top_p", "min_p"),
                            repetition_penalty_scope="prompt_and_output", greedy=False)
    v = LogitsLevelVerifier(proc, name="hf-order")
    assert v.capabilities.processing == proc
    assert v.metadata()["processing"]["order"] == list(proc.order)


@pytest.mark.parametrize("scope", ["output", "prompt_and_output"])
def test_target_probs_share_repeated_rows_bit_for_bit(scope):
    """Rows repeated in (logits, params, history, prompt) are processed once: the laws equal
    the processing of every row bit for bit, and a row differing in any one of the four
    gets its own law (V >= SHARE_MIN_VOCAB, so the shared path is taken)."""
    from specexact.decoders.law_table import SHARE_MIN_VOCAB

    proc = LogitsProcessing(order=("repetition_penalty", "temperature", "top_k", "top_p", "min_p"),
                            repetition_penalty_scope=scope, greedy=False)
    B, K, V = 12, 2, SHARE_MIN_VOCAB + 1
    g = torch.Generator().manual_seed(3)
    row = torch.randn(V, generator=g)
    top = row.topk(3).indices.tolist()  # kept by every truncation below
    logits = row.expand(B, K + 1, V).clone()
    logits[5, 1, top[0]] += 1.0  # one logit differs in one row
    drafts = torch.tensor([[top[0], top[1]]]).expand(B, K).clone()
    drafts[7, 0] = top[2]  # another token in the history of row 7's later prefixes
    prompts = torch.tensor([[V - 1, V - 2]]).expand(B, 2).clone()
    prompts[9, 0] = top[2]  # counted by a prompt-and-output repetition penalty only
    params = [SamplingParams(temperature=0.8, top_k=50, top_p=0.9, min_p=0.01, repetition_penalty=1.4)] * B
    params[10] = SamplingParams(temperature=0.7, top_k=50, top_p=0.9, min_p=0.01, repetition_penalty=1.4)
    x = LogitsVerifyInputs(draft_token_ids=drafts, draft_probs=torch.full((B, K, V), 1 / V),
                           target_logits=logits, target_params=tuple(params),
                           prompt_token_ids=prompts, output_token_ids=torch.tensor([[4, 5]]).expand(B, 2))
    v = LogitsLevelVerifier(proc)
    shared = v.target_probs(x)
    from specexact.decoders.params import batch_params
    every_row = proc(logits.reshape(B * (K + 1), V), batch_params(params, B).repeat_interleave(K + 1),
                     candidate_histories(x).reshape(B * (K + 1), -1), prompts.repeat_interleave(K + 1, dim=0))
    assert torch.equal(shared, every_row.reshape(B, K + 1, V))
    assert not torch.equal(shared[5, 1], shared[0, 1]) and torch.equal(shared[5, 0], shared[0, 0])
    assert not torch.equal(shared[7, 2], shared[0, 2]) and torch.equal(shared[7, 0], shared[0, 0])
    assert not torch.equal(shared[10, 0], shared[0, 0])
    if scope == "prompt_and_output":
        assert not torch.equal(shared[9, 0], shared[0, 0])


def test_supplied_uniforms_give_verify_logits_output_for_the_uniforms_it_draws():
    from specexact.decoders import verify
    from specexact.decoders.adapters import takes_uniforms, uniforms_dtype_of

    v = LogitsLevelVerifier()
    assert takes_uniforms(v) and uniforms_dtype_of(v) == torch.float64
    x = inputs()
    x = LogitsVerifyInputs(draft_token_ids=x.draft_token_ids, draft_probs=x.draft_probs,
                           target_logits=torch.randn(2, 4, 5, generator=torch.Generator().manual_seed(1)),
                           target_params=tuple(PARAMS[:2]), prompt_token_ids=x.prompt_token_ids,
                           output_token_ids=x.output_token_ids)
    g = torch.Generator().manual_seed(7)
    h = torch.Generator().set_state(g.get_state())
    expected = v.verify_logits(x, g)
    u = torch.rand((2, 3), generator=h, dtype=torch.float64)
    assert torch.equal(v.verify_logits_with_uniforms(x, u, h), expected)
    # a wrapped verifier without the uniforms protocol: the adapter does not claim it
    assert not takes_uniforms(LogitsLevelVerifier(verifier=lambda *a: verify(*a)))


def test_invalid_logits_inputs_are_refused_by_name():
    v = LogitsLevelVerifier()
    x = inputs()
    with pytest.raises(ValueError, match="target_logits contain NaN"):
        v.verify_logits(LogitsVerifyInputs(**{**x.__dict__, "target_logits": torch.full((2, 4, 5), float("nan"))}))
    with pytest.raises(ValueError, match="output_token_ids must lie"):
        v.verify_logits(LogitsVerifyInputs(**{**x.__dict__, "output_token_ids": torch.tensor([[7], [0]])}))
