"""The speculative decoder: greedy identity, EOS / max_new_tokens, per-prefix penalties,
logits alignment, protocol enforcement, devices."""

import pytest
import torch

from specexact.decoders import (
    SamplingParams,
    ToyLM,
    ToyLMConfig,
    VerifierProtocolError,
    batch_params,
    naive_generate,
    process_logits,
    speculative_generate,
    verify,
)

EOS = 7


@pytest.fixture(scope="module")
def models():
    target = ToyLM(ToyLMConfig(vocab_size=8, seed=1, eos_token_id=EOS, eos_logit=-2.0))
    return target, target.draft(0.7)


@pytest.mark.parametrize("gamma", [1, 3, 6])
def test_greedy_reproduces_naive_greedy_token_for_token(models, gamma):
    target, draft = models
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, 7, (64, 3), generator=g)
    params = [SamplingParams(temperature=0, repetition_penalty=1.2 + 0.1 * (i % 3),
                             frequency_penalty=0.3 * (i % 2)) for i in range(64)]
    a = naive_generate(target, prompts, params, max_new_tokens=15, generator=g, eos_token_id=EOS)
    b = speculative_generate(target, draft, prompts, params, num_draft_tokens=gamma, max_new_tokens=15,
                             generator=g, eos_token_id=EOS)
    assert torch.equal(a.tokens, b.tokens)
    assert torch.equal(a.num_tokens, b.num_tokens)
    assert (b.num_tokens < 15).any() and (b.num_tokens == 15).any()  # EOS and the cap both occur


def test_eos_ends_the_row_and_nothing_follows(models):
    target, draft = models
    g = torch.Generator().manual_seed(1)
    out = speculative_generate(target, draft, torch.zeros(512, 1, dtype=torch.long), SamplingParams(),
                               num_draft_tokens=4, max_new_tokens=12, generator=g, eos_token_id=EOS)
    for row, n in zip(out.tokens.tolist(), out.num_tokens.tolist()):
        kept = row[:n]
        assert all(t >= 0 for t in kept) and all(t == -1 for t in row[n:])
        assert EOS not in kept[:-1]  # at most one EOS, and only as the last token
        assert kept[-1] == EOS or n == 12
    assert (out.num_tokens < 12).any()


@pytest.mark.parametrize("max_new", [1, 2, 5])
def test_max_new_tokens_cuts_a_round(models, max_new):
    target, draft = models
    g = torch.Generator().manual_seed(2)
    out = speculative_generate(target, draft, torch.ones(256, 2, dtype=torch.long), SamplingParams(),
                               num_draft_tokens=4, max_new_tokens=max_new, generator=g)
    assert out.tokens.shape == (256, max_new)
    assert bool((out.num_tokens == max_new).all())  # no EOS configured: every row fills up
    assert out.target_calls <= max_new


class Spy:
    """A correct verifier that records its inputs."""

    def __init__(self):
        self.calls = []

    def __call__(self, ids, draft_probs, target_probs, generator):
        self.calls.append((ids.clone(), draft_probs.clone(), target_probs.clone()))
        return verify(ids, draft_probs, target_probs, generator)


