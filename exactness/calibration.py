"""Measuring the calibration of a check, with a stated error rate of the measurement itself.

A check run at nominal false-fail rate ``alpha`` is *calibrated* if a correct sampler fails
it with probability ``alpha``. The way to see it is to run the check on ``R`` independent
null replicates (exact draws of the reference law), count the rejections ``X`` and look at
the *calibration ratio* ``X / (R * alpha)``. A test that asserts that ratio lies in a band
``[low, high]`` is itself a statistical test: even a perfectly calibrated check leaves the
band with some probability. This module sizes ``R`` so that this probability is below a
stated false-fail rate (:func:`min_replicates_for_ratio`), computes that probability for a
given ``R`` (:func:`ratio_outside_probability`), and turns an observed count into a
:class:`~specexact.exactness.results.CheckResult` (:func:`calibration_ratio_check`).

Everything is computed from the exact binomial law of ``X`` (:data:`scipy.stats.binom`); no
normal approximation is used.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy import optimize, stats

from ._validate import check_int, check_name, check_rate, check_rates, check_real
from .results import CheckResult

__all__ = ["calibration_ratio_check", "min_replicates_for_ratio", "ratio_outside_probability"]

#: Largest block of candidate replicate counts evaluated at once by the search.
_SEARCH_BLOCK = 1 << 16


# --------------------------------------------------------------------------- validation


def _check_band(low: object, high: object) -> tuple[float, float]:
    low = check_real(low, "low")
    high = check_real(high, "high")
    if not 0.0 <= low < 1.0:
        raise ValueError(f"low must be in [0, 1) (a ratio below which the check fails), got {low!r}")
    if not high > 1.0:
        raise ValueError(f"high must be > 1 (math.inf allowed), got {high!r}")
    if low == 0.0 and high == math.inf:
        raise ValueError("low=0 and high=inf leave nothing outside the band: the check could never fail")
    return low, high


def _check_tolerance(value: object) -> float:
    value = check_real(value, "rate_tolerance")
    if not (1.0 <= value < math.inf):
        raise ValueError(f"rate_tolerance must be a finite number >= 1, got {value!r}")
    return value


def _true_rate_range(nominal: float, tolerance: float) -> tuple[float, float]:
    return nominal / tolerance, min(1.0, nominal * tolerance)


# --------------------------------------------------------------------------- the band in counts


def _ratio(count, replicates, nominal):
    """The calibration ratio, computed the same way everywhere (float64)."""
    return np.asarray(count, dtype=np.float64) / (np.asarray(replicates, dtype=np.float64) * nominal)


def _band_counts(replicates, nominal: float, low: float, high: float):
    """``(a, b)``: the counts ``x`` with ``low <= ratio(x) <= high`` are exactly ``a..b``.

    Vectorised over ``replicates`` (int64 array). ``a`` may exceed ``b`` (empty band).
    """
    r = np.asarray(replicates, dtype=np.int64)
    scale = r.astype(np.float64) * nominal
    a = np.clip(np.ceil(low * scale).astype(np.int64), 0, r + 1)
    # Settle the float predicate exactly at the boundary (two steps suffice for round-off).
    for _ in range(2):
        down = (a > 0) & (_ratio(a - 1, r, nominal) >= low)
        a = np.where(down, a - 1, a)
        up = (a <= r) & (_ratio(a, r, nominal) < low)
        a = np.where(up, a + 1, a)
    if high == math.inf:
        b = r.copy()
    else:
        b = np.clip(np.floor(high * scale).astype(np.int64), -1, r)
        for _ in range(2):
            up = (b < r) & (_ratio(b + 1, r, nominal) <= high)
            b = np.where(up, b + 1, b)
            down = (b >= 0) & (_ratio(b, r, nominal) > high)
            b = np.where(down, b - 1, b)
    return a, b


def _outside_probability(replicates, nominal, low, high, tolerance):
    """Upper bound on P(ratio outside the band) over true rates within ``tolerance``.

    The lower tail ``P(X < a)`` decreases and the upper tail ``P(X > b)`` increases with the
    true rate, so the sup over ``[nominal / tol, nominal * tol]`` of their sum is at most the
    lower tail at the smallest rate plus the upper tail at the largest (equality at tol=1).
    """
    r = np.asarray(replicates, dtype=np.int64)
    a, b = _band_counts(r, nominal, low, high)
    rate_low, rate_high = _true_rate_range(nominal, tolerance)
    lower = np.where(a > 0, stats.binom.cdf(a - 1, r, rate_low), 0.0)
    upper = np.where(b < r, stats.binom.sf(b, r, rate_high), 0.0)
    return np.minimum(1.0, lower + upper)


def ratio_outside_probability(
    replicates: int,
    nominal_rate: float,
    *,
    low: float = 0.5,
    high: float = 2.0,
    rate_tolerance: float = 1.0,
) -> float:
    """Probability that a calibrated check's measured ratio falls outside ``[low, high]``.

    Parameters
    ----------
    replicates : int
        Number ``R >= 1`` of independent null replicates the check is run on.
    nominal_rate : float
        Nominal false-fail rate ``alpha`` of the check, in (0, 1).
    low, high : float, default 0.5 and 2.0
        The band of acceptable ratios ``X / (R * alpha)``, ``0 <= low < 1 < high``;
        ``low = 0`` (only too many rejections count) or ``high = math.inf`` (only too few)
        make the band one-sided, not both.
    rate_tolerance : float, default 1.0
        Factor ``t >= 1``: bound the probability over every true rejection rate in
        ``[alpha / t, alpha * t]`` instead of at ``alpha`` exactly. Use ``t > 1`` for checks
        that are only approximately calibrated (asymptotic p-values, ties).

    Returns
    -------
    float
        ``P(X < a) + P(X > b)`` where ``a..b`` are the counts whose ratio lies in the band,
        the lower tail evaluated at ``alpha / t`` and the upper tail at ``alpha * t``
        (``X ~ Binomial(R, rate)``, :data:`scipy.stats.binom`). For ``t = 1`` this is the
        exact probability that a perfectly calibrated check is declared mis-calibrated;
        for ``t > 1`` an upper bound over the range of true rates.

    Raises
    ------
    TypeError
        If an argument has the wrong type.
    ValueError
        If ``replicates < 1``, a rate is outside (0, 1), the band is invalid or
        ``rate_tolerance`` is not a finite number >= 1.

    Notes
    -----
    A one-sided band with ``low = 0`` also bounds the probability for every true rate
    *below* ``alpha`` (the upper tail only grows with the rate): use it for checks that are
    conservative by design (exact discrete tests, Ville's inequality), whose true rate is
    at most, but possibly far below, nominal.

    References
    ----------
    N. L. Johnson, A. W. Kemp and S. Kotz, *Univariate Discrete Distributions*, 3rd ed.,
    Wiley, 2005, ch. 3 (stochastic ordering of the binomial law in its success probability).
    """
    replicates = check_int(replicates, "replicates", minimum=1)
    nominal = check_rate(nominal_rate, "nominal_rate")
    low, high = _check_band(low, high)
    tolerance = _check_tolerance(rate_tolerance)
    return float(_outside_probability(np.int64(replicates), nominal, low, high, tolerance))


def min_replicates_for_ratio(
    nominal_rate: float,
    *,
    low: float = 0.5,
    high: float = 2.0,
    false_fail_rate: float,
    rate_tolerance: float = 1.0,
    max_replicates: int = 10**9,
) -> int:
    """Fewest null replicates that measure a calibration ratio within a false-fail rate.

    Parameters
    ----------
    nominal_rate : float
        Nominal false-fail rate ``alpha`` of the check being calibrated, in (0, 1).
    low, high : float, default 0.5 and 2.0
        Band of acceptable ratios ``X / (R * alpha)`` (see
        :func:`ratio_outside_probability`).
    false_fail_rate : float
        Allowed probability, in (0, 1), that a calibrated check's ratio falls outside the
        band (the false-fail rate of the calibration measurement itself).
    rate_tolerance : float, default 1.0
        Guarantee the rate for every true rejection rate within this factor of
        ``alpha`` (see :func:`ratio_outside_probability`).
    max_replicates : int, default 10**9
        Give up (ValueError) beyond this many replicates.

    Returns
    -------
    int
        The smallest ``R`` with ``ratio_outside_probability(R, alpha, ...) <=
        false_fail_rate``.

    Raises
    ------
    TypeError
        If an argument has the wrong type.
    ValueError
        If a rate is outside (0, 1), the band or tolerance is invalid, or no
        ``R <= max_replicates`` reaches ``false_fail_rate``.

    Notes
    -----
    The probability is computed exactly from the binomial law. Because the band in counts
    ``ceil(low R alpha) .. floor(high R alpha)`` moves in integer steps, it saw-tooths in
    ``R``: a few ``R`` above the returned one may exceed ``false_fail_rate`` again. Use the
    returned ``R`` itself, or check a different ``R`` with
    :func:`ratio_outside_probability` (:func:`calibration_ratio_check` refuses an ``R``
    that is too small). The search scans every ``R`` in vectorised blocks, so the answer is
    the true minimum. Rough sizes at ``false_fail_rate = 5e-10`` and band [0.5, 2]:
    about 1.1e3 replicates at ``alpha = 0.1``, 2.3e3 at 0.05, 1.2e4 at 0.01 and 1.2e5 at
    1e-3 (inverse in ``alpha``); ``rate_tolerance = 1.25`` multiplies them by about 2.4.

    References
    ----------
    Johnson, Kemp and Kotz (2005), ch. 3. Chernoff, "A measure of asymptotic efficiency
    for tests of a hypothesis based on the sum of observations", Ann. Math. Statist. 23
    (1952) 493-507 (the exponential rate ``log(1/false_fail_rate) / KL`` that sets ``R``).
    """
    nominal = check_rate(nominal_rate, "nominal_rate")
    low, high = _check_band(low, high)
    target = check_rate(false_fail_rate, "false_fail_rate")
    tolerance = _check_tolerance(rate_tolerance)
    max_replicates = check_int(max_replicates, "max_replicates", minimum=1)
    found = _min_replicates(nominal, low, high, target, tolerance, max_replicates)
    if found is None:
        raise ValueError(
            f"no number of replicates up to max_replicates={max_replicates} measures the ratio of "
            f"nominal_rate={nominal!r} within [{low}, {high}] at false_fail_rate={target!r}"
        )
    return found


@functools.lru_cache(maxsize=1024)
def _min_replicates(nominal, low, high, target, tolerance, max_replicates):
    start, block = 1, 256
    while start <= max_replicates:
        stop = min(max_replicates, start + block - 1)
        candidates = np.arange(start, stop + 1, dtype=np.int64)
        ok = _outside_probability(candidates, nominal, low, high, tolerance) <= target
        if ok.any():
            return int(candidates[int(np.argmax(ok))])
        start = stop + 1
        block = min(2 * block, _SEARCH_BLOCK)
    return None


# --------------------------------------------------------------------------- the check


def _detectable_rates(replicates, nominal, a, b, beta):
    """Rates detected with power >= 1 - beta by each tail: (rate_down or None, rate_up or None)."""
    target = 1.0 - beta
    down = up = None
    if a > 0:
        # P(X <= a - 1) decreases in the rate from 1 at rate 0.
        def excess_down(rate):
            return float(stats.binom.cdf(a - 1, replicates, rate)) - target

        if excess_down(nominal) >= 0.0:
            down = nominal
        else:
            down = float(optimize.brentq(excess_down, 0.0, nominal, xtol=1e-15, rtol=1e-12))
    if b < replicates:

        def excess_up(rate):
            return float(stats.binom.sf(b, replicates, rate)) - target

        if excess_up(nominal) >= 0.0:
            up = nominal
        else:
            up = float(optimize.brentq(excess_up, nominal, 1.0, xtol=1e-15, rtol=1e-12))
    return down, up


def calibration_ratio_check(
    rejections: int,
    replicates: int,
    nominal_rate: float,
    *,
    low: float = 0.5,
    high: float = 2.0,
    false_fail_rate: float,
    false_pass_rate: float = 0.01,
    rate_tolerance: float = 1.0,
    name: str = "calibration_ratio",
) -> CheckResult:
    """Check that a measured false-fail frequency is within a factor band of nominal.

    Parameters
    ----------
    rejections : int
        Number ``X`` of the ``replicates`` null replicates on which the calibrated check
        failed, ``0 <= X <= R``.
    replicates : int
        Number ``R >= 1`` of independent null replicates (exact draws of the law the
        calibrated check tests against).
    nominal_rate : float
        Nominal false-fail rate ``alpha`` the calibrated check was run at, in (0, 1).
    low, high : float, default 0.5 and 2.0
        Band of acceptable ratios ``X / (R * alpha)``, ``0 <= low < 1 < high`` (one of
        ``low = 0``, ``high = math.inf`` allowed).
    false_fail_rate : float
        False-fail rate, in (0, 1), of *this* check: the probability that a calibrated
        check's ratio falls outside the band. ``R`` must be large enough for it (see
        :func:`min_replicates_for_ratio`).
    false_pass_rate : float, default 0.01
        Miss probability ``beta`` used to report the detectable departure.
    rate_tolerance : float, default 1.0
        Treat every true rate within this factor of ``alpha`` as calibrated (see
        :func:`ratio_outside_probability`).
    name : str, default "calibration_ratio"
        Name of the check.

    Returns
    -------
    CheckResult
        ``method="exact"``, ``statistic`` = the ratio ``X / (R * alpha)``, ``n = R``,
        ``passed`` iff ``low <= ratio <= high``. ``pvalue`` is 1 inside the band; outside it
        is the binomial probability, for a calibrated check, of a ratio at least as far
        outside the band on the log scale: with ``r`` the observed ratio, the mirror image
        of ``r`` is ``low * high / r``, and the p-value is ``P(ratio <= min(r, mirror)) +
        P(ratio >= max(r, mirror))`` (lower part at ``alpha / t``, upper part at
        ``alpha * t`` for ``rate_tolerance = t``; with ``low = 0`` or ``high = inf`` only
        the tested side counts). It never exceeds the design probability
        ``ratio_outside_probability(R, ...) <= false_fail_rate``, so ``passed`` is
        consistent with ``pvalue > false_fail_rate``.

        ``detectable_tv`` is the smallest shift ``s`` of the true rejection probability
        (the TV distance between the Bernoulli laws of one replicate's verdict under the
        true rate and under ``alpha``) such that a true rate of ``alpha + s`` (and, for a
        two-sided band, ``alpha - s``) leaves the band with probability at least
        ``1 - false_pass_rate``; ``math.inf`` if some tested direction is never detected
        with that power. ``details`` holds the rates themselves
        (``detectable_rate_low``/``_high``) and as ratios to ``alpha``, the band in counts
        and the design probability.

    Raises
    ------
    TypeError
        If an argument has the wrong type.
    ValueError
        If ``rejections`` is outside ``[0, R]``, a rate is outside (0, 1), the band or
        tolerance is invalid, or ``R`` is too small: a calibrated check would leave the
        band with probability above ``false_fail_rate``.

    Notes
    -----
    The count ``X`` is ``Binomial(R, rho)`` with ``rho`` the true false-fail rate of the
    calibrated check; the band in counts is ``a..b`` with ``a = ceil(low R alpha)`` and
    ``b = floor(high R alpha)`` (settled on the float ratio). Power is computed from one
    tail only (the other adds to it), so the reported detectable shift is conservative.
    The replicates must be independent; reusing one set of replicates for several nominal
    levels gives several checks, each at its own false-fail rate (a union bound covers them).

    References
    ----------
    Johnson, Kemp and Kotz, *Univariate Discrete Distributions*, 3rd ed., 2005, ch. 3.
    E. L. Lehmann and J. P. Romano, *Testing Statistical Hypotheses*, 4th ed., 2022,
    sec. 3.4 (p-values of tests with a given rejection region).
    """
    replicates = check_int(replicates, "replicates", minimum=1)
    rejections = check_int(rejections, "rejections", minimum=0)
    if rejections > replicates:
        raise ValueError(f"rejections must be <= replicates={replicates}, got {rejections}")
    nominal = check_rate(nominal_rate, "nominal_rate")
    low, high = _check_band(low, high)
    alpha, beta = check_rates(false_fail_rate, false_pass_rate)
    tolerance = _check_tolerance(rate_tolerance)
    name = check_name(name)

    r64 = np.int64(replicates)
    design = float(_outside_probability(r64, nominal, low, high, tolerance))
    if design > alpha:
        needed = _min_replicates(nominal, low, high, alpha, tolerance, 10**9)
        raise ValueError(
            f"replicates={replicates} is too few: a calibrated check (nominal_rate={nominal!r}) "
            f"would leave [{low}, {high}] with probability {design:.3g} > false_fail_rate="
            f"{alpha!r}; use min_replicates_for_ratio(...) = {needed}"
        )
    a_arr, b_arr = _band_counts(r64, nominal, low, high)
    a, b = int(a_arr), int(b_arr)
    ratio = float(_ratio(rejections, replicates, nominal))
    inside = a <= rejections <= b
    rate_low, rate_high = _true_rate_range(nominal, tolerance)
    if inside:
        pvalue = 1.0
    else:
        # Counts at least as far outside the band (log scale) as the observed one.
        if rejections < a:
            lower_count = rejections
            mirror = math.inf if ratio == 0.0 else low * high / ratio
            upper_count = (
                None
                if high == math.inf or mirror == math.inf
                else math.ceil(mirror * replicates * nominal - 1e-9)
            )
        else:
            upper_count = rejections
            mirror = low * high / ratio
            lower_count = None if low == 0.0 else math.floor(mirror * replicates * nominal + 1e-9)
            if lower_count is not None:
                lower_count = min(lower_count, a - 1)
        if upper_count is not None:
            upper_count = max(upper_count, b + 1)
        pvalue = 0.0
        if lower_count is not None and lower_count >= 0 and low > 0.0:
            pvalue += float(stats.binom.cdf(lower_count, replicates, rate_low))
        if upper_count is not None and upper_count <= replicates and high < math.inf:
            pvalue += float(stats.binom.sf(upper_count - 1, replicates, rate_high))
        pvalue = min(pvalue, design)  # a subset of the outside event (guards round-off)

    down, up = _detectable_rates(replicates, nominal, a, b, beta)
    shifts = []
    if low > 0.0:
        shifts.append(math.inf if down is None else nominal - down)
    if high < math.inf:
        shifts.append(math.inf if up is None else up - nominal)
    detectable = max(shifts)
    details = {
        "rejections": rejections,
        "replicates": replicates,
        "nominal_rate": nominal,
        "observed_rate": rejections / replicates,
        "ratio": ratio,
        "low": low,
        "high": high if high < math.inf else None,
        "rate_tolerance": tolerance,
        "band_counts": [a, b],
        "design_false_fail_probability": design,
        "detectable_rate_low": down,
        "detectable_rate_high": up,
        "detectable_ratio_low": None if down is None else down / nominal,
        "detectable_ratio_high": None if up is None else up / nominal,
        "detectable_tv_of": "shift of the true false-fail rate of the calibrated check",
    }
    high_text = "inf" if high == math.inf else f"{high:g}"
    return CheckResult(
        name=name,
        method="exact",
        statistic=ratio,
        pvalue=pvalue,
        dof=None,
        n=replicates,
        false_fail_rate=alpha,
        detectable_tv=detectable,
        false_pass_rate=beta,
        passed=bool(inside),
        worst=(("rejections", float(rejections), replicates * nominal),),
        details=details,
        description=(
            f"Calibration ratio: {rejections} rejections in {replicates} null replicates at "
            f"nominal rate {nominal:.3g} (ratio {ratio:.3g}), band [{low:g}, {high_text}] "
            f"(counts {a}..{b}); a calibrated check leaves it with probability {design:.3g} "
            "(exact binomial). Statistic: the ratio."
        ),
    )
