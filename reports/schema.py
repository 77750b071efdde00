"""The JSON Schema of the audit report, and a small validator with no dependencies.

:data:`REPORT_SCHEMA` is the source of truth; ``reports/audit.schema.json`` is the same
schema written out (regenerate with ``python -c "from specexact.reports.schema import
schema_json; print(schema_json(), end='')" > reports/audit.schema.json``; a test checks
that they agree and that :mod:`jsonschema` accepts it as Draft 2020-12).
``reports/schema.md`` explains the fields.

:func:`validate_report` checks a report against the schema with a validator of the subset
of JSON Schema the schema uses (``type``, ``properties``, ``required``,
``additionalProperties``, ``items``, ``prefixItems``, ``minItems``, ``maxItems``,
``enum``, ``const``, ``minimum``, ``maximum``, ``exclusiveMinimum``,
``exclusiveMaximum``, ``pattern``, ``anyOf``, ``allOf``, ``$ref`` to ``#/$defs/...``), so
``specexact merge`` can refuse malformed input without :mod:`jsonschema` installed.

Compatibility: readers must ignore fields they do not know (objects allow additional
properties). Adding fields bumps ``schema_version`` (``1.12`` -> ``1.13``) and keeps
``schema`` (``specexact.audit/1``); removing a field or changing its meaning bumps the
major version (``specexact.audit/2``).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Iterator

__all__ = ["REPORT_SCHEMA", "SchemaError", "validate_report", "iter_errors", "schema_json"]

_NULLABLE_NUMBER = {"type": ["number", "null"]}
_NULLABLE_STRING = {"type": ["string", "null"]}
_NULLABLE_INT = {"type": ["integer", "null"]}
_RATE = {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}
_TIMESTAMP = {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}"}
_TIER = {"enum": ["inexact", "defect", "under_accepting", "hardening"],
         "description": "severity tier (since 1.6; audit/tiers.py)"}

FUZZ_DEFS: dict[str, Any] = {
    "fuzz_plan": {
        "description": "the fuzz stage's part of the plan (since 1.3)",
        "type": "object",
        "required": ["share", "planned_time_s", "time_s", "profile", "examples_per_family", "generated_cases"],
        "properties": {
            "share": {"anyOf": [{"type": "null"}, {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}]},
            "planned_time_s": _NULLABLE_NUMBER,
            "time_s": _NULLABLE_NUMBER,
            "profile": {"enum": ["ci", "nightly"]},
            "examples_per_family": _NULLABLE_INT,
            "generated_cases": {"type": "array", "items": {"type": "string"}},
        },
    },
    "fuzz_family": {
        "type": "object",
        "required": ["name", "description", "rules", "examples", "calls", "examples_to_failure", "time_s", "stopped",
                     "tried", "vocab_sizes", "error"],
        "properties": {
            "name": {"type": "string"},
            "description": {"type": "string"},
            "rules": {"type": "array", "items": {"type": "string"}},
            "examples": {"type": "integer", "minimum": 0},
            "calls": {"type": "integer", "minimum": 0},
            "examples_to_failure": _NULLABLE_INT,
            "time_s": {"type": "number", "minimum": 0},
            "stopped": {"enum": ["examples", "time", "failure", "error"]},
            "tried": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
            "vocab_sizes": {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 2, "maxItems": 2},
            "error": _NULLABLE_STRING,
        },
    },
    "fuzz_finding": {
        "type": "object",
        "required": ["family", "rule", "rule_text", "message", "example", "example_summary", "call",
                     "examples_to_failure", "replay", "known_as", "flaky"],
        "properties": {
            "family": {"type": "string"},
            "rule": {"type": "string"},
            "rule_text": {"type": "string"},
            "message": {"type": "string"},
            "example": {"type": "string"},
            "example_summary": {"type": "object"},
            "call": {
                "type": "object",
                "required": ["entry", "generator_seed", "uniforms", "vocab_size", "batch_size", "num_draft_tokens",
                             "level"],
                "properties": {
                    "entry": {"enum": ["verify", "verify_with_uniforms", "verify_logits",
                                       "verify_logits_with_uniforms", "verify_tree"]},
                    "generator_seed": {"type": "integer", "minimum": 0},
                    "uniforms": {"anyOf": [{"type": "null"},
                                           {"type": "array", "items": {"type": "array", "items": {"type": "number"}}}]},
                    "vocab_size": {"type": "integer", "minimum": 0},
                    "batch_size": {"type": "integer", "minimum": 0},
                    "num_draft_tokens": {"type": "integer", "minimum": 0},
                    "level": {"enum": ["probability", "logits"]},
                },
            },
            "examples_to_failure": _NULLABLE_INT,
            "replay": {"type": "string"},
            "known_as": _NULLABLE_STRING,
            "flaky": {"type": "boolean"},
            "failing_examples": {"type": "integer", "minimum": 1},
            "tier": _TIER,
        },
    },
    "fuzz": {
        "description": "the fuzz stage (specexact.fuzz.FuzzResult.to_dict(); since 1.3)",
        "type": "object",
        "required": ["sampler", "level", "verdict", "settings", "subject", "time_s", "families", "findings",
                     "generated_cases", "error"],
        "properties": {
            "sampler": {"type": "string"},
            "level": {"enum": ["probability", "logits"]},
            "verdict": {"enum": ["pass", "fail", "error"]},
            "settings": {"type": "object", "required": ["profile", "seed"],
                         "properties": {"profile": {"enum": ["ci", "nightly"]}, "seed": {"type": "integer"}}},
            "subject": {"type": "object", "required": ["randomness", "input_dtypes", "uniforms_dtype"],
                        "properties": {"randomness": {"type": "string"},
                                       "input_dtypes": {"type": "array", "items": {"type": "string"}},
                                       "uniforms_dtype": _NULLABLE_STRING}},
            "time_s": {"type": "number", "minimum": 0},
            "families": {"type": "array", "items": {"$ref": "#/$defs/fuzz_family"}},
            "findings": {"type": "array", "items": {"$ref": "#/$defs/fuzz_finding"}},
            "generated_cases": {"type": "array", "items": {"type": "string"}},
            "not_applicable": {"type": "array", "items": {
                "type": "object", "required": ["what", "reason"],
                "properties": {"what": {"type": "string"}, "reason": {"type": "string"}}}},
            "error": _NULLABLE_STRING,
        },
    },
}
"""The fuzz phase's part of the schema (``fuzz``, ``plan.fuzz``; since 1.3)."""

