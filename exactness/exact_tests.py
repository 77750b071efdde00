"""Exact tests on small laws: a success probability, and the law of accepted draft lengths."""

from __future__ import annotations

import numpy as np
from scipy import stats

from ._validate import check_alternative, check_int, check_name, check_rates, check_real
from .goodness_of_fit import chisquare_gof
from .power import min_detectable_shift_binomial
from .results import CheckResult


def _check_probability(value: object, name: str) -> float:
    value = check_real(value, name)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    return value


def binomial_check(
    successes: int,
    trials: int,
    prob: float,
    *,
    false_fail_rate: float,
    false_pass_rate: float = 0.01,
    alternative: str = "two-sided",
    name: str = "binomial",
) -> CheckResult:
    """Exact binomial test of an event's frequency against its exact probability.

    Parameters
    ----------
    successes : int
        Number of trials in which the event occurred, ``0 <= successes <= trials``.
    trials : int
        Number of independent trials, >= 1.
    prob : float
        Exact probability of the event under a correct sampler, in [0, 1].
    false_fail_rate : float
        Significance level alpha in (0, 1).
    false_pass_rate : float, default 0.01
        Miss probability beta used to report ``detectable_tv``.
    alternative : {"two-sided", "greater", "less"}, default "two-sided"
        Alternative of :func:`scipy.stats.binomtest`.
    name : str, default "binomial"
        Name of the check.

    Returns
    -------
    CheckResult
        ``method="exact"``, ``statistic`` = observed frequency ``successes / trials``,
        ``n = trials``, ``worst = (("event", successes, trials * prob),)``.
        ``detectable_tv`` is the smallest shift of the event probability detected with
        power ``1 - false_pass_rate`` (:func:`min_detectable_shift_binomial`), which is
        the TV distance between the two Bernoulli laws.

    Raises
    ------
    TypeError
        If ``successes`` / ``trials`` are not integers or another argument has the wrong
        type.
    ValueError
        If ``trials < 1``, ``successes`` is outside ``[0, trials]``, ``prob`` outside
        [0, 1], a rate outside (0, 1), or ``alternative`` unknown.

    Notes
    -----
    Exact at every sample size (no approximation). The test is discrete and therefore
    conservative: its actual false-fail rate is at most ``false_fail_rate`` and can be
    well below it. ``prob`` of 0 or 1 gives an exact support check (any contrary outcome
    has p-value 0).

    References
    ----------
    C. J. Clopper and E. S. Pearson, Biometrika 26 (1934) 404-413; scipy.stats.binomtest
    (two-sided p-value by the likelihood ordering of outcomes).
    """
    trials = check_int(trials, "trials", minimum=1)
    successes = check_int(successes, "successes", minimum=0)
    if successes > trials:
        raise ValueError(f"successes must be <= trials={trials}, got {successes}")
    prob = _check_probability(prob, "prob")
    alpha, beta = check_rates(false_fail_rate, false_pass_rate)
    alternative = check_alternative(alternative, ("two-sided", "greater", "less"))
    name = check_name(name)
    pvalue = float(stats.binomtest(successes, trials, prob, alternative=alternative).pvalue)
    detectable = min_detectable_shift_binomial(
        trials, prob, false_fail_rate=alpha, false_pass_rate=beta, alternative=alternative
    )
    return CheckResult(
        name=name,
        method="exact",
        statistic=successes / trials,
        pvalue=pvalue,
        dof=None,
        n=trials,
        false_fail_rate=alpha,
        detectable_tv=detectable,
        false_pass_rate=beta,
        passed=pvalue > alpha,
        worst=(("event", float(successes), trials * prob),),
        details={"successes": successes, "prob": prob, "alternative": alternative},
        description=(
            f"Exact {alternative} binomial test: {successes} of {trials} trials against "
            f"probability {prob:.6g}. Statistic: observed frequency; detectable TV: shift "
            "of the event probability."
        ),
    )


