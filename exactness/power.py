"""Power and sample-size planning: how many samples a check needs, what it can detect.

Chi-square checks use the noncentral chi-square law of the Pearson statistic under a
fixed alternative; binomial checks use the exact binomial law of the two-sided (or
one-sided) exact test of :func:`scipy.stats.binomtest`.
"""

from __future__ import annotations

import functools
import math

from scipy import optimize, stats

from ._validate import check_alternative, check_int, check_rate, check_rates, check_real

_ALTERNATIVES = ("two-sided", "greater", "less")


# --------------------------------------------------------------------------- chi-square


def chisquare_power(noncentrality: float, dof: int, *, false_fail_rate: float) -> float:
    """Power of a level-``false_fail_rate`` chi-square test against a noncentrality.

    Parameters
    ----------
    noncentrality : float
        Noncentrality parameter lambda >= 0 of the statistic under the alternative; for
        Pearson's statistic ``lambda = n * sum((probs_true - reference_probs)**2 /
        reference_probs)``.
    dof : int
        Degrees of freedom, >= 1.
    false_fail_rate : float
        Significance level alpha in (0, 1).

    Returns
    -------
    float
        ``P(X > chi2.isf(alpha, dof))`` for ``X ~ ncx2(dof, noncentrality)``; equals
        ``false_fail_rate`` at ``noncentrality = 0``.

    Raises
    ------
    TypeError
        If an argument is not a number (``dof`` not an integer).
    ValueError
        If ``noncentrality`` is negative or infinite, ``dof < 1`` or ``false_fail_rate``
        is outside (0, 1).

    Notes
    -----
    The noncentral chi-square law of Pearson's statistic is a large-sample (local
    alternative) approximation, good when every expected count is in the tens.

    References
    ----------
    W. G. Cochran, "Some methods for strengthening the common chi-square tests",
    Biometrics 10 (1954) 417-451. J. Cohen, *Statistical Power Analysis for the
    Behavioral Sciences*, 2nd ed., 1988, ch. 7.
    """
    noncentrality = check_real(noncentrality, "noncentrality")
    if not (0.0 <= noncentrality < math.inf):
        raise ValueError(f"noncentrality must be finite and >= 0, got {noncentrality!r}")
    dof = check_int(dof, "dof", minimum=1)
    alpha = check_rate(false_fail_rate, "false_fail_rate")
    return _chisquare_power(noncentrality, dof, alpha)


def _chisquare_power(noncentrality: float, dof: int, alpha: float) -> float:
    critical = stats.chi2.isf(alpha, dof)
    if noncentrality == 0.0:
        return float(stats.chi2.sf(critical, dof))
    return float(stats.ncx2.sf(critical, dof, noncentrality))


@functools.lru_cache(maxsize=4096)
def _required_noncentrality(dof: int, alpha: float, beta: float) -> float:
    """Noncentrality at which the level-alpha test has power exactly 1 - beta."""
    target = 1.0 - beta

    def excess(noncentrality: float) -> float:
        return _chisquare_power(noncentrality, dof, alpha) - target

    upper = max(1.0, float(dof))
    while excess(upper) < 0.0:
        upper *= 2.0
    return float(optimize.brentq(excess, 0.0, upper, xtol=1e-12, rtol=1e-14, maxiter=500))


def _effective_n(n: float, two_sample: bool) -> float:
    return n / 2.0 if two_sample else n


