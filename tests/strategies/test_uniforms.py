"""acceptance_probes / boundary_uniforms: uniforms on the acceptance boundary."""

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specexact.strategies import (
    PROBE_PAIR_KINDS,
    UNIFORM_KINDS,
    AcceptanceProbe,
    InvalidArgument,
    acceptance_probes,
    boundary_uniforms,
)

TINY = 5e-324


def check_probe(probe: AcceptanceProbe) -> None:
    p, q, u = probe.target_prob, probe.draft_prob, probe.uniform
    assert 0 <= u < 1 and 0 <= p <= 1 and 0 <= q <= 1
    kind = probe.pair_kind
    if kind == "equal":
        assert p == q
    elif kind == "target_below":
        assert p < q
    elif kind == "target_above":
        assert p > q
    elif kind == "target_zero":
        assert p == 0 < q
    elif kind == "draft_zero":
        assert q == 0
    elif kind == "subnormal":
        assert 0 < q < 2.2250738585072014e-308
    elif kind == "dyadic":
        assert math.frexp(p)[0] == 0.5 and math.frexp(q)[0] == 0.5
    elif kind == "one":
        assert p == 1 or q == 1
    bounds = boundary_uniforms(p, q)
    if probe.uniform_kind != "random":
        assert u == bounds[probe.uniform_kind]
    if probe.uniform_kind == "ratio":
        assert u == p / q
    # The float rule and the exact rule agree outside the rounding band.
    if not probe.in_rounding_band:
        assert probe.float_accept == probe.exact_accept


@pytest.mark.parametrize("kind", UNIFORM_KINDS)
@given(data=st.data())
def test_probes_of_each_uniform_kind(kind, data):
    probe = data.draw(acceptance_probes(uniform_kinds=[kind]))
    assert probe.uniform_kind == kind
    check_probe(probe)


@pytest.mark.parametrize("kind", PROBE_PAIR_KINDS)
@given(data=st.data())
def test_probes_of_each_pair_kind(kind, data):
    probe = data.draw(acceptance_probes(pair_kinds=[kind]))
    assert probe.pair_kind == kind
    check_probe(probe)


def test_every_pair_kind_and_uniform_kind_is_reachable(reach):
    reach(acceptance_probes(), lambda p: p.pair_kind, PROBE_PAIR_KINDS)
    reach(acceptance_probes(), lambda p: p.uniform_kind, UNIFORM_KINDS)


# ---------------------------------------------------------------- pinned edge values
def test_pinned_boundary_uniforms():
    b = boundary_uniforms(0.3, 0.6)
    assert b == {"zero": 0.0, "smallest": TINY, "one_minus_ulp": 1 - 2**-53, "ratio": 0.5,
                 "below_ratio": 0.5 - 2**-54, "above_ratio": 0.5 + 2**-53}
    assert boundary_uniforms(0.5, 0.5) == {"zero": 0.0, "smallest": TINY,
                                           "one_minus_ulp": 1 - 2**-53, "below_ratio": 1 - 2**-53}
    assert boundary_uniforms(0.0, 0.5)["above_ratio"] == TINY
    assert set(boundary_uniforms(0.2, 0.0)) == {"zero", "smallest", "one_minus_ulp"}


@pytest.mark.parametrize(
    "p, q, u, float_accept, exact_accept",
    [
        (0.3, 0.6, 0.0, True, True),             # u = 0 accepts any p > 0
        (0.0, 0.6, 0.0, False, False),           # ... but never p = 0
        (0.3, 0.6, 0.5 - 2**-54, True, True),    # just below p/q
        (0.3, 0.6, 0.5 + 2**-53, False, False),  # just above p/q
        (0.5, 0.5, 1 - 2**-53, True, True),      # p = q: accept for every u < 1
        (0.2, 0.0, 1 - 2**-53, True, True),      # q = 0 < p: the guard accepts
        (0.0, 0.0, 0.0, False, False),           # 0 < 0 is false
        # p = q = smallest subnormal: u * q rounds to q for u > 1/2, so the float rule
        # rejects where the exact rule accepts (inside the rounding band).
        (TINY, TINY, 0.75, False, True),
        (TINY, TINY, 0.5, True, True),           # 0.5 * TINY rounds (to even) to 0
    ],
)
def test_pinned_acceptance_decisions(p, q, u, float_accept, exact_accept):
    probe = AcceptanceProbe(target_prob=p, draft_prob=q, uniform=u)
    assert probe.float_accept is float_accept
    assert probe.exact_accept is exact_accept
    if float_accept != exact_accept:
        assert probe.in_rounding_band


def test_exact_rule_is_rational():
    # fl(0.1 / 0.3) rounds up; exactly, 0.1 / 0.3 (as doubles) is a tiny bit below it.
    u = 0.1 / 0.3
    assert Fraction(u) * Fraction(0.3) != Fraction(0.1)
    probe = AcceptanceProbe(target_prob=0.1, draft_prob=0.3, uniform=u)
    assert probe.exact_accept == (Fraction(u) * Fraction(0.3) < Fraction(0.1))


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: acceptance_probes(pair_kinds=["negative"]), "unknown family 'negative'"),
        (lambda: acceptance_probes(uniform_kinds=[]), "at least one family"),
        (lambda: boundary_uniforms(1.5, 0.5), "target_prob=1.5 must be <= 1.0"),
        (lambda: boundary_uniforms(0.5, -0.1), "draft_prob=-0.1 must be >= 0.0"),
        (lambda: boundary_uniforms(math.nan, 0.5), "target_prob=nan must be finite"),
        (lambda: AcceptanceProbe(0.5, 0.5, 1.0), "uniform=1.0 must be < 1.0"),
    ],
)
def test_bad_arguments_raise(call, match):
    with pytest.raises(InvalidArgument, match=match):
        call()
