"""The toy language models: determinism, prefix dependence, controlled draft mismatch."""

import pytest
import torch

from specexact.decoders import SamplingParams, ToyLM, ToyLMConfig, batch_params, process_logits


def law(model, prefix):
    logits = model(torch.tensor([prefix]), torch.tensor([[len(prefix) - 1]]))[:, 0]
    return process_logits(logits.double(), batch_params(SamplingParams(), 1))[0]


def test_deterministic_given_seed():
    a, b = ToyLM(ToyLMConfig(vocab_size=50, seed=4)), ToyLM(ToyLMConfig(vocab_size=50, seed=4))
    x = torch.randint(0, 50, (3, 6), generator=torch.Generator().manual_seed(0))
    assert torch.equal(a(x), b(x))
    assert not torch.equal(a(x), ToyLM(ToyLMConfig(vocab_size=50, seed=5))(x))


def test_law_depends_on_the_whole_prefix_not_only_the_last_token():
    m = ToyLM(ToyLMConfig(vocab_size=20, seed=1))
    assert not torch.allclose(law(m, [3, 5, 7]), law(m, [4, 5, 7]))


def test_positions_select_prefixes_causally():
    m = ToyLM(ToyLMConfig(vocab_size=10, seed=2))
    x = torch.tensor([[1, 2, 3, 4]])
    full = m(x)  # [1, 4, V]
    assert torch.allclose(m(x[:, :2], torch.tensor([[1]]))[0, 0], full[0, 1])
    padded = torch.tensor([[1, 2, -1, -1]])
    assert torch.allclose(m(padded, torch.tensor([[1]]))[0, 0], full[0, 1])


def test_draft_mismatch_controls_distance():
    m = ToyLM(ToyLMConfig(vocab_size=64, seed=3))
    prefix = [1, 2, 3]
    tv = [0.5 * float((law(m, prefix) - law(m.draft(mm), prefix)).abs().sum()) for mm in (0.0, 0.1, 0.5, 1.5)]
    assert tv[0] == 0.0
    assert tv[1] < tv[2] < tv[3]


def test_zipf_like_head():
    m = ToyLM(ToyLMConfig(vocab_size=32000, seed=0))
    p = law(m, [0]).sort(descending=True).values
    assert float(p[:100].sum()) > 0.3  # heavy head
    assert float(p[0]) / float(p[99]) > 10


@pytest.mark.parametrize("V", [1, 2, 3, 8193])
def test_small_and_odd_vocabularies(V):
    m = ToyLM(ToyLMConfig(vocab_size=V, seed=0, eos_token_id=V - 1))
    out = m(torch.zeros(2, 3, dtype=torch.long))
    assert out.shape == (2, 3, V) and bool(torch.isfinite(out).all())


def test_float64_copy_matches():
    m = ToyLM(ToyLMConfig(vocab_size=30, seed=9))
    x = torch.tensor([[1, 2, 3]])
    assert torch.allclose(m(x).double(), m.to(dtype=torch.float64)(x), atol=1e-5)


@pytest.mark.parametrize("kw, match", [
    (dict(vocab_size=0), "vocab_size"), (dict(vocab_size=4, eos_token_id=4), "eos_token_id"),
    (dict(vocab_size=4, hidden_size=0), "hidden_size"),
])
def test_config_validation(kw, match):
    with pytest.raises(ValueError, match=match):
        ToyLMConfig(**kw)


def test_bad_calls():
    m = ToyLM(ToyLMConfig(vocab_size=4))
    with pytest.raises(ValueError, match="input_ids"):
        m(torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="positions"):
        m(torch.zeros(1, 2, dtype=torch.long), torch.tensor([[2]]))
    with pytest.raises(ValueError, match="mismatch"):
        m.draft(-1.0)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_rows_logits_do_not_depend_on_the_rows_projected_with_it(threads):
    """With MKL on an AVX-512 CPU and two threads, the last rows of an 11-row product
    (split 8 + 3 over the threads) and products of one to three rows rounded otherwise
    than the same rows among 512; the decoders' fused path then never applied there."""
    model = ToyLM(ToyLMConfig(vocab_size=8193, seed=11))
    states = torch.tanh(torch.randn(512, model.config.hidden_size, generator=torch.Generator().manual_seed(0)))
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        every = model.project(states).view(torch.int32)
        for offset, rows in [(0, 1), (3, 2), (5, 3), (8, 5), (0, 11), (17, 13), (40, 100), (1, 511)]:
            part = states[offset:offset + rows]
            assert torch.equal(model.project(part).view(torch.int32), every[offset:offset + rows])
            assert torch.equal(model.project_rows(part).view(torch.int32), every[offset:offset + rows])
        assert torch.get_num_threads() == threads  # the caller's count is restored
    finally:
        torch.set_num_threads(saved)
