"""What a fuzz phase found: :class:`Finding` (a broken rule with its shrunk example and
replay) and :class:`FuzzResult` (every family's tally and the findings), JSON-ready."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from specexact.decoders.adapters.protocol import LogitsVerifyInputs

from specexact.fuzz.engine import FamilyRun
from specexact.fuzz.replay import replay_script
from specexact.fuzz.rules import RULES, RuleBroken
from specexact.fuzz.settings import FuzzSettings
from specexact.fuzz.subject import Subject

__all__ = ["Finding", "FuzzResult", "finding_of", "known_findings"]


def known_findings(sampler) -> tuple:
    """Deterministic findings an adapter's module records (``FINDINGS``), each with the
    ``fuzz_rule`` (and optionally ``fuzz_message``, a substring of the message, and
    ``fuzz_level``, the protocol level) that identify it in a fuzz finding."""
    sampler = getattr(sampler, "__wrapped__", sampler)  # under a per-call time limit (audit.call_timeout)
    module = sys.modules.get(type(sampler).__module__)
    return tuple(getattr(module, "FINDINGS", ()) or ())


@dataclass(frozen=True)
class Finding:
    """One broken rule, shrunk.

    Attributes
    ----------
    family, rule, message : str
    example : str
        The shrunk example's ``repr`` (rebuilds it).
    example_summary : dict
        Its input family, V, B, K, dtype.
    call : dict
        The failing call: entry point, generator seed, supplied uniforms, sizes, whether the
        replay prints the inputs literally.
    examples_to_failure : int or None
        The number of the example of its family that first broke the rule this way (before
        shrinking; every example of the family is checked, :mod:`.engine`).
    failing_examples : int
        How many examples of its family broke it this way.
    replay : str
        A stand-alone script that repeats the call and checks the rule.
    known_as : str or None
        The id of the adapter's recorded finding this one is (``FINDINGS``), if any.
    flaky : bool
        Hypothesis saw it fail once but not on replay.
    """

    family: str
    rule: str
    message: str
    example: str
    example_summary: dict
    call: dict
    examples_to_failure: int | None
    replay: str
    known_as: str | None = None
    flaky: bool = False
    failing_examples: int = 1

    def to_dict(self) -> dict:
        return {"family": self.family, "rule": self.rule, "rule_text": RULES[self.rule], "message": self.message,
                "example": self.example, "example_summary": dict(self.example_summary), "call": dict(self.call),
                "examples_to_failure": self.examples_to_failure, "replay": self.replay, "known_as": self.known_as,
                "flaky": self.flaky, "failing_examples": self.failing_examples}


def _call_summary(call) -> dict:
    x = call.inputs
    B, K = (int(v) for v in x.draft_token_ids.shape[:2]) if x.draft_token_ids.dim() == 2 else (
        int(x.draft_token_ids.shape[0]), 0)
    return {"entry": call.entry, "generator_seed": int(call.generator_seed),
            "uniforms": None if call.uniforms is None else [[float(u) for u in row] for row in call.uniforms.tolist()],
            "vocab_size": call.vocab_size, "batch_size": B, "num_draft_tokens": K,
            "level": "logits" if isinstance(x, LogitsVerifyInputs) else "probability"}


def finding_of(subject: Subject, run: FamilyRun, exc: RuleBroken, describe) -> Finding:
    """The :class:`Finding` of a family's shrunk failure ``exc`` (``exc.example`` set by
    the engine)."""
    example = getattr(exc, "example", None)
    corruption = example[1] if isinstance(example, tuple) else None
    shown = repr(example[0]) if isinstance(example, tuple) else repr(example)
    summary = describe(example) if example is not None else {}
    call = exc.call
    known = None
    for k in known_findings(subject.sampler):
        if (k.get("fuzz_rule") == exc.rule and (not k.get("fuzz_message") or k["fuzz_message"] in exc.message)
                and k.get("fuzz_level", subject.level) == subject.level):
            known = k.get("id")
            break
    script = replay_script(sampler=subject.name, family=run.name, rule=exc.rule, message=exc.message, example=shown,
                           call=call, call_timeout_s=subject.call_timeout_s or 30.0, corruption=corruption,
                           must_accept=getattr(exc, "must_accept", None))
    return Finding(family=run.name, rule=exc.rule, message=exc.message, example=shown, example_summary=summary,
                   call=_call_summary(call),
                   examples_to_failure=getattr(exc, "first_example", run.examples_to_failure), replay=script,
                   known_as=known, flaky=run.flaky, failing_examples=int(getattr(exc, "failing_examples", 1)))


@dataclass
class FuzzResult:
    """The outcome of :func:`~specexact.fuzz.run.run_fuzz`.

    Attributes
    ----------
    sampler : str
    level : {"probability", "logits"}
    settings : FuzzSettings
    subject : dict
        What was fuzzed within: declared randomness, input dtypes, uniforms dtype (None
        when uniforms cannot be supplied), rounding dtype, processing.
    families : list of FamilyRun
    findings : list of Finding
    time_s : float
    error : str or None
        Set when the fuzz phase itself could not run (CLI exit status 2).
    generated_cases : list of str
        The statistical cases the audit added for this phase (filled by the audit).
    not_applicable : list of dict
        ``{"what", "reason"}`` for each family or rule that does not apply to the sampler
        (:func:`~specexact.fuzz.families.not_applicable`): not run, and said so.
    """

    sampler: str
    level: str
    settings: FuzzSettings
    subject: dict
    families: list = field(default_factory=list)
    findings: list = field(default_factory=list)
    time_s: float = 0.0
    error: str | None = None
    generated_cases: list = field(default_factory=list)
    not_applicable: list = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """No finding (an error is not a pass either)."""
        return not self.findings and self.error is None

    def to_dict(self) -> dict:
        """The report's ``fuzz`` object (``reports/schema.md``)."""
        return {
            "sampler": self.sampler,
            "level": self.level,
            "verdict": "fail" if self.findings else ("error" if self.error else "pass"),
            "settings": self.settings.to_dict(),
            "subject": dict(self.subject),
            "time_s": self.time_s,
            "families": [{"name": r.name, "description": r.description, "rules": list(r.rules),
                          "examples": r.examples, "calls": r.calls, "examples_to_failure": r.examples_to_failure,
                          "time_s": r.time_s, "stopped": r.stopped, "tried": dict(sorted(r.tried.items())),
                          "vocab_sizes": list(r.vocab), "error": r.error, "unchecked": r.unchecked,
                          "shrinks_cut": r.shrinks_cut} for r in self.families],
            "findings": [f.to_dict() for f in self.findings],
            "generated_cases": list(self.generated_cases),
            "not_applicable": [dict(n) for n in self.not_applicable],
            "error": self.error,
        }
