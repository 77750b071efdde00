"""Eager argument checks shared by the strategies (errors name the argument and value)."""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument as _HypothesisInvalidArgument
from hypothesis.strategies import SearchStrategy

__all__ = ["InvalidArgument"]


class InvalidArgument(_HypothesisInvalidArgument, ValueError):
    """A strategy was called with a bad argument.

    Subclasses both :class:`hypothesis.errors.InvalidArgument` and :class:`ValueError`, so
    either can be caught. The message names the argument and its value, e.g.
    ``"min_size=-1 must be >= 0"``.
    """


def check_int(value: object, name: str, *, minimum: int | None = None,
              maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{name}={value!r} must be an integer")
    if minimum is not None and value < minimum:
        raise InvalidArgument(f"{name}={value!r} must be >= {minimum}")
    if maximum is not None and value > maximum:
        raise InvalidArgument(f"{name}={value!r} must be <= {maximum}")
    return value


def check_optional_int(value: object, name: str, *, minimum: int | None = None) -> int | None:
    if value is None:
        return None
    return check_int(value, name, minimum=minimum)


def int_or_strategy(value: object, name: str, *, minimum: int,
                    maximum: int | None = None) -> SearchStrategy[int]:
    """``value`` as a strategy: an int in range becomes ``just(value)``."""
    if isinstance(value, SearchStrategy):
        return value
    return st.just(check_int(value, name, minimum=minimum, maximum=maximum))


def check_families(families: object, name: str, known: Sequence[str]) -> tuple[str, ...]:
    """A non-empty tuple of known family names without repeats (``None`` -> all)."""
    if families is None:
        return tuple(known)
    if isinstance(families, str) or not isinstance(families, Iterable):
        raise InvalidArgument(
            f"{name}={families!r} must be a sequence of family names, e.g. {tuple(known[:2])!r}"
        )
    chosen = tuple(families)
    if not chosen:
        raise InvalidArgument(f"{name}={families!r} must name at least one family")
    for fam in chosen:
        if fam not in known:
            raise InvalidArgument(f"{name} contains unknown family {fam!r}; known: {tuple(known)!r}")
    if len(set(chosen)) != len(chosen):
        raise InvalidArgument(f"{name}={families!r} names a family twice")
    return chosen


def check_real(value: object, name: str, *, low: float | None = None, high: float | None = None,
               low_open: bool = False, high_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{name}={value!r} must be a real number")
    value = float(value)
    if not math.isfinite(value):
        raise InvalidArgument(f"{name}={value!r} must be finite")
    if low is not None and (value < low or (low_open and value == low)):
        raise InvalidArgument(f"{name}={value!r} must be {'>' if low_open else '>='} {low}")
    if high is not None and (value > high or (high_open and value == high)):
        raise InvalidArgument(f"{name}={value!r} must be {'<' if high_open else '<='} {high}")
    return value
