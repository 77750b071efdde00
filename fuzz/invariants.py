"""The exact rules on one call of the sampler (:data:`~specexact.fuzz.rules.RULES`).

:func:`checked_call` makes a call and raises :class:`~specexact.fuzz.rules.RuleBroken`
for a crash, a hang, a protocol violation or an emitted token of target probability 0;
:func:`check_call_invariants` adds what needs two calls: inputs left unmodified, the same
generator state giving the same output while torch's global RNG holds something else,
and a call with a random decision drawing from its generator.

Torch's global RNG is seeded with :data:`GLOBAL_SEED` around every call (and restored
afterwards), so a sampler that draws from it behaves the same when Hypothesis replays an
example; the second call of the determinism rule runs on :data:`OTHER_GLOBAL_SEED`.
"""

from __future__ import annotations

import torch

from specexact.decoders import VerifierProtocolError, check_verifier_output

from specexact.fuzz.declared_order import order_message, swap_allowing_token
from specexact.fuzz.examples import ProbInputs
from specexact.fuzz.reference import acceptance_band, forbidden_tokens, target_law
from specexact.fuzz.rules import rule_error
from specexact.fuzz.subject import Call, CallTimeout, Subject

__all__ = ["GLOBAL_SEED", "OTHER_GLOBAL_SEED", "checked_call", "check_output", "check_call_invariants",
           "has_random_decision", "snapshot", "same_inputs"]

GLOBAL_SEED = 20240611
"""Torch's global RNG is seeded with this around every call of the sampler."""
OTHER_GLOBAL_SEED = 977
"""The global seed of the second call of the determinism rule."""


def _run(subject: Subject, call: Call, generator=None, global_seed: int = GLOBAL_SEED) -> torch.Tensor:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(global_seed)
        return subject.run(call, generator)


def check_output(subject: Subject, call: Call, out, forbidden: torch.Tensor | None = None) -> torch.Tensor:
    """Raise for a protocol violation or an emitted forbidden token; return the emitted
    counts ``[B]``.

    ``forbidden`` is :func:`~specexact.fuzz.reference.forbidden_tokens` of the inputs
    (computed when None).
    """
    ids = call.draft_token_ids
    try:
        num = check_verifier_output(out, ids, call.vocab_size)
    except VerifierProtocolError as exc:
        raise rule_error("output_protocol", str(exc), call) from None
    forbidden = forbidden_tokens(subject, call.inputs) if forbidden is None else forbidden
    out = out.detach().long().cpu()
    present = out >= 0
    tok = out.clamp_min(0)
    bad = present & forbidden.gather(2, tok[:, :, None]).squeeze(2)
    if bool(bad.any()):
        b, j = bad.nonzero()[0].tolist()
        what = "an accepted draft" if j < int(num[b]) - 1 else "the last (recovered or bonus) token"
        extra = ""
        if call.uniforms is not None and j < ids.shape[1]:
            extra = f"; supplied uniform for draft {j}: {float(call.uniforms[b, j])!r}"
        message = (f"emitted token {int(out[b, j])} at row {b}, position {j} ({what}), whose target probability "
                   f"there is 0{extra}; output {out[b].tolist()}")
        at_zero = call.uniforms is not None and j < ids.shape[1] and float(call.uniforms[b, j]) <= 0
        swap = [] if (at_zero and j < int(num[b]) - 1) else swap_allowing_token(subject, call.inputs, b, j,
                                                                                   int(out[b, j]))
        if swap:
            raise rule_error("declared_processing", order_message(subject, message, swap), call)
        raise rule_error("zero_probability_token", message, call)
    return num.cpu()


def checked_call(subject: Subject, call: Call, *, forbidden: torch.Tensor | None = None, generator=None,
                 global_seed: int = GLOBAL_SEED) -> torch.Tensor:
    """Make ``call``; raise :class:`~specexact.fuzz.rules.RuleBroken` for ``no_hang``,
    ``no_crash``, ``output_protocol`` or ``zero_probability_token``; return the output."""
    out = guarded_call(subject, call, generator, global_seed)
    check_output(subject, call, out, forbidden)
    return out


