"""Certified upper bounds on the total variation distance from the counts a check used.

A check that passes says "no evidence of a difference"; these bounds say how close the
sampler's law is: ``TV(law of the sampler, reference) <= upper`` with probability at least
``1 - delta``, computed from the same counts.

Method
------
Let ``p`` be the sampler's (unknown) law over a partition of the outcomes into ``K`` *cells*,
``p_hat`` the empirical law of ``n`` i.i.d. samples and ``p0`` the reference. By the triangle
inequality ``TV(p, p0) <= TV(p_hat, p0) + TV(p_hat, p)``; the first term is observed, the
second is bounded with probability ``>= 1 - delta`` by ``eps / 2`` where ``eps`` bounds
``||p_hat - p||_1``. Two bounds on ``eps``, both valid for every ``p`` on ``K`` cells:

- *McDiarmid*: ``||p_hat - p||_1`` changes by at most ``2 / n`` when one sample changes, so it
  exceeds its mean by ``t`` with probability ``<= exp(-n t^2 / 2)``; its mean is at most
  ``sum_j sqrt(p_j (1 - p_j) / n) <= sqrt((K - 1) / n)`` (Jensen, then Cauchy-Schwarz). So
  ``eps = sqrt((K - 1) / n) + sqrt(2 ln(1 / delta) / n)``.
- *Weissman et al.* (2003, "Inequalities for the L1 deviation of the empirical
  distribution", HP Labs HPL-2003-97, Thm 2.1 with ``phi >= 2``):
  ``P(||p_hat - p||_1 >= eps) <= (2^K - 2) exp(-n eps^2 / 2)``, so
  ``eps = sqrt(2 (ln(2^K - 2) + ln(1 / delta)) / n)``.

Both thresholds depend only on ``(n, K, delta)``, so their minimum is valid at the same
``delta`` (the event "the deviation exceeds the smaller one" is the larger of the two events).

Assumptions and scope
---------------------
- The ``n`` samples are i.i.d. from the sampler's law (one per row; rows of one call that
  share randomness break this, which the independence checks test separately).
- The partition into cells must not depend on the counts: each outcome of positive reference
  probability its own cell (the *full* law; ``bins=None``), or the check's bins, which depend
  only on the reference law and ``n`` (:func:`~.goodness_of_fit.binned_law`; the bound is then
  on the *binned* law, which can be closer to the reference than the full law), or for two
  samples a partition fixed in advance (:func:`hash_bins` of outcome codes). Every outcome
  the reference gives probability 0 - observed or not, listed or not - falls into one extra
  cell of reference mass 0, so unseen outcomes are accounted for: the full-law bound covers
  mass the sampler might put anywhere outside the reference support.
- The guarantee is unconditional: ``P(TV > upper) <= delta``; reporting the bound only for
  passing checks keeps ``P(pass and TV > upper) <= delta``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from ._validate import check_counts, check_int, check_probs, check_rate

__all__ = ["L1Deviation", "TVBound", "l1_deviation_bound", "certified_tv_bound",
           "certified_tv_bound_two_sample", "hash_bins", "cell_counts"]


@dataclass(frozen=True)
class L1Deviation:
    """A bound ``eps`` with ``P(||p_hat - p||_1 > eps) <= delta`` for ``n`` samples on ``K`` cells.

    Attributes
    ----------
    eps : float
        ``min(mcdiarmid, weissman)``.
    mcdiarmid, weissman : float
        The two bounds (module docstring).
    method : {"mcdiarmid", "weissman"}
        The one that gave ``eps``.
    """

    eps: float
    mcdiarmid: float
    weissman: float
    method: str


def l1_deviation_bound(n: int, num_cells: int, delta: float) -> L1Deviation:
    """``eps`` such that ``||p_hat - p||_1 <= eps`` with probability ``>= 1 - delta``.

    Parameters
    ----------
    n : int
        Samples, >= 1.
    num_cells : int
        ``K >= 1`` cells of the law (with one cell ``p_hat = p``: ``eps = 0``).
    delta : float
        In (0, 1).

    Raises
    ------
    TypeError, ValueError
        On a non-integer or too small ``n`` / ``num_cells`` or ``delta`` outside (0, 1).
    """
    n = check_int(n, "n", minimum=1)
    K = check_int(num_cells, "num_cells", minimum=1)
    delta = check_rate(delta, "delta")
    if K == 1:
        return L1Deviation(0.0, 0.0, 0.0, "weissman")
    log_inv = math.log(1.0 / delta)
    mcd = math.sqrt((K - 1) / n) + math.sqrt(2.0 * log_inv / n)
    log_count = K * math.log(2.0) + math.log1p(-2.0 ** (1 - K))  # ln(2^K - 2), stable
    weiss = math.sqrt(2.0 * (log_count + log_inv) / n)
    return L1Deviation(min(mcd, weiss), mcd, weiss, "mcdiarmid" if mcd <= weiss else "weissman")


@dataclass(frozen=True)
class TVBound:
    """A certified bound ``TV(sampler, reference) <= upper`` with probability ``>= 1 - delta``.

    Attributes
    ----------
    upper : float
        ``min(1, observed_tv + deviation)``.
    observed_tv : float
        TV between the empirical law(s) and the reference over the cells.
    deviation : float
        Half the L1 deviation bound (for two samples: the sum of both samples').
    delta : float
    n : int
        Samples (for two samples: ``n_a + n_b``).
    num_cells : int
        Cells of the partition, including the cell of zero reference mass.
    method : str
        ``"mcdiarmid"`` / ``"weissman"`` (per sample for two samples, joined by ``"+"``).
    law : {"full", "binned"}
        Whether the bound is on the full law or on the law binned by the partition.
    description : str
    """

    upper: float
    observed_tv: float
    deviation: float
    delta: float
    n: int
    num_cells: int
    method: str
    law: str
    description: str = ""

    def to_dict(self) -> dict:
        """JSON-ready dict of the fields."""
        return asdict(self)


def _cells(bins, size: int, probs: np.ndarray) -> tuple[np.ndarray, int, str]:
    """Cell index per outcome (the last cell: reference mass 0) and the number of cells."""
    if bins is None:
        positive = probs > 0
        cells = np.full(size, -1, dtype=np.int64)
        cells[positive] = np.arange(int(positive.sum()))
        num = int(positive.sum())
        law = "full"
    else:
        cells = np.asarray(bins)
        if cells.shape != (size,) or not np.issubdtype(cells.dtype, np.integer):
            raise ValueError(f"bins must be an integer array of shape ({size},), got {cells.dtype} {cells.shape}")
        if cells.size and int(cells.min()) < -1:
            raise ValueError(f"bins must be >= -1 (-1: the zero-probability cell), got {int(cells.min())}")
        if np.any((cells < 0) & (probs > 0)):
            raise ValueError("bins puts an outcome of positive reference probability in the -1 cell")
        num = int(cells.max()) + 1 if cells.size else 0
        cells = cells.astype(np.int64)
        law = "binned"
    zero_cell = num
    return np.where(cells < 0, zero_cell, cells), num + 1, law


def cell_counts(counts, reference_probs, *, bins=None, outside_count: int = 0):
    """Counts and reference masses per cell (the last cell holds the reference's zeros and
    the ``outside_count`` observations that are not among the listed outcomes).

    Returns
    -------
    (observed [K] int64, reference [K] float64, law str)
    """
    counts = check_counts(counts, "counts")
    probs, _ = check_probs(reference_probs, "reference_probs")
    if counts.shape != probs.shape:
        raise ValueError(f"counts and reference_probs must have one shape, got {counts.shape} and {probs.shape}")
    outside = check_int(outside_count, "outside_count", minimum=0)
    cells, K, law = _cells(bins, probs.size, probs)
    observed = np.bincount(cells, weights=counts, minlength=K).astype(np.int64)
    observed[K - 1] += outside
    reference = np.bincount(cells, weights=probs, minlength=K)
    return observed, reference / reference.sum(), law


def certified_tv_bound(counts, reference_probs, *, delta: float, bins=None, outside_count: int = 0) -> TVBound:
    """Certified ``TV(sampler, reference) <= upper`` from counts against an exact law.

    Parameters
    ----------
    counts : array_like of int, shape (M,)
        Samples per listed outcome (e.g. :func:`~.enumeration.count_sequences`).
    reference_probs : array_like of float, shape (M,)
        The exact reference law of the listed outcomes.
    delta : float
        The bound fails with probability at most ``delta``.
    bins : array_like of int, shape (M,), optional
        A partition fixed without the counts (``-1`` for zero-probability outcomes), e.g. the
        check's :func:`~.goodness_of_fit.binned_law`; default: the full law.
    outside_count : int
        Samples that fell on outcomes not listed (all of reference probability 0).

    Returns
    -------
    TVBound

    Raises
    ------
    TypeError, ValueError
        On malformed counts / laws / bins, or ``delta`` outside (0, 1).
    """
    observed, reference, law = cell_counts(counts, reference_probs, bins=bins, outside_count=outside_count)
    n = int(observed.sum())
    if n < 1:
        raise ValueError("counts must hold at least one sample")
    dev = l1_deviation_bound(n, observed.size, delta)
    tv_obs = 0.5 * float(np.abs(observed / n - reference).sum())
    upper = min(1.0, tv_obs + dev.eps / 2)
    return TVBound(upper=upper, observed_tv=tv_obs, deviation=dev.eps / 2, delta=float(delta), n=n,
                   num_cells=int(observed.size), method=dev.method, law=law,
                   description=(f"TV of the {law} law <= {upper:.4g} with probability >= 1 - {delta:g}: "
                                f"observed {tv_obs:.4g} + deviation {dev.eps / 2:.4g} ({dev.method}, "
                                f"n={n}, {observed.size} cells)"))


def hash_bins(codes, num_bins: int) -> np.ndarray:
    """A partition of outcome codes into ``num_bins`` bins fixed in advance (a multiplicative
    hash of each int64 code), for two-sample bounds over outcome spaces too large to list.

    Shape: ``codes [M] -> bins [M]`` (int64 in ``[0, num_bins)``).
    """
    num_bins = check_int(num_bins, "num_bins", minimum=1)
    c = np.asarray(codes).astype(np.uint64)
    mixed = (c * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(17)
    return (mixed % np.uint64(num_bins)).astype(np.int64)


def certified_tv_bound_two_sample(counts_a, counts_b, *, delta: float, bins) -> TVBound:
    """Certified ``TV(law a, law b) <= upper`` of the binned laws from two samples.

    ``TV(a, b) <= TV(a_hat, b_hat) + TV(a_hat, a) + TV(b_hat, b)``, each deviation bounded at
    ``delta / 2`` (:func:`l1_deviation_bound`).

    Parameters
    ----------
    counts_a, counts_b : array_like of int, shape (M,)
        Counts of the two samples over one outcome list.
    delta : float
    bins : array_like of int, shape (M,)
        A partition into ``[0, K)`` fixed without the counts (e.g. :func:`hash_bins` of the
        outcome codes): a data-dependent binning (such as the homogeneity test's pooled
        one) would void the bound.

    Returns
    -------
    TVBound
        ``law="binned"``, ``n = n_a + n_b``.
    """
    a = check_counts(counts_a, "counts_a")
    b = check_counts(counts_b, "counts_b")
    if a.shape != b.shape:
        raise ValueError(f"counts_a and counts_b must have one shape, got {a.shape} and {b.shape}")
    delta = check_rate(delta, "delta")
    cells = np.asarray(bins)
    if cells.shape != a.shape or not np.issubdtype(cells.dtype, np.integer) or (cells.size and cells.min() < 0):
        raise ValueError(f"bins must be a non-negative integer array of shape {a.shape}")
    K = int(cells.max()) + 1
    ca = np.bincount(cells, weights=a, minlength=K)
    cb = np.bincount(cells, weights=b, minlength=K)
    na, nb = int(ca.sum()), int(cb.sum())
    if na < 1 or nb < 1:
        raise ValueError("both samples must hold at least one count")
    da, db = l1_deviation_bound(na, K, delta / 2), l1_deviation_bound(nb, K, delta / 2)
    tv_obs = 0.5 * float(np.abs(ca / na - cb / nb).sum())
    deviation = (da.eps + db.eps) / 2
    upper = min(1.0, tv_obs + deviation)
    return TVBound(upper=upper, observed_tv=tv_obs, deviation=deviation, delta=float(delta), n=na + nb,
                   num_cells=K, method=f"{da.method}+{db.method}", law="binned",
                   description=(f"TV of the binned laws <= {upper:.4g} with probability >= 1 - {delta:g}: "
                                f"observed {tv_obs:.4g} + deviations {da.eps / 2:.4g} + {db.eps / 2:.4g} "
                                f"(n_a={na}, n_b={nb}, {K} cells)"))
