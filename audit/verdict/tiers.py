"""Severity tiers of the audit's findings, and which tiers fail the audit (exit status 1).

Every finding of a report — a failing check of a case, a defect of a case, a finding of
the fuzz phase — has one tier, decided here from what produced it (the check or fuzz rule
and the finding's kind) by :func:`tier_of`:

- ``inexact``: a law check or a per-decision check failed (the emitted law, a token law,
  independence, the acceptance rule, EOS cuts; the fuzz phase's acceptance-rule probes);
- ``defect``: *defect on valid input*: a crash, a hang, an out-of-range id or another
  output-protocol violation, an emitted token of target probability 0, modified input
  tensors, a generator not used or not reproducible;
- ``under_accepting``: exact, but accepting fewer drafts than its scheme's law (for a
  token-wise sampler, the token-wise optimum);
- ``hardening``: invalid input accepted, or refused with the wrong exception (the fuzz
  rule ``refuses_invalid_input``).

The first three fail the audit (:data:`FAILING_TIERS`); ``hardening`` findings are listed
and counted but fail it only with ``strict_inputs`` (``--strict-inputs``): the verdict
itself is decided in :mod:`specexact.audit.verdict.verdict`. A new check or
fuzz rule must be added to :data:`CHECK_TIERS` / :data:`FUZZ_RULE_TIERS`
(``tests/audit/verdict/test_tiers.py`` fails otherwise); at run time an unknown one counts as
``inexact``, so it fails the audit rather than passing unseen.
"""

from __future__ import annotations

from typing import Iterable, Mapping

__all__ = ["TIERS", "TIER_LABELS", "TIER_TEXT", "FAILING_TIERS", "CHECK_TIERS", "KIND_TIERS", "FUZZ_RULE_TIERS",
           "tier_of", "tier_of_check", "tier_of_fuzz_rule", "failing_tiers", "tier_counts",
           "findings_by_tier"]

TIERS = ("inexact", "defect", "under_accepting", "hardening")
"""Every tier, most severe first (the order reports list them in)."""

TIER_LABELS = {
    "inexact": "inexact",
    "defect": "defect on valid input",
    "under_accepting": "under-accepting",
    "hardening": "hardening",
}
"""How reports name each tier."""

TIER_TEXT = {
    "inexact": "a law or per-decision check fails",
    "defect": "crash, hang, out-of-range id, zero-probability token, output protocol, inputs modified, "
              "generator not used or not reproducible, reported logprobs wrong",
    "under_accepting": "exact, but accepts less than its scheme's optimum",
    "hardening": "invalid input accepted, or refused with the wrong exception",
}
"""What each tier means, in words."""

FAILING_TIERS = ("inexact", "defect", "under_accepting")
"""The tiers that fail the audit (exit status 1) whatever the options."""

CHECK_TIERS = {
    # the emitted law and token laws
    "sequence_law": "inexact", "first_token_law": "inexact", "sequences_vs_naive": "inexact",
    "lossy_tv": "inexact",  # a measurement: it never fails
    # acceptance (an accepted-length check that fails with the law right is under-accepting: KIND_TIERS)
    "accepted_length": "inexact", "first_acceptance": "inexact",
    # independence and fresh randomness, as statistical checks of the law
    "independent_rows": "inexact", "independent_calls": "inexact",
    # per-decision checks (audit/checks/decisions_checks.py)
    "acceptance_exact": "inexact", "acceptance": "inexact", "recovered_support": "inexact",
    "recovered_token_law": "inexact", "bonus_token_law": "inexact", "eos_cut": "inexact",
    # end-to-end cases (audit/cases/e2e/): the engine's plain sampling and its seeds
    "plain_sequence_law": "inexact", "sequences_vs_plain": "inexact", "reproducible": "defect",
    # an engine's seed promise (audit/cases/e2e/seed_checks.py): a seeded request in another mix
    # (a broken promise: defect), unseeded requests of one call dependent (their joint law: inexact)
    "reproducible_in_mix": "defect", "reproducible_alone": "defect", "independent_requests": "inexact",
    # a long end-to-end case's per-token checks (audit/cases/e2e/token_checks.py)
    "token_law": "inexact", "plain_token_law": "inexact",
    # an engine's reported logprobs against the exact law (audit/cases/e2e/logprob_checks.py):
    # the outputs may be right; the numbers the engine reports are not
    "token_logprobs": "defect", "plain_token_logprobs": "defect",
    # a crash, hang or protocol violation of a case
    "defect": "defect",
    # evidence spread over several checks (the audit's combined check, audit/checks/combined.py);
    # under-accepting by its kind where that is its evidence (audit/verdict/finding_kinds.py, combined_kind)
    "combined": "inexact",
}
"""The tier of a failing check, by check type (the name before ``[``)."""

