"""The exact rules the fuzz phase checks on every example, and the exception that reports one.

Every rule is decided without statistics: an output either breaks it or not. A broken
rule raises :class:`RuleBroken` (one subclass per rule, so that Hypothesis shrinks and
reports each rule's failure on its own), carrying the call that broke it.
"""

from __future__ import annotations

__all__ = ["RULES", "RuleBroken", "rule_error", "FuzzerError"]

RULES: dict[str, str] = {
    "output_protocol": "the output is an integer [B, K+1] tensor, -1 only as a suffix, at least one token per "
                       "row, ids in [0, V), the emitted prefix equal to the drafts",
    "zero_probability_token": "no emitted token has target probability 0 at its position (after the declared "
                              "processing, at the logits level)",
    "no_crash": "valid input gives an output, not an exception",
    "no_hang": "a call on valid input returns within the per-call time limit",
    "refuses_invalid_input": "invalid input raises ValueError or TypeError (not another exception, not an output)",
    "inputs_unmodified": "the sampler does not modify its input tensors",
    "same_generator_same_output": "the same generator state gives the same output (whatever torch's global RNG "
                                  "holds)",
    "uses_generator": "a call with a random decision draws from the generator it is passed",
    "acceptance_rule": "with supplied uniforms, draft d is accepted iff u < min(1, p(d)/q(d)), up to the declared "
                       "dtype's rounding (exactly: never when p(d) = 0)",
    "declared_processing": "logits level: the sampler follows the law of its declared order of operations (a "
                           "decision outside the acceptance band, or an emitted token of probability 0, that the "
                           "law of the declared order with two operations swapped allows is this rule's finding, "
                           "not acceptance_rule's or zero_probability_token's)",
}
"""Rule name -> what it requires."""


class FuzzerError(RuntimeError):
    """The fuzz phase itself could not run (not a finding about the sampler)."""


class RuleBroken(AssertionError):
    """A rule of :data:`RULES` broken by one call.

    Attributes
    ----------
    rule : str
    message : str
        What happened, in words (row, position, token, uniform).
    call : object
        The :class:`~specexact.fuzz.calls.Call` that broke it (inputs, uniforms, generator
        seed), for the finding's replay.
    """

    rule = "rule"

    def __init__(self, message: str, call=None) -> None:
        super().__init__(f"{self.rule}: {message}")
        self.message = message
        self.call = call


_CLASSES: dict[str, type] = {}


def rule_error(rule: str, message: str, call=None) -> RuleBroken:
    """The :class:`RuleBroken` of ``rule`` (its own subclass, so Hypothesis tells the rules apart).

    Raises
    ------
    ValueError
        ``rule`` is not in :data:`RULES`.
    """
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; known: {sorted(RULES)}")
    cls = _CLASSES.get(rule)
    if cls is None:
        cls = type(f"RuleBroken_{rule}", (RuleBroken,), {"rule": rule, "__module__": __name__})
        _CLASSES[rule] = cls
    return cls(message, call)