def min_num_samples_chisquare(
    tv: float,
    *,
    num_bins: int,
    false_fail_rate: float,
    false_pass_rate: float = 0.01,
    two_sample: bool = False,
) -> int:
    """Samples a Pearson chi-square check needs to detect any law at TV distance ``tv``.

    Parameters
    ----------
    tv : float
        Total-variation distance in (0, 1] between the sampled law and the reference law
        (both after binning) that must be detected.
    num_bins : int
        Number of bins (cells) of the test, >= 2; the test has ``num_bins - 1`` degrees of
        freedom.
    false_fail_rate : float
        Significance level alpha in (0, 1).
    false_pass_rate : float, default 0.01
        Allowed probability beta in (0, 1) of missing the discrepancy (power 1 - beta).
    two_sample : bool, default False
        Plan the two-sample homogeneity test (sampler vs reference sampler, equal sizes)
        instead of the goodness-of-fit test against an exact law.

    Returns
    -------
    int
        Smallest ``n`` whose worst-case power is at least ``1 - false_pass_rate``. For
        ``two_sample=True`` this is the size of *each* sample: the effective size is
        ``n / 2``, so a two-sample check costs about 2x the one-sample ``n`` per sample and
        4x in total.

    Raises
    ------
    TypeError
        If an argument has the wrong type.
    ValueError
        If ``tv`` is outside (0, 1], ``num_bins < 2``, a rate is outside (0, 1) or
        ``false_fail_rate + false_pass_rate >= 1``.

    Notes
    -----
    Worst case over all alternatives at TV distance ``tv``: by Cauchy-Schwarz,
    ``sum((q - p)**2 / p) >= (sum|q - p|)**2 = 4 * tv**2``, so the noncentrality is at
    least ``lambda = 4 * n_eff * tv**2``, with equality when the error is spread in
    proportion to ``p`` over two halves of the mass. The required ``lambda`` solves
    ``chisquare_power(lambda, num_bins - 1) = 1 - false_pass_rate``. The power law is the
    noncentral chi-square approximation (see :func:`chisquare_power`); binning can only
    lose power, so ``tv`` is the distance between the *binned* laws.

    References
    ----------
    Cochran (1954), Biometrics 10:417-451. TensorFlow Probability,
    ``distributions/internal/statistical_testing.py`` (``min_num_samples_*`` planning).
    """
    tv = check_real(tv, "tv")
    if not 0.0 < tv <= 1.0:
        raise ValueError(f"tv must be in (0, 1], got {tv!r}")
    num_bins = check_int(num_bins, "num_bins", minimum=2)
    alpha, beta = check_rates(false_fail_rate, false_pass_rate)
    if not isinstance(two_sample, bool):
        raise TypeError(f"two_sample must be a bool, got {two_sample!r}")
    noncentrality = _required_noncentrality(num_bins - 1, alpha, beta)
    n_eff = noncentrality / (4.0 * tv * tv)
    return max(1, math.ceil(2.0 * n_eff if two_sample else n_eff))


def min_detectable_tv_chisquare(
    n: int,
    *,
    num_bins: int,
    false_fail_rate: float,
    false_pass_rate: float = 0.01,
    two_sample: bool = False,
) -> float:
    """Smallest TV distance a Pearson chi-square check on ``n`` samples surely detects.

    Parameters
    ----------
    n : int
        Number of samples, >= 1 (per sample when ``two_sample=True``).
    num_bins : int
        Number of bins, >= 2.
    false_fail_rate : float
        Significance level alpha in (0, 1).
    false_pass_rate : float, default 0.01
        Allowed miss probability beta in (0, 1).
    two_sample : bool, default False
        Two-sample homogeneity test with equal sample sizes ``n`` (effective size
        ``n / 2``).

    Returns
    -------
    float
        ``tv = sqrt(lambda* / (4 * n_eff))`` where ``lambda*`` (found with
        :func:`scipy.optimize.brentq`) gives power ``1 - false_pass_rate``; ``math.inf``
        when that exceeds 1 (no TV discrepancy is guaranteed to be detected).

    Raises
    ------
    TypeError
        If an argument has the wrong type.
    ValueError
        If ``n < 1``, ``num_bins < 2``, a rate is outside (0, 1) or the rates sum to >= 1.

    Notes
    -----
    Inverse of :func:`min_num_samples_chisquare` (up to rounding ``n`` up); the same
    worst-case bound ``lambda >= 4 * n_eff * tv**2`` and noncentral chi-square
    approximation apply. With unequal two-sample sizes pass ``min(n_a, n_b)``: the
    effective size ``n_a * n_b / (n_a + n_b)`` is at least ``min(n_a, n_b) / 2``.

    References
    ----------
    Cochran (1954), Biometrics 10:417-451.
    """
    n = check_int(n, "n", minimum=1)
    num_bins = check_int(num_bins, "num_bins", minimum=2)
    alpha, beta = check_rates(false_fail_rate, false_pass_rate)
    if not isinstance(two_sample, bool):
        raise TypeError(f"two_sample must be a bool, got {two_sample!r}")
    return _min_detectable_tv_chisquare(n, num_bins, alpha, beta, two_sample)


@functools.lru_cache(maxsize=4096)
def _min_detectable_tv_chisquare(
    n: int, num_bins: int, alpha: float, beta: float, two_sample: bool
) -> float:
    noncentrality = _required_noncentrality(num_bins - 1, alpha, beta)
    tv = math.sqrt(noncentrality / (4.0 * _effective_n(n, two_sample)))
    return tv if tv <= 1.0 else math.inf


# --------------------------------------------------------------------------- binomial


