"""What an audit is asked to do: one settings object for every stage.

:class:`AuditSettings` gathers what used to be a long parameter list of ``run_audit``:
the sampler's name (so an isolated case can resolve it again), the cases, the false-fail
rate, the sample size (a time budget or a fixed number of decoder calls), the seed, the
device, and how the run is carried out (shard, journal, isolation). It validates itself,
so every stage can rely on it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, fields, replace

import torch

from specexact.fuzz.settings import FuzzSettings

__all__ = ["AuditSettings"]


@dataclass(frozen=True)
class AuditSettings:
    """Settings of one audit (of one shard of it).

    Parameters
    ----------
    sampler_name : str
        The ``--sampler`` value (``"builtin"``, an entry-point name or ``MODULE:CALLABLE``);
        an isolated case resolves the sampler again from it.
    sampler_target : str
        What the name resolved to (``MODULE:CALLABLE``), for the report.
    cases : sequence of cases, optional
        The whole audit (every shard's cases). Default: the default cases.
    case_set : {"default", "quick", "custom"}, optional
        How ``cases`` were chosen (used in the findings' reproduction commands); default
        ``"default"`` when ``cases`` is None, else ``"custom"``.
    false_fail_rate : float
        Chance that a correct sampler fails the audit as a whole, in (0, 1); split equally
        (Bonferroni) over every check of every case of the whole audit (all shards).
    budget_s : float, optional
        Time for the audit (this shard), > 0. Ignored when ``num_batches`` is given.
    num_batches : int, optional
        Fixed decoder calls per case (rounded up to even), >= 1: reproducible sample sizes.
    seed : int
        Seeds every case's generator (:func:`~specexact.audit.cases.result.case_seed`).
    device : str or torch.device
    shard : (int, int), optional
        Run only shard ``i`` (1-based) of ``n``.
    journal_dir : path, optional
        Journal finished cases there and resume from a journal of the same audit.
    fresh : bool
        Ignore (replace) an existing journal.
    isolate : bool
        Run each case in a child process.
    case_timeout_s : float, optional
        Isolated cases only: kill a case after this many seconds (> 0).
    threads : int, optional
        Torch intra-op threads (>= 1). Default: with a time budget on the CPU, chosen by
        the pilot's timing (:func:`~specexact.audit.run.pilot.pilot_with_thread_choice`); with
        fixed ``num_batches`` (or on another device), torch's current count. The audit
        restores the caller's count when it returns.
    elapsed_before_s : float
        Seconds the caller already spent on this audit before :func:`run_audit` (the
        command's start-up: imports, resolving the sampler), counted against ``budget_s``
        so that the budget holds for the whole command. Not part of the audit's key.
    fuzz : bool
        Run the fuzz phase (:mod:`specexact.fuzz`): its exact families as a stage before
        the cases, and its generated statistical cases among the cases. Default False for
        the Python API; ``specexact audit`` turns it on unless ``--no-fuzz``.
    fuzz_share : float
        Budget mode: the share of ``budget_s`` the exact fuzz families get, in (0, 1)
        (default 0.2); time they leave unused goes to the cases (which are planned after
        the fuzz stage from the time actually left).
    fuzz_profile : {"ci", "nightly"}
        How much the fuzz phase explores (:class:`specexact.fuzz.FuzzSettings`).
    fuzz_examples : int, optional
        Examples per exact family, fixed also with a budget (then the fuzz phase takes the
        time they take, and its findings do not depend on the machine's speed); default:
        the profile's with ``num_batches``, as many as the share allows with a budget.
    fuzz_database_dir : path, optional
        Hypothesis example database of the fuzz phase (earlier failures replayed first);
        the CLI uses ``<report-dir>/.fuzz-examples``.
    strict_inputs : bool
        Hardening findings (invalid input accepted or refused with the wrong exception,
        :mod:`specexact.audit.verdict.tiers`) fail the audit too; by default they are listed and
        counted but the verdict stays ``"pass"`` (``--strict-inputs``).

    Raises
    ------
    ValueError
        A value out of range; the message names the field and the value.
    """

    sampler_name: str = "builtin"
    sampler_target: str = "specexact.decoders:verify"
    cases: tuple | None = None
    case_set: str | None = None
    false_fail_rate: float = 1e-6
    budget_s: float | None = 120.0
    num_batches: int | None = None
    seed: int = 0
    device: str = "cpu"
    shard: tuple[int, int] | None = None
    journal_dir: str | None = None
    fresh: bool = False
    isolate: bool = False
    case_timeout_s: float | None = None
    threads: int | None = None
    elapsed_before_s: float = 0.0
    fuzz: bool = False
    fuzz_share: float = 0.2
    fuzz_profile: str = "ci"
    fuzz_examples: int | None = None
    fuzz_database_dir: str | None = None
    strict_inputs: bool = False

    def __post_init__(self) -> None:
        if self.cases is not None and not isinstance(self.cases, tuple):
            object.__setattr__(self, "cases", tuple(self.cases))
        if isinstance(self.device, torch.device):
            object.__setattr__(self, "device", str(self.device))
        if self.journal_dir is not None and not isinstance(self.journal_dir, str):
            object.__setattr__(self, "journal_dir", os.fspath(self.journal_dir))
        if self.shard is not None:
            object.__setattr__(self, "shard", tuple(int(x) for x in self.shard))
        if self.case_set is None:
            object.__setattr__(self, "case_set", "default" if self.cases is None else "custom")
        if self.case_set not in ("default", "quick", "custom"):
            raise ValueError(f"case_set must be 'default', 'quick' or 'custom', got {self.case_set!r}")
        if not (isinstance(self.false_fail_rate, (int, float)) and 0 < self.false_fail_rate < 1):
            raise ValueError(f"false_fail_rate must be in (0, 1), got {self.false_fail_rate!r}")
        if self.num_batches is None and (self.budget_s is None or not self.budget_s > 0
                                         or not math.isfinite(self.budget_s)):
            raise ValueError(f"budget_s must be > 0 when num_batches is not given, got {self.budget_s!r}")
        if self.num_batches is not None and (int(self.num_batches) != self.num_batches or self.num_batches < 1):
            raise ValueError(f"num_batches must be an integer >= 1, got {self.num_batches!r}")
        if self.case_timeout_s is not None and not self.case_timeout_s > 0:
            raise ValueError(f"case_timeout_s must be > 0, got {self.case_timeout_s!r}")
        if self.shard is not None and (len(self.shard) != 2 or not 1 <= self.shard[0] <= self.shard[1]):
            raise ValueError(f"shard must be (i, n) with 1 <= i <= n, got {self.shard!r}")
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)
                                         or self.threads < 1):
            raise ValueError(f"threads must be an integer >= 1, got {self.threads!r}")
        if not (isinstance(self.elapsed_before_s, (int, float)) and 0 <= self.elapsed_before_s < math.inf):
            raise ValueError(f"elapsed_before_s must be >= 0 and finite, got {self.elapsed_before_s!r}")
        if int(self.seed) != self.seed:
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        self._check_fuzz()

    def _check_fuzz(self) -> None:
        if not isinstance(self.fuzz, bool):
            raise TypeError(f"fuzz must be a bool, got {self.fuzz!r}")
        if not (isinstance(self.fuzz_share, (int, float)) and 0 < self.fuzz_share < 1):
            raise ValueError(f"fuzz_share must be in (0, 1), got {self.fuzz_share!r}")
        if self.fuzz_profile not in ("ci", "nightly"):
            raise ValueError(f"fuzz_profile must be 'ci' or 'nightly', got {self.fuzz_profile!r}")
        if self.fuzz_examples is not None and (int(self.fuzz_examples) != self.fuzz_examples or self.fuzz_examples < 1):
            raise ValueError(f"fuzz_examples must be an integer >= 1, got {self.fuzz_examples!r}")
        if not isinstance(self.strict_inputs, bool):
            raise TypeError(f"strict_inputs must be a bool, got {self.strict_inputs!r}")
        if self.fuzz_database_dir is not None and not isinstance(self.fuzz_database_dir, str):
            object.__setattr__(self, "fuzz_database_dir", os.fspath(self.fuzz_database_dir))

    @property
    def fuzz_time_s(self) -> float | None:
        """Time of the exact fuzz families: ``fuzz_share * budget_s`` in budget mode, None
        (a fixed number of examples) with ``num_batches``, with ``fuzz_examples`` or without
        the fuzz phase."""
        if not self.fuzz or self.num_batches is not None or self.fuzz_examples is not None:
            return None
        return float(self.fuzz_share * self.budget_s)

    def fuzz_settings(self):
        """The :class:`specexact.fuzz.FuzzSettings` of this audit's fuzz phase."""
        return FuzzSettings(profile=self.fuzz_profile, seed=int(self.seed), time_s=self.fuzz_time_s,
                            examples=self.fuzz_examples, database_dir=self.fuzz_database_dir)

    @property
    def mode(self) -> str:
        """``"batches"`` (fixed sample sizes) or ``"budget"`` (a time budget)."""
        return "batches" if self.num_batches is not None else "budget"

    @property
    def effective_budget_s(self) -> float | None:
        """The time budget when it decides the sample sizes, else None."""
        return None if self.num_batches is not None else self.budget_s

    def with_(self, **changes) -> "AuditSettings":
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)

    def to_dict(self) -> dict:
        """JSON-ready fields (cases by name)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["cases"] = None if self.cases is None else [c.name for c in self.cases]
        return d
