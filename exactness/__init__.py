"""Exact laws, calibrated tests, power and sample-size planning, false-fail budgets.

Every check returns a :class:`CheckResult` carrying its verdict, its p-value, the
false-fail rate it was run at and the smallest discrepancy it detects at its sample size.

Modules
-------
results
    :class:`CheckResult`.
power
    Noncentral chi-square and exact binomial power / sample-size planning.
budget
    :class:`FalseFailBudget`, Holm and Benjamini-Hochberg.
combination
    Cauchy combination of p-values, valid under dependence (:func:`cauchy_combination`);
    randomised p-values of discrete tests (:func:`randomized_pvalue`).
goodness_of_fit
    Binned Pearson chi-square against an exact law (:func:`chisquare_gof`).
two_sample
    Two-sample homogeneity (:func:`chisquare_homogeneity`).
ks
    Randomised-PIT KS for discrete laws, two-sample KS, p-value uniformity.
exact_tests
    Exact binomial test, accepted-length law.
independence
    Pair-agreement test for shared randomness.
sequential
    Anytime-valid e-process (:class:`SequentialGOF`).
pit
    Randomised PITs of single events (decisions, tokens) and the slot-count uniformity
    check the per-event audit checks use.
"""

from .budget import FalseFailBudget, benjamini_hochberg, holm
from .combination import cauchy_combination, randomized_pvalue
from .calibration import calibration_ratio_check, min_replicates_for_ratio, ratio_outside_probability
from .exact_tests import (
    accepted_length_check,
    binomial_check,
    mean_accepted_length,
    truncated_geometric_law,
)
from .goodness_of_fit import binned_law, chisquare_gof
from .independence import collision_probability, pair_agreement_check, pair_agreement_vs_control_check
from .ks import detectable_ks_distance, ks_two_sample, pvalue_uniformity, randomized_pit_ks
from .power import (
    chisquare_power,
    min_detectable_shift_binomial,
    min_detectable_tv_chisquare,
    min_num_samples_binomial,
    min_num_samples_chisquare,
)
from .results import CheckResult
from .sequential import SequentialGOF
from .two_sample import chisquare_homogeneity

__all__ = [
    "CheckResult",
    "FalseFailBudget",
    "SequentialGOF",
    "accepted_length_check",
    "benjamini_hochberg",
    "binned_law",
    "binomial_check",
    "calibration_ratio_check",
    "cauchy_combination",
    "randomized_pvalue",
    "chisquare_gof",
    "chisquare_homogeneity",
    "chisquare_power",
    "collision_probability",
    "detectable_ks_distance",
    "holm",
    "ks_two_sample",
    "mean_accepted_length",
    "min_detectable_shift_binomial",
    "min_detectable_tv_chisquare",
    "min_num_samples_binomial",
    "min_num_samples_chisquare",
    "min_replicates_for_ratio",
    "pair_agreement_check",
    "pair_agreement_vs_control_check",
    "pvalue_uniformity",
    "randomized_pit_ks",
    "ratio_outside_probability",
    "truncated_geometric_law",
]