def _first_true(predicate, lo: int, hi: int, guess: float) -> int:
    """Smallest k in [lo, hi] with predicate(k) for a predicate false-then-true.

    Returns ``hi + 1`` if it is false everywhere. Gallops from ``guess`` then bisects.
    """
    guess = lo if not math.isfinite(guess) else int(min(max(guess, lo), hi))
    if predicate(guess):
        right, step = guess, 1
        while True:
            left = right - step
            if left < lo:
                left = lo - 1
                break
            if not predicate(left):
                break
            right, step = left, step * 2
    else:
        left, step = guess, 1
        while True:
            right = left + step
            if right > hi:
                right = hi + 1
                break
            if predicate(right):
                break
            left, step = right, step * 2
    while right - left > 1:
        middle = (left + right) // 2
        if predicate(middle):
            right = middle
        else:
            left = middle
    return right


@functools.lru_cache(maxsize=4096)
def _binomial_rejection_region(n: int, prob: float, alpha: float, alternative: str):
    """``(k_lo, k_hi)``: binomtest rejects at level alpha iff k <= k_lo or k >= k_hi."""

    def rejects(k: int, side: str) -> bool:
        return stats.binomtest(k, n, prob, alternative=side).pvalue <= alpha

    k_lo, k_hi = -1, n + 1
    tail = alpha / 2.0 if alternative == "two-sided" else alpha
    mean = n * prob
    if alternative in ("two-sided", "less"):
        side = alternative
        top = n if alternative == "less" else math.floor(mean)
        # p-value increases with k below the mean: rejection is a prefix [0, k_lo].
        guess = stats.binom.ppf(tail, n, prob)
        k_lo = _first_true(lambda k: not rejects(k, side), 0, top, guess) - 1
    if alternative in ("two-sided", "greater"):
        side = alternative
        bottom = 0 if alternative == "greater" else math.ceil(mean)
        guess = stats.binom.isf(tail, n, prob) + 1
        k_hi = _first_true(lambda k: rejects(k, side), bottom, n, guess)
    return k_lo, k_hi


def _binomial_power(n: int, region: tuple[int, int], true_prob: float) -> float:
    k_lo, k_hi = region
    power = 0.0
    if k_lo >= 0:
        power += stats.binom.cdf(k_lo, n, true_prob)
    if k_hi <= n:
        power += stats.binom.sf(k_hi - 1, n, true_prob)
    return float(power)


@functools.lru_cache(maxsize=65536)
def _min_detectable_shift_binomial(
    n: int, prob: float, alpha: float, beta: float, alternative: str
) -> float:
    region = _binomial_rejection_region(n, prob, alpha, alternative)
    target = 1.0 - beta
    directions = {"two-sided": (1, -1), "greater": (1,), "less": (-1,)}[alternative]
    worst = 0.0
    any_room = False
    for sign in directions:
        room = 1.0 - prob if sign > 0 else prob
        if room <= 0.0:
            continue
        any_room = True

        def excess(shift: float, sign: int = sign) -> float:
            true_prob = min(1.0, max(0.0, prob + sign * shift))
            return _binomial_power(n, region, true_prob) - target

        if excess(room) < 0.0:
            return math.inf
        shift = optimize.brentq(excess, 0.0, room, xtol=1e-15, rtol=1e-13, maxiter=500)
        worst = max(worst, float(shift))
    return worst if any_room else math.inf


def min_detectable_shift_binomial(
    n: int,
    prob: float,
    *,
    false_fail_rate: float,
    false_pass_rate: float = 0.01,
    alternative: str = "two-sided",
) -> float:
    """Smallest shift of a success probability the exact binomial test surely detects.

    Parameters
    ----------
    n : int
        Number of trials, >= 1.
    prob : float
        Success probability under the null, in [0, 1].
    false_fail_rate : float
        Significance level alpha in (0, 1).
    false_pass_rate : float, default 0.01
        Allowed miss probability beta in (0, 1).
    alternative : {"two-sided", "greater", "less"}, default "two-sided"
        Alternative of :func:`scipy.stats.binomtest`; one-sided tests only look at
        shifts in their direction.

    Returns
    -------
    float
        The smallest ``shift`` such that every true success probability ``prob +- s`` with
        ``s >= shift`` (in the tested directions, inside [0, 1]) is rejected with
        probability >= ``1 - false_pass_rate``. It equals the total-variation distance
        between the Bernoulli laws. ``math.inf`` if in some tested direction with room
        even the extreme probability (0 or 1) is not detected with that power, or if no
        tested direction has room.

    Raises
    ------
    TypeError
        If an argument has the wrong type.
    ValueError
        If ``n < 1``, ``prob`` is outside [0, 1], a rate is outside (0, 1), the rates sum
        to >= 1, or ``alternative`` is unknown.

    Notes
    -----
    Computed *exactly* (no normal approximation): the rejection region
    ``{k <= k_lo} U {k >= k_hi}`` of :func:`scipy.stats.binomtest` at level alpha is found
    by searching ``k`` with binomtest itself, and the power is the binomial probability
    of that region under the shifted probability (solved with
    :func:`scipy.optimize.brentq`). The exact test is conservative (its size is at most
    alpha) and its power is not monotone in ``n`` (a saw-tooth).

    References
    ----------
    M. R. Chernick and C. Y. Liu, "The saw-toothed behavior of power versus sample size
    and software solutions", The American Statistician 56 (2002) 149-155.
    """
    n = check_int(n, "n", minimum=1)
    prob = _check_prob(prob)
    alpha, beta = check_rates(false_fail_rate, false_pass_rate)
    alternative = check_alternative(alternative, _ALTERNATIVES)
    return _min_detectable_shift_binomial(n, prob, alpha, beta, alternative)


