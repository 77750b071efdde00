"""The tree-drafting decoder: drafting rules, per-node processing, greedy identity, cuts, law."""

import numpy as np
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
)
from specexact.decoders.tree import (
    TreeVerifyOutput,
    chain_as_tree_verifier,
    draft_children,
    tree_speculative_generate,
    verify_block,
    verify_tree_rrs,
    verify_tree_target_only,
)
from specexact.exactness import chisquare_gof
from specexact.exactness.enumeration import count_sequences, sequence_law

EOS = 5


@pytest.fixture(scope="module")
def models():
    target = ToyLM(ToyLMConfig(vocab_size=6, seed=2, eos_token_id=EOS, eos_logit=-1.5))
    return target, target.draft(0.8)


def test_draft_children_rules():
    q = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.25, 0.25, 0.25, 0.25]])
    g = torch.Generator().manual_seed(0)
    toks, laws = draft_children(q, 3, "iid", g)
    assert torch.equal(laws, q[:, None].expand(-1, 3, -1))
    toks, laws = draft_children(q, 3, "without_replacement", g)
    for m in range(2):
        assert len(set(toks[m].tolist())) == 3  # distinct while mass remains
        for j in range(3):
            want = q[m].clone()
            want[toks[m, :j]] = 0
            assert torch.allclose(laws[m, j], want / want.sum())
    # Row 0 has 3 tokens of positive mass: a 4th child falls back to q itself.
    toks, laws = draft_children(q[:1], 4, "without_replacement", g)
    assert torch.allclose(laws[0, 3], q[0])
    toks, laws = draft_children(q, 2, "top_k", g)
    assert toks.tolist() == [[0, 1], [0, 1]]  # ties: lower id first
    assert torch.equal(laws, torch.nn.functional.one_hot(toks, 4).float())
    with pytest.raises(ValueError, match="drafting must be one of"):
        draft_children(q, 2, "beam", g)


@pytest.mark.parametrize("verifier,branching,drafting", [
    (verify_tree_rrs, (2, 2), "iid"),
    (verify_tree_rrs, (3, 1, 1), "without_replacement"),
    (verify_tree_target_only, (2, 3), "top_k"),
    (chain_as_tree_verifier(verify_block), (1, 1, 1, 1), "iid"),
])
def test_greedy_reproduces_naive_greedy(models, verifier, branching, drafting):
    target, draft = models
    g = torch.Generator().manual_seed(1)
    prompts = torch.randint(0, 5, (48, 3), generator=g)
    params = [SamplingParams(temperature=0, repetition_penalty=1.1 + 0.2 * (i % 3),
                             frequency_penalty=0.3 * (i % 2)) for i in range(48)]
    a = naive_generate(target, prompts, params, max_new_tokens=12, generator=g, eos_token_id=EOS)
    b = tree_speculative_generate(target, draft, prompts, params, branching=branching, max_new_tokens=12,
                                  drafting=drafting, generator=g, eos_token_id=EOS, verifier=verifier)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.num_tokens, b.num_tokens)
    assert (b.num_tokens < 12).any() and (b.num_tokens == 12).any()
    assert b.target_calls == b.accepted_lengths.shape[1] and b.draft_calls == len(branching) * b.target_calls


def test_every_node_gets_its_own_processed_law(models):
    """target_probs[:, n + 1] is the law after prompt + generated + node n's path, with the
    penalties counting that history; draft rows are the draft's processed law after the parent."""
    target, draft = models
    tparams = SamplingParams(repetition_penalty=1.5, presence_penalty=0.4, top_k=4)
    dparams = SamplingParams(temperature=0.7, frequency_penalty=0.5)
    records = []

    def keep(record):
        records.append((record.rows.clone(), record.num_generated.clone(), record.draft_token_ids.clone(),
                        record.parent_ids.clone(), record.draft_probs.clone(), record.target_probs.clone()))

    prompts = torch.tensor([[1, 2], [3, 3]])
    out = tree_speculative_generate(target, draft, prompts, tparams, dparams, branching=(2, 2), max_new_tokens=6,
                                    generator=torch.Generator().manual_seed(5), observer=keep)
    assert len(records) >= 2 and any(int(r[1].max()) > 0 for r in records)
    for rows, generated, ids, parents, q, p in records:
        for a, b in enumerate(rows.tolist()):
            before = out.tokens[b, :int(generated[a])].tolist()
            for n in range(ids.shape[1]):
                path, m = [], n
                while m >= 0:
                    path.insert(0, int(ids[a, m]))
                    m = int(parents[a, m])
                for model, params, hist_tokens, got in ((target, tparams, before + path, p[a, n + 1]),
                                                         (draft, dparams, before + path[:-1], q[a, n])):
                    hist = torch.tensor([hist_tokens], dtype=torch.long).reshape(1, -1)
                    seq = torch.cat([prompts[b:b + 1], hist], 1)
                    want = process_logits(model(seq, torch.tensor([[seq.shape[1] - 1]]))[:, 0],
                                          batch_params(params, 1), hist)[0]
                    assert torch.allclose(want, got, atol=1e-6), (b, n)