def truncated_geometric_law(acceptance_rate: float, gamma: int) -> np.ndarray:
    """Law of the number of accepted draft tokens in one speculative round.

    Parameters
    ----------
    acceptance_rate : float
        Probability ``a`` in [0, 1] that a draft token is accepted, the same at every
        position and independent across positions.
    gamma : int
        Number of draft tokens per round, >= 1.

    Returns
    -------
    numpy.ndarray of float64, shape (gamma + 1,)
        ``P(N = k) = a**k * (1 - a)`` for ``k < gamma`` and ``P(N = gamma) = a**gamma``.

    Raises
    ------
    TypeError
        If ``acceptance_rate`` is not a real number or ``gamma`` not an integer.
    ValueError
        If ``acceptance_rate`` is outside [0, 1] or ``gamma < 1``.

    Notes
    -----
    Exact when every position's acceptance event is independent with the same
    probability, e.g. a context-free target and draft with ``a = 1 - TV(target, draft)``.
    With context-dependent models the per-round law differs and must be computed by
    enumeration instead.

    References
    ----------
    Y. Leviathan, M. Kalman and Y. Matias, "Fast inference from transformers via
    speculative decoding", ICML 2023 (arXiv:2211.17192), sec. 3.1.
    """
    rate = _check_probability(acceptance_rate, "acceptance_rate")
    gamma = check_int(gamma, "gamma", minimum=1)
    k = np.arange(gamma + 1, dtype=np.float64)
    law = rate**k * (1.0 - rate)
    law[gamma] = rate**gamma
    return law


def mean_accepted_length(acceptance_rate: float, gamma: int) -> float:
    """Expected number of accepted draft tokens per round under the truncated geometric law.

    Parameters
    ----------
    acceptance_rate : float
        Per-position acceptance probability ``a`` in [0, 1].
    gamma : int
        Draft tokens per round, >= 1.

    Returns
    -------
    float
        ``E[N] = sum_k k P(N = k) = (a - a**(gamma + 1)) / (1 - a)`` (``gamma`` at
        ``a = 1``). Tokens generated per round are ``E[N] + 1`` (Leviathan et al.,
        eq. 1: ``(1 - a**(gamma + 1)) / (1 - a)``).

    Raises
    ------
    TypeError, ValueError
        As :func:`truncated_geometric_law`.

    Notes
    -----
    Same independence assumption as :func:`truncated_geometric_law`.

    References
    ----------
    Leviathan, Kalman and Matias, ICML 2023 (arXiv:2211.17192), eq. (1).
    """
    law = truncated_geometric_law(acceptance_rate, gamma)
    return float(np.dot(np.arange(law.size), law))


def accepted_length_check(
    observed_counts,
    reference_probs,
    *,
    false_fail_rate: float,
    false_pass_rate: float = 0.01,
    min_expected: float = 50.0,
    monte_carlo_replicates: int = 0,
    seed: int | None = None,
    name: str = "accepted_length",
) -> CheckResult:
    """Test the law of accepted draft lengths ``{0, ..., gamma}`` against its exact law.

    Parameters
    ----------
    observed_counts : array_like of int, shape (gamma + 1,)
        ``observed_counts[k]`` = number of rounds in which exactly ``k`` draft tokens were
        accepted.
    reference_probs : array_like of float, shape (gamma + 1,)
        Exact law of the accepted length (e.g. :func:`truncated_geometric_law`, or one
        computed by enumeration).
    false_fail_rate : float
        Significance level alpha in (0, 1).
    false_pass_rate : float, default 0.01
        Miss probability beta used to report ``detectable_tv``.
    min_expected : float, default 50.0
        Smallest expected count per bin.
    monte_carlo_replicates : int, default 0
        Optional Monte Carlo null (see :func:`chisquare_gof`).
    seed : int, optional
        Seed for the Monte Carlo replicates.
    name : str, default "accepted_length"
        Name of the check.

    Returns
    -------
    CheckResult
        As :func:`chisquare_gof`, with outcomes labelled ``"accepted=k"``.

    Raises
    ------
    TypeError, ValueError
        As :func:`chisquare_gof`; ValueError also if fewer than two lengths are given.

    Notes
    -----
    A law-level test: it sees every moment of the accepted length, not only the mean.
    Lengths of reference probability 0 (e.g. any length below ``gamma`` at acceptance
    rate 1) are checked exactly.

    References
    ----------
    Leviathan, Kalman and Matias, ICML 2023 (arXiv:2211.17192); Chen et al. 2023
    (arXiv:2302.01318).
    """
    size = len(np.asarray(reference_probs).reshape(-1))
    if size < 2:
        raise ValueError(f"reference_probs must cover lengths 0..gamma with gamma >= 1, got {size} entries")
    return chisquare_gof(
        observed_counts,
        reference_probs,
        false_fail_rate=false_fail_rate,
        false_pass_rate=false_pass_rate,
        min_expected=min_expected,
        labels=[f"accepted={k}" for k in range(size)],
        name=name,
        monte_carlo_replicates=monte_carlo_replicates,
        seed=seed,
    )