REPORT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://specexact.invalid/schemas/audit/1.12/audit.schema.json",
    "title": "specexact audit report",
    "description": "One run (or merged shards) of `specexact audit`. See reports/schema.md.",
    "type": "object",
    "required": [
        "schema", "schema_version", "verdict", "sampler", "started_at", "finished_at", "wall_time_s",
        "settings", "plan", "environment", "num_sequences", "resumed_cases", "cases", "checks", "findings",
        "accepted_length",
    ],
    "properties": {
        "schema": {"const": "specexact.audit/1"},
        "schema_version": {"type": "string", "pattern": r"^1\.\d+$"},
        "verdict": {"enum": ["pass", "fail"]},
        "sampler": {
            "type": "object",
            "required": ["name", "target"],
            "properties": {
                "name": {"type": "string"},
                "target": {"type": "string"},
                "metadata": {"type": ["object", "null"],
                             "description": "adapter metadata (library, version, signature variant), if any"},
                "package": {
                    "anyOf": [
                        {"type": "null"},
                        {"type": "object", "required": ["name", "version"],
                         "properties": {"name": {"type": "string"}, "version": _NULLABLE_STRING}},
                    ]
                },
            },
        },
        "started_at": _TIMESTAMP,
        "finished_at": {"anyOf": [{"type": "null"}, _TIMESTAMP]},
        "wall_time_s": {"type": "number", "minimum": 0},
        "settings": {"$ref": "#/$defs/settings"},
        "plan": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/plan"}]},
        "environment": {"$ref": "#/$defs/environment"},
        "num_sequences": {"type": "integer", "minimum": 0},
        "resumed_cases": {"type": "array", "items": {"type": "string"}},
        "cases": {"type": "array", "items": {"$ref": "#/$defs/case"}},
        "checks": {"type": "array", "items": {"$ref": "#/$defs/report_check"}},
        "findings": {"type": "array", "items": {"$ref": "#/$defs/finding"},
                     "description": "every finding, the fuzz phase's included (since 1.6), each with its tier"},
        "tiers": {"type": "object", "required": ["inexact", "defect", "under_accepting", "hardening"],
                  "properties": {t: {"type": "integer", "minimum": 0}
                                 for t in ("inexact", "defect", "under_accepting", "hardening")},
                  "description": "findings per tier (since 1.6)"},
        "accepted_length": {"type": "array", "items": {"$ref": "#/$defs/accepted_length"}},
        "shards": {"type": "array", "items": {"$ref": "#/$defs/shard_summary"}},
        "journal": {"type": "string"},
        "diagnosis": {"$ref": "#/$defs/diagnosis"},
        "acceptance": {"type": "array", "items": {"$ref": "#/$defs/acceptance_row"},
                       "description": "accepted-length means per check: observed, own scheme's law, token-wise "
                                      "optimum (since 1.3)"},
        "lossy_measurements": {"type": "array", "items": {"$ref": "#/$defs/lossy_measurement"},
                               "description": "a lossy sampler's measured TVs with their intervals (since 1.3)"},
        "notes": {"type": "array", "items": {"type": "string"},
                  "description": "observations that are not failures, e.g. a scheme that accepts less than "
                                 "token-wise verification by design (since 1.3)"},
        "fuzz": {"$ref": "#/$defs/fuzz"},
        "combined": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/combined"}],
                     "description": "since 1.7: the combined check over every check's p-value "
                                    "(audit/combined.py); null in a report without settings.combination"},
    },
    "$defs": {
        "combined": {
            "description": "Since 1.7: the Cauchy combination (Liu and Xie 2020) of the statistical checks' "
                           "p-values, which fails at pvalue <= false_fail_rate (its share of the audit's rate).",
            "type": "object",
            "required": ["method", "pvalue", "false_fail_rate", "passed", "num_pvalues", "neutralised", "strongest"],
            "properties": {
                "method": {"const": "cauchy"},
                "pvalue": {"type": "number", "minimum": 0, "maximum": 1},
                "false_fail_rate": _RATE,
                "passed": {"type": "boolean"},
                "num_pvalues": {"type": "integer", "minimum": 0},
                "neutralised": {"type": "integer", "minimum": 0,
                                "description": "combined checks failing on their own, their terms set to 0"},
                "randomised": {"type": "integer", "minimum": 0,
                               "description": "since 1.8: combined checks whose p-value entered randomised "
                                              "within its atom (details.pvalue_lower; audit/combined.py)"},
                "strongest": {"type": "array", "maxItems": 5, "items": {
                    "type": "object", "required": ["case", "check", "pvalue"],
                    "properties": {"case": {"type": "string"}, "check": {"type": "string"},
                                   "pvalue": {"type": "number", "minimum": 0, "maximum": 1}}}},
            },
        },
        "diagnosis": {
            "description": "Since 1.3: which part of the sampler the failing checks point at (audit/diagnosis.py).",
            "type": "object",
            "required": ["summary", "culprits", "parts", "notes"],
            "properties": {
                "summary": {"type": "string"},
                "culprits": {"type": "array", "items": {"$ref": "#/$defs/part_key"}},
                "hardening": {"type": "array", "items": {"$ref": "#/$defs/part_key"},
                              "description": "parts failing only at the hardening tier (since 1.6)"},
                "parts": {"type": "array", "items": {"$ref": "#/$defs/diagnosis_part"}},
                "notes": {"type": "array", "items": {"type": "string"}},
                "level": {"enum": ["e2e"], "description": "an end-to-end audit's diagnosis (the parts of a generate "
                                                        "loop); absent for the verify level"},
                "suspects": {"type": "array", "items": {"$ref": "#/$defs/part_key"},
                             "description": "end-to-end: parts the failing checks cannot tell apart, likelier first"},
            },
        },
        "part_key": {"enum": ["acceptance_rule", "recovered_token", "bonus_token", "position_alignment",
                              "per_prefix_processing", "independence", "reproducibility", "eos_cut", "protocol",
                              "input_validation", "emitted_law", "drafting", "target_forward", "seeds",
                              "batching", "logprobs"],
                     "description": "since 1.9: logprobs (an end-to-end engine's reported logprobs); since 1.10 "
                                    "the part seeds also holds the seed promise's checks (reproducible_in_mix, "
                                    "independent_requests); since 1.11 also reproducible_alone, and an "
                                    "end-to-end case's config has check_alone, its engine's capabilities "
                                    "stop_tokens and seeds.alone"},
        "diagnosis_part": {
            "type": "object",
            "required": ["part", "label", "status", "checks_run", "failed", "evidence", "explained_by", "heuristic",
                         "event", "replay"],
            "properties": {
                "part": {"$ref": "#/$defs/part_key"},
                "label": {"type": "string"},
                "status": {"enum": ["pass", "fail", "not_tested", "suspect"]},
                "tier": {"anyOf": [{"type": "null"}, _TIER]},
                "checks_run": {"type": "integer", "minimum": 0},
                "failed": {"type": "array", "items": {"type": "string"}},
                "evidence": _NULLABLE_STRING,
                "explained_by": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/part_key"}]},
                "heuristic": {"type": "boolean"},
                "event": {"type": ["object", "null"]},
                "replay": _NULLABLE_STRING,
                "tested_by": {"type": "array", "items": {"type": "string"},
                              "description": "end-to-end: the checks (case / check) that tested the part"},
            },
        },
        "acceptance_row": {
            "type": "object",
            "required": ["case", "check", "scheme", "passed", "mean_accepted_length",
                         "expected_mean_accepted_length", "tokenwise_optimum_mean_accepted_length", "note"],
            "properties": {
                "case": {"type": "string"}, "check": {"type": "string"}, "scheme": {"type": "string"},
                "passed": {"type": "boolean"}, "measured": {"type": "boolean"},
                "mean_accepted_length": _NULLABLE_NUMBER, "expected_mean_accepted_length": _NULLABLE_NUMBER,
                "tokenwise_optimum_mean_accepted_length": _NULLABLE_NUMBER, "note": _NULLABLE_STRING,
            },
        },
        "lossy_measurement": {
            "type": "object",
            "required": ["case", "check", "estimate", "lower", "upper", "delta", "n", "num_cells", "law"],
            "properties": {
                "case": {"type": "string"}, "check": {"type": "string"},
                "estimate": {"type": "number", "minimum": 0, "maximum": 1},
                "lower": {"type": "number", "minimum": 0, "maximum": 1},
                "upper": {"type": "number", "minimum": 0, "maximum": 1},
                "delta": _RATE, "n": {"type": "integer", "minimum": 2},
                "num_cells": {"type": "integer", "minimum": 1}, "law": {"enum": ["full", "binned"]},
            },
        },
        "real": {
            "description": "A float; non-finite values are the strings inf, -inf, nan (strict JSON).",
            "anyOf": [{"type": "number"}, {"enum": ["inf", "-inf", "nan"]}],
        },
        "tv": {
            "description": "A detectable total variation distance; null where the check guarantees none "
                           "(since 1.3; earlier reports wrote the string inf).",
            "anyOf": [{"type": "number", "minimum": 0}, {"type": "null"}, {"const": "inf"}],
        },
        "worst": {
            "type": "array",
            "maxItems": 5,
            "items": {
                "type": "array",
                "prefixItems": [{"type": "string"}, {"$ref": "#/$defs/real"}, {"$ref": "#/$defs/real"}],
                "minItems": 3,
                "maxItems": 3,
            },
        },
        "check_result": {
            "description": "CheckResult.to_dict() of specexact.exactness.results.",
            "type": "object",
            "required": ["name", "method", "statistic", "pvalue", "dof", "n", "false_fail_rate", "detectable_tv",
                         "false_pass_rate", "passed", "worst", "details", "description"],
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "method": {"enum": ["exact", "asymptotic", "monte_carlo"]},
                "statistic": {"$ref": "#/$defs/real"},
                "pvalue": {"type": "number", "minimum": 0, "maximum": 1},
                "dof": _NULLABLE_INT,
                "n": {"type": "integer", "minimum": 0},
                "false_fail_rate": _RATE,
                "detectable_tv": {"$ref": "#/$defs/tv"},
                "false_pass_rate": _RATE,
                "passed": {"type": "boolean"},
                "worst": {"$ref": "#/$defs/worst"},
                "details": {"type": "object"},
                "description": {"type": "string"},
            },
        },
        "report_check": {
            "allOf": [
                {"$ref": "#/$defs/check_result"},
                {"type": "object", "required": ["case"],
                 "properties": {"case": {"type": "string"},
                                "bh_adjusted_pvalue": {"type": "number", "minimum": 0, "maximum": 1}}},
            ]
        },
        "execution": {
            "type": "object",
            "required": ["isolated", "resumed", "timeout_s", "sampling_time_s", "planned_batches"],
            "properties": {
                "isolated": {"type": "boolean"},
                "resumed": {"type": "boolean"},
                "timeout_s": _NULLABLE_NUMBER,
                "sampling_time_s": _NULLABLE_NUMBER,
                "planned_batches": _NULLABLE_INT,
                "initial_planned_batches": _NULLABLE_INT,
                "planned_time_s": _NULLABLE_NUMBER,
                "processes": {
                    "type": "array",
                    "description": "since 1.8, end-to-end cases whose engine could not be loaded again in the "
                                   "audit's process after a crash: what each process did, the audit's first, "
                                   "then the fresh ones the case went on in (class ids)",
                    "items": {
                        "type": "object",
                        "required": ["process", "searched", "crashing", "checked"],
                        "properties": {
                            "process": {"enum": ["audit", "fresh"]},
                            "whole_case": {"type": "boolean"},
                            "searched": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                            "crashing": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                            "checked": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                            "note": _NULLABLE_STRING,
                        },
                    },
                },
            },
        },
        "case": {
            "type": "object",
            "required": ["name", "description", "config", "seed", "num_sequences", "num_batches", "wall_time_s",
                         "verdict", "defect", "checks", "execution"],
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "description": {"type": "string"},
                "config": {"type": "object"},
                "seed": {"type": "integer", "minimum": 0},
                "num_sequences": {"type": "integer", "minimum": 0},
                "num_batches": {"type": "integer", "minimum": 0},
                "wall_time_s": {"type": "number", "minimum": 0},
                "verdict": {"enum": ["pass", "fail"]},
                "defect": _NULLABLE_STRING,
                "checks": {"type": "array", "items": {"$ref": "#/$defs/check_result"}},
                "execution": {"$ref": "#/$defs/execution"},
                "engine_not_started": {"const": True,
                                       "description": "since 1.12, end-to-end cases: the engine's first load in the "
                                                      "audit's process raised (nothing of it ran there); absent "
                                                      "otherwise. A report every case of which has it audited "
                                                      "nothing: the command's verdict is error (exit status 2)"},
                "phase_times_s": {"type": "object", "additionalProperties": {"type": "number", "minimum": 0},
                                  "description": "since 1.7, end-to-end cases: seconds spent loading the "
                                                 "engine, computing the exact laws (laws, before the first "
                                                 "call), in speculative and plain generate calls, in the "
                                                 "crash search, in the checks, and in starting fresh processes "
                                                 "after a crash (fresh_process_start)"},
            },
        },
        "finding": {
            "type": "object",
            "required": ["case", "check", "kind", "message", "pvalue", "worst", "defect", "reproduction"],
            "properties": {
                "source": {"enum": ["check", "fuzz", "combined"],
                           "description": "since 1.6: a failing check of a case, or a fuzz finding; since 1.7 "
                                          "the failing combined check"},
                "tier": _TIER,
                "case": {"type": "string"},
                "check": {"type": "string"},
                "kind": {"enum": ["inexactness", "under_accepting", "decision_rule", "crash", "timeout",
                                  "protocol_violation", "fuzz"]},
                "family": {"type": "string"},
                "rule": {"type": "string"},
                "fuzz_index": {"type": "integer", "minimum": 0},
                "message": {"type": "string"},
                "pvalue": {"type": "number", "minimum": 0, "maximum": 1},
                "worst": {"$ref": "#/$defs/worst"},
                "defect": _NULLABLE_STRING,
                "reproduction": {"anyOf": [
                    {
                        "type": "object",
                        "required": ["command", "python", "case_seed", "num_batches", "per_check_false_fail_rate"],
                        "properties": {
                            "command": {"type": "string", "pattern": "^specexact audit "},
                            "python": {"type": "string"},
                            "case_seed": {"type": "integer"},
                            "batch_size": _NULLABLE_INT,
                            "num_batches": {"type": "integer", "minimum": 1},
                            "per_check_false_fail_rate": _RATE,
                            "false_fail_rate": _RATE,
                            "threads": _NULLABLE_INT,
                        },
                    },
                    {  # the combined check (since 1.7): the whole audit again
                        "type": "object",
                        "required": ["command", "python"],
                        "properties": {"command": {"type": "string", "pattern": "^specexact audit "},
                                       "python": {"type": "string"}},
                    },
                    {  # a fuzz finding (since 1.6): the fuzz command and the replay script
                        "type": "object",
                        "required": ["command", "python"],
                        "properties": {"command": {"type": "string", "pattern": "^specexact fuzz "},
                                       "python": {"type": "string"}},
                    },
                ]},
            },
        },
        "settings": {
            "type": "object",
            "required": ["seed", "budget_s", "num_batches", "false_fail_rate", "num_checks",
                         "per_check_false_fail_rate", "correction", "device", "isolate", "case_timeout_s",
                         "case_set", "all_cases", "shard", "audit_key"],
            "properties": {
                "seed": {"type": "integer"},
                "budget_s": {"anyOf": [{"type": "null"}, {"type": "number", "exclusiveMinimum": 0}]},
                "num_batches": {"anyOf": [{"type": "null"}, {"type": "integer", "minimum": 1}]},
                "false_fail_rate": _RATE,
                "num_checks": {"type": "integer", "minimum": 1},
                "per_check_false_fail_rate": _RATE,
                "correction": {"enum": ["bonferroni", "bonferroni+cauchy"],
                               "description": "bonferroni+cauchy (since 1.7): per_check_false_fail_rate is "
                                              "(1 - combination.share) * false_fail_rate / num_checks"},
                "combination": {
                    "description": "since 1.7: the combined check's method, share and false-fail rate",
                    "type": "object",
                    "required": ["method", "share", "false_fail_rate"],
                    "properties": {"method": {"const": "cauchy"},
                                   "share": _RATE,
                                   "false_fail_rate": _RATE},
                },
                "device": {"type": "string"},
                "isolate": {"type": "boolean"},
                "case_timeout_s": _NULLABLE_NUMBER,
                "case_set": {"enum": ["default", "quick", "custom"]},
                "all_cases": {"type": "array", "minItems": 1, "items": {"type": "string"}},
                "shard": {
                    "anyOf": [
                        {"type": "null"},
                        {"type": "object", "required": ["index", "count", "cases"],
                         "properties": {"index": {"type": "integer", "minimum": 1},
                                        "count": {"type": "integer", "minimum": 1},
                                        "cases": {"type": "array", "items": {"type": "string"}}}},
                    ]
                },
                "audit_key": {"type": "string", "pattern": "^[0-9a-f]{16}$"},
                "strict_inputs": {"type": "boolean",
                                  "description": "hardening findings fail the verdict too (since 1.6)"},
                "processing": {
                    "description": "the logits processing of the reference laws: the built-in one "
                                   "(probability-level samplers) or the order a logits-level sampler declared",
                    "type": "object",
                    "required": ["level", "order", "repetition_penalty_scope", "greedy"],
                    "properties": {
                        "level": {"enum": ["probability", "logits"]},
                        "order": {"type": "array", "items": {"type": "string"}},
                        "repetition_penalty_scope": {"enum": ["output", "prompt_and_output"]},
                        "greedy": {"type": "boolean"},
                    },
                },
                "threads": {
                    "description": "torch intra-op threads the cases ran with, and how the count was chosen "
                                   "(since 1.3)",
                    "type": "object",
                    "required": ["threads", "chosen_by"],
                    "properties": {
                        "threads": {"type": "integer", "minimum": 1},
                        "chosen_by": {"enum": ["measured", "set", "default"]},
                        "seconds": {"type": "object", "additionalProperties": {"type": "number", "minimum": 0}},
                        "cases_timed": {"type": "integer", "minimum": 0},
                    },
                },
                "skipped_cases": {
                    "description": "row classes left out because the sampler does not implement an operation "
                                   "they need (the whole case when no class is left), and (kind 'budget', "
                                   "since 1.4) whole cases left out because their minimum of decoder calls "
                                   "did not fit the time left",
                    "type": "array",
                    "items": {"type": "object", "required": ["case", "reason", "classes"],
                              "properties": {"case": {"type": "string"}, "reason": {"type": "string"},
                                             "kind": {"enum": ["budget"]},
                                             "classes": {"type": "array", "items": {"type": "integer"}}}},
                },
            },
        },
        "case_plan": {
            "type": "object",
            "required": ["name", "seconds_per_batch", "rows_per_class", "planned_batches", "planned_time_s",
                         "planned_sequences_per_class", "planned_detectable_tv"],
            "properties": {
                "name": {"type": "string"},
                "seconds_per_batch": _NULLABLE_NUMBER,
                "rows_per_class": {"type": "integer", "minimum": 1},
                "planned_batches": {"type": "integer", "minimum": 1},
                "planned_time_s": _NULLABLE_NUMBER,
                "planned_sequences_per_class": {"type": "integer", "minimum": 1},
                "planned_detectable_tv": {"anyOf": [{"$ref": "#/$defs/tv"}, {"$ref": "#/$defs/real"}]},
                "min_batches": {"type": "integer", "minimum": 2},  # the case's floor (since 1.5)
            },
        },
        "plan": {
            "type": "object",
            "required": ["mode", "budget_s", "pilot_s", "per_check_false_fail_rate", "target_detectable_tv",
                         "feasible", "cases", "note"],
            "properties": {
                "mode": {"enum": ["budget", "batches"]},
                "budget_s": _NULLABLE_NUMBER,
                "pilot_s": {"type": "number", "minimum": 0},
                "per_check_false_fail_rate": _RATE,
                "target_detectable_tv": _NULLABLE_NUMBER,
                "feasible": {"type": "boolean"},
                "cases": {"type": "array", "items": {"$ref": "#/$defs/case_plan"}},
                "note": {"type": "string"},
                "fuzz": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/fuzz_plan"}]},
                "skipped": {"description": "cases left out because their minimum of decoder calls did not fit "
                                           "the time left (since 1.4)",
                            "type": "array",
                            "items": {"type": "object", "required": ["case", "reason"],
                                      "properties": {"case": {"type": "string"}, "reason": {"type": "string"}}}},
            },
        },
        **FUZZ_DEFS,
        "environment": {
            "type": "object",
            "required": ["specexact", "python", "torch", "cuda", "device", "platform", "git_revision"],
            "properties": {
                "specexact": {"type": "string"},
                "python": {"type": "string"},
                "torch": {"type": "string"},
                "cuda": _NULLABLE_STRING,
                "numpy": {"type": "string"},
                "scipy": _NULLABLE_STRING,
                "packages": {"type": "object", "additionalProperties": _NULLABLE_STRING},
                "device": {"type": "string"},
                "device_name": _NULLABLE_STRING,
                "torch_num_threads": {"type": "integer", "minimum": 1},
                "cpu_count": _NULLABLE_INT,
                "platform": {"type": "string"},
                "git_revision": _NULLABLE_STRING,
                "git_dirty": {"type": ["boolean", "null"]},
                "allocator": {"description": "what the C allocator was told (specexact.audit.core.allocator; since 1.4): "
                                             "'kept' or 'default', with the reason in parentheses",
                              "type": "string"},
            },
        },
        "accepted_length": {
            "type": "object",
            "required": ["case", "check", "labels", "observed", "expected", "source"],
            "properties": {
                "case": {"type": "string"},
                "check": {"type": "string"},
                "passed": {"type": "boolean"},
                "pvalue": {"type": "number", "minimum": 0, "maximum": 1},
                "labels": {"type": "array", "items": {"type": "string"}},
                "observed": {"type": "array", "items": {"type": "number", "minimum": 0}},
                "expected": {"type": "array", "items": {"type": "number", "minimum": 0}},
                "source": {"enum": ["details", "binned", "none"]},
            },
        },
        "shard_summary": {
            "type": "object",
            "required": ["index", "count", "cases", "started_at", "wall_time_s", "verdict", "environment"],
            "properties": {
                "index": {"type": "integer", "minimum": 1},
                "count": {"type": "integer", "minimum": 1},
                "cases": {"type": "array", "items": {"type": "string"}},
                "started_at": _TIMESTAMP,
                "wall_time_s": {"type": "number", "minimum": 0},
                "verdict": {"enum": ["pass", "fail"]},
                "environment": {"$ref": "#/$defs/environment"},
                "plan": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/plan"}]},
            },
        },
    },
}


