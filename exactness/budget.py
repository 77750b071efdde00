"""Sharing one false-fail rate between many checks (family-wise error control)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from ._validate import check_int, check_rate, check_pvalues


def holm(pvalues, *, total: float) -> np.ndarray:
    """Holm's step-down procedure: which checks fail at family-wise false-fail rate ``total``.

    Parameters
    ----------
    pvalues : array_like of float, shape (m,)
        p-values of the ``m`` checks, in [0, 1].
    total : float
        Family-wise false-fail rate in (0, 1): the probability that any correct check
        fails.

    Returns
    -------
    numpy.ndarray of bool, shape (m,)
        ``True`` where the check is rejected (fails), in the input order.

    Raises
    ------
    TypeError
        If ``pvalues`` is not numeric or ``total`` not a real number.
    ValueError
        If ``pvalues`` is empty, not 1-D or outside [0, 1] (or NaN), or ``total`` is outside
        (0, 1).

    Notes
    -----
    Sort the p-values ascending, ``p_(1) <= ... <= p_(m)``; reject ``p_(1), ..., p_(k)``
    where ``k`` is the largest index with ``p_(i) <= total / (m - i + 1)`` for every
    ``i <= k``. Controls the family-wise error rate under any dependence and rejects
    everything Bonferroni (``p <= total / m``) rejects.

    References
    ----------
    S. Holm, "A simple sequentially rejective multiple test procedure", Scandinavian
    Journal of Statistics 6 (1979) 65-70.
    """
    values = check_pvalues(pvalues)
    total = check_rate(total, "total")
    m = values.size
    order = np.argsort(values, kind="stable")
    thresholds = total / (m - np.arange(m))
    passes = values[order] > thresholds
    num_rejected = int(np.argmax(passes)) if passes.any() else m
    rejected = np.zeros(m, dtype=bool)
    rejected[order[:num_rejected]] = True
    return rejected


def benjamini_hochberg(pvalues) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values, for reading a report (not for verdicts).

    Parameters
    ----------
    pvalues : array_like of float, shape (m,)
        p-values in [0, 1].

    Returns
    -------
    numpy.ndarray of float64, shape (m,)
        Adjusted p-values from :func:`scipy.stats.false_discovery_control` (``method="bh"``):
        rejecting those <= q controls the false discovery rate at q.

    Raises
    ------
    TypeError, ValueError
        If ``pvalues`` is not a 1-D, non-empty array of values in [0, 1].

    Notes
    -----
    The false discovery rate bounds the expected *fraction* of false failures among
    failures, not the probability of any false failure; a suite that must not flake
    should decide with :func:`holm` or :meth:`FalseFailBudget.per_check`. BH is valid
    for independent or positively dependent p-values.

    References
    ----------
    Y. Benjamini and Y. Hochberg, JRSS-B 57 (1995) 289-300.
    """
    values = check_pvalues(pvalues)
    return np.asarray(stats.false_discovery_control(values, method="bh"), dtype=np.float64)


@dataclass(frozen=True)
class FalseFailBudget:
    """A total false-fail rate shared by all checks of a suite.

    Parameters
    ----------
    total : float, default 1e-6
        Probability, in (0, 1), that a correct implementation fails *any* check of the
        suite (family-wise error rate).

    Raises
    ------
    TypeError
        If ``total`` is not a real number.
    ValueError
        If ``total`` is outside (0, 1).

    Notes
    -----
    :meth:`per_check` (Bonferroni) needs the number of checks up front and is valid under
    any dependence; :meth:`holm` decides after all p-values are known and rejects at least
    as much.

    References
    ----------
    C. E. Bonferroni (1936); Holm (1979), Scand. J. Statist. 6:65-70.
    """

    total: float = 1e-6

    def __post_init__(self) -> None:
        object.__setattr__(self, "total", check_rate(self.total, "total"))

    def per_check(self, num_checks: int) -> float:
        """Bonferroni share of the budget for each of ``num_checks`` checks.

        Parameters
        ----------
        num_checks : int
            Number of checks, >= 1.

        Returns
        -------
        float
            ``total / num_checks``: run each check at this false-fail rate.

        Raises
        ------
        TypeError
            If ``num_checks`` is not an integer.
        ValueError
            If ``num_checks < 1``.

        Notes
        -----
        By the union bound the suite's false-fail rate is at most ``total`` under any
        dependence between the checks.

        References
        ----------
        C. E. Bonferroni, "Teoria statistica delle classi e calcolo delle probabilita",
        1936.
        """
        return self.total / check_int(num_checks, "num_checks", minimum=1)

    def holm(self, pvalues) -> np.ndarray:
        """Holm step-down verdicts at this budget; see :func:`holm`.

        Parameters
        ----------
        pvalues : array_like of float, shape (m,)
            p-values of the checks.

        Returns
        -------
        numpy.ndarray of bool, shape (m,)
            ``True`` where the check fails.

        Raises
        ------
        TypeError, ValueError
            As :func:`holm`.

        Notes
        -----
        Family-wise false-fail rate at most ``total`` under any dependence.

        References
        ----------
        Holm (1979), Scand. J. Statist. 6:65-70.
        """
        return holm(pvalues, total=self.total)
