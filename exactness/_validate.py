"""Argument checks shared by the exactness modules (private).

Every check raises ``TypeError`` for a value of the wrong kind and ``ValueError`` for a
value of the right kind outside its domain; both messages name the argument and quote
the offending value, so a failing audit points at the caller's mistake.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np

from .labels import SequenceLabels

#: Relative tolerance on ``sum(reference_probs) == 1``; drift below it is renormalised.
PROBS_SUM_RTOL = 1e-9


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_real(value: object, name: str) -> float:
    """Return ``value`` as a float; reject bools, non-reals and NaN."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {_short(value)}")
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"{name} must not be NaN, got {value}")
    return value


def check_rate(value: object, name: str) -> float:
    """Return a probability strictly inside (0, 1) as a float."""
    value = check_real(value, name)
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name} must be in (0, 1), got {value!r}")
    return value


def check_rates(false_fail_rate: object, false_pass_rate: object) -> tuple[float, float]:
    """Validate a (false_fail_rate, false_pass_rate) pair whose sum is below 1."""
    alpha = check_rate(false_fail_rate, "false_fail_rate")
    beta = check_rate(false_pass_rate, "false_pass_rate")
    if alpha + beta >= 1.0:
        raise ValueError(
            "false_fail_rate + false_pass_rate must be < 1 (otherwise a test that ignores "
            f"the data already has the requested power), got {alpha!r} + {beta!r}"
        )
    return alpha, beta


def check_int(value: object, name: str, *, minimum: int | None = None) -> int:
    """Return an integer (Python or NumPy, not bool) as ``int``, optionally bounded below."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {_short(value)}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_positive_finite(value: object, name: str) -> float:
    """Return a finite float > 0."""
    value = check_real(value, name)
    if not (math.isfinite(value) and value > 0.0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return value


def check_seed(value: object, name: str = "seed", *, allow_none: bool = False) -> int | None:
    """Return a non-negative integer seed (or None when allowed)."""
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        kind = "a non-negative integer or None" if allow_none else "a non-negative integer"
        raise TypeError(f"{name} must be {kind}, got {_short(value)}")
    if int(value) < 0:
        raise ValueError(f"{name} must be >= 0, got {int(value)}")
    return int(value)


def check_counts(values: object, name: str) -> np.ndarray:
    """Return a 1-D int64 array of non-negative counts.

    Raises TypeError for non-integer dtypes (floats, bools, objects) and ValueError for
    wrong dimensionality, emptiness or negative entries.
    """
    array = np.asarray(values)
    if array.dtype.kind not in "iu":
        raise TypeError(
            f"{name} must be an integer array, got dtype {array.dtype} ({_short(values)})"
        )
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    if array.size == 0:
        raise ValueError(f"{name} must not be empty, got shape {array.shape}")
    if array.dtype.kind == "u" and array.dtype.itemsize >= 8 and array.max() > np.iinfo(np.int64).max:
        raise ValueError(f"{name} has counts above int64 range, got max {array.max()}")
    array = array.astype(np.int64, copy=True)
    if (array < 0).any():
        bad = int(np.flatnonzero(array < 0)[0])
        raise ValueError(f"{name} must be >= 0, got {array[bad]} at index {bad}")
    return array


def check_probs(values: object, name: str = "reference_probs") -> tuple[np.ndarray, bool]:
    """Return ``(probs, renormalised)`` for a 1-D probability vector.

    The entries must be finite and >= 0 and sum to 1 within a relative tolerance of
    ``PROBS_SUM_RTOL``; drift within the tolerance is removed by renormalising (and
    reported through ``renormalised``), larger drift raises ValueError.
    """
    array = np.asarray(values)
    if array.dtype.kind not in "fiu" or array.dtype.kind == "b":
        raise TypeError(f"{name} must be a real floating array, got dtype {array.dtype}")
    array = array.astype(np.float64, copy=True)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    if array.size == 0:
        raise ValueError(f"{name} must not be empty, got shape {array.shape}")
    if not np.isfinite(array).all():
        bad = int(np.flatnonzero(~np.isfinite(array))[0])
        raise ValueError(f"{name} must be finite, got {array[bad]} at index {bad}")
    if (array < 0).any():
        bad = int(np.flatnonzero(array < 0)[0])
        raise ValueError(f"{name} must be >= 0, got {float(array[bad])!r} at index {bad}")
    total = math.fsum(array.tolist())
    if abs(total - 1.0) > PROBS_SUM_RTOL:
        raise ValueError(
            f"{name} must sum to 1 (relative tolerance {PROBS_SUM_RTOL:g}), got sum {total!r}"
        )
    renormalised = total != 1.0
    if renormalised:
        array /= total
    return array, renormalised


def check_labels(labels: object, size: int, name: str = "labels") -> Sequence[str]:
    """Return ``size`` outcome labels as strings (default: the outcome indices); a
    :class:`~specexact.exactness.labels.SequenceLabels` is returned as it is (formatted when read)."""
    if labels is None:
        return [str(i) for i in range(size)]
    if isinstance(labels, (str, bytes)) or not isinstance(labels, (Sequence, np.ndarray)):
        raise TypeError(f"{name} must be a sequence of strings or None, got {_short(labels)}")
    if len(labels) != size:
        raise ValueError(f"{name} must have {size} entries (one per outcome), got {len(labels)}")
    if isinstance(labels, SequenceLabels):  # strings by construction, formatted when read
        return labels
    return [str(label) for label in labels]


def check_name(value: object, name: str = "name") -> str:
    """Return a non-empty string."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {_short(value)}")
    if not value:
        raise ValueError(f"{name} must not be empty, got {value!r}")
    return value


def check_alternative(value: object, allowed: tuple[str, ...]) -> str:
    """Return a hypothesis direction out of ``allowed``."""
    if value not in allowed:
        raise ValueError(f"alternative must be one of {allowed}, got {_short(value)}")
    return str(value)

def check_pvalues(pvalues) -> np.ndarray:
    array = np.asarray(pvalues)
    if array.dtype.kind not in "fiu":
        raise TypeError(f"pvalues must be a real numeric array, got dtype {array.dtype}")
    array = array.astype(np.float64)
    if array.ndim != 1:
        raise ValueError(f"pvalues must be one-dimensional, got shape {array.shape}")
    if array.size == 0:
        raise ValueError(f"pvalues must not be empty, got shape {array.shape}")
    bad = ~((array >= 0.0) & (array <= 1.0))  # also catches NaN
    if bad.any():
        raise ValueError(f"pvalues must be in [0, 1], got {float(array[bad][0])!r}")
    return array
