"""The verifier: decisions with injected uniforms, float guards, input validation, output form."""

import pytest
import torch

import specexact.decoders.rejection_sampling as verify_module
from specexact.decoders import verify


def inject(monkeypatch, values):
    """Make the verifier's uniform draws return ``values`` in order (float64 tensors)."""
    queue = [torch.as_tensor(v, dtype=torch.float64) for v in values]

    def fake(shape, generator, device):
        return queue.pop(0).reshape(shape)

    monkeypatch.setattr(verify_module, "uniform", fake)
    import specexact.decoders.sampling as sampling

    monkeypatch.setattr(sampling, "uniform", lambda shape, g, d: fake(shape, g, d))


# The seed note's example: target (0.6, 0.4), draft (0.8, 0.2); drafting token 0 is
# accepted with probability 0.75; on rejection the residual is (0, 1).
TARGET = torch.tensor([[[0.6, 0.4], [0.5, 0.5]]], dtype=torch.float64)
DRAFT = torch.tensor([[[0.8, 0.2]]], dtype=torch.float64)


def test_accepts_below_ratio_and_emits_bonus(monkeypatch):
    inject(monkeypatch, [[[0.7499]], [[0.6]]])
    out = verify(torch.tensor([[0]]), DRAFT, TARGET)
    assert out.tolist() == [[0, 1]]  # accepted, then bonus from (0.5, 0.5) at u=0.6 -> id 1


def test_rejects_at_ratio_and_emits_from_residual(monkeypatch):
    inject(monkeypatch, [[[0.75]], [[0.0]]])
    out = verify(torch.tensor([[0]]), DRAFT, TARGET)
    assert out.tolist() == [[1, -1]]  # residual (0, 1): the recovered token is 1


def test_token_with_draft_prob_above_target_is_always_accepted_when_ratio_ge_1(monkeypatch):
    inject(monkeypatch, [[[0.999999]], [[0.1]]])
    out = verify(torch.tensor([[1]]), DRAFT, TARGET)
    assert out.tolist() == [[1, 0]]


def test_zero_draft_prob_guard_accepts_iff_target_positive(monkeypatch):
    draft = torch.tensor([[[1.0, 0.0, 0.0]]])
    target = torch.tensor([[[0.0, 0.5, 0.5], [0.0, 0.0, 1.0]]])
    inject(monkeypatch, [[[0.999]], [[0.5]]])
    assert verify(torch.tensor([[1]]), draft, target).tolist() == [[1, 2]]
    target0 = torch.tensor([[[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]]])
    inject(monkeypatch, [[[0.0]], [[0.5]]])
    assert verify(torch.tensor([[1]]), draft, target0).tolist() == [[2, -1]]


def test_residual_without_mass_falls_back_to_target(monkeypatch):
    # Target a few ulps below the draft on the drafted token, equal elsewhere: a rejection
    # is possible but max(target - draft, 0) has no mass.
    draft = torch.tensor([[[0.5, 0.5]]], dtype=torch.float32)
    target = torch.tensor([[[0.5, 0.5], [1.0, 0.0]]], dtype=torch.float32)
    target[0, 0, 0] = torch.nextafter(torch.tensor(0.5), torch.tensor(0.0))
    inject(monkeypatch, [[[1 - 2**-53]], [[0.25]]])
    out = verify(torch.tensor([[0]]), draft, target)
    assert out.tolist() == [[0, -1]]  # fell back to the target row, u=0.25 -> id 0


def test_first_rejection_stops_the_row(monkeypatch):
    draft = torch.full((1, 3, 2), 0.5)
    target = torch.tensor([[[0.5, 0.5], [0.1, 0.9], [0.5, 0.5], [0.5, 0.5]]])
    inject(monkeypatch, [[[0.0, 0.5, 0.0]], [[0.0]]])
    out = verify(torch.tensor([[0, 0, 0]]), draft, target)
    assert out.tolist() == [[0, 1, -1, -1]]


def test_ragged_rows_and_placeholders():
    g = torch.Generator().manual_seed(0)
    B, K, V = 256, 4, 7
    draft = torch.softmax(torch.randn(B, K, V, generator=g), -1)
    target = torch.softmax(torch.randn(B, K + 1, V, generator=g), -1)
    ids = torch.multinomial(draft.reshape(-1, V), 1, generator=g).reshape(B, K)
    out = verify(ids, draft, target, g)
    num = (out >= 0).sum(1)
    assert out.shape == (B, K + 1) and bool(((num >= 1) & (num <= K + 1)).all())
    assert bool(((out >= 0) == (torch.arange(K + 1)[None] < num[:, None])).all())
    accepted = torch.arange(K)[None] < (num - 1)[:, None]
    assert bool((out[:, :K][accepted] == ids[accepted]).all())
    assert len(set(num.tolist())) > 2  # acceptance is ragged across rows


def test_same_generator_state_same_output():
    g = torch.Generator().manual_seed(0)
    draft = torch.softmax(torch.randn(8, 2, 5, generator=g), -1)
    target = torch.softmax(torch.randn(8, 3, 5, generator=g), -1)
    ids = torch.zeros(8, 2, dtype=torch.long)
    a = verify(ids, draft, target, torch.Generator().manual_seed(3))
    b = verify(ids, draft, target, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)


def good_inputs():
    return torch.tensor([[0, 1]]), torch.full((1, 2, 3), 1 / 3), torch.full((1, 3, 3), 1 / 3)


@pytest.mark.parametrize("mutate, exc, match", [
    (lambda i, d, t: (i[:, :0], d[:, :0], t[:, :1]), ValueError, "K=0"),
    (lambda i, d, t: (i[:0], d[:0], t[:0]), ValueError, "empty batch"),
    (lambda i, d, t: (i + 5, d, t), ValueError, "draft_token_ids must lie in"),
    (lambda i, d, t: (i.float(), d, t), TypeError, "draft_token_ids must be an integer"),
    (lambda i, d, t: (i, d, t[:, :2]), ValueError, "target_probs must have shape"),
    (lambda i, d, t: (i, d[:, :, :2], t), ValueError, "target_probs must have shape"),
    (lambda i, d, t: (i, d.clone().fill_(float("nan")), t), ValueError, "draft_probs has a NaN"),
    (lambda i, d, t: (i, d, t - 0.5), ValueError, "target_probs has a negative value"),
    (lambda i, d, t: (i, d * 0, t), ValueError, "draft_probs has a row with no positive mass"),
])
def test_bad_input_raises_naming_the_argument(mutate, exc, match):
    with pytest.raises(exc, match=match):
        verify(*mutate(*good_inputs()))


def test_half_precision_inputs():
    ids, d, t = good_inputs()
    out = verify(ids, d.half(), t.bfloat16(), torch.Generator().manual_seed(0))
    assert out.dtype == torch.int64 and bool((out[:, 0] >= 0).all())
