"""Anytime-valid sequential goodness of fit (an e-process; stop whenever you like)."""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from ._validate import check_counts, check_name, check_probs, check_rates
from .results import CheckResult


class SequentialGOF:
    """Anytime-valid test of outcome counts against an exact law, fed in batches.

    Parameters
    ----------
    reference_probs : array_like of float, shape (M,)
        Exact law (>= 0, summing to 1 within relative 1e-9).
    false_fail_rate : float
        Probability alpha in (0, 1) that a correct sampler is *ever* rejected, however
        long the test runs and whenever it is stopped.
    false_pass_rate : float, default 0.01
        Recorded in :meth:`result` only (the e-process has no fixed-n power guarantee).
    name : str, default "sequential_gof"
        Name used by :meth:`result`.

    Raises
    ------
    TypeError
        If ``reference_probs`` is not a real array or another argument has the wrong type.
    ValueError
        If ``reference_probs`` is not a probability vector or a rate is outside (0, 1).

    Notes
    -----
    The e-value after ``n`` samples with counts ``c`` is the likelihood ratio of the
    Krichevsky-Trofimov (KT) sequential plug-in predictor ``(c_s + 1/2) / (t + M/2)``
    against the reference law. The KT predictor's sequential product equals the
    Dirichlet(1/2, ..., 1/2)-multinomial marginal likelihood, so the e-value depends on
    the counts only and batches may arrive in any order::

        log E = lgamma(M/2) - lgamma(n + M/2) + sum_s [lgamma(c_s + 1/2) - lgamma(1/2)]
                - sum_s c_s log P(s)

    ``E`` is a nonnegative martingale with mean 1 under the null, so by Ville's inequality
    ``P(sup_t E_t >= 1/alpha) <= alpha``: rejecting once ``E >= 1/alpha`` (checked after
    each batch) is valid under optional stopping. A sample on a zero-probability outcome
    makes ``E`` infinite (exact rejection). Worst-case cost is a few times the fixed-n
    sample size, and the mixture over all M outcomes costs power for large M; gross bugs
    are rejected early.

    References
    ----------
    R. Krichevsky and V. Trofimov, IEEE Trans. Inf. Theory 27 (1981) 199-207. J. Ville,
    *Etude critique de la notion de collectif*, 1939. M. Lindon and A. Malek, "Anytime-
    valid inference for multinomial count data", NeurIPS 2022. I. Waudby-Smith and
    A. Ramdas, JRSS-B 86 (2024) 1-27.
    """

    def __init__(
        self,
        reference_probs,
        *,
        false_fail_rate: float,
        false_pass_rate: float = 0.01,
        name: str = "sequential_gof",
    ):
        self._probs, _ = check_probs(reference_probs, "reference_probs")
        self._alpha, self._beta = check_rates(false_fail_rate, false_pass_rate)
        self._name = check_name(name)
        with np.errstate(divide="ignore"):
            self._log_probs = np.log(self._probs)
        self._counts = np.zeros(self._probs.size, dtype=np.int64)
        self._log_e_value = 0.0
        self._max_log_e_value = 0.0

    @property
    def counts(self) -> np.ndarray:
        """Accumulated counts, int64 array of shape (M,) (a copy)."""
        return self._counts.copy()

    @property
    def num_samples(self) -> int:
        """Number of samples seen so far."""
        return int(self._counts.sum())

    @property
    def log_e_value(self) -> float:
        """Natural log of the current e-value (``math.inf`` after a support violation)."""
        return self._log_e_value

    @property
    def e_value(self) -> float:
        """Current e-value ``E_n`` (may overflow to ``math.inf``)."""
        return math.exp(self._log_e_value) if self._log_e_value < 700 else math.inf

    @property
    def rejected(self) -> bool:
        """True once the e-value has reached ``1 / false_fail_rate`` (stays True)."""
        return self.pvalue <= self._alpha

    @property
    def pvalue(self) -> float:
        """Anytime-valid p-value ``min(1, 1 / max_t E_t)``."""
        return min(1.0, math.exp(-self._max_log_e_value))

    def update(self, counts) -> bool:
        """Add a batch of counts and return :attr:`rejected`.

        Parameters
        ----------
        counts : array_like of int, shape (M,)
            Counts of the new samples per outcome (non-negative, integer dtype).

        Returns
        -------
        bool
            Whether the test has rejected (now or earlier).

        Raises
        ------
        TypeError
            If ``counts`` is not an integer array.
        ValueError
            If ``counts`` has the wrong shape or negative entries.

        Notes
        -----
        The e-value is checked after each batch only; checking at fewer times than every
        sample keeps Ville's guarantee (it holds for any stopping time).

        References
        ----------
        Ville (1939); Waudby-Smith and Ramdas, JRSS-B 86 (2024) 1-27.
        """
        batch = check_counts(counts, "counts")
        if batch.shape != self._probs.shape:
            raise ValueError(
                f"counts must have shape {self._probs.shape} (one per outcome), got {batch.shape}"
            )
        self._counts += batch
        self._log_e_value = self._compute_log_e_value()
        self._max_log_e_value = max(self._max_log_e_value, self._log_e_value)
        return self.rejected

    def _compute_log_e_value(self) -> float:
        counts = self._counts
        n = int(counts.sum())
        if n == 0:
            return 0.0
        seen = counts > 0
        if (self._probs[seen] == 0.0).any():
            return math.inf
        half_m = 0.5 * counts.size
        log_mixture = (
            special.gammaln(half_m)
            - special.gammaln(n + half_m)
            + np.sum(special.gammaln(counts[seen] + 0.5) - special.gammaln(0.5))
        )
        log_null = float(np.dot(counts[seen], self._log_probs[seen]))
        return float(log_mixture - log_null)

    def result(self) -> CheckResult:
        """Summarise the test so far as a :class:`CheckResult`.

        Returns
        -------
        CheckResult
            ``method="exact"`` (Ville's inequality, non-asymptotic), ``statistic`` = the
            largest log e-value seen, ``pvalue = min(1, 1 / max E)``, ``passed = not
            rejected``; ``detectable_tv`` is ``math.inf`` (no fixed-n power guarantee).

        Raises
        ------
        ValueError
            If no samples have been added yet.

        Notes
        -----
        ``pvalue`` is anytime-valid: ``P(pvalue <= alpha) <= alpha`` at any stopping time.

        References
        ----------
        A. Ramdas, J. Ruf, M. Larsson and W. M. Koolen, "Admissible anytime-valid
        sequential inference must rely on nonnegative martingales", arXiv:2009.03167.
        """
        n = self.num_samples
        if n == 0:
            raise ValueError("SequentialGOF has no samples yet (num_samples is 0); call update first")
        pvalue = self.pvalue
        finite_log_e = self._log_e_value if math.isfinite(self._log_e_value) else None
        return CheckResult(
            name=self._name,
            method="exact",
            statistic=self._max_log_e_value,
            pvalue=pvalue,
            dof=None,
            n=n,
            false_fail_rate=self._alpha,
            detectable_tv=math.inf,
            false_pass_rate=self._beta,
            passed=pvalue > self._alpha,
            details={
                "procedure": "KT plug-in e-process (Dirichlet(1/2) mixture), Ville threshold",
                "log_e_value": finite_log_e,
                "threshold_log_e_value": -math.log(self._alpha),
            },
            description=(
                f"Anytime-valid KT likelihood-ratio e-process over {n} samples; rejects when "
                f"the e-value reaches 1/alpha = {1 / self._alpha:.3g}. Statistic: largest log "
                "e-value."
            ),
        )
