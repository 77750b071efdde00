"""CheckResult (results.py)."""

import dataclasses
import json
import math

import pytest

from specexact.exactness.results import CheckResult


def make(**overrides):
    fields = dict(
        name="goodness_of_fit",
        method="asymptotic",
        statistic=12.5,
        pvalue=0.25,
        dof=9,
        n=100_000,
        false_fail_rate=1e-6,
        detectable_tv=0.0123,
        false_pass_rate=0.01,
        passed=True,
        worst=(("tok7", 130.0, 100.0), ("tok3 (+2 more)", 80.0, 100.0)),
        details={"num_bins": 10, "renormalised": False, "seed": None, "nested": {"a": [1, 2.5]}},
        description="Pearson chi-square over 10 bins.",
    )
    fields.update(overrides)
    return CheckResult(**fields)


def test_frozen_and_hashable():
    result = make()
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.pvalue = 0.5
    assert hash(result) == hash(make())
    assert result == make()


def test_str_and_repr_are_one_readable_line():
    text = str(make())
    assert "\n" not in text and "\n" not in repr(make())
    for piece in ("goodness_of_fit", "PASS", "p=0.25", "n=100000", "alpha=1e-06", "detectable TV=0.0123"):
        assert piece in text
    failed = make(pvalue=0.0, passed=False, detectable_tv=math.inf)
    assert "FAIL" in str(failed) and "detectable TV=inf" in str(failed)
    assert repr(failed).startswith("<CheckResult goodness_of_fit: FAIL")


@pytest.mark.parametrize("detectable_tv", [0.0123, math.inf])
def test_to_dict_round_trip_through_json(detectable_tv):
    result = make(detectable_tv=detectable_tv, statistic=math.inf if detectable_tv == math.inf else 1.0)
    data = result.to_dict()
    text = json.dumps(data, allow_nan=False)
    restored = CheckResult.from_dict(json.loads(text))
    assert restored == result
    assert isinstance(restored.worst, tuple) and isinstance(restored.worst[0], tuple)
    if detectable_tv == math.inf:
        assert data["detectable_tv"] == "inf" and data["statistic"] == "inf"


def test_details_are_copied():
    details = {"a": 1}
    result = make(details=details)
    details["a"] = 2
    assert result.details["a"] == 1


@pytest.mark.parametrize(
    "overrides, error, match",
    [
        ({"method": "bootstrap"}, ValueError, "method must be one of"),
        ({"pvalue": math.nan}, ValueError, "pvalue must not be NaN"),
        ({"pvalue": 1.5}, ValueError, "pvalue must be in"),
        ({"false_fail_rate": 1.5, "passed": False}, ValueError, r"false_fail_rate must be in \(0, 1\), got 1.5"),
        ({"passed": False}, ValueError, "passed must equal pvalue > false_fail_rate"),
        ({"detectable_tv": -0.1}, ValueError, "detectable_tv"),
        ({"n": -1}, ValueError, "n must be >= 0"),
        ({"worst": (("a", 1.0),)}, ValueError, "worst"),
        ({"worst": tuple((str(i), 1.0, 1.0) for i in range(6))}, ValueError, "at most 5"),
        ({"details": {"x": object()}}, TypeError, "details must be JSON-serialisable"),
        ({"details": {"x": math.nan}}, ValueError, "details must be JSON-serialisable"),
        ({"name": 3}, TypeError, "name must be a string"),
        ({"passed": 1}, TypeError, "passed must be a bool"),
    ],
)
def test_validation(overrides, error, match):
    with pytest.raises(error, match=match):
        make(**overrides)


def test_from_dict_rejects_missing_and_unknown_keys():
    data = make().to_dict()
    del data["pvalue"]
    data["extra"] = 1
    with pytest.raises(ValueError, match="missing keys \\['pvalue'\\] and unknown keys \\['extra'\\]"):
        CheckResult.from_dict(data)