def _check_prob(prob: object) -> float:
    prob = check_real(prob, "prob")
    if not 0.0 <= prob <= 1.0:
        raise ValueError(f"prob must be in [0, 1], got {prob!r}")
    return prob


def min_num_samples_binomial(
    shift: float,
    prob: float,
    *,
    false_fail_rate: float,
    false_pass_rate: float = 0.01,
    alternative: str = "two-sided",
    max_samples: int = 10**13,
) -> int:
    """Trials the exact binomial test needs to detect a shift of a success probability.

    Parameters
    ----------
    shift : float
        Shift of the success probability (TV distance between the Bernoulli laws) to
        detect, in (0, 1].
    prob : float
        Success probability under the null, in [0, 1].
    false_fail_rate : float
        Significance level alpha in (0, 1).
    false_pass_rate : float, default 0.01
        Allowed miss probability beta in (0, 1).
    alternative : {"two-sided", "greater", "less"}, default "two-sided"
        Alternative of :func:`scipy.stats.binomtest`.
    max_samples : int, default 10**13
        Give up (ValueError) beyond this many trials.

    Returns
    -------
    int
        An ``n`` with ``min_detectable_shift_binomial(n, prob) <= shift`` while
        ``min_detectable_shift_binomial(n - 1, prob) > shift``.

    Raises
    ------
    TypeError
        If an argument has the wrong type.
    ValueError
        If ``shift`` is outside (0, 1], ``prob`` outside [0, 1], a rate outside (0, 1),
        the rates sum to >= 1, ``alternative`` is unknown, no tested direction has room
        for ``shift``, or more than ``max_samples`` trials would be needed.

    Notes
    -----
    Exact binomial power (see :func:`min_detectable_shift_binomial`). Because that power
    saw-tooths in ``n``, the answer is found by bisection from a normal-approximation
    start and is *a* crossing point: a few smaller ``n`` may also reach the power.

    References
    ----------
    Chernick and Liu (2002), The American Statistician 56:149-155.
    """
    shift = check_real(shift, "shift")
    if not 0.0 < shift <= 1.0:
        raise ValueError(f"shift must be in (0, 1], got {shift!r}")
    prob = _check_prob(prob)
    alpha, beta = check_rates(false_fail_rate, false_pass_rate)
    alternative = check_alternative(alternative, _ALTERNATIVES)
    max_samples = check_int(max_samples, "max_samples", minimum=1)
    rooms = {"two-sided": (1.0 - prob, prob), "greater": (1.0 - prob,), "less": (prob,)}
    if max(rooms[alternative]) < shift:
        raise ValueError(
            f"shift must leave the success probability inside [0, 1] in a tested direction "
            f"(prob={prob!r}, alternative={alternative!r}), got {shift!r}"
        )

    def detects(n: int) -> bool:
        return _min_detectable_shift_binomial(n, prob, alpha, beta, alternative) <= shift

    # Normal-approximation starting point.
    z_alpha = stats.norm.isf(alpha / 2.0 if alternative == "two-sided" else alpha)
    z_beta = stats.norm.isf(beta)
    shifted = prob + shift if prob + shift <= 1.0 else prob - shift
    spread = z_alpha * math.sqrt(prob * (1 - prob)) + z_beta * math.sqrt(shifted * (1 - shifted))
    guess = max(1, math.ceil((spread / shift) ** 2))
    if guess > max_samples:
        guess = max_samples
    found = _first_true(detects, 1, max_samples, guess)
    if found > max_samples:
        raise ValueError(
            f"max_samples={max_samples} trials do not reach power {1 - beta} for "
            f"shift {shift!r} at prob {prob!r}"
        )
    return found