def test_target_law_is_reprocessed_per_candidate_prefix_and_aligned(models):
    """target_probs[:, j] must be the processed law after prompt + generated + d_1..d_j."""
    target, draft = models
    tp = SamplingParams(temperature=0.8, repetition_penalty=1.7, presence_penalty=0.4, top_k=5)
    dp = SamplingParams(temperature=1.3, frequency_penalty=0.6, top_p=0.8)
    spy = Spy()
    g = torch.Generator().manual_seed(3)
    prompt = torch.tensor([[2, 3]] * 4)
    out = speculative_generate(target, draft, prompt, tp, dp, num_draft_tokens=3, max_new_tokens=9,
                               generator=g, verifier=spy)
    assert len(spy.calls) >= 2
    # Replay: before round r, each row has generated the tokens emitted so far.
    emitted = [[] for _ in range(4)]
    round_no = 0
    for ids, dprobs, tprobs in spy.calls:
        active = [b for b in range(4) if len(emitted[b]) < 9]
        assert ids.shape[0] == len(active)
        for a, b in enumerate(active):
            gen = emitted[b]
            for j in range(4):
                prefix = prompt[b].tolist() + gen + ids[a, :j].tolist()
                hist = torch.tensor([gen + ids[a, :j].tolist()]).reshape(1, -1)
                logits = target(torch.tensor([prefix]), torch.tensor([[len(prefix) - 1]]))[:, 0]
                want = process_logits(logits, batch_params(tp, 1), hist)[0]
                assert torch.allclose(tprobs[a, j], want, atol=1e-6), (b, j)
                if j < 3:
                    dlog = draft(torch.tensor([prefix]), torch.tensor([[len(prefix) - 1]]))[:, 0]
                    assert torch.allclose(dprobs[a, j], process_logits(dlog, batch_params(dp, 1), hist)[0], atol=1e-6)
        for a, b in enumerate(active):
            n = len(emitted[b]) + min(int(out.accepted_lengths[b, round_no]) + 1, 9 - len(emitted[b]))
            emitted[b] = out.tokens[b, :n].tolist()
        round_no += 1
    assert [len(e) for e in emitted] == [9] * 4


def test_accepted_lengths_recorded_per_round(models):
    target, draft = models
    g = torch.Generator().manual_seed(4)
    out = speculative_generate(target, draft, torch.zeros(128, 1, dtype=torch.long), SamplingParams(),
                               num_draft_tokens=3, max_new_tokens=10, generator=g)
    acc = out.accepted_lengths
    assert acc.shape[0] == 128 and acc.shape[1] == out.target_calls
    assert bool(((acc >= -1) & (acc <= 3)).all()) and bool((acc[:, 0] >= 0).all())


@pytest.mark.parametrize("bad, match", [
    (lambda ids, d, t, g: torch.zeros(ids.shape[0], ids.shape[1] + 1), "integer ids"),
    (lambda ids, d, t, g: torch.full((ids.shape[0], ids.shape[1] + 1), 99), "outside"),
    (lambda ids, d, t, g: torch.full((ids.shape[0], ids.shape[1] + 1), -1), "no token"),
    (lambda ids, d, t, g: torch.zeros(ids.shape[0], ids.shape[1], dtype=torch.long), "shape"),
    (lambda ids, d, t, g: torch.cat([(ids + 1) % 8, ids[:, :1]], 1), "accepted position"),
    (lambda ids, d, t, g: torch.cat([torch.full_like(ids, -1), ids[:, :1]], 1), "left-aligned"),
])
def test_protocol_violations_are_reported(models, bad, match):
    target, draft = models
    with pytest.raises(VerifierProtocolError, match=match):
        speculative_generate(target, draft, torch.zeros(4, 1, dtype=torch.long), SamplingParams(),
                             num_draft_tokens=2, max_new_tokens=4, generator=torch.Generator().manual_seed(0),
                             verifier=bad)


