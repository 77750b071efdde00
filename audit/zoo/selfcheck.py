"""Self-checks of the audit: is it calibrated on correct samplers, and how fast does it kill bugs?

Two measurements of the audit *itself*, built on the real case runner
(:func:`~specexact.audit.cases.dispatch.run_case`) and the real audit
(:func:`~specexact.audit.run.stages.run_audit`):

- **Calibration** (:func:`null_pvalues`, :func:`calibration_table`): run the audit's checks
  on a *correct* verifier over many seeds at a relaxed per-check false-fail rate (e.g. 0.1)
  and compare each check type's observed rejection frequency with the nominal rate. The
  comparison is itself a statistical check with a stated false-fail rate
  (:func:`~specexact.exactness.calibration.calibration_ratio_check`), sized with
  :func:`~specexact.exactness.calibration.min_replicates_for_ratio`.
- **Kill table** (:func:`kill_table`, :func:`kill_table_markdown`): for each verifier, the
  smallest number of decoder calls per case at which the full audit fails, with the
  sequences it used, the failing checks and the wall time.

Pooling within a check type
---------------------------
For a correct sampler the rows of a batch are independent draws, row classes use disjoint
rows, and cases and seeds use distinct generator seeds, so the verdicts of one check type
across classes, cases and seeds are independent Bernoulli trials. Their sum is a
Poisson-binomial count; when the rates average the nominal rate its tails (at counts at
least one away from the mean) are no heavier than those of the binomial law with the same
mean (W. Hoeffding, Ann. Math. Statist. 27 (1956) 713-721), so the binomial design of
:func:`~specexact.exactness.calibration.min_replicates_for_ratio` covers the pooled count. Checks of *different* types on
the same class share data (e.g. ``independent_rows`` and ``independent_calls`` share their
control pairs) and are never pooled together.

The measurements live in :mod:`~specexact.audit.zoo.calibration` (calibration),
:mod:`~specexact.audit.zoo.kill_table` (kill table) and :mod:`~specexact.audit.zoo.law_cache`
(the exact-law cache both use); their public names are importable here.
"""

from specexact.audit.zoo.calibration import (
                                             CalibrationRow,
                                             NullRecord,
                                             calibration_case,
                                             calibration_table,
                                             calibration_table_markdown,
                                             check_type,
                                             null_pvalues,
                                             seeds_for_calibration,
)
from specexact.audit.zoo.kill_table import KillRow, kill_table, kill_table_markdown
from specexact.audit.zoo.law_cache import cached_exact_laws

__all__ = [
    "CalibrationRow",
    "KillRow",
    "NullRecord",
    "cached_exact_laws",
    "calibration_case",
    "calibration_table",
    "calibration_table_markdown",
    "check_type",
    "kill_table",
    "kill_table_markdown",
    "null_pvalues",
    "seeds_for_calibration",
]
