"""The first stage of an audit: from the sampler and the settings to what will run.

:func:`resolve_audit` decides, before any sampling, everything the later stages need:
which cases (and which of their row classes) can drive this sampler and which are
skipped and why, the shard's slice, the number of checks of the whole audit and hence the
per-check false-fail rate, the environment, the audit's key (journal, merge), and one
:class:`SamplerInfo` that every later stage reads instead of asking the sampler again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, is_dataclass
from typing import Sequence

import torch

from specexact.audit.cases.catalog import default_cases_for
from specexact.audit.cases.dispatch import checks_per_case, restrict_to_sampler
from specexact.audit.cases.generated import generated_cases
from specexact.audit.checks.combined import split_false_fail_rate
from specexact.audit.core.environment import environment, sampler_package
from specexact.audit.core.settings import AuditSettings
from specexact.audit.run.shard import shard_cases
from specexact.audit.sampler.samplers import sampler_metadata
from specexact.decoders.adapters.protocol import is_logits_level, processing_of, scheme_of
from specexact.decoders.processing import LogitsProcessing

__all__ = ["SamplerInfo", "ResolvedAudit", "resolve_audit", "audit_key"]


@dataclass(frozen=True)
class SamplerInfo:
    """What the audit knows of the sampler under audit, gathered once.

    Attributes
    ----------
    verifier : callable or adapter
        The sampler itself (``None`` only for isolated runs that never call it here).
    name, target : str
        ``--sampler`` value and what it resolved to.
    level : {"probability", "logits"}
    processing : LogitsProcessing
        The order of operations the reference laws use for it.
    scheme : str
        Its declared verification scheme (:data:`~specexact.decoders.adapters.SCHEMES`).
    metadata : dict or None
        Its ``metadata()`` (adapters), or ``{"error": ...}`` when that raised.
    """

    verifier: object
    name: str
    target: str
    level: str
    processing: LogitsProcessing
    scheme: str
    metadata: dict | None

    def to_dict(self) -> dict:
        """The report's ``sampler`` entry."""
        return {"name": self.name, "target": self.target, "package": sampler_package(self.target),
                "metadata": self.metadata}


@dataclass(frozen=True)
class ResolvedAudit:
    """The outcome of :func:`resolve_audit`.

    Attributes
    ----------
    settings : AuditSettings
    sampler : SamplerInfo
    cases : list
        Every case of the whole audit that can drive the sampler (restricted to its
        runnable classes), in order.
    run_cases : list
        This shard's slice of ``cases`` (all of them without a shard).
    skipped : list of dict
        ``{"case", "reason", "classes"}`` for cases or classes the sampler cannot run.
    num_checks : int
        Checks of the whole audit (all shards).
    per_check_false_fail_rate : float
        ``(1 - COMBINED_SHARE) * settings.false_fail_rate / num_checks`` (Bonferroni over
        the checks of the rate the combined check leaves; :mod:`specexact.audit.checks.combined`).
    environment : dict
    key : str
        :func:`audit_key`.
    """

    settings: AuditSettings
    sampler: SamplerInfo
    cases: list
    run_cases: list
    skipped: list = field(default_factory=list)
    num_checks: int = 0
    per_check_false_fail_rate: float = 0.0
    environment: dict = field(default_factory=dict)
    key: str = ""

    @property
    def device(self) -> torch.device:
        return torch.device(self.settings.device)

    @property
    def journal_key(self) -> str:
        """The key of this shard's journal."""
        shard = self.settings.shard
        return self.key if shard is None else f"{self.key}-shard{shard[0]}of{shard[1]}"


def _digest(obj) -> str:
    text = json.dumps(obj, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def audit_key(*, sampler_name: str, sampler_target: str, seed: int, cases: Sequence, budget_s: float | None,
              num_batches: int | None, false_fail_rate: float, device: torch.device | str,
              env: dict | None = None) -> str:
    """Hash of everything that decides an audit's results (not which shard runs it).

    Two runs with the same key draw the same samples for the same case (with
    ``num_batches``), so their cases can be resumed or merged into one report.
    """
    env = env or {}
    return _digest({
        "sampler": sampler_name, "target": sampler_target, "seed": seed,
        "cases": [asdict(c) if is_dataclass(c) else repr(c) for c in cases],
        "budget_s": None if num_batches is not None else budget_s, "num_batches": num_batches,
        "false_fail_rate": false_fail_rate, "device": str(torch.device(device)),
        "versions": [env.get("specexact"), env.get("git_revision"), env.get("torch")],
    })


def _metadata(verifier) -> dict | None:
    meta = sampler_metadata(verifier)
    try:
        json.dumps(meta, allow_nan=False, default=str)
    except (TypeError, ValueError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    return meta


def sampler_info(verifier, settings: AuditSettings) -> SamplerInfo:
    """:class:`SamplerInfo` of ``verifier`` under ``settings``' names."""
    return SamplerInfo(verifier=verifier, name=settings.sampler_name, target=settings.sampler_target,
                       level="logits" if is_logits_level(verifier) else "probability",
                       processing=processing_of(verifier), scheme=scheme_of(verifier),
                       metadata=_metadata(verifier))


def resolve_audit(verifier, settings: AuditSettings) -> ResolvedAudit:
    """Stage 1 of an audit: which cases run, at which per-check rate (module docstring).

    Parameters
    ----------
    verifier : callable or logits-level adapter
        The sampler under audit.
    settings : AuditSettings

    Returns
    -------
    ResolvedAudit

    Raises
    ------
    ValueError
        No case can drive this sampler (the message gives each case's reason), or two
        cases share a name.
    """
    all_cases = list(default_cases_for(verifier) if settings.cases is None else settings.cases)
    if settings.fuzz:  # the fuzz phase's statistical cases, drawn from the seed (known before sampling)

        all_cases += generated_cases(verifier, settings.fuzz_settings())
    # A logits-level sampler that does not implement an operation (e.g. no presence
    # penalty) cannot be audited on a class that needs it: drop the class (the whole case
    # when no class is left), say why.
    skipped, runnable = [], []
    for c in all_cases:
        restricted, reason = restrict_to_sampler(c, verifier)
        if reason is not None:
            kept = [] if restricted is None else [restricted.class_id(i) for i in range(len(restricted.row_classes))]
            skipped.append({"case": c.name, "reason": reason,
                            "classes": [c.class_id(i) for i in range(len(c.row_classes)) if c.class_id(i) not in kept]})
        if restricted is not None:
            runnable.append(restricted)
    if not runnable:
        raise ValueError("no audit case can drive this sampler: "
                         + "; ".join(f"{s['case']}: {s['reason']}" for s in skipped))
    names = [c.name for c in runnable]
    if len(set(names)) != len(names):
        raise ValueError(f"case names must be unique, got {names}")
    run = shard_cases(runnable, *settings.shard) if settings.shard is not None else runnable
    num_checks = sum(checks_per_case(c) for c in runnable)
    env = environment(settings.device)
    key = audit_key(sampler_name=settings.sampler_name, sampler_target=settings.sampler_target, seed=settings.seed,
                    cases=runnable, budget_s=settings.budget_s, num_batches=settings.num_batches,
                    false_fail_rate=settings.false_fail_rate, device=settings.device, env=env)
    return ResolvedAudit(settings=settings, sampler=sampler_info(verifier, settings), cases=runnable, run_cases=run,
                         skipped=skipped, num_checks=num_checks,
                         per_check_false_fail_rate=split_false_fail_rate(settings.false_fail_rate, num_checks)[0],
                         environment=env, key=key)
