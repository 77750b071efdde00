"""Boundary probes for the acceptance test ``u * q < p`` of samplers with injectable uniforms.

A probe is one drafted token's ``target_prob`` p, ``draft_prob`` q and the float64 uniform
u the sampler compares with them. The uniforms sit where an acceptance rule can be off by
one float: 0, the smallest positive double, ``fl(p / q)`` and its two neighbours, and
``1 - 2**-53`` (the largest double below 1, the top of ``torch.rand``'s range).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from ._validation import InvalidArgument, check_families, check_real

__all__ = [
    "PROBE_PAIR_KINDS",
    "UNIFORM_KINDS",
    "AcceptanceProbe",
    "acceptance_probes",
    "boundary_uniforms",
]

#: Smallest positive double (subnormal).
SMALLEST_DOUBLE = 5e-324
#: Largest double below 1.
ONE_MINUS_ULP = math.nextafter(1.0, 0.0)

#: Kinds of (p, q) pairs.
PROBE_PAIR_KINDS: tuple[str, ...] = (
    "equal", "target_below", "target_above", "target_zero", "draft_zero", "subnormal",
    "dyadic", "one",
)
#: Kinds of uniforms (see :func:`boundary_uniforms`).
UNIFORM_KINDS: tuple[str, ...] = (
    "zero", "smallest", "ratio", "below_ratio", "above_ratio", "one_minus_ulp", "random",
)


def boundary_uniforms(target_prob: float, draft_prob: float) -> dict[str, float]:
    """The boundary uniforms in ``[0, 1)`` for one (p, q) pair, by kind.

    Parameters
    ----------
    target_prob, draft_prob : float
        p and q, finite, in [0, 1].

    Returns
    -------
    dict of str to float
        ``zero``: 0; ``smallest``: 5e-324; ``ratio``: ``fl(p / q)``; ``below_ratio`` /
        ``above_ratio``: its float neighbours; ``one_minus_ulp``: ``1 - 2**-53``. Kinds
        whose value falls outside ``[0, 1)`` (ratio >= 1, or ``q = 0``) are left out.

    Raises
    ------
    InvalidArgument
        If p or q is not a finite number in [0, 1].
    """
    p = check_real(target_prob, "target_prob", low=0.0, high=1.0)
    q = check_real(draft_prob, "draft_prob", low=0.0, high=1.0)
    out = {"zero": 0.0, "smallest": SMALLEST_DOUBLE, "one_minus_ulp": ONE_MINUS_ULP}
    if q > 0:
        ratio = p / q
        for kind, value in (("ratio", ratio), ("below_ratio", math.nextafter(ratio, -1.0)),
                            ("above_ratio", math.nextafter(ratio, 2.0))):
            if 0.0 <= value < 1.0:
                out[kind] = value
    return out


@dataclass(frozen=True)
class AcceptanceProbe:
    """One acceptance decision to probe.

    Attributes
    ----------
    target_prob, draft_prob : float
        p(d) and q(d) of the drafted token.
    uniform : float
        The injected uniform u, in ``[0, 1)``.
    pair_kind, uniform_kind : str
        Tags from :data:`PROBE_PAIR_KINDS` and :data:`UNIFORM_KINDS`.
    """

    target_prob: float
    draft_prob: float
    uniform: float
    pair_kind: str = "equal"
    uniform_kind: str = "random"

    def __post_init__(self) -> None:
        check_real(self.target_prob, "target_prob", low=0.0, high=1.0)
        check_real(self.draft_prob, "draft_prob", low=0.0, high=1.0)
        check_real(self.uniform, "uniform", low=0.0, high=1.0, high_open=True)

    @property
    def float_accept(self) -> bool:
        """The documented float64 rule: accept iff ``u * q < p`` (product rounded)."""
        return self.uniform * self.draft_prob < self.target_prob

    @property
    def exact_accept(self) -> bool:
        """The rule in exact arithmetic: accept iff ``u * q < p`` over the rationals,
        i.e. ``u < p / q`` (``q = 0``: accept iff ``p > 0``)."""
        return Fraction(self.uniform) * Fraction(self.draft_prob) < Fraction(self.target_prob)

    @property
    def in_rounding_band(self) -> bool:
        """True when ``u * q`` is within one ulp of p, where the rounded product may
        legitimately decide differently from the exact one."""
        exact = Fraction(self.uniform) * Fraction(self.draft_prob)
        ulp = Fraction(math.ulp(self.target_prob)) if self.target_prob > 0 else Fraction(SMALLEST_DOUBLE)
        return abs(exact - Fraction(self.target_prob)) <= ulp


_SUBNORMAL = st.one_of(st.sampled_from([SMALLEST_DOUBLE, 2 * SMALLEST_DOUBLE, 1e-310]),
                       st.floats(SMALLEST_DOUBLE, 2.2250738585072014e-308, exclude_max=True))


def _pair(kind: str, ordered: bool = False) -> SearchStrategy[tuple[float, float]]:
    """(p, q) of a pair kind; ``ordered`` makes ``p <= q`` (so that ``p / q < 1`` can
    have boundary uniforms) where the kind allows both orders."""
    if ordered and kind == "dyadic":
        return _pair(kind).map(lambda t: (min(t), max(t)))
    if ordered and kind == "subnormal":
        return st.tuples(_SUBNORMAL, _SUBNORMAL).map(lambda t: (min(t), max(t)))
    if ordered and kind == "one":
        return st.floats(1e-12, 1.0).map(lambda p: (p, 1.0))
    unit = st.floats(1e-12, 1.0)
    if kind == "equal":
        return unit.map(lambda x: (x, x))
    if kind == "target_below":
        return st.tuples(unit, unit).map(lambda t: (min(t), max(t))).filter(lambda t: t[0] < t[1])
    if kind == "target_above":
        return st.tuples(unit, unit).map(lambda t: (max(t), min(t))).filter(lambda t: t[0] > t[1])
    if kind == "target_zero":
        return unit.map(lambda q: (0.0, q))
    if kind == "draft_zero":
        return st.one_of(st.just(0.0), unit).map(lambda p: (p, 0.0))
    if kind == "subnormal":
        return st.tuples(st.one_of(_SUBNORMAL, unit), _SUBNORMAL)
    if kind == "dyadic":
        pow2 = st.integers(1, 60).map(lambda j: 2.0**-j)
        return st.tuples(pow2, pow2)
    if kind == "one":
        return st.one_of(unit.map(lambda q: (1.0, q)), unit.map(lambda p: (p, 1.0)))
    raise AssertionError(kind)  # pragma: no cover


_RATIO_KINDS = ("ratio", "below_ratio", "above_ratio")
# Pair kinds that give each ratio kind a value in [0, 1).
_RATIO_PAIRS = {
    "ratio": ("target_below", "target_zero", "subnormal", "dyadic", "one"),
    "above_ratio": ("target_below", "target_zero", "subnormal", "dyadic", "one"),
    "below_ratio": ("equal", "target_below", "subnormal", "dyadic", "one"),
}


@st.composite
def _probes(draw, pair_kinds, uniform_kinds):
    kind = draw(st.sampled_from(uniform_kinds))
    pairs = pair_kinds
    if kind in _RATIO_KINDS:
        pairs = tuple(k for k in pair_kinds if k in _RATIO_PAIRS[kind])
        if not pairs:
            kind = next((k for k in uniform_kinds if k not in _RATIO_KINDS), None)
            if kind is None:
                raise InvalidArgument(
                    f"uniform_kinds={uniform_kinds!r} need p < q, which none of "
                    f"pair_kinds={pair_kinds!r} gives")
            pairs = pair_kinds
    pair_kind = draw(st.sampled_from(pairs))
    p, q = draw(_pair(pair_kind, ordered=kind in _RATIO_KINDS).filter(lambda t: kind == "random" or kind in boundary_uniforms(*t)))
    bounds = boundary_uniforms(p, q)
    if kind == "random":
        u = draw(st.floats(0.0, 1.0, exclude_max=True))
    else:
        u = bounds[kind]
    return AcceptanceProbe(target_prob=p, draft_prob=q, uniform=u, pair_kind=pair_kind,
                           uniform_kind=kind)


def acceptance_probes(
    *,
    pair_kinds: Sequence[str] | None = None,
    uniform_kinds: Sequence[str] | None = None,
) -> SearchStrategy[AcceptanceProbe]:
    """(p, q, u) triples on the acceptance boundary of modified rejection sampling.

    Parameters
    ----------
    pair_kinds : sequence of str, keyword-only
        Subset of :data:`PROBE_PAIR_KINDS` (default all): ``equal`` (p = q),
        ``target_below`` / ``target_above`` (p < q / p > q), ``target_zero`` (p = 0),
        ``draft_zero`` (q = 0, p >= 0), ``subnormal`` (q, and sometimes p, subnormal),
        ``dyadic`` (powers of two, exact ratios), ``one`` (p = 1 or q = 1). Non-special
        values are in [1e-12, 1].
    uniform_kinds : sequence of str, keyword-only
        Subset of :data:`UNIFORM_KINDS` (default all); see :func:`boundary_uniforms`;
        ``random`` is any double in ``[0, 1)``.

    Returns
    -------
    SearchStrategy[AcceptanceProbe]
        The uniform kind is drawn first (uniformly), then a pair kind for which it exists
        (``ratio`` and its neighbours need ``p / q`` or its neighbour in ``[0, 1)``: they
        come with ``target_below``, ``target_zero`` (not ``below_ratio``), ``equal``
        (``below_ratio`` only), and ``subnormal`` / ``dyadic`` / ``one`` pairs ordered
        so that ``p <= q``). Every pair kind and every uniform kind is reachable
        (``tests/strategies/test_uniforms.py``; how often each is drawn is not promised).

    Raises
    ------
    InvalidArgument
        On unknown or repeated kinds.
    """
    pk = check_families(pair_kinds, "pair_kinds", PROBE_PAIR_KINDS)
    uk = check_families(uniform_kinds, "uniform_kinds", UNIFORM_KINDS)
    return _probes(pk, uk)
