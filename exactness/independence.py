"""Independence of draws that must not share randomness: the pair-agreement test."""

from __future__ import annotations

import numpy as np

from ._validate import check_int, check_name, check_probs, check_rates, check_real
from .exact_tests import binomial_check
from .results import CheckResult


def collision_probability(reference_probs) -> float:
    """Probability that two independent draws from a law agree.

    Parameters
    ----------
    reference_probs : array_like of float, shape (M,)
        The law (>= 0, summing to 1 within relative 1e-9).

    Returns
    -------
    float
        ``sum_s P(s)**2``, in ``[1/M, 1]``.

    Raises
    ------
    TypeError, ValueError
        If ``reference_probs`` is not a probability vector.

    Notes
    -----
    Computed with :func:`numpy.dot` in float64; exact up to rounding.

    References
    ----------
    A. Renyi, "On measures of entropy and information", Proc. 4th Berkeley Symp. (1961)
    (collision entropy ``-log sum P**2``).
    """
    probs, _ = check_probs(reference_probs, "reference_probs")
    return float(min(1.0, np.dot(probs, probs)))


def pair_agreement_check(
    num_equal_pairs: int,
    num_pairs: int,
    collision_prob: float,
    *,
    false_fail_rate: float,
    false_pass_rate: float = 0.01,
    name: str = "pair_agreement",
) -> CheckResult:
    """Test that paired outputs, which should be independent draws, do not agree too often.

    Parameters
    ----------
    num_equal_pairs : int
        Number of pairs whose two outputs are equal, ``0 <= num_equal_pairs <= num_pairs``.
    num_pairs : int
        Number of independent pairs, >= 1; each pair holds two outputs that must be
        independent draws from the same law (e.g. two rows of a batch with the same
        prompt, or two runs with different seeds).
    collision_prob : float
        Exact agreement probability of two independent draws, ``sum_s P(s)**2`` (see
        :func:`collision_probability`), in [0, 1].
    false_fail_rate : float
        Significance level alpha in (0, 1).
    false_pass_rate : float, default 0.01
        Miss probability beta used to report ``detectable_tv``.
    name : str, default "pair_agreement"
        Name of the check.

    Returns
    -------
    CheckResult
        One-sided (``alternative="greater"``) exact binomial test
        (:func:`binomial_check`). ``detectable_tv`` is the smallest *excess* agreement
        probability detected with power ``1 - false_pass_rate`` (the TV distance between
        the Bernoulli laws of the agreement indicator).

    Raises
    ------
    TypeError
        If the counts are not integers or another argument has the wrong type.
    ValueError
        If ``num_pairs < 1``, ``num_equal_pairs`` outside ``[0, num_pairs]``,
        ``collision_prob`` outside [0, 1], or a rate outside (0, 1).

    Notes
    -----
    Why a separate test: a batch whose rows share random numbers can have every row
    exactly distributed on its own, so per-row goodness-of-fit tests pass, while the rows
    are correlated. Correlated rows make agreement more likely than ``sum_s P(s)**2`` (for
    perfectly shared randomness, agreement is certain) and silently shrink the effective
    sample size of any test that pools rows. Reusing the same uniforms through the same
    sampling map raises the agreement probability, hence the one-sided test; a deliberately
    antithetic coupling could lower it and is not looked for. Pairs must be independent of
    each other.

    References
    ----------
    Leviathan et al., ICML 2023 (arXiv:2211.17192); Chen et al. 2023 (arXiv:2302.01318)
    (batched speculative sampling must use independent randomness per row).
    """
    num_pairs = check_int(num_pairs, "num_pairs", minimum=1)
    num_equal_pairs = check_int(num_equal_pairs, "num_equal_pairs", minimum=0)
    if num_equal_pairs > num_pairs:
        raise ValueError(f"num_equal_pairs must be <= num_pairs={num_pairs}, got {num_equal_pairs}")
    collision_prob = check_real(collision_prob, "collision_prob")
    if not 0.0 <= collision_prob <= 1.0:
        raise ValueError(f"collision_prob must be in [0, 1], got {collision_prob!r}")
    alpha, beta = check_rates(false_fail_rate, false_pass_rate)
    name = check_name(name)
    result = binomial_check(
        num_equal_pairs,
        num_pairs,
        collision_prob,
        false_fail_rate=alpha,
        false_pass_rate=beta,
        alternative="greater",
        name=name,
    )
    return CheckResult(
        name=result.name,
        method=result.method,
        statistic=result.statistic,
        pvalue=result.pvalue,
        dof=None,
        n=num_pairs,
        false_fail_rate=alpha,
        detectable_tv=result.detectable_tv,
        false_pass_rate=beta,
        passed=result.passed,
        worst=(("equal pairs", float(num_equal_pairs), num_pairs * collision_prob),),
        details={
            "num_equal_pairs": num_equal_pairs,
            "collision_prob": collision_prob,
            "detectable_tv_of": "excess agreement probability",
        },
        description=(
            f"One-sided exact binomial test: {num_equal_pairs} of {num_pairs} pairs agree, "
            f"independent draws agree with probability {collision_prob:.6g}. Statistic: "
            "agreement frequency; detectable TV: excess agreement probability."
        ),
    )


