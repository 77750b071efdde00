"""Calibration of the audit on a correct verifier (the first self-check of
:mod:`specexact.audit.zoo.selfcheck`, whose docstring states why a check type's trials may be
pooled): a case built for it (:func:`calibration_case`), the seeds it needs
(:func:`seeds_for_calibration`), every check's p-value over many seeds (:func:`null_pvalues`)
and the pooled rejection frequencies against the nominal rate (:func:`calibration_table`,
:func:`calibration_table_markdown`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
import torch

from specexact.audit.cases import dispatch as _runner
from specexact.audit.cases.decoder_case import AuditCase, RowClass
from specexact.audit.zoo.law_cache import cached_exact_laws
from specexact.decoders import SamplingParams, ToyLMConfig
from specexact.exactness.calibration import calibration_ratio_check, min_replicates_for_ratio, ratio_outside_probability

__all__ = ["CalibrationRow", "NullRecord", "calibration_case", "calibration_table", "calibration_table_markdown",
           "check_type", "null_pvalues", "seeds_for_calibration"]


def calibration_case(rows_per_class: int = 128) -> AuditCase:
    """A small exact case built for measuring calibration: twelve row classes per batch.

    V = 5 with EOS, sequences of 4 tokens over two rounds (gamma = 2), twelve classes with
    different prompts, temperatures, truncations and penalties on both sides; every class's
    sequence law has at least two bins of 50 expected counts at ``rows_per_class = 128``
    and 2 decoder calls. Many classes per call make the fixed cost of a decoder call buy
    many independent checks of each type.
    """
    sp = SamplingParams
    classes = (
        RowClass((1, 2), sp(temperature=1.6), sp()),
        RowClass((3, 0), sp(temperature=0.8, top_p=0.9), sp(temperature=1.2)),
        RowClass((2, 2), sp(top_k=3, repetition_penalty=1.3), sp(temperature=0.7)),
        RowClass((0, 1), sp(temperature=1.2, min_p=0.05, presence_penalty=0.5), sp(top_k=4)),
        RowClass((4, 3), sp(frequency_penalty=0.4), sp(temperature=1.5, top_p=0.8)),
        RowClass((1, 4), sp(temperature=1.1), sp(frequency_penalty=0.6)),
        RowClass((0, 0), sp(temperature=1.3), sp()),
        RowClass((2, 1), sp(top_p=0.8), sp(top_k=2)),
        RowClass((3, 3), sp(repetition_penalty=0.8), sp(temperature=0.9, presence_penalty=0.3)),
        RowClass((4, 0), sp(temperature=1.0, top_k=4), sp(min_p=0.1)),
        RowClass((1, 1), sp(temperature=1.4, frequency_penalty=0.2), sp(temperature=1.0)),
        RowClass((2, 4), sp(min_p=0.02), sp(temperature=2.0)),
    )
    return AuditCase(
        name="calibration-v5",
        description="twelve row classes over V=5 with EOS, two rounds per sequence: many "
                    "independent checks per decoder call, for calibration runs",
        model=ToyLMConfig(vocab_size=5, seed=23, zipf_exponent=0.9, context_strength=2.0,
                          eos_token_id=4, eos_logit=-1.5),
        mismatch=0.7,
        row_classes=classes,
        num_draft_tokens=2,
        length=4,
        batch_size=rows_per_class * len(classes),
    )


def seeds_for_calibration(
    trials_per_seed: Mapping[str, int],
    level: float,
    *,
    false_fail_rate: float,
    one_sided_types: Iterable[str] = (),
    rate_tolerance: float = 1.0,
    max_seeds: int = 10**7,
) -> int:
    """Fewest seeds whose pooled trials measure every check type's ratio at ``level``.

    Parameters
    ----------
    trials_per_seed : mapping of str to int
        Checks with power of each type that one seed (all cases) produces.
    level : float
        Nominal level of the ratio checks.
    false_fail_rate : float
        False-fail rate of each ratio check.
    one_sided_types : iterable of str
        Types checked with ``low = 0`` (conservative by design).
    rate_tolerance : float, default 1.0
        For the two-sided types (see :func:`ratio_outside_probability`).
    max_seeds : int

    Returns
    -------
    int
        The smallest ``S`` such that ``S * trials_per_seed[t]`` trials keep every type's
        ratio check within ``false_fail_rate`` (the saw-tooth of the binomial design is
        checked at the actual pooled count).
    """
    one_sided = set(one_sided_types)

    def band(kind):
        if kind in one_sided:
            return dict(low=0.0, rate_tolerance=1.0)
        return dict(rate_tolerance=rate_tolerance)

    seeds = 1
    for kind, per_seed in trials_per_seed.items():
        if per_seed > 0:
            need = min_replicates_for_ratio(level, false_fail_rate=false_fail_rate, **band(kind))
            seeds = max(seeds, -(-need // per_seed))
    while seeds <= max_seeds:
        if all(per_seed == 0 or ratio_outside_probability(seeds * per_seed, level, **band(kind))
               <= false_fail_rate for kind, per_seed in trials_per_seed.items()):
            return seeds
        seeds += 1
    raise ValueError(f"no number of seeds up to {max_seeds} reaches false_fail_rate={false_fail_rate}")


def check_type(name: str) -> str:
    """The type of a check: its name without the ``[class c]`` suffix."""
    return name.split("[", 1)[0]


@dataclass(frozen=True)
class NullRecord:
    """One check's outcome on one seed of a correct verifier."""

    case: str
    check: str
    seed: int
    pvalue: float
    n: int
    method: str
    has_power: bool
    pvalue_lower: float | None = None
    """``P(T > t)`` where the check records it (``details["pvalue_lower"]``): the p-value
    without the observed atom, for the combined check's randomised p-value."""

    @property
    def type(self) -> str:
        return check_type(self.check)