def guarded_call(subject: Subject, call: Call, generator=None, global_seed: int = GLOBAL_SEED):
    """Make ``call`` with torch's global RNG seeded to ``global_seed`` (restored after);
    raise :class:`~specexact.fuzz.rules.RuleBroken` for ``no_hang`` or ``no_crash``; return
    the output unchecked (chain and tree samplers alike)."""
    try:
        return _run(subject, call, generator, global_seed)
    except CallTimeout as exc:
        raise rule_error("no_hang", str(exc), call) from None
    except Exception as exc:  # noqa: BLE001 - a crash on valid input is the finding
        raise rule_error("no_crash", f"{type(exc).__name__}: {exc}", call) from None


def snapshot(inputs):
    """Copies of the input tensors (and their dtypes), for :func:`same_inputs`."""
    if isinstance(inputs, ProbInputs):
        return inputs.clone()
    return {k: getattr(inputs, k).clone() for k in ("draft_token_ids", "draft_probs", "target_logits",
                                                     "prompt_token_ids", "output_token_ids")}


def same_inputs(inputs, copy) -> str | None:
    """None if ``inputs`` still equal the snapshot ``copy`` bit for bit, else the field that changed."""
    if isinstance(inputs, ProbInputs):
        pairs = [("draft_token_ids", inputs.draft_token_ids, copy.draft_token_ids),
                 ("draft_probs", inputs.draft_probs, copy.draft_probs),
                 ("target_probs", inputs.target_probs, copy.target_probs)]
    else:
        pairs = [(k, getattr(inputs, k), v) for k, v in copy.items()]
    for name, now, before in pairs:
        if now.dtype != before.dtype or now.shape != before.shape or not torch.equal(
                torch.nan_to_num(now.detach()), torch.nan_to_num(before)):
            return name
    return None


def has_random_decision(subject: Subject, inputs, law: torch.Tensor | None = None) -> bool:
    """True when some row's first acceptance is a coin with probability in (1e-6, 1 - 1e-6):
    a correct sampler must then draw randomness (from the generator it is passed)."""
    band = acceptance_band(subject, inputs, law)
    K = inputs.draft_token_ids.shape[1]
    first = torch.arange(band.low.numel()) % K == 0
    coin = first & ~band.unclear & ~band.zero & (band.low > 1e-6) & (band.high < 1 - 1e-6)
    return bool(coin.any())


def check_call_invariants(subject: Subject, call: Call) -> torch.Tensor:
    """Every single-example rule on ``call``: :func:`checked_call`, inputs unmodified,
    ``uses_generator`` (token-wise samplers only: :func:`~specexact.fuzz.families.not_applicable`)
    and ``same_generator_same_output``. Returns the first output."""
    law = target_law(subject, call.inputs)
    forbidden = forbidden_tokens(subject, call.inputs, law)
    copy = snapshot(call.inputs)
    gen = call.generator(subject.device)
    before = gen.get_state()
    out = checked_call(subject, call, forbidden=forbidden, generator=gen)
    changed = same_inputs(call.inputs, copy)
    if changed is not None:
        raise rule_error("inputs_unmodified", f"the call modified its input {changed}", call)
    if (subject.scheme == "tokenwise" and has_random_decision(subject, call.inputs, law)
            and torch.equal(before, gen.get_state())):
        raise rule_error("uses_generator", "a call with a random acceptance decision left its generator untouched "
                                           "(the sampler draws its randomness elsewhere)", call)
    again = checked_call(subject, call, forbidden=forbidden, global_seed=OTHER_GLOBAL_SEED)
    if not torch.equal(out.detach().long().cpu(), again.detach().long().cpu()):
        raise rule_error("same_generator_same_output",
                         f"two calls with the same generator state (seed {call.generator_seed}) gave "
                         f"{out.tolist()} and {again.tolist()} (torch's global RNG seeded {GLOBAL_SEED} and "
                         f"{OTHER_GLOBAL_SEED})", call)
    return out
