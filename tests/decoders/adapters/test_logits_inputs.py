"""validate_logits_verify_inputs: valid inputs pass; every kind of invalid one is named."""

import pytest
import torch

from specexact.decoders import SamplingParams
from specexact.decoders.adapters import LogitsVerifyInputs
from specexact.decoders.adapters.logits_inputs import validate_logits_verify_inputs


def good(**changes):
    B, K, V = 2, 2, 4
    fields = dict(draft_token_ids=torch.tensor([[0, 1], [2, 3]]), draft_probs=torch.full((B, K, V), 0.25),
                  target_logits=torch.zeros(B, K + 1, V), target_params=(SamplingParams(),) * B,
                  prompt_token_ids=torch.tensor([[1], [2]]), output_token_ids=torch.tensor([[3, -1], [0, 1]]))
    fields.update(changes)
    return LogitsVerifyInputs(**fields)


def test_valid_inputs_pass():
    validate_logits_verify_inputs(good())
    validate_logits_verify_inputs(good(output_token_ids=torch.zeros(2, 0, dtype=torch.int64)))
    x = torch.zeros(2, 3, 4)
    x[:, :, 1:] = -torch.inf  # -inf is fine as long as a row keeps a finite logit
    validate_logits_verify_inputs(good(target_logits=x))


@pytest.mark.parametrize("changes,error,match", [
    ({"target_logits": torch.full((2, 3, 4), float("nan"))}, ValueError, "NaN"),
    ({"target_logits": torch.full((2, 3, 4), float("inf"))}, ValueError, r"\+inf"),
    ({"target_logits": torch.full((2, 3, 4), -float("inf"))}, ValueError, "all -inf"),
    ({"target_logits": torch.zeros(2, 2, 4)}, ValueError, "target_logits must have shape"),
    ({"target_logits": torch.zeros(2, 3, 4, dtype=torch.int64)}, TypeError, "floating"),
    ({"draft_token_ids": torch.tensor([[0, 9], [2, 3]])}, ValueError, "draft_token_ids must lie"),
    ({"draft_probs": torch.full((2, 2, 4), -1.0)}, ValueError, "negative"),
    ({"target_params": (SamplingParams(),)}, ValueError, "target_params must hold B=2"),
    ({"target_params": (SamplingParams(), "top_k=3")}, TypeError, "target_params\\[1\\]"),
    ({"prompt_token_ids": torch.tensor([[4], [0]])}, ValueError, "prompt_token_ids must lie in \\[0, 4\\)"),
    ({"output_token_ids": torch.tensor([[-1, 3], [0, 1]])}, ValueError, "after its -1 padding"),
    ({"output_token_ids": torch.tensor([[0.5], [1.0]])}, TypeError, "output_token_ids must be an integer"),
])
def test_invalid_inputs_are_named(changes, error, match):
    with pytest.raises(error, match=match):
        validate_logits_verify_inputs(good(**changes))


def test_not_inputs_at_all():
    with pytest.raises(TypeError, match="LogitsVerifyInputs"):
        validate_logits_verify_inputs({"draft_token_ids": 1})