def null_pvalues(
    cases: Sequence[AuditCase],
    verifier: Callable,
    *,
    seeds: Iterable[int],
    num_batches: int,
    false_fail_rate: float = 0.1,
    device: torch.device | str = "cpu",
    progress: Callable[[int, int], None] | None = None,
    min_expected: float | None = None,
) -> list[NullRecord]:
    """Run every case on every seed with a (correct) verifier and record each check's p-value.

    Parameters
    ----------
    cases : sequence of AuditCase
    verifier : callable
        A verifier with the ``verify`` protocol, believed correct.
    seeds : iterable of int
        Audit seeds (each case derives its generator seed with
        :func:`~specexact.audit.cases.dispatch.case_seed`).
    num_batches : int
        Decoder calls per case and seed (fixed, so the sample size is data-independent).
    false_fail_rate : float, default 0.1
        Per-check rate passed to :func:`run_case` (it affects only the recorded verdicts and
        detectable distances; p-values do not depend on it).
    device : torch.device or str
    progress : callable, optional
        ``progress(done, total)`` after each seed.

    Returns
    -------
    list of NullRecord
        One record per (seed, case, check). ``has_power`` is False for checks that cannot
        fail by design at this sample size (a single bin, i.e. ``detectable_tv`` infinite
        with ``dof == 0``); the decision depends on the reference law and ``n`` only.

    Raises
    ------
    RuntimeError
        If the verifier crashes or breaks the protocol (a correct verifier must not).
    """
    seeds = list(seeds)
    records: list[NullRecord] = []
    with cached_exact_laws():
        for done, seed in enumerate(seeds, 1):
            for case in cases:
                extra = {} if min_expected is None else {"min_expected": min_expected}
                result = _runner.run_case(case, verifier, false_fail_rate=false_fail_rate,
                                          seed=seed, num_batches=num_batches, device=device, **extra)
                if result.defect is not None:
                    raise RuntimeError(f"case {case.name} seed {seed}: {result.defect}")
                for chk in result.checks:
                    no_power = chk.dof == 0 and chk.detectable_tv == math.inf
                    records.append(NullRecord(case.name, chk.name, seed, chk.pvalue, chk.n,
                                              chk.method, not no_power, chk.details.get("pvalue_lower")))
            if progress is not None:
                progress(done, len(seeds))
    return records