class SchemaError(ValueError):
    """A report does not match :data:`REPORT_SCHEMA`; the message lists the first errors."""


_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool)
    or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def _resolve(ref: str, root: dict) -> dict:
    if not ref.startswith("#/"):
        raise ValueError(f"only local $ref are supported, got {ref!r}")
    node: Any = root
    for part in ref[2:].split("/"):
        node = node[part]
    return node


def iter_errors(instance: Any, schema: dict | None = None, path: str = "$", root: dict | None = None) -> Iterator[str]:
    """Yield ``"PATH: problem"`` for every violation of ``schema`` (default: the report's)."""
    root = root or REPORT_SCHEMA
    schema = REPORT_SCHEMA if schema is None else schema
    if "$ref" in schema:
        yield from iter_errors(instance, _resolve(schema["$ref"], root), path, root)
    if "allOf" in schema:
        for sub in schema["allOf"]:
            yield from iter_errors(instance, sub, path, root)
    if "anyOf" in schema:
        if not any(not any(True for _ in iter_errors(instance, sub, path, root)) for sub in schema["anyOf"]):
            yield f"{path}: {_short(instance)} matches none of the allowed forms"
            return
    if "const" in schema and instance != schema["const"]:
        yield f"{path}: must be {schema['const']!r}, got {_short(instance)}"
    if "enum" in schema and instance not in schema["enum"]:
        yield f"{path}: must be one of {schema['enum']}, got {_short(instance)}"
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_TYPES[t](instance) for t in types):
            yield f"{path}: must be of type {' or '.join(types)}, got {_short(instance)}"
            return
    if isinstance(instance, (int, float)) and not isinstance(instance, bool):
        bounded = any(k in schema for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"))
        if bounded and math.isnan(instance):  # NaN compares false with every bound: never in range
            yield f"{path}: must be a number within its bounds, got nan"
            return
        if "minimum" in schema and instance < schema["minimum"]:
            yield f"{path}: must be >= {schema['minimum']}, got {instance!r}"
        if "maximum" in schema and instance > schema["maximum"]:
            yield f"{path}: must be <= {schema['maximum']}, got {instance!r}"
        if "exclusiveMinimum" in schema and instance <= schema["exclusiveMinimum"]:
            yield f"{path}: must be > {schema['exclusiveMinimum']}, got {instance!r}"
        if "exclusiveMaximum" in schema and instance >= schema["exclusiveMaximum"]:
            yield f"{path}: must be < {schema['exclusiveMaximum']}, got {instance!r}"
    if isinstance(instance, str):
        if "pattern" in schema and not re.search(schema["pattern"], instance):
            yield f"{path}: {_short(instance)} does not match {schema['pattern']!r}"
        if "minLength" in schema and len(instance) < schema["minLength"]:
            yield f"{path}: must have at least {schema['minLength']} character(s)"
    if isinstance(instance, dict):
        for key in schema.get("required", []):
            if key not in instance:
                yield f"{path}: missing required field {key!r}"
        props = schema.get("properties", {})
        for key, value in instance.items():
            if key in props:
                yield from iter_errors(value, props[key], f"{path}.{key}", root)
            elif "additionalProperties" in schema:
                extra = schema["additionalProperties"]
                if extra is False:
                    yield f"{path}: unexpected field {key!r}"
                elif isinstance(extra, dict):
                    yield from iter_errors(value, extra, f"{path}.{key}", root)
    if isinstance(instance, list):
        if "minItems" in schema and len(instance) < schema["minItems"]:
            yield f"{path}: must have at least {schema['minItems']} item(s), got {len(instance)}"
        if "maxItems" in schema and len(instance) > schema["maxItems"]:
            yield f"{path}: must have at most {schema['maxItems']} item(s), got {len(instance)}"
        prefix = schema.get("prefixItems", [])
        for k, (value, sub) in enumerate(zip(instance, prefix)):
            yield from iter_errors(value, sub, f"{path}[{k}]", root)
        if "items" in schema:
            for k in range(len(prefix), len(instance)):
                yield from iter_errors(instance[k], schema["items"], f"{path}[{k}]", root)


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def validate_report(report: Any, *, max_errors: int = 10) -> None:
    """Raise :class:`SchemaError` if ``report`` does not match :data:`REPORT_SCHEMA`."""
    errors = []
    for err in iter_errors(report):
        errors.append(err)
        if len(errors) >= max_errors:
            break
    if errors:
        raise SchemaError("report does not match the specexact.audit/1 schema:\n  " + "\n  ".join(errors))


def schema_json() -> str:
    """The schema as the text of ``reports/audit.schema.json``."""
    return json.dumps(REPORT_SCHEMA, indent=2) + "\n"

