"""The JSON report against its documented schema (reports/audit.schema.json)."""

import copy
import json
from pathlib import Path

import pytest

from specexact.audit import SCHEMA, SCHEMA_VERSION
from specexact.audit.checks.decisions_checks import DECISION_CHECKS
from specexact.reports import REPORT_SCHEMA, SchemaError, validate_report
from specexact.reports.schema import iter_errors, schema_json

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "reports" / "audit.schema.json"
jsonschema = pytest.importorskip("jsonschema")


def both_accept(report):
    validate_report(report)
    jsonschema.Draft202012Validator(REPORT_SCHEMA).validate(report)


def test_schema_file_is_the_schema_and_valid_draft_2020_12():
    assert SCHEMA_FILE.read_text() == schema_json(), "regenerate reports/audit.schema.json (see schema.py)"
    jsonschema.Draft202012Validator.check_schema(json.loads(SCHEMA_FILE.read_text()))
    assert REPORT_SCHEMA["properties"]["schema"]["const"] == SCHEMA
    assert SCHEMA_VERSION.startswith("1.")


def test_passing_and_failing_reports_match_the_schema(passing_report, failing_report):
    for report in (passing_report, failing_report):
        both_accept(report)
        assert report["schema"] == SCHEMA and report["schema_version"] == SCHEMA_VERSION
    # run metadata the schema promises
    env = passing_report["environment"]
    assert env["torch"] and "cuda" in env and env["device"] == "cpu" and "git_revision" in env
    assert passing_report["settings"]["seed"] == 0 and passing_report["settings"]["num_batches"] == 2
    assert passing_report["cases"][0]["seed"] > 0
    # every check's full result object is there
    assert len(passing_report["checks"]) == 8 + DECISION_CHECKS  # 2 classes x 4, then the per-event checks
    for chk in passing_report["checks"]:
        assert {"statistic", "pvalue", "dof", "n", "false_fail_rate", "detectable_tv", "worst", "details"} <= set(chk)
    # findings carry a reproduction
    (finding, *_) = failing_report["findings"]
    assert finding["kind"] == "inexactness"
    assert finding["reproduction"]["command"].startswith("specexact audit --sampler specexact.audit.zoo:")
    assert "--batches 4" in finding["reproduction"]["command"] and "--quick" not in finding["reproduction"]["command"]


@pytest.mark.parametrize("mutate, where", [
    (lambda r: r.pop("verdict"), "verdict"),
    (lambda r: r.update(verdict="maybe"), "verdict"),
    (lambda r: r["checks"][0].update(pvalue=1.5), "pvalue"),
    (lambda r: r["checks"][0].update(method="vibes"), "method"),
    (lambda r: r["checks"][0].pop("detectable_tv"), "detectable_tv"),
    (lambda r: r["checks"][0].update(worst=[["a", 1.0]]), "worst"),
    (lambda r: r["settings"].update(false_fail_rate=0), "false_fail_rate"),
    (lambda r: r["settings"].update(audit_key="XYZ"), "audit_key"),
    (lambda r: r["cases"][0].update(verdict=True), "verdict"),
    (lambda r: r["environment"].pop("torch"), "torch"),
    (lambda r: r.update(schema="specexact.audit/2"), "schema"),
    (lambda r: r.update(num_sequences=-1), "num_sequences"),
])
def test_broken_reports_are_rejected(passing_report, mutate, where):
    report = copy.deepcopy(passing_report)
    mutate(report)
    with pytest.raises(SchemaError, match=where):
        validate_report(report)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(REPORT_SCHEMA).validate(report)


def test_unknown_fields_are_allowed_for_forward_compatibility(passing_report):
    report = copy.deepcopy(passing_report)
    report["baseline"] = {"anything": 1}
    report["checks"][0]["extra"] = "x"
    both_accept(report)


def test_error_paths_point_at_the_field(passing_report):
    report = copy.deepcopy(passing_report)
    report["cases"][0]["checks"][2]["n"] = "many"
    (err,) = list(iter_errors(report))
    assert err.startswith("$.cases[0].checks[2].n:")


def test_a_nan_where_a_bounded_number_belongs_is_rejected(passing_report):
    # NaN compares false with every bound, so a range check alone lets it through (as
    # jsonschema does); a NaN p-value or rate is a defect of whoever wrote the report
    for field in ("pvalue", "false_fail_rate"):
        report = copy.deepcopy(passing_report)
        report["checks"][0][field] = float("nan")
        with pytest.raises(SchemaError, match=f"{field}: must be a number within its bounds, got nan"):
            validate_report(report)
