"""The parts of speculative decoding a diagnosis names (:data:`PARTS`), which check type
(:data:`CHECK_PARTS`) and fuzz rule (:data:`FUZZ_RULE_PARTS`) belongs to each, and how the
diagnosis reads one check (its type, whether it tested anything, its label). Used by
:mod:`specexact.audit.verdict.diagnosis` and :mod:`specexact.audit.verdict.diagnosis_heuristics`.
"""

from __future__ import annotations

import math
from collections import defaultdict

__all__ = ["PARTS", "CHECK_PARTS", "FUZZ_RULE_PARTS", "FAMILIES", "check_type", "tested", "check_label",
           "by_case_type"]

PARTS = (
    ("acceptance_rule", "acceptance rule"),
    ("recovered_token", "recovered token"),
    ("bonus_token", "bonus token"),
    ("position_alignment", "position alignment"),
    ("per_prefix_processing", "per-prefix processing (penalties, truncation)"),
    ("independence", "independence (rows of a call)"),
    ("reproducibility", "reproducibility (fresh randomness per call)"),
    ("eos_cut", "EOS / max_new_tokens"),
    ("protocol", "protocol (crash, hang, output)"),
    ("input_validation", "input validation (invalid input refused)"),
    ("emitted_law", "emitted law (sequences)"),
)
"""Every part, in report order: ``(key, label)``."""

CHECK_PARTS = {
    "acceptance_exact": "acceptance_rule", "acceptance": "acceptance_rule", "accepted_length": "acceptance_rule",
    "first_acceptance": "acceptance_rule",
    "recovered_support": "recovered_token", "recovered_token_law": "recovered_token",
    "bonus_token_law": "bonus_token",
    "eos_cut": "eos_cut",
    "independent_rows": "independence",
    "independent_calls": "reproducibility",
    "defect": "protocol",
    "sequence_law": "emitted_law", "first_token_law": "emitted_law", "sequences_vs_naive": "emitted_law",
    # end-to-end cases (audit/cases/e2e/)
    "plain_sequence_law": "emitted_law", "sequences_vs_plain": "emitted_law", "reproducible": "reproducibility",
    "reproducible_in_mix": "reproducibility", "reproducible_alone": "reproducibility", "independent_requests": "independence",
    "token_law": "emitted_law", "plain_token_law": "emitted_law",
}
"""The part each check type belongs to."""

FUZZ_RULE_PARTS = {
    "acceptance_rule": "acceptance_rule", "zero_probability_token": "acceptance_rule",
    "declared_processing": "per_prefix_processing",
    "no_crash": "protocol", "no_hang": "protocol", "output_protocol": "protocol", "inputs_unmodified": "protocol",
    "refuses_invalid_input": "input_validation",
    "uses_generator": "reproducibility", "same_generator_same_output": "reproducibility",
}
"""The part a fuzz finding's rule fails (a zero-probability *last* token goes to the
recovered token instead: :func:`~specexact.audit.verdict.diagnosis._fuzz_part`)."""

FAMILIES = ("acceptance_rule", "recovered_token", "bonus_token")
"""The per-event parts (their checks judge each decision, recovered or bonus token)."""


def check_type(chk: dict) -> str:
    return chk["name"].split("[", 1)[0]


def tested(chk: dict) -> bool:
    d = chk.get("details") or {}
    return int(chk.get("n") or 0) > 0 and not d.get("not_applicable") and chk.get("detectable_tv") != "inf" \
        and chk.get("detectable_tv") != math.inf


def check_label(chk: dict) -> str:
    return f"{chk['case']} / {chk['name']}"


def by_case_type(checks: list[dict]) -> dict:
    out = defaultdict(dict)
    for c in checks:
        out[c["case"]][check_type(c)] = c
    return out
