"""Goodness of fit of observed outcome counts to an exact reference law (Pearson)."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from ._validate import (
    check_counts,
    check_int,
    check_labels,
    check_name,
    check_positive_finite,
    check_probs,
    check_rates,
    check_seed,
)
from .power import min_detectable_tv_chisquare
from .results import MAX_WORST, CheckResult
from .tv_bounds import certified_tv_bound

#: The full law is certified when it has at most ``n / FULL_LAW_SAMPLES_PER_CELL`` outcomes.
FULL_LAW_SAMPLES_PER_CELL = 100
#: Cells of the coarse partition certified beside the check's own bins (each holds >= 1/32
#: of the reference mass): few cells, so small TVs can be certified (the deviation term of
#: the bound grows like sqrt(cells / n)).
CERTIFIED_COARSE_BINS = 32

CERTIFIED_SEMANTICS = (
    "certified_tv.upper bounds the TV between the sampler's law on these cells and the reference's: "
    "if that TV were larger, this check would pass with this bound with probability at most delta "
    "(= the check's false-fail rate); i.i.d. samples; cells fixed by the reference law and n only")
"""What ``details["certified_tv"]`` means (see :func:`certificates`)."""

#: Largest number of Monte Carlo replicates drawn at once (times the number of bins).
_MONTE_CARLO_CELLS_PER_BATCH = 1 << 22


def binned_law(reference_probs, *, n: int, min_expected: float) -> np.ndarray:
    """Group outcomes into bins with at least ``min_expected`` expected counts each.

    Parameters
    ----------
    reference_probs : array_like of float, shape (M,)
        Exact law of the outcomes: entries >= 0 summing to 1 (relative tolerance 1e-9;
        smaller drift is renormalised).
    n : int
        Number of samples the expected counts refer to, >= 1.
    min_expected : float
        Smallest expected count ``n * (bin probability)`` a bin may have, > 0.

    Returns
    -------
    numpy.ndarray of int64, shape (M,)
        Bin index of every outcome, ``-1`` for outcomes of reference probability 0 (they
        are checked exactly instead). Bins are numbered ``0 .. num_bins - 1`` in order of
        decreasing probability of their outcomes.

    Raises
    ------
    TypeError
        If ``reference_probs`` is not a real array or ``n`` / ``min_expected`` have the
        wrong type.
    ValueError
        If ``reference_probs`` is not a probability vector or ``n < 1`` or
        ``min_expected`` is not a finite number > 0.

    Notes
    -----
    Outcomes are sorted by reference probability, largest first (ties in index order),
    and consecutive outcomes are grouped greedily: a bin closes as soon as its expected
    count reaches ``min_expected``. A leftover tail below ``min_expected`` is merged into
    the last bin; if even the whole support is below ``min_expected`` there is one bin.
    The binning depends on the reference law and ``n`` only, never on the observed
    counts, so the binned Pearson statistic keeps its null law. Keeping tens of expected
    counts per bin keeps the chi-square approximation accurate at small significance
    levels (Cochran's rule, made stricter for alpha far below 1e-3).

    References
    ----------
    W. G. Cochran, "Some methods for strengthening the common chi-square tests",
    Biometrics 10 (1954) 417-451.
    """
    probs, _ = check_probs(reference_probs, "reference_probs")
    n = check_int(n, "n", minimum=1)
    min_expected = check_positive_finite(min_expected, "min_expected")
    return _binned_law(probs, n, min_expected)


def _binned_law(probs: np.ndarray, n: int, min_expected: float) -> np.ndarray:
    order = np.argsort(-probs, kind="stable")
    sorted_probs = probs[order]
    support = int(np.count_nonzero(sorted_probs > 0.0))
    threshold = min_expected / n
    sorted_bins = np.full(probs.size, -1, dtype=np.int64)
    # Outcomes heavy enough on their own form singleton bins (a sorted prefix).
    heavy = int(np.count_nonzero(sorted_probs[:support] >= threshold))
    sorted_bins[:heavy] = np.arange(heavy)
    num_bins = heavy
    cumulative = np.cumsum(sorted_probs[:support])
    start = heavy
    base = cumulative[heavy - 1] if heavy else 0.0
    while start < support:
        end = int(np.searchsorted(cumulative, base + threshold, side="left"))
        end = max(end, start)
        # Guard against round-off in the cumulative sum: sum the bin directly.
        while end < support and sorted_probs[start : end + 1].sum() < threshold:
            end += 1
        if end >= support:
            break
        sorted_bins[start : end + 1] = num_bins
        num_bins += 1
        base = cumulative[end]
        start = end + 1
    if start < support:  # leftover tail below min_expected
        sorted_bins[start:support] = max(num_bins - 1, 0)
        num_bins = max(num_bins, 1)
    bins = np.empty_like(sorted_bins)
    bins[order] = sorted_bins
    return bins


def support_violation(counts, probs, outcome_labels, *, details: dict, common: dict) -> CheckResult | None:
    """The exact support check shared by the goodness-of-fit checks.

    Returns a failing :class:`CheckResult` (method ``"exact"``, p-value 0) when any sample
    fell on an outcome of reference probability 0, else None. ``details`` gains
    ``support_violations``; ``common`` holds the fields every result of the caller shares
    (name, n, rates, detectable_tv).
    """
    violating = np.flatnonzero((probs == 0.0) & (counts > 0))
    if not violating.size:
        return None
    num_violations = int(counts[violating].sum())
    top = violating[np.argsort(-counts[violating], kind="stable")][:MAX_WORST]
    details["support_violations"] = num_violations
    return CheckResult(
        method="exact",
        statistic=float(num_violations),
        pvalue=0.0,
        dof=None,
        passed=False,
        worst=tuple((outcome_labels[i], float(counts[i]), 0.0) for i in top),
        details=details,
        description=(
            f"{num_violations} of {common['n']} samples fell on {violating.size} outcome(s) of "
            "reference probability 0; a correct sampler never does (exact failure). "
            "Statistic: number of such samples."
        ),
        **common,
    )


def certificates(counts: np.ndarray, probs: np.ndarray, bins: np.ndarray, num_bins: int, *,
                 delta: float) -> dict:
    """Certified TV upper bounds from the counts of a passing goodness-of-fit check.

    Shapes: ``counts [M]`` int, ``probs [M]`` float64, ``bins [M]`` (the check's
    :func:`binned_law`). Returns ``details`` entries:

    - ``certified_tv``: :func:`~.tv_bounds.certified_tv_bound` at ``delta`` on the *full* law
      (every outcome of positive reference probability its own cell) when it has at most
      ``n / FULL_LAW_SAMPLES_PER_CELL`` outcomes, else on the check's bins (the *binned* law);
    - ``certified_tv_coarse`` (when those cells are more than :data:`CERTIFIED_COARSE_BINS`):
      the same bound on a partition of at most 32 bins of >= 1/32 reference mass each, which
      certifies smaller TVs of a coarser law.

    Each dict is :meth:`~.tv_bounds.TVBound.to_dict` plus ``partition`` (in words) and
    ``semantics`` (:data:`CERTIFIED_SEMANTICS`). Every partition depends on the reference law
    and ``n`` only, never on the counts, as the bound requires; each bound holds at ``delta``
    on its own.
    """
    n = int(counts.sum())
    support = int(np.count_nonzero(probs > 0))
    if support * FULL_LAW_SAMPLES_PER_CELL <= n:
        main, partition, cells = certified_tv_bound(counts, probs, delta=delta), "every outcome", support
    else:
        main = certified_tv_bound(counts, probs, delta=delta, bins=bins)
        partition, cells = f"the check's {num_bins} bins", num_bins
    out = {"certified_tv": {**main.to_dict(), "partition": partition, "semantics": CERTIFIED_SEMANTICS}}
    if cells > CERTIFIED_COARSE_BINS:
        coarse = certified_tv_bound(counts, probs, delta=delta,
                                    bins=_binned_law(probs, n, n / CERTIFIED_COARSE_BINS))
        out["certified_tv_coarse"] = {**coarse.to_dict(), "semantics": CERTIFIED_SEMANTICS,
                                      "partition": f"<= {CERTIFIED_COARSE_BINS} bins of >= 1/{CERTIFIED_COARSE_BINS} "
                                                   "reference mass each"}
    return out


def _pearson_statistic(counts: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Pearson statistic along the last axis (vectorised for Monte Carlo replicates)."""
    return np.sum((counts - expected) ** 2 / expected, axis=-1)


def _bin_labels(labels: list[str], bins: np.ndarray, probs: np.ndarray, num_bins: int) -> list[str]:
    """Label of each bin: its most probable outcome's label, plus how many others."""
    order = np.argsort(-probs, kind="stable")
    sorted_bins = bins[order]
    keep = sorted_bins >= 0
    present, first_position = np.unique(sorted_bins[keep], return_index=True)
    first = np.empty(num_bins, dtype=np.int64)
    first[present] = order[keep][first_position]
    sizes = np.bincount(bins[bins >= 0], minlength=num_bins)
    return [
        labels[first[b]] if sizes[b] == 1 else f"{labels[first[b]]} (+{sizes[b] - 1} more)"
        for b in range(num_bins)
    ]


def _worst_bins(contributions, bin_labels, observed, expected):
    top = np.argsort(-contributions, kind="stable")[:MAX_WORST]
    return tuple((bin_labels[b], float(observed[b]), float(expected[b])) for b in top)


def chisquare_gof(
    observed_counts,
    reference_probs,
    *,
    false_fail_rate: float,
    false_pass_rate: float = 0.01,
    min_expected: float = 50.0,
    labels=None,
    name: str = "goodness_of_fit",
    monte_carlo_replicates: int = 0,
    seed: int | None = None,
) -> CheckResult:
    """Test observed outcome counts against an exact reference law.

    Parameters
    ----------
    observed_counts : array_like of int, shape (M,)
        Number of samples that landed on each outcome (non-negative, integer dtype, total
        ``n >= 1``).
    reference_probs : array_like of float, shape (M,)
        The exact law the sampler must follow: entries >= 0 summing to 1 (relative
        tolerance 1e-9; tinier drift is renormalised).
    false_fail_rate : float
        Significance level alpha in (0, 1): probability that a correct sampler fails.
    false_pass_rate : float, default 0.01
        Miss probability beta used to report ``detectable_tv``.
    min_expected : float, default 50.0
        Smallest expected count per bin (see :func:`binned_law`).
    labels : sequence of str, shape (M,), optional
        Outcome names for ``worst``; default: outcome indices.
    name : str, default "goodness_of_fit"
        Name of the check.
    monte_carlo_replicates : int, default 0
        If > 0, compute the p-value from this many exact multinomial null replicates of
        the binned counts instead of the chi-square limit. Must be >= ``1 /
        false_fail_rate - 1`` so that the check can fail at all.
    seed : int, optional
        Seed of the :class:`numpy.random.Generator` for the Monte Carlo replicates.

    Returns
    -------
    CheckResult
        ``method`` is ``"exact"`` for a support violation or a single bin,
        ``"asymptotic"`` for the chi-square p-value and ``"monte_carlo"`` for the
        simulated one. ``worst`` holds the five bins with the largest
        ``(O - E)**2 / E`` (observed and expected counts), each labelled by its most
        probable outcome and the number of further outcomes in it; on a support
        violation it holds the offending outcomes with their counts and expectation 0.
        ``detectable_tv`` is the TV distance between the *binned* laws detected with
        power ``1 - false_pass_rate`` (``math.inf`` with fewer than two bins). A passing
        check's ``details`` also hold ``certified_tv`` (and ``certified_tv_coarse``): a
        certified upper bound on the TV from the reference at ``delta = false_fail_rate``
        (:func:`certificates`).

    Raises
    ------
    TypeError
        If ``observed_counts`` is not an integer array, ``reference_probs`` not a real
        array, or an option has the wrong type.
    ValueError
        If the shapes differ, counts are negative or all zero, ``reference_probs`` is not
        a probability vector, a rate is outside (0, 1), ``min_expected <= 0`` or
        ``monte_carlo_replicates`` is too small to reach ``false_fail_rate``.

    Notes
    -----
    Procedure: (a) any count on an outcome of reference probability 0 fails at once with
    p-value 0 (exact: a correct sampler never produces it); (b) outcomes are binned by
    :func:`binned_law` so that every bin expects at least ``min_expected`` counts;
    (c) Pearson's statistic on the binned counts is referred to chi-square with
    ``num_bins - 1`` degrees of freedom (:func:`scipy.stats.chisquare`) or, with
    ``monte_carlo_replicates = R > 0``, to ``R`` multinomial replicates
    (:func:`scipy.stats.monte_carlo_test`, p-value ``(1 + #{T_r >= T_obs}) / (1 + R)``,
    valid at every ``n``). With fewer than two bins the test has no power and passes
    with p-value 1. The chi-square limit over-rejects at tiny alpha when bins are
    small; with tens of expected counts per bin the excess stays below about 1.5x at
    alpha = 1e-5 (measured), and the Monte Carlo p-value removes it.

    References
    ----------
    K. Pearson, Philosophical Magazine 50 (1900) 157-175. Cochran (1954), Biometrics
    10:417-451. A. C. A. Hope, "A simplified Monte Carlo significance test procedure",
    JRSS-B 30 (1968) 582-598.
    """
    counts = check_counts(observed_counts, "observed_counts")
    probs, renormalised = check_probs(reference_probs, "reference_probs")
    if counts.shape != probs.shape:
        raise ValueError(
            f"observed_counts and reference_probs must have the same shape, got "
            f"{counts.shape} and {probs.shape}"
        )
    alpha, beta = check_rates(false_fail_rate, false_pass_rate)
    min_expected = check_positive_finite(min_expected, "min_expected")
    outcome_labels = check_labels(labels, probs.size)
    name = check_name(name)
    replicates = check_int(monte_carlo_replicates, "monte_carlo_replicates", minimum=0)
    seed = check_seed(seed, allow_none=True)
    if replicates and 1.0 / (replicates + 1) > alpha:
        raise ValueError(
            "monte_carlo_replicates must be >= 1/false_fail_rate - 1 "
            f"(= {math.ceil(1.0 / alpha - 1)}) for the check to be able to fail, "
            f"got {replicates}"
        )
    n = int(counts.sum())
    if n < 1:
        raise ValueError("observed_counts must hold at least one observation, got total 0")

    bins = _binned_law(probs, n, min_expected)
    num_bins = int(bins.max()) + 1 if (bins >= 0).any() else 0
    in_support = bins >= 0
    binned_counts = np.bincount(bins[in_support], weights=counts[in_support], minlength=num_bins)
    binned_probs = np.bincount(bins[in_support], weights=probs[in_support], minlength=num_bins)
    binned_probs /= binned_probs.sum()
    expected = n * binned_probs
    detectable = (
        min_detectable_tv_chisquare(
            n, num_bins=num_bins, false_fail_rate=alpha, false_pass_rate=beta
        )
        if num_bins >= 2
        else math.inf
    )
    details = {
        "num_outcomes": int(probs.size),
        "num_zero_prob_outcomes": int(np.count_nonzero(probs == 0.0)),
        "num_bins": num_bins,
        "min_expected": min_expected,
        "smallest_bin_expected": float(expected.min()) if num_bins else 0.0,
        "renormalised": bool(renormalised),
        "monte_carlo_replicates": replicates,
        "seed": seed,
        "detectable_tv_of": "binned law",
    }
    common = dict(
        name=name,
        n=n,
        false_fail_rate=alpha,
        false_pass_rate=beta,
        detectable_tv=detectable,
    )

    violation = support_violation(counts, probs, outcome_labels, details=details, common=common)
    if violation is not None:
        return violation
    details["support_violations"] = 0

    if num_bins < 2:
        return CheckResult(
            method="exact",
            statistic=0.0,
            pvalue=1.0,
            dof=0,
            passed=True,
            worst=(),
            details={**details, **certificates(counts, probs, bins, num_bins, delta=alpha)},
            description=(
                f"Support check passed; all outcomes fit in {num_bins} bin(s) of >= "
                f"{min_expected:g} expected counts at n={n}, so the chi-square test has no "
                "power (pass with p-value 1, detectable TV inf). Draw more samples."
            ),
            **common,
        )

    bin_labels = _bin_labels(outcome_labels, bins, probs, num_bins)
    contributions = (binned_counts - expected) ** 2 / expected
    worst = _worst_bins(contributions, bin_labels, binned_counts, expected)
    dof = num_bins - 1
    if replicates:
        rng = np.random.default_rng(seed)
        batch = max(1, min(replicates, _MONTE_CARLO_CELLS_PER_BATCH // num_bins))
        result = stats.monte_carlo_test(
            binned_counts,
            lambda size: rng.multinomial(n, binned_probs, size=size[0]),
            lambda x, axis=-1: _pearson_statistic(np.moveaxis(x, axis, -1), expected),
            vectorized=True,
            n_resamples=replicates,
            batch=batch,
            alternative="greater",
        )
        statistic, pvalue, method = float(result.statistic), float(result.pvalue), "monte_carlo"
        how = f"{replicates} exact multinomial null replicates (seed {seed})"
    else:
        result = stats.chisquare(binned_counts, expected)
        statistic, pvalue, method = float(result.statistic), float(result.pvalue), "asymptotic"
        how = f"the chi-square law with {dof} degrees of freedom"
    if pvalue > alpha:  # a passing check also says how close the law is
        details.update(certificates(counts, probs, bins, num_bins, delta=alpha))
    return CheckResult(
        method=method,
        statistic=statistic,
        pvalue=pvalue,
        dof=dof,
        passed=pvalue > alpha,
        worst=worst,
        details=details,
        description=(
            f"Pearson chi-square of {n} samples against the reference law over {num_bins} "
            f"bins (>= {min_expected:g} expected counts each, outcomes sorted by reference "
            f"probability), p-value from {how}; zero-probability outcomes checked exactly."
        ),
        **common,
    )
