"""Replay scripts: they repeat the failing call and say REPRODUCED; against a correct sampler
they say it is not reproduced."""

import contextlib
import io

import torch

from specexact.fuzz.examples import ProbInputs
from specexact.fuzz.replay import replay_script, tensor_literal
from specexact.fuzz.subject import Call


def run(script: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(script, "replay", "exec"), {})
    return out.getvalue()


def test_tensor_literals_rebuild_values_and_dtypes():
    t = torch.tensor([[0.1, float("inf")], [2.0**-149, 0.0]], dtype=torch.float32)
    back = eval(tensor_literal(t), {"torch": torch, "inf": float("inf"), "nan": float("nan")})
    assert back.dtype == torch.float32 and torch.equal(back, t)
    b = torch.tensor([0.3], dtype=torch.bfloat16)
    assert torch.equal(eval(tensor_literal(b), {"torch": torch}), b)


def test_a_zero_probability_replay_reproduces_on_the_faulty_sampler_only():
    x = ProbInputs(torch.tensor([[1]]), torch.tensor([[[0.5, 0.5]]]), torch.tensor([[[1.0, 0.0], [0.5, 0.5]]]))
    call = Call("verify_with_uniforms", x, uniforms=torch.tensor([[0.0]], dtype=torch.float64))
    for sampler, expected in (("specexact.audit.zoo_float:accepts_at_equality", "REPRODUCED"),
                              ("builtin", "not reproduced")):
        script = replay_script(sampler=sampler, family="acceptance_probes", rule="zero_probability_token",
                               message="emitted token 1 <b>", example="...", call=call)
        # the sampler's text as written (no HTML entities: the reports escape the script)
        assert "# emitted token 1 <b>" in script and "&lt;" not in script and "&gt;" not in script
        assert expected in run(script)


def test_a_determinism_replay_and_an_invalid_input_replay():
    x = ProbInputs(torch.tensor([[0], [1]]), torch.full((2, 1, 3), 1 / 3), torch.tensor([[[0.5, 0.3, 0.2]] * 2] * 2))
    call = Call("verify", x, generator_seed=5)
    script = replay_script(sampler="specexact.audit.zoo_float:global_rng_draws", family="verify_calls",
                           rule="same_generator_same_output", message="m", example="e", call=call)
    assert "REPRODUCED" in run(script)
    assert "not reproduced" in run(script.replace("specexact.audit.zoo_float:global_rng_draws", "builtin"))
    bad = Call("verify", ProbInputs(x.draft_token_ids + 7, x.draft_probs, x.target_probs))
    script = replay_script(sampler="builtin", family="invalid_inputs", rule="refuses_invalid_input", message="m",
                           example="e", call=bad, corruption="draft_id_too_large")
    assert "not reproduced: ValueError" in run(script)


def test_empty_tensors_keep_their_shape():
    """A call with no drafts has ``draft_probs [B, 0, V]``: the literal must rebuild that
    shape, or the replay fails on another error than the finding's."""
    for t in (torch.zeros(1, 0, 5), torch.zeros(2, 0, dtype=torch.long), torch.zeros(0)):
        rebuilt = eval(tensor_literal(t), {"torch": torch})
        assert rebuilt.shape == t.shape and rebuilt.dtype == t.dtype
