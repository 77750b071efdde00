"""The fuzz phase in a child process (``specexact audit --isolate``).

``python -m specexact.audit.run.fuzz_child SPEC RESULT`` resolves the sampler by its name, runs
:func:`~specexact.fuzz.run_fuzz` with the pickled settings and writes the result's
``to_dict()`` as JSON, so a sampler that hangs in C code or takes its process down on a
fuzz input cannot take the audit with it (the parent,
:func:`specexact.audit.run.fuzz_stage.run_fuzz_stage`, kills it after a timeout and records
what happened). :class:`DictResult` is the parent's view of the child's result.
"""

from __future__ import annotations

import sys

from specexact.audit.run.child import start_child, write_child_result
from specexact.audit.sampler.samplers import resolve_sampler
from specexact.fuzz.rules import RULES
from specexact.fuzz.run import run_fuzz

__all__ = ["DictResult", "crashed_result"]


class DictResult:
    """A fuzz result known only as its ``to_dict()`` (from a child process)."""

    def __init__(self, data: dict) -> None:
        self.data = data
        self.generated_cases = list(data.get("generated_cases") or [])

    @property
    def findings(self) -> list:
        return list(self.data.get("findings") or [])

    @property
    def error(self) -> str | None:
        return self.data.get("error")

    @property
    def passed(self) -> bool:
        return not self.findings and self.error is None

    def to_dict(self) -> dict:
        return {**self.data, "generated_cases": list(self.generated_cases)}


def crashed_result(*, sampler: str, settings, rule: str, message: str, seed: int, time_s: float) -> DictResult:
    """The result of a fuzz process that hung (``rule="no_hang"``) or died (``"no_crash"``):
    one finding without a shrunk example (the process did not report which example), whose
    replay reruns the fuzz phase in process."""
    replay = ("# the fuzz process died or hung: rerun the fuzz phase in this process to see the example\n"
              "from specexact.audit import resolve_sampler\nfrom specexact.fuzz import FuzzSettings, run_fuzz\n"
              f"sampler, _ = resolve_sampler({sampler!r})\n"
              f"result = run_fuzz(sampler, FuzzSettings(profile={settings.profile!r}, seed={seed!r}), "
              f"name={sampler!r})\n"
              "print([(f.rule, f.message, f.example) for f in result.findings] or 'not reproduced')\n")
    finding = {"family": "isolated", "rule": rule, "rule_text": RULES[rule], "message": message,
               "example": "unknown: the fuzz process did not report it", "example_summary": {},
               "call": {"entry": "verify", "generator_seed": 0, "uniforms": None, "vocab_size": 0, "batch_size": 0,
                        "num_draft_tokens": 0, "level": "probability"},
               "examples_to_failure": None, "replay": replay, "known_as": None, "flaky": False}
    return DictResult({"sampler": sampler, "level": "probability", "verdict": "fail", "settings": settings.to_dict(),
                       "subject": {"randomness": "?", "input_dtypes": [], "uniforms_dtype": None}, "time_s": time_s,
                       "families": [], "findings": [finding], "generated_cases": [], "error": None})


def _child(spec_path: str, result_path: str) -> int:
    spec = start_child(spec_path)
    sampler, _ = resolve_sampler(spec["sampler"])
    result = run_fuzz(sampler, spec["settings"], name=spec["sampler"], device=spec["device"])
    write_child_result(result_path, result.to_dict())
    return 0


if __name__ == "__main__":  # pragma: no cover - exercised through subprocesses
    sys.exit(_child(sys.argv[1], sys.argv[2]))
