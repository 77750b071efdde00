"""The audit: split the false-fail rate over all checks, plan sample sizes, run the cases
(resumably, optionally isolated, optionally one shard of them), decide, report.

The report is a JSON-ready dict whose layout is the versioned schema
``specexact.audit/1`` (``reports/audit.schema.json``, described in ``reports/schema.md``).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import platform
import re
import subprocess
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from specexact.exactness.budget import benjamini_hochberg

from specexact.decoders.adapters.protocol import is_logits_level, processing_of

from .cases import AuditCase, default_cases
from .journal import Journal, journal_path
from .plan import MIN_BATCHES, AuditPlan, CasePlan, approx_detectable_tv, pilot_costs, plan_batches, rows_per_class
from .runner import CaseResult, checks_per_case, restrict_to_sampler, run_case

__all__ = ["run_audit", "build_report", "environment", "audit_key", "SCHEMA", "SCHEMA_VERSION"]

SCHEMA = "specexact.audit/1"
"""Major version tag of the JSON report; readers switch on it (``reports/schema.md``)."""
SCHEMA_VERSION = "1.2"
"""Full version: additions keep the major version, removals or changes of meaning bump it."""

_PACKAGES = ("numpy", "scipy", "rich", "hypothesis", "matplotlib", "jinja2")
#: Prior of the per-case time outside sampling (models, enumeration, checks), seconds.
_OVERHEAD_PRIOR_S = 1.0
#: Prior of the start-up time of an isolated case's process (imports torch), seconds.
_SPAWN_PRIOR_S = 3.0


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
    except Exception:  # noqa: BLE001 - git is optional
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def environment(device: torch.device | str) -> dict:
    """Versions, device and git revision, for the report's metadata."""
    import specexact

    rev = _git("rev-parse", "HEAD") or None
    dirty = None
    if rev:
        status = _git("status", "--porcelain", "--untracked-files=no")
        dirty = bool(status) if status is not None else None
    dev = torch.device(device)
    return {
        "specexact": specexact.__version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "numpy": np.__version__,
        "scipy": _version("scipy"),
        "packages": {name: _version(name) for name in _PACKAGES},
        "device": str(dev),
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or platform.machine(),
        "torch_num_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "git_revision": rev,
        "git_dirty": dirty,
    }


def sampler_package(target: str) -> dict | None:
    """``{"name", "version"}`` of the distribution that provides ``MODULE:CALLABLE``, if any."""
    from importlib.metadata import packages_distributions

    top = target.partition(":")[0].split(".")[0]
    try:
        dists = packages_distributions().get(top) or []
    except Exception:  # noqa: BLE001 - broken metadata must not stop an audit
        dists = []
    if not dists:
        return None
    return {"name": dists[0], "version": _version(dists[0])}


def _sampler_metadata(verifier) -> dict | None:
    """Adapter metadata (library, version, variant), if the sampler module provides it."""
    try:
        from .samplers import sampler_metadata
    except ImportError:
        return None
    try:
        meta = sampler_metadata(verifier)
        json.dumps(meta, allow_nan=False, default=str)
    except Exception as exc:  # noqa: BLE001 - metadata is informative only
        return {"error": f"{type(exc).__name__}: {exc}"}
    return meta