def test_argument_validation(models):
    target, draft = models
    small = ToyLM(ToyLMConfig(vocab_size=5))
    with pytest.raises(ValueError, match="vocab_size"):
        speculative_generate(target, small, torch.zeros(1, 1, dtype=torch.long), SamplingParams(),
                             num_draft_tokens=2, max_new_tokens=3)
    with pytest.raises(ValueError, match="num_draft_tokens"):
        speculative_generate(target, draft, torch.zeros(1, 1, dtype=torch.long), SamplingParams(),
                             num_draft_tokens=0, max_new_tokens=3)
    with pytest.raises(ValueError, match="prompt_ids"):
        speculative_generate(target, draft, torch.full((1, 1), 8), SamplingParams(),
                             num_draft_tokens=2, max_new_tokens=3)
    with pytest.raises(ValueError, match="max_new_tokens"):
        naive_generate(target, torch.zeros(1, 1, dtype=torch.long), SamplingParams(), max_new_tokens=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_greedy_identity_and_sampling():
    target = ToyLM(ToyLMConfig(vocab_size=32000, seed=2, eos_token_id=1), device="cuda")
    draft = target.draft(0.3)
    g = torch.Generator(device="cuda").manual_seed(0)
    prompts = torch.randint(0, 32000, (256, 4), device="cuda", generator=g)
    p = SamplingParams(temperature=0, repetition_penalty=1.3)
    a = naive_generate(target, prompts, p, max_new_tokens=12, generator=g, eos_token_id=1)
    b = speculative_generate(target, draft, prompts, p, num_draft_tokens=4, max_new_tokens=12,
                             generator=g, eos_token_id=1)
    assert torch.equal(a.tokens, b.tokens)
    s = speculative_generate(target, draft, prompts, SamplingParams(top_p=0.9), num_draft_tokens=4,
                             max_new_tokens=12, generator=g, eos_token_id=1)
    assert s.tokens.device.type == "cuda" and bool((s.tokens < 32000).all())


def test_a_verifier_that_overwrites_its_id_input_is_judged_on_what_it_returned(models):
    """The verifier gets its own copy of the drafted ids: scribbling on it afterwards
    must not turn a correct output into a protocol violation."""
    target, draft = models

    def scribbler(ids, draft_probs, target_probs, generator=None):
        out = verify(ids, draft_probs, target_probs, generator)
        ids.fill_(0)
        return out

    prompts = torch.randint(0, 7, (16, 2), generator=torch.Generator().manual_seed(0))
    kw = dict(num_draft_tokens=3, max_new_tokens=8, eos_token_id=EOS)
    a = speculative_generate(target, draft, prompts, SamplingParams(), generator=torch.Generator().manual_seed(1),
                             verifier=scribbler, **kw)
    b = speculative_generate(target, draft, prompts, SamplingParams(), generator=torch.Generator().manual_seed(1),
                             **kw)
    assert torch.equal(a.tokens, b.tokens)


def test_observer_sees_every_round_and_its_records_rebuild_the_output(models):
    """The observer's records hold what the verifier saw and did: the kept tokens of all
    rounds, in order, are the generated tokens; the target laws are those the verifier got."""
    from specexact.decoders.adapters.builtin_logits import LogitsLevelVerifier

    target, draft = models
    prompts = torch.randint(0, 7, (48, 2), generator=torch.Generator().manual_seed(3))
    params = [SamplingParams(temperature=0.9, top_k=5, repetition_penalty=1.3 + 0.1 * (i % 2)) for i in range(48)]
    outputs = {}
    for name, verifier in (("prob", verify), ("logits", LogitsLevelVerifier())):
        records = []
        seen = []

        def spy(ids, q, p, gen, _seen=seen):
            _seen.append(p.clone())
            return verify(ids, q, p, gen)

        if name == "prob":
            verifier = spy
        out = speculative_generate(target, draft, prompts, params, num_draft_tokens=3, max_new_tokens=9,
                                   generator=torch.Generator().manual_seed(4), eos_token_id=EOS,
                                   verifier=verifier, observer=lambda r, _rec=records: _rec.append(
                                       (r.round_index, r.rows.clone(), r.num_generated.clone(), r.output.clone(),
                                        r.num_emitted.clone(), r.num_kept.clone(), r.target_probs.clone())))
        rebuilt = torch.full_like(out.tokens, -1)
        for k, (ri, rows, ngen, o, nem, nkeep, tp) in enumerate(records):
            assert ri == k
            assert tp.shape == (len(rows), 4, target.vocab_size)
            assert bool((nkeep <= nem).all()) and bool((nkeep >= 1).all())
            if name == "prob":
                assert torch.equal(tp, seen[k])
            for a, r in enumerate(rows.tolist()):
                n0, m = int(ngen[a]), int(nkeep[a])
                rebuilt[r, n0:n0 + m] = o[a, :m]
        assert torch.equal(rebuilt, out.tokens)
        outputs[name] = (out.tokens, [rec[6] for rec in records])
    # Same generator, same law: the logits-level path computes the same processed laws.
    assert torch.equal(outputs["prob"][0], outputs["logits"][0])
    for a, b in zip(*(outputs[n][1] for n in ("prob", "logits"))):
        torch.testing.assert_close(a, b)