def pair_agreement_vs_control_check(
    suspect_equal: int,
    suspect_pairs: int,
    control_equal: int,
    control_pairs: int,
    *,
    false_fail_rate: float,
    false_pass_rate: float = 0.01,
    name: str = "pair_agreement_vs_control",
) -> CheckResult:
    """Test that suspect pairs agree no more often than control pairs of the same law.

    Unlike :func:`pair_agreement_check`, this needs no exact collision probability: the
    control pairs (outputs that cannot share randomness under the suspected bug, e.g. two
    rows in two different calls at different batch positions) estimate it. A sampler whose
    law is wrong but whose draws are independent therefore passes this check: it isolates
    shared randomness from bias, which other checks catch.

    Parameters
    ----------
    suspect_equal, suspect_pairs : int
        Equal pairs and pairs among the suspect pairs (e.g. two rows of one call).
    control_equal, control_pairs : int
        The same for control pairs. All outputs of all pairs must be distinct draws; under
        the null every pair agrees independently with one common probability.
    false_fail_rate : float
        Significance level in (0, 1).
    false_pass_rate : float, default 0.01
        Miss probability used to report ``detectable_tv``.
    name : str

    Returns
    -------
    CheckResult
        One-sided Fisher exact test (``scipy.stats.fisher_exact``, alternative
        ``"greater"``) on the 2x2 table (suspect/control x equal/not), method ``"exact"``
        (conditional on the total number of agreements, so conservative);
        ``details["pvalue_lower"]`` is ``P(X > x)`` of that conditional law, the p-value
        without the observed atom (for
        :func:`~specexact.exactness.combination.randomized_pvalue`).
        ``detectable_tv`` is the smallest excess agreement probability of suspect pairs
        detected with power ``1 - false_pass_rate``, by the normal approximation of the
        two-proportion test at the pooled agreement rate (an approximation; stated in
        ``details``).

    Raises
    ------
    TypeError, ValueError
        On non-integer or inconsistent counts, or rates outside (0, 1).

    References
    ----------
    R. A. Fisher, *Statistical Methods for Research Workers*, 1934 (exact test of 2x2 tables).
    """
    from scipy import stats

    suspect_pairs = check_int(suspect_pairs, "suspect_pairs", minimum=1)
    control_pairs = check_int(control_pairs, "control_pairs", minimum=1)
    suspect_equal = check_int(suspect_equal, "suspect_equal", minimum=0)
    control_equal = check_int(control_equal, "control_equal", minimum=0)
    if suspect_equal > suspect_pairs:
        raise ValueError(f"suspect_equal must be <= suspect_pairs={suspect_pairs}, got {suspect_equal}")
    if control_equal > control_pairs:
        raise ValueError(f"control_equal must be <= control_pairs={control_pairs}, got {control_equal}")
    alpha, beta = check_rates(false_fail_rate, false_pass_rate)
    name = check_name(name)
    table = [[suspect_equal, suspect_pairs - suspect_equal], [control_equal, control_pairs - control_equal]]
    res = stats.fisher_exact(table, alternative="greater")
    pvalue = float(min(1.0, max(0.0, res.pvalue)))
    # P(X > x) of the conditional (hypergeometric) law of the suspect agreements: the
    # p-value without the observed atom, for a randomised p-value (combination module).
    total_equal = suspect_equal + control_equal
    lower = float(stats.hypergeom.sf(suspect_equal, suspect_pairs + control_pairs, total_equal, suspect_pairs))
    lower = min(max(lower, 0.0), pvalue)
    pooled = (suspect_equal + control_equal) / (suspect_pairs + control_pairs)
    z = stats.norm.isf(alpha) + stats.norm.isf(beta)
    detectable = float(min(1.0, z * np.sqrt(max(pooled * (1 - pooled), 1e-300)
                                            * (1 / suspect_pairs + 1 / control_pairs))))
    if pooled in (0.0, 1.0):
        detectable = float("inf")  # every pair equal (or none): the check has no power
    rate_s, rate_c = suspect_equal / suspect_pairs, control_equal / control_pairs
    return CheckResult(
        name=name,
        method="exact",
        statistic=float(rate_s - rate_c),
        pvalue=pvalue,
        dof=None,
        n=suspect_pairs,
        false_fail_rate=alpha,
        detectable_tv=detectable,
        false_pass_rate=beta,
        passed=pvalue > alpha,
        worst=(("suspect agreement", rate_s, rate_c),),
        details={
            "suspect_equal": suspect_equal, "suspect_pairs": suspect_pairs,
            "control_equal": control_equal, "control_pairs": control_pairs,
            "pvalue_lower": lower,
            "detectable_tv_of": "excess agreement probability (normal approximation)",
        },
        description=(
            f"One-sided Fisher exact test: suspect pairs agree {rate_s:.4g}, control pairs "
            f"{rate_c:.4g}. Statistic: difference of agreement frequencies."
        ),
    )