KIND_TIERS = {
    "inexactness": "inexact",
    "decision_rule": "inexact",
    "under_accepting": "under_accepting",
    "crash": "defect",
    "timeout": "defect",
    "protocol_violation": "defect",
}
"""The tier of a check finding by its ``kind`` (``audit/verdict/finding_kinds.py``); it decides over the
check type for ``under_accepting`` and the defect kinds."""

FUZZ_RULE_TIERS = {
    "acceptance_rule": "inexact",
    "declared_processing": "inexact",
    "output_protocol": "defect",
    "zero_probability_token": "defect",
    "no_crash": "defect",
    "no_hang": "defect",
    "inputs_unmodified": "defect",
    "same_generator_same_output": "defect",
    "uses_generator": "defect",
    "refuses_invalid_input": "hardening",
}
"""The tier of a fuzz finding, by the rule it broke (:data:`specexact.fuzz.rules.RULES`)."""


def tier_of_check(name: str, kind: str | None = None) -> str:
    """The tier of a failing check ``name`` (e.g. ``sequence_law[class 0]``) whose finding
    has ``kind``; an unknown check type counts as ``inexact``."""
    if kind in ("under_accepting", "crash", "timeout", "protocol_violation"):
        return KIND_TIERS[kind]
    return CHECK_TIERS.get(name.split("[", 1)[0], "inexact")


def tier_of_fuzz_rule(rule: str) -> str:
    """The tier of a fuzz finding of ``rule``; an unknown rule counts as ``inexact``."""
    return FUZZ_RULE_TIERS.get(rule, "inexact")


def tier_of(finding: Mapping) -> str:
    """The tier of one finding: a fuzz finding (it has ``rule``) by its rule, a check
    finding by its check and ``kind``."""
    if finding.get("source") == "fuzz" or ("rule" in finding and "family" in finding):
        return tier_of_fuzz_rule(finding["rule"])
    return tier_of_check(finding["check"], finding.get("kind"))


def failing_tiers(strict_inputs: bool = False) -> tuple:
    """The tiers that fail the audit: :data:`FAILING_TIERS`, and ``hardening`` with
    ``strict_inputs``."""
    return FAILING_TIERS + (("hardening",) if strict_inputs else ())


def tier_counts(findings: Iterable[Mapping]) -> dict:
    """``{tier: number of findings}`` for every tier of :data:`TIERS` (zeros included)."""
    counts = dict.fromkeys(TIERS, 0)
    for f in findings:
        t = f.get("tier") or tier_of(f)
        counts[t] = counts.get(t, 0) + 1
    return counts


def findings_by_tier(findings: Iterable[Mapping]) -> list[tuple[str, list]]:
    """``[(tier, findings of that tier)]`` in :data:`TIERS` order, tiers without findings
    left out."""
    groups: dict[str, list] = {t: [] for t in TIERS}
    for f in findings:
        groups.setdefault(f.get("tier") or tier_of(f), []).append(f)
    return [(t, fs) for t, fs in groups.items() if fs]
