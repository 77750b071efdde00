"""Self-checks of the audit: is it calibrated on correct samplers, and how fast does it kill bugs?

Two measurements of the audit *itself*, built on the real case runner
(:func:`~specexact.audit.runner.run_case`) and the real audit (:func:`run_audit`):

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
:func:`min_replicates_for_ratio` covers the pooled count. Checks of *different* types on
the same class share data (e.g. ``independent_rows`` and ``independent_calls`` share their
control pairs) and are never pooled together.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
import torch

from specexact.decoders import SamplingParams, ToyLMConfig
from specexact.exactness.calibration import calibration_ratio_check
from specexact.exactness.enumeration import SequenceLaw as _SequenceLaw

from . import decoder_kind as _decoder_kind
from . import runner as _runner
from .audit import run_audit
from .cases import AuditCase, RowClass, default_cases

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


# --------------------------------------------------------------------------- exact-law cache


def _model_key(model) -> tuple:
    """Configuration plus a digest of every tensor attribute (the weights) of a model."""
    digest = hashlib.sha1()
    tensors = sorted((name, value) for name, value in vars(model).items() if isinstance(value, torch.Tensor))
    if not tensors:
        raise TypeError(f"cannot fingerprint model {type(model).__name__}: it has no tensor attributes")
    for name, tensor in tensors:
        digest.update(name.encode())
        digest.update(tensor.detach().to("cpu", torch.float64).contiguous().numpy().tobytes())
    return (type(model).__name__, getattr(model, "config", None), digest.hexdigest())


def _params_key(params) -> str:
    return repr(params)


@contextlib.contextmanager
def cached_exact_laws():
    """Memoise the exact laws the case runner enumerates, for the duration of the block.

    The reference laws (:func:`~specexact.exactness.enumeration.sequence_law` and
    :func:`~specexact.exactness.enumeration.acceptance_law`) depend only on the case, not on
    the seed or the verifier, and their enumeration (with the outcome labels) dominates the
    cost of a small case. Inside the block the runner gets each law once per distinct
    (model weights, prompt, parameters, length); verdicts and p-values are unchanged.
    """
    original_sequence_law = _decoder_kind.sequence_law
    original_acceptance_law = _decoder_kind.acceptance_law
    laws: dict = {}

    def sequence_law(model, prompt_ids, params, **kwargs):
        key = ("sequence", _model_key(model), tuple(prompt_ids.tolist()), _params_key(params),
               tuple(sorted(kwargs.items())))
        if key not in laws:
            law = original_sequence_law(model, prompt_ids, params, **kwargs)
            labels = law.labels()
            law = _LabelledLaw(law.sequences, law.probs, law.codes, law.vocab_size)
            object.__setattr__(law, "_labels", labels)
            laws[key] = law
        return laws[key]

    def acceptance_law(target, draft, prompt_ids, target_params, draft_params, **kwargs):
        key = ("acceptance", _model_key(target), _model_key(draft), tuple(prompt_ids.tolist()),
               _params_key(target_params), _params_key(draft_params), tuple(sorted(kwargs.items())))
        if key not in laws:
            laws[key] = original_acceptance_law(target, draft, prompt_ids, target_params,
                                                draft_params, **kwargs)
        return laws[key].copy()

    _decoder_kind.sequence_law = sequence_law
    _decoder_kind.acceptance_law = acceptance_law
    try:
        yield laws
    finally:
        _decoder_kind.sequence_law = original_sequence_law
        _decoder_kind.acceptance_law = original_acceptance_law


@dataclass(frozen=True)
class _LabelledLaw(_SequenceLaw):
    """A :class:`SequenceLaw` whose labels were computed once."""

    def labels(self) -> list[str]:  # noqa: D102 - same contract as SequenceLaw.labels
        return list(self._labels)  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- calibration


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
    from specexact.exactness.calibration import min_replicates_for_ratio, ratio_outside_probability

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
        :func:`~specexact.audit.runner.case_seed`).
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


# --------------------------------------------------------------------------- kill table


@dataclass
class KillRow:
    """How one verifier fared in :func:`kill_table`."""

    name: str
    expected: str  # "fail" (planted bug) or "pass" (correct)
    verdict: str
    batches: int | None  # smallest failing batches (bugs) or the batches run (correct)
    sequences: int
    failing_checks: list[str]
    wall_time_s: float
    tried: list[int]

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def kill_table(
    verifiers: Mapping[str, Callable],
    *,
    batches: Sequence[int] = (1, 2, 4, 8),
    seed: int = 0,
    false_fail_rate: float = 1e-6,
    correct: Iterable[str] | None = None,
    cases: Sequence[AuditCase] | None = None,
    device: torch.device | str = "cpu",
    on_row: Callable[[KillRow], None] | None = None,
) -> list[KillRow]:
    """Smallest number of decoder calls per case at which the audit fails each verifier.

    Parameters
    ----------
    verifiers : mapping of str to callable
        Verifiers by name.
    batches : sequence of int, default (1, 2, 4, 8)
        Increasing decoder calls per case to try. The runner rounds odd numbers up to even
        (its independence checks pair successive calls), so 1 runs as 2; a size that runs
        the same audit as the previous one is not run again, and the smallest nominal size
        is recorded.
    seed : int, default 0
        Audit seed.
    false_fail_rate : float, default 1e-6
        The whole audit's false-fail rate (split over its checks).
    correct : iterable of str, optional
        Names of verifiers believed correct: run only at ``max(batches)`` and record the
        verdict. Default: the names in :data:`specexact.audit.zoo.CORRECT`.
    cases : sequence of AuditCase, optional
        Default: :func:`~specexact.audit.cases.default_cases`.
    device : torch.device or str
    on_row : callable, optional
        Called with each finished row (for progress output).

    Returns
    -------
    list of KillRow
        For a planted bug: ``batches`` is the first entry of ``batches`` at which the audit
        failed (None if it passed them all), ``sequences`` the sequences sampled in that
        audit, ``failing_checks`` its findings as ``"case: check"``, ``wall_time_s`` the time
        of the audits run for it (all tried sizes). For a correct verifier: one audit at
        ``max(batches)``. The exact reference laws are enumerated once for all verifiers
        (:func:`cached_exact_laws`); verdicts are those of :func:`run_audit`.
    """
    if correct is None:
        from .zoo import CORRECT

        correct = CORRECT
    correct = set(correct)
    sizes = sorted(set(int(b) for b in batches))
    if not sizes or sizes[0] < 1:
        raise ValueError(f"batches must be positive integers, got {list(batches)!r}")
    cases = list(default_cases() if cases is None else cases)
    rows = []
    with cached_exact_laws():
        for name, verifier in verifiers.items():
            is_correct = name in correct
            plan = [sizes[-1]] if is_correct else sizes
            tried, start = [], time.perf_counter()
            report, effective = None, None
            for size in plan:
                tried.append(size)
                if size + size % 2 == effective:
                    continue  # the runner rounds odd sizes up: this audit was just run
                effective = size + size % 2
                report = run_audit(verifier, sampler_name=name, cases=cases,
                                   false_fail_rate=false_fail_rate, num_batches=size, budget_s=None,
                                   seed=seed, device=device)
                if report["verdict"] == "fail" and not is_correct:
                    break
            failed = report["verdict"] == "fail"
            row = KillRow(
                name=name,
                expected="pass" if is_correct else "fail",
                verdict=report["verdict"],
                batches=tried[-1] if (failed or is_correct) else None,
                sequences=int(report["num_sequences"]),
                failing_checks=[f"{f['case']}: {f['check']}" for f in report["findings"]],
                wall_time_s=time.perf_counter() - start,
                tried=tried,
            )
            rows.append(row)
            if on_row is not None:
                on_row(row)
    return rows


def kill_table_markdown(rows: Sequence[KillRow], *, max_checks: int = 4) -> str:
    """A Markdown table of :func:`kill_table` rows."""
    lines = ["| verifier | expected | verdict | batches | sequences | failing checks | seconds |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        checks = row.failing_checks[:max_checks]
        more = len(row.failing_checks) - len(checks)
        text = "; ".join(checks) + (f"; +{more} more" if more > 0 else "")
        batches = "-" if row.batches is None else str(row.batches)
        if row.expected == "fail" and row.batches is None:
            batches = f"not killed by {max(row.tried)}"
        lines.append(f"| {row.name} | {row.expected} | {row.verdict} | {batches} | {row.sequences} | "
                     f"{text or '-'} | {row.wall_time_s:.1f} |")
    return "\n".join(lines)
