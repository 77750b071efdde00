"""Case kinds behind one protocol: every case is served by exactly one kind."""

import pytest

from specexact.audit import default_cases
from specexact.audit.cases.kinds import KINDS, kind_of, kinds
from specexact.audit.cases.protocol import CaseKind
from specexact.audit.cases.e2e.catalog import e2e_cases
from specexact.audit.cases.tree_case import tree_cases
from specexact.audit.cases.verify_case import verify_cases
from specexact.decoders.engines.builtin import BuiltinEngine


def test_every_kind_module_defines_a_case_kind():
    assert len(kinds()) == len(KINDS)
    assert all(isinstance(k, CaseKind) for k in kinds())
    assert [k.name for k in kinds()] == ["e2e", "tree", "verify", "decoder"]


def test_each_case_is_served_by_its_own_kind_and_only_that():
    samples = {"decoder": default_cases()[0], "tree": tree_cases()[0], "verify": verify_cases()[0],
               "e2e": e2e_cases(BuiltinEngine())[0]}
    for name, case in samples.items():
        assert kind_of(case).name == name
        assert [k.name for k in kinds() if k.handles(case)] == [name]


def test_a_case_of_no_kind_is_refused_by_name():
    with pytest.raises(TypeError, match="no case kind handles object"):
        kind_of(object())