@dataclass
class CalibrationRow:
    """Pooled calibration of one check type at one nominal level."""

    check_type: str
    level: float
    trials: int
    rejections: int
    ratio: float
    one_sided: bool
    excluded_no_power: int
    result: object = field(repr=False, default=None)

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in ("check_type", "level", "trials", "rejections", "ratio",
                                             "one_sided", "excluded_no_power")}
        if not math.isfinite(out["ratio"]):
            out["ratio"] = None  # no trials
        if self.result is not None:
            out["passed"] = self.result.passed
            out["pvalue"] = self.result.pvalue
            out["design_false_fail_probability"] = self.result.details["design_false_fail_probability"]
            out["detectable_ratio_low"] = self.result.details["detectable_ratio_low"]
            out["detectable_ratio_high"] = self.result.details["detectable_ratio_high"]
        return out


def calibration_table(
    records: Sequence[NullRecord],
    levels: Sequence[float],
    *,
    false_fail_rate: float | None = None,
    one_sided_types: Iterable[str] = (),
    rate_tolerance: float = 1.0,
    low: float = 0.5,
    high: float = 2.0,
) -> list[CalibrationRow]:
    """Pool the records per check type and compare rejection frequencies with nominal.

    Parameters
    ----------
    records : sequence of NullRecord
        From :func:`null_pvalues`.
    levels : sequence of float
        Nominal levels at which a p-value counts as a rejection (``p <= level``).
    false_fail_rate : float, optional
        If given, each (type, level) gets a :func:`calibration_ratio_check` at this rate
        (stored in ``row.result``); it raises ValueError when the pooled number of trials is
        too small for that rate.
    one_sided_types : iterable of str
        Check types that are conservative by design (exact discrete tests): only a ratio
        above ``high`` counts against them (``low = 0``).
    rate_tolerance, low, high
        Passed to :func:`calibration_ratio_check`.

    Returns
    -------
    list of CalibrationRow
        Sorted by check type then level. Records without power are excluded (counted in
        ``excluded_no_power``).
    """
    one_sided = set(one_sided_types)
    by_type: dict[str, list[NullRecord]] = defaultdict(list)
    excluded: dict[str, int] = defaultdict(int)
    for rec in records:
        if rec.has_power:
            by_type[rec.type].append(rec)
        else:
            excluded[rec.type] += 1
    rows = []
    for kind in sorted(set(by_type) | set(excluded)):
        pvalues = np.array([r.pvalue for r in by_type.get(kind, [])])
        for level in levels:
            trials = int(pvalues.size)
            rejections = int(np.count_nonzero(pvalues <= level))
            ratio = rejections / (trials * level) if trials else math.nan
            result = None
            if false_fail_rate is not None and trials:
                result = calibration_ratio_check(
                    rejections, trials, level, low=0.0 if kind in one_sided else low, high=high,
                    false_fail_rate=false_fail_rate, rate_tolerance=rate_tolerance,
                    name=f"calibration[{kind}@{level:g}]",
                )
            rows.append(CalibrationRow(kind, float(level), trials, rejections, ratio, kind in one_sided,
                                       excluded.get(kind, 0), result))
    return rows


def calibration_table_markdown(rows: Sequence[CalibrationRow]) -> str:
    """A Markdown table of :func:`calibration_table` rows."""
    lines = ["| check type | nominal | trials | rejections | ratio | band | verdict |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        band = "[0, 2]" if row.one_sided else "[0.5, 2]"
        verdict = "-" if row.result is None else ("pass" if row.result.passed else "FAIL")
        lines.append(f"| {row.check_type} | {row.level:g} | {row.trials} | {row.rejections} | "
                     f"{row.ratio:.3f} | {band} | {verdict} |")
    return "\n".join(lines)
