"""The record every exactness check returns: :class:`CheckResult`."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ._validate import check_int, check_name, check_real

#: The ways a p-value can be computed.
METHODS = ("exact", "asymptotic", "monte_carlo")

#: Largest number of entries kept in :attr:`CheckResult.worst`.
MAX_WORST = 5

_FLOAT_FIELDS = ("statistic", "pvalue", "false_fail_rate", "detectable_tv", "false_pass_rate")


def _encode_float(value: float) -> float | str:
    if value == math.inf:
        return "inf"
    if value == -math.inf:
        return "-inf"
    return float(value)


def _decode_float(value: Any, name: str) -> float:
    if value == "inf":
        return math.inf
    if value == "-inf":
        return -math.inf
    if isinstance(value, str):
        raise ValueError(f"{name} must be a number, 'inf' or '-inf', got {value!r}")
    return check_real(value, name)


def _format_float(value: float) -> str:
    return "inf" if value == math.inf else f"{value:.3g}"


@dataclass(frozen=True, repr=False)
class CheckResult:
    """Outcome of one statistical exactness check.

    Parameters
    ----------
    name : str
        Name of the check (for reports), e.g. ``"goodness_of_fit"``.
    method : {"exact", "asymptotic", "monte_carlo"}
        How ``pvalue`` was computed: from the exact null law of the statistic, from its
        large-sample limit, or from simulated null replicates.
    statistic : float
        Value of the test statistic (its meaning is given by ``description``); may be
        ``math.inf`` but never NaN.
    pvalue : float
        p-value in [0, 1].
    dof : int or None
        Degrees of freedom of the reference chi-square law, or None where none applies.
    n : int
        Number of samples (observations) the check used, >= 0.
    false_fail_rate : float
        The significance level alpha the check was run at, in (0, 1): the probability that a
        correct sampler fails this check.
    detectable_tv : float
        Smallest total-variation distance between the sampled and the reference law that
        this check detects with probability at least ``1 - false_pass_rate`` at this ``n``;
        ``math.inf`` when no distance up to 1 is guaranteed to be detected. Checks whose
        natural discrepancy is not a TV distance document the meaning in their own
        docstring (e.g. the TV distance between Bernoulli laws, i.e. a shift of a
        probability, for binomial checks).
    false_pass_rate : float
        The allowed probability, in (0, 1), of passing a sampler whose law is
        ``detectable_tv`` away from the reference (1 - power).
    passed : bool
        Verdict; must equal ``pvalue > false_fail_rate``.
    worst : tuple of (str, float, float)
        Up to five ``(label, observed, expected)`` triples for the largest contributions to
        the statistic, largest first.
    details : Mapping[str, Any]
        JSON-serialisable extras (finite floats, ints, strings, bools, None, lists and
        string-keyed mappings of those). Stored as a private ``dict`` copy; treat as
        read-only.
    description : str
        One or two sentences saying what was tested and how.

    Raises
    ------
    TypeError
        If a field has the wrong type (e.g. a non-string ``name``, non-serialisable
        ``details``).
    ValueError
        If a field is outside its domain: unknown ``method``, NaN or out-of-range
        ``pvalue``, rates outside (0, 1), negative ``n`` or ``detectable_tv``, more than five
        ``worst`` entries, or ``passed`` inconsistent with ``pvalue > false_fail_rate``.

    Notes
    -----
    Instances are immutable and hashable (``details`` is excluded from the hash).
    :meth:`to_dict` encodes infinite floats (in the top-level float fields and in
    ``worst``) as the strings ``"inf"`` / ``"-inf"``, so the output is strict JSON;
    :meth:`from_dict` decodes them.

    References
    ----------
    E. L. Lehmann and J. P. Romano, *Testing Statistical Hypotheses*, 4th ed., Springer,
    2022, ch. 3 (level, size, power).
    """

    name: str
    method: str
    statistic: float
    pvalue: float
    dof: int | None
    n: int
    false_fail_rate: float
    detectable_tv: float
    false_pass_rate: float
    passed: bool
    worst: tuple[tuple[str, float, float], ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict, hash=False)
    description: str = ""

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "name", check_name(self.name, "name"))
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        set_(self, "statistic", check_real(self.statistic, "statistic"))
        pvalue = check_real(self.pvalue, "pvalue")
        if not 0.0 <= pvalue <= 1.0:
            raise ValueError(f"pvalue must be in [0, 1], got {pvalue!r}")
        set_(self, "pvalue", pvalue)
        if self.dof is not None:
            set_(self, "dof", check_int(self.dof, "dof", minimum=0))
        set_(self, "n", check_int(self.n, "n", minimum=0))
        for rate in ("false_fail_rate", "false_pass_rate"):
            value = check_real(getattr(self, rate), rate)
            if not 0.0 < value < 1.0:
                raise ValueError(f"{rate} must be in (0, 1), got {value!r}")
            set_(self, rate, value)
        detectable = check_real(self.detectable_tv, "detectable_tv")
        if detectable < 0.0:
            raise ValueError(f"detectable_tv must be >= 0 or inf, got {detectable!r}")
        set_(self, "detectable_tv", detectable)
        if not isinstance(self.passed, bool):
            raise TypeError(f"passed must be a bool, got {self.passed!r}")
        if self.passed != (self.pvalue > self.false_fail_rate):
            raise ValueError(
                f"passed must equal pvalue > false_fail_rate, got passed={self.passed} with "
                f"pvalue={self.pvalue!r} and false_fail_rate={self.false_fail_rate!r}"
            )
        worst = tuple(self.worst)
        if len(worst) > MAX_WORST:
            raise ValueError(f"worst must have at most {MAX_WORST} entries, got {len(worst)}")
        normalised = []
        for i, entry in enumerate(worst):
            if len(entry) != 3:
                raise ValueError(
                    f"worst[{i}] must be a (label, observed, expected) triple, got {entry!r}"
                )
            label, observed, expected = entry
            normalised.append(
                (
                    str(label),
                    check_real(observed, f"worst[{i}].observed"),
                    check_real(expected, f"worst[{i}].expected"),
                )
            )
        set_(self, "worst", tuple(normalised))
        if not isinstance(self.details, Mapping):
            raise TypeError(f"details must be a mapping, got {type(self.details).__name__}")
        details = dict(self.details)
        try:
            json.dumps(details, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise type(error)(
                f"details must be JSON-serialisable with finite floats, got {details!r}: {error}"
            ) from None
        set_(self, "details", details)
        if not isinstance(self.description, str):
            raise TypeError(f"description must be a string, got {self.description!r}")

    def __str__(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        detectable = _format_float(self.detectable_tv)
        return (
            f"{self.name}: {verdict} p={self.pvalue:.4g} n={self.n} "
            f"alpha={self.false_fail_rate:.3g} detectable TV={detectable} ({self.method})"
        )

    def __repr__(self) -> str:
        return f"<CheckResult {self}>"

    def to_dict(self) -> dict[str, Any]:
        """Return the result as a JSON-serialisable dict.

        Returns
        -------
        dict
            One key per field. Floats stay floats except infinities, which become the
            strings ``"inf"`` / ``"-inf"``; ``worst`` becomes a list of
            ``[label, observed, expected]`` lists; ``details`` is copied as is.

        Raises
        ------
        None
            Every field was validated at construction (``details`` is JSON-serialisable).
        """
        out: dict[str, Any] = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name in _FLOAT_FIELDS:
                value = _encode_float(value)
            elif item.name == "worst":
                value = [[label, _encode_float(o), _encode_float(e)] for label, o, e in value]
            elif item.name == "details":
                value = json.loads(json.dumps(value))
            out[item.name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CheckResult:
        """Rebuild a result from :meth:`to_dict` output (or its JSON round trip).

        Parameters
        ----------
        data : Mapping[str, Any]
            Mapping with exactly the keys written by :meth:`to_dict`.

        Returns
        -------
        CheckResult
            A result equal to the one that was serialised.

        Raises
        ------
        TypeError
            If ``data`` is not a mapping.
        ValueError
            If keys are missing or unknown, or a value fails the field validation.
        """
        if not isinstance(data, Mapping):
            raise TypeError(f"data must be a mapping, got {type(data).__name__}")
        names = [item.name for item in fields(cls)]
        missing = sorted(set(names) - set(data))
        unknown = sorted(set(data) - set(names))
        if missing or unknown:
            raise ValueError(f"data has missing keys {missing} and unknown keys {unknown}")
        kwargs = dict(data)
        for key in _FLOAT_FIELDS:
            kwargs[key] = _decode_float(kwargs[key], key)
        kwargs["worst"] = tuple(
            (
                label,
                _decode_float(observed, "worst.observed"),
                _decode_float(expected, "worst.expected"),
            )
            for label, observed, expected in kwargs["worst"]
        )
        return cls(**kwargs)
