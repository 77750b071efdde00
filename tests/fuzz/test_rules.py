"""Rules and their exceptions: one exception type per rule, so Hypothesis keeps each apart."""

import pytest

from specexact.fuzz.rules import RULES, RuleBroken, rule_error


def test_each_rule_has_its_own_exception_type():
    errors = [rule_error(rule, "message") for rule in RULES]
    assert len({type(e) for e in errors}) == len(RULES)
    for rule, err in zip(RULES, errors):
        assert isinstance(err, RuleBroken) and isinstance(err, AssertionError)
        assert err.rule == rule and str(err) == f"{rule}: message" and err.message == "message"
    assert type(rule_error("no_crash", "a")) is type(rule_error("no_crash", "b"))


def test_an_unknown_rule_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown rule 'nope'"):
        rule_error("nope", "x")