def test_eos_and_max_new_tokens_cut_the_round(models):
    target, draft = models
    g = torch.Generator().manual_seed(2)
    out = tree_speculative_generate(target, draft, torch.zeros(256, 1, dtype=torch.long), SamplingParams(),
                                    branching=(2, 2, 2), max_new_tokens=9, generator=g, eos_token_id=EOS)
    for row, n in zip(out.tokens.tolist(), out.num_tokens.tolist()):
        kept = row[:n]
        assert all(t >= 0 for t in kept) and all(t == -1 for t in row[n:])
        assert EOS not in kept[:-1] and (kept[-1] == EOS or n == 9)
    assert (out.num_tokens < 9).any()
    out = tree_speculative_generate(target, draft, torch.zeros(64, 1, dtype=torch.long), SamplingParams(),
                                    branching=(2, 2, 2), max_new_tokens=2, generator=g)
    assert bool((out.num_tokens == 2).all()) and out.target_calls <= 2


def test_protocol_violations_and_bad_arguments(models):
    target, draft = models

    def liar(ids, parents, q, p, generator):
        out = verify_tree_rrs(ids, parents, q, p, generator)
        return TreeVerifyOutput(out.tokens, torch.where(out.accepted_nodes >= 0, 5, -1))

    prompts = torch.zeros(64, 1, dtype=torch.long)
    with pytest.raises(VerifierProtocolError):
        tree_speculative_generate(target, draft, prompts, SamplingParams(), branching=(2, 2), max_new_tokens=4,
                                  generator=torch.Generator().manual_seed(0), verifier=liar)
    with pytest.raises(ValueError, match="drafting must be one of"):
        tree_speculative_generate(target, draft, prompts, SamplingParams(), branching=(2,), max_new_tokens=4,
                                  drafting="beam")
    with pytest.raises(ValueError, match="branching"):
        tree_speculative_generate(target, draft, prompts, SamplingParams(), branching=(), max_new_tokens=4)
    with pytest.raises(ValueError, match="top_k drafting needs"):
        tree_speculative_generate(target, draft, prompts, SamplingParams(), branching=(7,), max_new_tokens=4,
                                  drafting="top_k")
    with pytest.raises(ValueError, match="single-chain"):
        tree_speculative_generate(target, draft, prompts, SamplingParams(), branching=(2,), max_new_tokens=4,
                                  verifier=chain_as_tree_verifier(verify_block))


# 20 000 sequences of 4 tokens over V = 3 (81 outcomes, bins of >= 50 expected): several rounds
# per sequence; detectable TV of the binned law about 0.045 at the per-check rate, power 0.99.
GEN_CASES = [(verify_tree_rrs, (2, 2), "iid"), (verify_tree_target_only, (2, 2), "top_k"),
             (chain_as_tree_verifier(verify_block), (1, 1), "iid")]


@pytest.mark.statistical(checks=len(GEN_CASES))
def test_generations_have_the_target_law(tiny_models, alpha):
    target, draft = tiny_models
    params = SamplingParams(repetition_penalty=1.3, frequency_penalty=0.2)
    law = sequence_law(target, torch.tensor([0, 1]), params, length=4)
    for seed, (verifier, branching, drafting) in enumerate(GEN_CASES):
        g = torch.Generator().manual_seed(40 + seed)
        out = tree_speculative_generate(target, draft, torch.tensor([[0, 1]]).expand(20_000, -1), params,
                                        SamplingParams(temperature=0.8), branching=branching, max_new_tokens=4,
                                        drafting=drafting, generator=g, verifier=verifier)
        counts, unexpected = count_sequences(law, out.tokens)
        assert len(unexpected) == 0
        result = chisquare_gof(counts, law.probs, false_fail_rate=alpha, name=f"generation {branching} {drafting}")
        assert result.passed, result
        assert np.mean(out.accepted_lengths.clamp_min(0).numpy()) > 0