def _digest(obj) -> str:
    text = json.dumps(obj, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def audit_key(*, sampler_name: str, sampler_target: str, seed: int, cases: Sequence[AuditCase],
              budget_s: float | None, num_batches: int | None, false_fail_rate: float,
              device: torch.device | str, env: dict | None = None) -> str:
    """Hash of everything that decides an audit's results (not which shard runs it).

    Two runs with the same key draw the same samples for the same case (with
    ``num_batches``), so their cases can be resumed or merged into one report.
    """
    env = env or {}
    return _digest({
        "sampler": sampler_name, "target": sampler_target, "seed": seed,
        "cases": [asdict(c) for c in cases],
        "budget_s": None if num_batches is not None else budget_s, "num_batches": num_batches,
        "false_fail_rate": false_fail_rate, "device": str(torch.device(device)),
        "versions": [env.get("specexact"), env.get("git_revision"), env.get("torch")],
    })


# --------------------------------------------------------------------------- the report


def _checks_of(config: dict) -> int:
    if config.get("kind") == "verify":
        from .verify_case import VERIFY_CHECKS

        return VERIFY_CHECKS
    return (4 if config.get("exact", True) else 5) * len(config.get("row_classes", []) or [1])


def _finding_kind(case: dict, chk: dict) -> str:
    if chk["name"] != "defect":
        return "inexactness"
    kind = (chk.get("details") or {}).get("kind")
    if kind in ("timeout", "crash"):
        return kind
    defect = case.get("defect") or ""
    return "protocol_violation" if defect.startswith("protocol violation") else "crash"


def _reproduction(case: dict, settings: dict, sampler: dict) -> dict:
    alpha = settings["per_check_false_fail_rate"]
    execution = case.get("execution") or {}
    nb = int(case.get("num_batches") or 0)
    if case.get("defect"):
        nb = max(nb + 1, int(execution.get("planned_batches") or 0))
    nb = max(2, nb + nb % 2)
    rate = alpha * _checks_of(case.get("config", {}))
    parts = ["specexact", "audit", "--sampler", _shell_quote(sampler["name"]), "--seed", str(settings["seed"]),
             "--case", case["name"], "--batches", str(nb), "--false-fail-rate", f"{rate:.6g}"]
    if settings.get("case_set") == "quick":
        parts.append("--quick")
    if settings.get("device"):
        parts += ["--device", settings["device"]]
    if execution.get("isolated") or _finding_kind(case, {"name": "defect", "details": {}}) in ("timeout",):
        parts.append("--isolate")
    return {
        "command": " ".join(parts),
        "python": (
            "from specexact.audit import resolve_sampler, run_case\n"
            "from specexact.audit.cases import all_cases\n"
            f"case = next(c for c in all_cases(quick={settings.get('case_set') == 'quick'}) "
            f"if c.name == {case['name']!r})\n"
            f"verifier, _ = resolve_sampler({sampler['name']!r})\n"
            f"result = run_case(case, verifier, false_fail_rate={alpha!r}, seed={settings['seed']!r}, "
            f"num_batches={nb}, device={settings.get('device') or 'cpu'!r})\n"
            "print(result.defect or [str(c) for c in result.checks])"
        ),
        "case_seed": case.get("seed"),
        "batch_size": case.get("config", {}).get("batch_size"),
        "num_batches": nb,
        "per_check_false_fail_rate": alpha,
    }


def _shell_quote(text: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9_.:/=+-]+", text or ""):
        return text
    return "'" + (text or "").replace("'", "'\"'\"'") + "'"


_N_LABEL = re.compile(r"^N=(\d+)")


def accepted_length_histograms(checks: Sequence[dict]) -> list[dict]:
    """Observed vs expected counts of every ``accepted_length`` check, for plots.

    Uses the raw per-``N`` counts when the check's ``details`` hold ``observed_counts``
    and ``expected_probs`` (unbinned, ``source: "details"``); otherwise the check's binned
    ``worst`` entries when they cover all its bins (``source: "binned"``: labels such as
    ``N=3 (+1 more)`` are bins that merged rare lengths). Checks whose law is a single bin
    (e.g. greedy rows) have nothing to show and are listed with empty counts.
    """
    out = []
    for chk in checks:
        if not chk["name"].startswith("accepted_length"):
            continue
        details = chk.get("details") or {}
        entry = {"case": chk["case"], "check": chk["name"], "passed": bool(chk["passed"]), "pvalue": chk["pvalue"],
                 "labels": [], "observed": [], "expected": [], "source": "none"}
        if isinstance(details.get("observed_counts"), list) and isinstance(details.get("expected_probs"), list):
            obs = [float(x) for x in details["observed_counts"]]
            n = sum(obs)
            entry.update(labels=[f"N={k}" for k in range(len(obs))], observed=obs,
                         expected=[n * float(p) for p in details["expected_probs"]], source="details")
        else:
            worst = [w for w in chk.get("worst", []) if isinstance(w[1], (int, float)) and isinstance(w[2], (int, float))]
            bins = details.get("num_bins")
            if worst and bins is not None and len(worst) == bins and all(_N_LABEL.match(w[0]) for w in worst):
                worst.sort(key=lambda w: int(_N_LABEL.match(w[0]).group(1)))
                entry.update(labels=[w[0] for w in worst], observed=[float(w[1]) for w in worst],
                             expected=[float(w[2]) for w in worst], source="binned")
        out.append(entry)
    return out


def build_report(
    case_dicts: Sequence[dict],
    *,
    sampler: dict,
    settings: dict,
    environment: dict,
    started_at: str,
    finished_at: str | None = None,
    wall_time_s: float,
    plan: dict | None = None,
    shards: list | None = None,
    resumed_cases: Sequence[str] = (),
) -> dict:
    """Assemble the report (schema ``specexact.audit/1``) from finished cases' dicts.

    Used by :func:`run_audit` and by :func:`specexact.audit.shard.merge_reports`, so a
    merged report is computed exactly as an unsharded one.
    """
    alpha = settings["per_check_false_fail_rate"]
    flat = []
    for case in case_dicts:
        for chk in case["checks"]:
            flat.append({"case": case["name"], **chk})
    pvalues = np.array([float(c["pvalue"]) for c in flat], dtype=float)
    if len(pvalues):
        for entry, adj in zip(flat, benjamini_hochberg(pvalues)):
            entry["bh_adjusted_pvalue"] = float(adj)
    findings = []
    for case in case_dicts:
        for chk in case["checks"]:
            if chk["passed"]:
                continue
            kind = _finding_kind(case, chk)
            message = (chk.get("details") or {}).get("message") or (
                f"{chk['name']}: p={float(chk['pvalue']):.3g} <= {alpha:.3g}"
                + (f" — {chk['description']}" if chk.get("description") else ""))
            findings.append({
                "case": case["name"],
                "check": chk["name"],
                "kind": kind,
                "message": message,
                "pvalue": chk["pvalue"],
                "worst": [list(w) for w in chk.get("worst", [])],
                "defect": case.get("defect"),
                "reproduction": _reproduction(case, settings, sampler),
            })
    verdict = "pass" if all(c["verdict"] == "pass" for c in case_dicts) else "fail"
    report = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "verdict": verdict,
        "sampler": sampler,
        "started_at": started_at,
        "finished_at": finished_at,
        "wall_time_s": wall_time_s,
        "settings": settings,
        "plan": plan,
        "environment": environment,
        "num_sequences": int(sum(c["num_sequences"] for c in case_dicts)),
        "resumed_cases": list(resumed_cases),
        "cases": list(case_dicts),
        "checks": flat,
        "findings": findings,
        "accepted_length": accepted_length_histograms(flat),
    }
    if shards is not None:
        report["shards"] = shards
    return report


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# --------------------------------------------------------------------------- running


