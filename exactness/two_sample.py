"""Two-sample homogeneity: do two samplers produce the same law over the same outcomes?"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from ._validate import check_counts, check_labels, check_name, check_positive_finite, check_rates
from .goodness_of_fit import _bin_labels, _binned_law, _worst_bins
from .power import min_detectable_tv_chisquare
from .results import CheckResult
from .tv_bounds import certified_tv_bound_two_sample, hash_bins

#: Bins of the fixed hash partition the two-sample certified bound uses.
CERTIFIED_HASH_BINS = 32


def chisquare_homogeneity(
    counts_a,
    counts_b,
    *,
    false_fail_rate: float,
    false_pass_rate: float = 0.01,
    min_expected: float = 50.0,
    labels=None,
    name: str = "homogeneity",
    outcome_codes=None,
) -> CheckResult:
    """Test whether two count vectors over the same outcomes come from one law.

    Typical use: speculative-decoding counts (``counts_a``) against naive-sampling counts
    (``counts_b``) when the exact law is not available.

    Parameters
    ----------
    counts_a, counts_b : array_like of int, shape (M,)
        Outcome counts of the two samples (non-negative, integer dtype, each with total
        >= 1), over the same outcome list.
    false_fail_rate : float
        Significance level alpha in (0, 1).
    false_pass_rate : float, default 0.01
        Miss probability beta used to report ``detectable_tv``.
    min_expected : float, default 50.0
        Smallest expected count per bin *in each sample*.
    labels : sequence of str, shape (M,), optional
        Outcome names; default: outcome indices.
    name : str, default "homogeneity"
        Name of the check.
    outcome_codes : array_like of int, shape (M,), optional
        A fixed integer code of each outcome (e.g. :func:`~.enumeration.encode_sequences`),
        for the certified bound's partition; default: the outcome's index, which is fixed
        only if the outcome list itself does not depend on the counts.

    Returns
    -------
    CheckResult
        ``method="asymptotic"`` (chi-square limit with ``num_bins - 1`` degrees of
        freedom), ``n = n_a + n_b``. ``worst`` holds the five bins with the largest
        contribution to the statistic (summed over both samples) as ``(label,
        observed count in sample a, expected count in sample a under homogeneity)``.
        ``detectable_tv`` is the TV distance between the two *binned* laws detected with
        power ``1 - false_pass_rate`` (``math.inf`` with fewer than two bins). A passing
        check's ``details["certified_tv"]`` bounds the TV between the two laws binned by a
        fixed hash of ``outcome_codes`` into :data:`CERTIFIED_HASH_BINS` bins
        (:func:`~.tv_bounds.certified_tv_bound_two_sample` at ``delta = false_fail_rate``; the
        test's own pooled binning depends on the counts and would void the bound).

    Raises
    ------
    TypeError
        If a count vector is not an integer array or an option has the wrong type.
    ValueError
        If the shapes differ, counts are negative, a sample is empty, a rate is outside
        (0, 1) or ``min_expected <= 0``.

    Notes
    -----
    All-zero columns are dropped. The remaining outcomes are sorted by pooled frequency
    and grouped greedily (as in :func:`binned_law`) into bins whose expected count in the
    smaller sample, ``min(n_a, n_b) * pooled frequency``, is at least ``min_expected``.
    The binning depends on the data only through the pooled counts, which are ancillary
    (the null law of the table given its margins does not involve the unknown common
    law), so the test keeps its level. The 2 x num_bins table is tested with
    :func:`scipy.stats.chi2_contingency` (``correction=False``). ``detectable_tv`` uses
    :func:`min_detectable_tv_chisquare` with ``two_sample=True`` and per-sample size
    ``min(n_a, n_b)``, which is conservative for unequal sizes (the effective size
    ``n_a n_b / (n_a + n_b)`` is at least ``min(n_a, n_b) / 2``). A two-sample check needs
    about 4x the total samples of a goodness-of-fit check against the exact law.

    References
    ----------
    Cochran (1954), Biometrics 10:417-451. A. Agresti, *Categorical Data Analysis*, 3rd ed.,
    Wiley, 2013, sec. 3.2 (homogeneity of multinomials).
    """
    a = check_counts(counts_a, "counts_a")
    b = check_counts(counts_b, "counts_b")
    if a.shape != b.shape:
        raise ValueError(
            f"counts_a and counts_b must have the same shape, got {a.shape} and {b.shape}"
        )
    alpha, beta = check_rates(false_fail_rate, false_pass_rate)
    min_expected = check_positive_finite(min_expected, "min_expected")
    outcome_labels = check_labels(labels, a.size)
    name = check_name(name)
    n_a, n_b = int(a.sum()), int(b.sum())
    if n_a < 1:
        raise ValueError("counts_a must hold at least one observation, got total 0")
    if n_b < 1:
        raise ValueError("counts_b must hold at least one observation, got total 0")

    if outcome_codes is None:
        codes = np.arange(a.size, dtype=np.int64)
    else:
        codes = np.asarray(outcome_codes)
        if codes.shape != a.shape or not np.issubdtype(codes.dtype, np.integer):
            raise ValueError(f"outcome_codes must be an integer array of shape {a.shape}, got "
                             f"{codes.dtype} {codes.shape}")
    all_a, all_b = a, b
    keep = (a + b) > 0
    a, b = a[keep], b[keep]
    kept_labels = [label for label, k in zip(outcome_labels, keep) if k]
    pooled = (a + b) / float(n_a + n_b)
    n_small = min(n_a, n_b)
    bins = _binned_law(pooled, n_small, min_expected)
    num_bins = int(bins.max()) + 1
    table = np.vstack(
        [
            np.bincount(bins, weights=a, minlength=num_bins),
            np.bincount(bins, weights=b, minlength=num_bins),
        ]
    )
    detectable = (
        min_detectable_tv_chisquare(
            n_small, num_bins=num_bins, false_fail_rate=alpha, false_pass_rate=beta, two_sample=True
        )
        if num_bins >= 2
        else math.inf
    )
    details = {
        "n_a": n_a,
        "n_b": n_b,
        "num_outcomes": int(keep.size),
        "dropped_zero_columns": int(np.count_nonzero(~keep)),
        "num_bins": num_bins,
        "min_expected": min_expected,
        "detectable_tv_of": "binned laws, per-sample size min(n_a, n_b)",
    }
    common = dict(
        name=name,
        n=n_a + n_b,
        false_fail_rate=alpha,
        false_pass_rate=beta,
        detectable_tv=detectable,
    )
    if num_bins < 2:
        return CheckResult(
            method="exact",
            statistic=0.0,
            pvalue=1.0,
            dof=0,
            passed=True,
            details=details,
            description=(
                f"All outcomes fit in one bin of >= {min_expected:g} expected counts per "
                f"sample (n_a={n_a}, n_b={n_b}); the homogeneity test has no power (pass with "
                "p-value 1, detectable TV inf). Draw more samples."
            ),
            **common,
        )
    result = stats.chi2_contingency(table, correction=False)
    expected = result.expected_freq
    contributions = ((table - expected) ** 2 / expected).sum(axis=0)
    bin_labels = _bin_labels(kept_labels, bins, pooled, num_bins)
    worst = _worst_bins(contributions, bin_labels, table[0], expected[0])
    pvalue = float(result.pvalue)
    if pvalue > alpha:
        bound = certified_tv_bound_two_sample(all_a, all_b, delta=alpha, bins=hash_bins(codes, CERTIFIED_HASH_BINS))
        details["certified_tv"] = {
            **bound.to_dict(),
            "partition": f"a fixed hash of the outcome codes into {CERTIFIED_HASH_BINS} bins",
            "semantics": ("certified_tv.upper bounds the TV between the two samples' laws on these bins: if it "
                          "were larger, this check would pass with this bound with probability at most delta "
                          "(= the check's false-fail rate); i.i.d. samples")}
    return CheckResult(
        method="asymptotic",
        statistic=float(result.statistic),
        pvalue=pvalue,
        dof=int(result.dof),
        passed=pvalue > alpha,
        worst=worst,
        details=details,
        description=(
            f"Pearson chi-square homogeneity of two samples (n_a={n_a}, n_b={n_b}) over "
            f"{num_bins} bins of pooled-frequency-sorted outcomes (>= {min_expected:g} "
            f"expected counts per sample), chi-square law with {num_bins - 1} degrees of "
            "freedom."
        ),
        **common,
    )