def run_audit(
    verifier: Callable,
    *,
    sampler_name: str = "builtin",
    sampler_target: str = "specexact.decoders:verify",
    cases: Sequence[AuditCase] | None = None,
    false_fail_rate: float = 1e-6,
    budget_s: float | None = 120.0,
    num_batches: int | None = None,
    seed: int = 0,
    device: torch.device | str = "cpu",
    on_case_start: Callable[[AuditCase, int, int], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
    on_case_end: Callable[[CaseResult], None] | None = None,
    shard: tuple[int, int] | None = None,
    journal_dir: str | os.PathLike | None = None,
    fresh: bool = False,
    isolate: bool = False,
    case_timeout_s: float | None = None,
    on_status: Callable[[dict], None] | None = None,
    case_set: str | None = None,
) -> dict:
    """Audit ``verifier`` on ``cases`` and return the report as a JSON-ready dict.

    Parameters
    ----------
    verifier : callable
        Anything with the :func:`~specexact.decoders.verify` protocol.
    cases : sequence of AuditCase, optional
        The whole audit. Default: :func:`~specexact.audit.cases.default_cases`.
    false_fail_rate : float
        Chance that a correct verifier fails the audit as a whole; split equally
        (Bonferroni) over every check of every case of the *whole* audit (all shards), so
        each check runs at ``false_fail_rate / num_checks``.
    budget_s : float, optional
        Time for the audit (this shard). Sample sizes are planned from the power functions
        to fit it (:mod:`specexact.audit.plan`): the sizes depend on the machine's speed,
        not on the data. Ignored when ``num_batches`` is given.
    num_batches : int, optional
        Fixed decoder calls per case (rounded up to even): reproducible sample sizes.
    seed : int
        Seeds every case's generator (:func:`~specexact.audit.runner.case_seed`).
    shard : (i, n), optional
        Run only shard ``i`` (1-based) of ``n`` of the cases
        (:func:`~specexact.audit.shard.shard_cases`); merge the reports with
        :func:`~specexact.audit.shard.merge_reports`.
    journal_dir : path, optional
        Journal finished cases here (:mod:`specexact.audit.journal`) and resume from a
        journal of the same audit (same :func:`audit_key` and shard) found there.
    fresh : bool
        Ignore (replace) an existing journal.
    isolate : bool
        Run each case in a child process (:mod:`specexact.audit.isolation`); the child
        resolves ``sampler_name`` again with ``resolve_sampler``.
    case_timeout_s : float, optional
        Isolated cases only: kill a case after this many seconds. Default: 4 times its
        planned time plus 300 s with a budget, 1800 s with ``num_batches``.
    on_status : callable, optional
        ``on_status(event)`` with dicts ``{"event": "pilot" | "plan" | "case_start" |
        "batch" | "case_end", ...}`` for progress displays (see the CLI).
    case_set : str, optional
        ``"default"``, ``"quick"`` or ``"custom"``: how ``cases`` were chosen (used in the
        findings' reproduction commands).

    Returns
    -------
    dict
        The report (``reports/schema.md``); ``verdict`` is ``"pass"`` or ``"fail"``.
    """
    if not 0 < false_fail_rate < 1:
        raise ValueError(f"false_fail_rate must be in (0, 1), got {false_fail_rate!r}")
    if num_batches is None and (budget_s is None or budget_s <= 0):
        raise ValueError(f"budget_s must be > 0 when num_batches is not given, got {budget_s!r}")
    if num_batches is not None and num_batches < 1:
        raise ValueError(f"num_batches must be >= 1, got {num_batches!r}")
    if case_timeout_s is not None and case_timeout_s <= 0:
        raise ValueError(f"case_timeout_s must be > 0, got {case_timeout_s!r}")
    if case_set is None:
        case_set = "default" if cases is None else "custom"
    all_cases = list(default_cases() if cases is None else cases)
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
    all_cases = runnable
    if not all_cases:
        raise ValueError("no audit case can drive this sampler: "
                         + "; ".join(f"{s['case']}: {s['reason']}" for s in skipped))
    names = [c.name for c in all_cases]
    if len(set(names)) != len(names):
        raise ValueError(f"case names must be unique, got {names}")
    if shard is not None:
        from .shard import shard_cases

        run_cases = shard_cases(all_cases, *shard)
    else:
        run_cases = all_cases
    total_checks = sum(checks_per_case(c) for c in all_cases)
    alpha = false_fail_rate / total_checks
    dev = torch.device(device)
    env = environment(dev)
    mode = "batches" if num_batches is not None else "budget"
    key = audit_key(sampler_name=sampler_name, sampler_target=sampler_target, seed=seed, cases=all_cases,
                    budget_s=budget_s, num_batches=num_batches, false_fail_rate=false_fail_rate, device=dev, env=env)
    status = on_status or (lambda event: None)
    t0 = time.perf_counter()

    def new_header() -> dict:
        # Pilot (budget mode) happens here, once per audit: a resumed audit keeps its plan.
        costs = None
        pilot_s = 0.0
        if mode == "budget":
            status({"event": "pilot", "num_cases": len(run_cases)})
            tp = time.perf_counter()
            costs = pilot_costs(run_cases, dev, verifier=None if isolate else verifier)
            pilot_s = time.perf_counter() - tp
        return {"started_at": _now(), "costs": costs, "pilot_s": pilot_s,
                "cases": [c.name for c in run_cases], "sampler": sampler_name}

    created = {"new": False}

    def header_factory() -> dict:
        created["new"] = True
        return new_header()

    state_cases: dict[str, dict] = {}
    journal = None
    if journal_dir is not None:
        jkey = key if shard is None else f"{key}-shard{shard[0]}of{shard[1]}"
        journal, state = Journal.open(journal_path(journal_dir, jkey), jkey, header_factory, fresh=fresh)
        header = state.header
        state_cases = state.cases
    else:
        header = header_factory()
    costs = header.get("costs")
    pilot_s = float(header.get("pilot_s") or 0.0)
    started_at = header["started_at"]
    # Time already spent by earlier (killed) runs of this audit: their pilot and finished cases.
    prior_s = 0.0 if created["new"] else pilot_s + sum(
        float(rec["result"].get("wall_time_s", 0.0)) for rec in state_cases.values())

    ratios: list[float] = []  # measured / pilot seconds per call
    overheads: list[float] = []
    spawn = _SPAWN_PRIOR_S if isolate else 0.0
    cost_of = dict(zip(header.get("cases") or [], costs or []))
    notes: list[str] = []

    def speed() -> float:
        return float(np.median(ratios)) if ratios else 1.0

    def overhead() -> float:
        return float(np.mean(overheads)) if overheads else _OVERHEAD_PRIOR_S + spawn

    def elapsed() -> float:
        return prior_s + (time.perf_counter() - t0)

    def make_plan(remaining: list[AuditCase]) -> AuditPlan:
        if mode == "batches":
            nb = num_batches + num_batches % 2
            cps = [CasePlan(c.name, None, rows_per_class(c), nb, None, nb * rows_per_class(c),
                            approx_detectable_tv(c, nb * rows_per_class(c), alpha)) for c in remaining]
            return AuditPlan("batches", None, 0.0, alpha, None, True, cps)
        left = budget_s - elapsed() - overhead() * len(remaining)
        rc = [cost_of[c.name] * speed() for c in remaining]
        batches, tv, feasible = plan_batches(remaining, rc, left, alpha)
        cps = [CasePlan(c.name, cost, rows_per_class(c), b, b * cost, b * rows_per_class(c),
                        approx_detectable_tv(c, b * rows_per_class(c), alpha))
               for c, cost, b in zip(remaining, rc, batches)]
        note = "" if feasible else (f"budget too small: {len(remaining)} case(s) need at least "
                                    f"{sum(2 * x for x in rc) + overhead() * len(remaining):.0f} s more; "
                                    "each runs its minimum of 2 decoder calls")
        if note and not notes:
            notes.append(note)
        return AuditPlan("budget", budget_s, pilot_s, alpha, tv, feasible, cps, note)

    todo = [c for c in run_cases if c.name not in state_cases]
    first_plan = make_plan(todo)
    status({"event": "plan", "plan": first_plan, "resumed": sorted(state_cases), "budget_s": budget_s,
            "mode": mode, "num_cases": len(run_cases)})

    results: list[tuple[CaseResult, dict]] = []
    final_plan_cases: dict[str, CasePlan] = {}
    resumed: list[str] = []
    from .isolation import case_result_from_dict, run_case_isolated

    for i, case in enumerate(run_cases):
        if case.name in state_cases:
            rec = state_cases[case.name]
            res = case_result_from_dict(case, rec["result"])
            execution = dict(rec.get("execution") or {})
            execution["resumed"] = True
            results.append((res, execution))
            resumed.append(case.name)
            if rec.get("plan"):
                final_plan_cases[case.name] = CasePlan(**rec["plan"])
            if on_case_end is not None:
                on_case_end(res)
            status({"event": "case_end", "case": case.name, "index": i, "num_cases": len(run_cases),
                    "resumed": True, "passed": res.passed})
            continue
        remaining = [c for c in run_cases[i:] if c.name not in state_cases]
        plan = make_plan(remaining)
        cp = plan.cases[0]
        final_plan_cases[case.name] = cp
        if on_case_start is not None:
            on_case_start(case, i, len(run_cases))
        status({"event": "case_start", "case": case.name, "index": i, "num_cases": len(run_cases),
                "planned_batches": cp.planned_batches, "planned_detectable_tv": cp.planned_detectable_tv,
                "planned_time_s": cp.planned_time_s, "elapsed_s": elapsed()})
        if mode == "budget":
            share = (cp.planned_batches - 0.5) * cp.seconds_per_batch
            # Never more than the time left after the later cases' minimum. A no-op when the
            # plan fits; it matters when the prediction is far off (a sampler much slower,
            # relative to the pilot's verifier, on earlier cases than on this one), which
            # would otherwise stretch the case past the budget.
            left = budget_s - elapsed() - overhead() * len(remaining) - sum(
                MIN_BATCHES * cost_of[c.name] * speed() for c in remaining[1:])
            share = max(min(share, left), 1e-3)
            kwargs = {"num_batches": None, "time_budget_s": share}
        else:
            kwargs = {"num_batches": num_batches, "time_budget_s": None}
        case_start = time.perf_counter()
        last = {"t": None}
        C = len(case.row_classes)

        def on_batch(num_sequences: int, nb: int, case=case, i=i, cp=cp, case_start=case_start, last=last, C=C):
            last["t"] = time.perf_counter() - case_start
            if progress is not None:
                progress(num_sequences, nb)
            status({"event": "batch", "case": case.name, "index": i, "num_cases": len(run_cases),
                    "num_sequences": num_sequences, "num_batches": nb, "planned_batches": cp.planned_batches,
                    "detectable_tv": approx_detectable_tv(case, num_sequences // C, alpha),
                    "planned_detectable_tv": cp.planned_detectable_tv, "elapsed_s": elapsed()})

        timeout = None
        if isolate:
            timeout = case_timeout_s or (4 * cp.planned_time_s + 300 if mode == "budget" else 1800.0)
            res, sampling = run_case_isolated(case, sampler_name, false_fail_rate=alpha, seed=seed, device=dev,
                                              timeout_s=timeout, progress=on_batch, **kwargs)
        else:
            res = run_case(case, verifier, false_fail_rate=alpha, seed=seed, device=dev, progress=on_batch, **kwargs)
            sampling = last["t"]
        total_case = time.perf_counter() - case_start
        if sampling is not None and res.num_batches and cost_of.get(case.name):
            ratios.append((sampling / res.num_batches) / cost_of[case.name])
        if sampling is not None:
            overheads.append(max(total_case - sampling, 0.0))
        execution = {"isolated": bool(isolate), "resumed": False, "timeout_s": timeout,
                     "sampling_time_s": sampling, "planned_batches": cp.planned_batches}
        results.append((res, execution))
        if journal is not None:
            from specexact.reports.json_report import to_jsonable

            journal.append_case(case.name, to_jsonable(res.to_dict()), execution=to_jsonable(execution),
                                plan=to_jsonable(cp.to_dict()))
        if on_case_end is not None:
            on_case_end(res)
        status({"event": "case_end", "case": case.name, "index": i, "num_cases": len(run_cases),
                "resumed": False, "passed": res.passed, "elapsed_s": elapsed()})
    wall = time.perf_counter() - t0

    case_dicts = []
    for res, execution in results:
        d = res.to_dict()
        d["execution"] = execution
        case_dicts.append(d)
    # The plan as carried out: each case's plan when it started (later cases are re-planned
    # from the time actually left); the target is the weakest case's planned TV.
    planned = [final_plan_cases[c.name] for c in run_cases if c.name in final_plan_cases]
    finite_tvs = [c.planned_detectable_tv for c in planned if math.isfinite(c.planned_detectable_tv)]
    target_tv = max(finite_tvs) if (mode == "budget" and finite_tvs) else None
    plan_dict = AuditPlan(mode, budget_s if mode == "budget" else None, pilot_s, alpha, target_tv,
                          not notes, planned, notes[0] if notes else "").to_dict()
    from specexact.reports.json_report import to_jsonable

    settings = {
        "seed": seed,
        "budget_s": budget_s if num_batches is None else None,
        "num_batches": num_batches,
        "false_fail_rate": false_fail_rate,
        "num_checks": total_checks,
        "per_check_false_fail_rate": alpha,
        "correction": "bonferroni",
        "device": str(dev),
        "isolate": bool(isolate),
        "case_timeout_s": case_timeout_s,
        "case_set": case_set,
        "all_cases": names,
        "shard": None if shard is None else {"index": shard[0], "count": shard[1],
                                             "cases": [c.name for c in run_cases]},
        "audit_key": key,
        "processing": {"level": "logits" if is_logits_level(verifier) else "probability",
                       **processing_of(verifier).to_dict()},
        "skipped_cases": skipped,
    }
    report = build_report(
        case_dicts,
        sampler={"name": sampler_name, "target": sampler_target, "package": sampler_package(sampler_target),
                 "metadata": _sampler_metadata(verifier)},
        settings=settings, environment=env, started_at=started_at, finished_at=_now(),
        wall_time_s=wall, plan=plan_dict, resumed_cases=resumed,
    )
    report = to_jsonable(report)
    if journal is not None:
        report["journal"] = str(journal.path)
    return report
