"""The last stage of an audit: assemble the report (schema ``specexact.audit/1``) from the
finished cases' dicts, with findings, their reproduction commands and the accepted-length
histograms. Used by :func:`~specexact.audit.audit.run_audit` and by
:func:`~specexact.audit.shard.merge_reports`, so a merged report is computed exactly as an
unsharded one.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from specexact.exactness.budget import benjamini_hochberg

from .combined import combined_check
from .decisions_checks import DECISION_CHECK_NAMES, DECISION_CHECKS
from .e2e_case import e2e_num_checks
from .diagnosis import diagnose
from .tiers import fails, tier_counts, tier_of, tier_of_check
from .verify_case import VERIFY_CHECKS

__all__ = ["SCHEMA", "SCHEMA_VERSION", "build_report", "accepted_length_histograms", "add_diagnosis",
           "acceptance_rows", "lossy_measurements", "under_accepting", "combined_kind", "fuzz_report_findings",
           "report_findings"]

SCHEMA = "specexact.audit/1"
"""Major version tag of the JSON report; readers switch on it (``reports/schema.md``)."""
SCHEMA_VERSION = "1.8"
"""Full version: additions keep the major version, removals or changes of meaning bump it."""


def _checks_of(config: dict) -> int:
    if config.get("kind") == "verify":
        return VERIFY_CHECKS
    if config.get("kind") == "e2e":  # audit/e2e_case.py, E2EKind.checks
        return e2e_num_checks(len(config.get("row_classes") or []),
                              sum(bool(a) for a in config.get("check_acceptance") or []))
    return (4 if config.get("exact", True) else 5) * len(config.get("row_classes", []) or [1]) + DECISION_CHECKS


def _is_accepted_length(chk: dict) -> bool:
    """An acceptance check of the case's accepted-length law: ``accepted_length[...]``, or
    ``first_acceptance[...]`` where the law is known only for the first draft (a
    large-vocabulary block or two-sample case: the binomial test of ``P(N >= 1)``)."""
    return chk["name"].startswith(("accepted_length", "first_acceptance"))


def _acceptance_below(chk: dict) -> tuple[float, float] | None:
    """``(observed, expected)`` of an acceptance check: the mean accepted length, or for
    ``first_acceptance`` the frequency of accepting the first draft; None if not recorded."""
    d = chk.get("details") or {}
    if chk["name"].startswith("first_acceptance"):
        n, k, prob = chk.get("n"), d.get("successes"), d.get("prob")
        if isinstance(n, (int, float)) and n > 0 and isinstance(k, (int, float)) and isinstance(prob, (int, float)):
            return float(k) / float(n), float(prob)
        return None
    mean, expected = d.get("mean_accepted_length"), d.get("expected_mean_accepted_length")
    if isinstance(mean, (int, float)) and isinstance(expected, (int, float)):
        return float(mean), float(expected)
    return None


def _is_decision_check(chk: dict) -> bool:
    """A per-decision check (audit/decisions_checks.py): it judges each decision against the
    declared scheme's rule, not the emitted law."""
    return chk["name"] in DECISION_CHECK_NAMES


def _law_checks_pass(case: dict) -> bool:
    """Every check of the case on the emitted law and its independence passed (all but the
    accepted-length and per-decision checks)."""
    return all(c["passed"] for c in case["checks"] if not (_is_accepted_length(c) or _is_decision_check(c)))


def under_accepting(case: dict, chk: dict) -> bool:
    """Whether a failing accepted-length check is *exact but under-accepting*: every check of
    its case on the emitted law (sequences, tokens, independence) passed, and the mean
    accepted length fell below the scheme's own law's (for a token-wise sampler, the
    token-wise optimum); in a case whose accepted-length law is known only for the first
    draft (``first_acceptance``), the frequency of accepting it fell below ``P(N >= 1)``.
    Per-decision checks may fail beside it (a sampler of another scheme declared
    token-wise); they are findings of kind ``decision_rule``."""
    if chk["passed"] or not _is_accepted_length(chk) or not _law_checks_pass(case):
        return False
    below = _acceptance_below(chk)
    return below is not None and below[0] < below[1]


def _finding_kind(case: dict, chk: dict) -> str:
    """``inexactness`` (a check of the emitted law failed, or a per-decision check beside
    one), ``decision_rule`` (per-decision checks fail while every check of the emitted law
    passes: the decisions do not follow the declared scheme — an inexactness too small for
    the law checks, or an exact sampler of another scheme), ``under_accepting``, or a defect
    kind."""
    if chk["name"] != "defect":
        if under_accepting(case, chk):
            return "under_accepting"
        if _is_decision_check(chk) and _law_checks_pass(case):
            return "decision_rule"
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
    e2e = case.get("config", {}).get("kind") == "e2e"
    if case.get("defect"):
        # one call past those that ran reaches the call that failed; an end-to-end case goes
        # on after a crash with the classes that do not crash (its num_batches are theirs),
        # so the planned number (often far more than ran) is not needed to reach it
        nb = nb + 1 if e2e else max(nb + 1, int(execution.get("planned_batches") or 0))
    nb = max(2, nb + nb % 2)
    # the case's checks at the same per-check rate: the command's own audit keeps its
    # combined share too (audit/combined.py)
    share = float((settings.get("combination") or {}).get("share", 0.0))
    rate = alpha * _checks_of(case.get("config", {})) / (1.0 - share)
    threads = (settings.get("threads") or {}).get("threads")
    if e2e:
        return _e2e_reproduction(case, settings, sampler, nb, alpha, rate, threads)
    parts = ["specexact", "audit", "--sampler", _shell_quote(sampler["name"]), "--seed", str(settings["seed"]),
             "--case", case["name"], "--batches", str(nb), "--false-fail-rate", f"{rate:.6g}"]
    if settings.get("case_set") == "quick":
        parts.append("--quick")
    if settings.get("device"):
        parts += ["--device", settings["device"]]
    if execution.get("isolated") or _finding_kind(case, {"name": "defect", "details": {}}) in ("timeout",):
        parts.append("--isolate")
    if threads:  # the thread count can change the floats, hence the samples
        parts += ["--threads", str(int(threads))]
    if "fuzz" in (case.get("config", {}).get("tags") or []):
        return _generated_reproduction(case, settings, sampler, nb, alpha, parts, threads)
    # One case alone: without the fuzz phase (its generated cases would add checks, hence
    # another per-check rate than the finding's).
    parts.insert(parts.index("--false-fail-rate") + 2, "--no-fuzz")
    return {
        "command": " ".join(parts),
        "python": (
            (f"import torch\ntorch.set_num_threads({int(threads)})\n" if threads else "")
            + "from specexact.audit import resolve_sampler, run_case\n"
            "from specexact.audit.catalog import all_cases\n"
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
        "false_fail_rate": float(f"{rate:.6g}"),
        "threads": int(threads) if threads else None,
    }


ENGINE_SAMPLER_PREFIX = "engine-"
"""An engine audit's sampler name is ``engine-`` and the ``--engine`` value (cli/cli_audit.py)."""


def _engine_name(sampler: dict) -> str:
    """The ``--engine`` value that names the audited engine again: the sampler's name without
    :data:`ENGINE_SAMPLER_PREFIX` when that is a registered name (or no target says more),
    else the sampler's ``MODULE:CLASS`` target (``--engine MODULE:CLASS``, and
    ``specexact.testing.audit_engine`` of an engine that no entry point names)."""
    from specexact.decoders.engines.registry import engine_names

    name = sampler["name"]
    name = name[len(ENGINE_SAMPLER_PREFIX):] if name.startswith(ENGINE_SAMPLER_PREFIX) else name
    target = str(sampler.get("target") or "")
    if name in engine_names() or ":" not in target:
        return name
    return target


def _engine_arguments(sampler: dict, configs: Sequence[dict]) -> list[str]:
    """``specexact audit`` arguments that select an engine audit's cases again: ``--engine``
    (the sampler's name without :data:`ENGINE_SAMPLER_PREFIX`), ``--method`` when the cases
    share one, ``--pair`` and ``--requests-per-class``."""
    parts = ["--engine", _shell_quote(_engine_name(sampler))]
    methods = sorted({c.get("method") for c in configs})
    if len(methods) == 1:
        parts += ["--method", str(methods[0])]
    pairs = sorted({c.get("pair") for c in configs})
    if len(pairs) == 1:
        parts += ["--pair", str(pairs[0])]
    sizes = sorted({int(c.get("requests_per_class") or 0) for c in configs})
    if len(sizes) == 1 and sizes[0]:
        parts += ["--requests-per-class", str(sizes[0])]
    return parts


def _e2e_reproduction(case: dict, settings: dict, sampler: dict, nb: int, alpha: float, rate: float,
                      threads: int | None) -> dict:
    """The reproduction of an end-to-end case: ``--engine`` with the case's method, pair and
    requests per class (no ``--case`` names it: :func:`~specexact.audit.e2e_case.e2e_cases`
    makes it from the engine), the case's calls and the rate that gives the same per-check
    rate; the Python rebuilds the case from the engine."""
    config = case.get("config", {})
    engine = _engine_name(sampler)
    parts = (["specexact", "audit"] + _engine_arguments(sampler, [config])
             + ["--seed", str(settings["seed"]), "--batches", str(nb), "--false-fail-rate", f"{rate:.6g}"])
    if settings.get("device"):
        parts += ["--device", settings["device"]]
    if threads:
        parts += ["--threads", str(int(threads))]
    return {
        "command": " ".join(parts),
        "python": (
            (f"import torch\ntorch.set_num_threads({int(threads)})\n" if threads else "")
            + "from specexact.audit import run_case\n"
            "from specexact.audit.e2e_case import e2e_cases\n"
            "from specexact.decoders.engines.registry import resolve_engine\n"
            f"engine, _ = resolve_engine({engine!r})\n"
            f"case = next(c for c in e2e_cases(engine, {config.get('method')!r}, pair={config.get('pair')!r}, "
            f"num_speculative_tokens={config.get('num_speculative_tokens')!r}, "
            f"requests_per_class={config.get('requests_per_class')!r}) if c.name == {case['name']!r})\n"
            f"result = run_case(case, engine, false_fail_rate={alpha!r}, seed={settings['seed']!r}, "
            f"num_batches={nb}, device={settings.get('device') or 'cpu'!r})\n"
            "print(result.defect or [str(c) for c in result.checks])"
        ),
        "case_seed": case.get("seed"),
        "batch_size": config.get("batch_size"),
        "num_batches": nb,
        "per_check_false_fail_rate": alpha,
        "false_fail_rate": float(f"{rate:.6g}"),
        "threads": int(threads) if threads else None,
    }


def _generated_reproduction(case: dict, settings: dict, sampler: dict, nb: int, alpha: float, parts: list,
                            threads: int | None) -> dict:
    """The reproduction of a fuzz-generated case (``fuzz-rows-*``, ``fuzz-laws-*``): no
    ``--case`` can name it, so the command reruns the fuzzed audit with the same seed, the
    case's number of calls for every case and the audit's false-fail rate (hence the same
    checks and per-check rate); the Python rebuilds the case from the seed alone."""
    i = parts.index("--case")
    command = parts[:i] + parts[i + 2:]
    j = command.index("--false-fail-rate")
    command[j + 1] = f"{settings['false_fail_rate']:.6g}"
    return {
        "command": " ".join(command),
        "python": (
            (f"import torch\ntorch.set_num_threads({int(threads)})\n" if threads else "")
            + "from specexact.audit import resolve_sampler, run_case\n"
            "from specexact.fuzz.generated_cases import generated_case\n"
            f"verifier, _ = resolve_sampler({sampler['name']!r})\n"
            f"case = generated_case({case['name']!r}, verifier, seed={settings['seed']!r})\n"
            f"result = run_case(case, verifier, false_fail_rate={alpha!r}, seed={settings['seed']!r}, "
            f"num_batches={nb}, device={settings.get('device') or 'cpu'!r})\n"
            "print(result.defect or [str(c) for c in result.checks])"
        ),
        "case_seed": case.get("seed"),
        "batch_size": case.get("config", {}).get("batch_size"),
        "num_batches": nb,
        "per_check_false_fail_rate": alpha,
        "false_fail_rate": float(f"{settings['false_fail_rate']:.6g}"),
        "threads": int(threads) if threads else None,
    }


def _fuzz_command(sampler: dict, fuzz: dict) -> str:
    """The ``specexact fuzz`` command that reruns the exact families of the audit's fuzz phase."""
    fs = fuzz.get("settings") or {}
    parts = ["specexact", "fuzz", "--sampler", _shell_quote(sampler["name"]), "--seed", str(fs.get("seed", 0)),
             "--profile", str(fs.get("profile") or "ci"), "--exact-only"]
    if fs.get("examples_per_family"):
        parts += ["--examples", str(int(fs["examples_per_family"]))]
    return " ".join(parts)


def fuzz_report_findings(fuzz: dict | None, sampler: dict) -> list[dict]:
    """The fuzz phase's findings as entries of the report's ``findings`` (since 1.6):
    ``source`` ``"fuzz"``, ``case`` ``"fuzz"``, ``check`` ``"family / rule"``, ``kind``
    ``"fuzz"``, the tier of the rule, p-value 0 (an exact rule), ``fuzz_index`` (the
    finding's index in ``fuzz.findings``) and a ``reproduction`` whose ``python`` is the
    finding's replay script."""
    out = []
    for i, f in enumerate((fuzz or {}).get("findings") or []):
        out.append({
            "source": "fuzz",
            "case": "fuzz",
            "check": f"{f['family']} / {f['rule']}",
            "kind": "fuzz",
            "tier": tier_of(f),
            "message": f["message"] + (f" (= {f['known_as']})" if f.get("known_as") else ""),
            "pvalue": 0.0,
            "worst": [],
            "defect": None,
            "family": f["family"],
            "rule": f["rule"],
            "example": f.get("example"),
            "known_as": f.get("known_as"),
            "fuzz_index": i,
            "reproduction": {"command": _fuzz_command(sampler, fuzz), "python": f.get("replay") or ""},
        })
    return out


def report_findings(report: dict) -> list[dict]:
    """Every finding of ``report``, each with its ``tier``: the report's ``findings``, and
    for a report older than 1.6 (whose ``findings`` left the fuzz phase's out) its fuzz
    findings too. For the renderers, which also read older reports."""
    findings = [f if f.get("tier") else {**f, "tier": tier_of(f)} for f in report.get("findings") or []]
    if "tiers" not in report and not any(f.get("source") == "fuzz" for f in findings):
        findings += fuzz_report_findings(report.get("fuzz"), report.get("sampler") or {"name": "?"})
    return findings


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


def acceptance_rows(checks: Sequence[dict]) -> list[dict]:
    """Every accepted-length check's means: observed, the declared scheme's law and the
    token-wise optimum (chain cases), with a note where a sampler that is exact for its scheme
    accepts less than token-wise verification would (``sample_compare``, by design)."""
    rows = []
    for chk in checks:
        if not chk["name"].startswith("accepted_length"):
            continue
        d = chk.get("details") or {}
        mean, own = d.get("mean_accepted_length"), d.get("expected_mean_accepted_length")
        optimum = d.get("tokenwise_optimum_mean_accepted_length")
        note = None
        if chk["passed"] and isinstance(own, (int, float)) and isinstance(optimum, (int, float)) \
                and own < optimum - 1e-9:
            note = (f"exact for its scheme {d.get('scheme')!r}, which accepts less than token-wise verification: "
                    f"mean accepted length {mean:.4g} (its law {own:.4g}) vs the token-wise optimum {optimum:.4g}")
        rows.append({"case": chk["case"], "check": chk["name"], "scheme": d.get("scheme", "tokenwise"),
                     "passed": bool(chk["passed"]), "measured": bool(d.get("measured", False)),
                     "mean_accepted_length": mean, "expected_mean_accepted_length": own,
                     "tokenwise_optimum_mean_accepted_length": optimum, "note": note})
    return rows


def lossy_measurements(checks: Sequence[dict]) -> list[dict]:
    """The measured TVs of a lossy sampler (checks whose ``details`` hold ``lossy_tv``)."""
    out = []
    for chk in checks:
        tv = (chk.get("details") or {}).get("lossy_tv")
        if isinstance(tv, dict):
            out.append({"case": chk["case"], "check": chk["name"],
                        **{k: tv.get(k) for k in ("estimate", "lower", "upper", "delta", "n", "num_cells", "law")}})
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
    fuzz: dict | None = None,
) -> dict:
    """Assemble the report (schema ``specexact.audit/1``) from finished cases' dicts.

    Used by :func:`run_audit` and by :func:`specexact.audit.shard.merge_reports`, so a
    merged report is computed exactly as an unsharded one. ``fuzz`` is the fuzz stage's
    result (:meth:`specexact.fuzz.FuzzResult.to_dict`, since 1.3): its findings join the
    report's ``findings`` (since 1.6). Every finding has a tier (:mod:`specexact.audit.tiers`);
    ``verdict`` is ``"fail"`` when one of a failing tier is found (``hardening`` only with
    ``settings["strict_inputs"]``).
    """
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
            # The level this check was decided at: its own false-fail rate (a chi-square check
            # runs at a third of the per-check share, audit/levels.py), not the audit's share:
            # the terminal, the report and the diagnosis then state the same threshold.
            level = float(chk.get("false_fail_rate") or settings["per_check_false_fail_rate"])
            message = (chk.get("details") or {}).get("message") or (
                f"{chk['name']}: p={float(chk['pvalue']):.3g} <= {level:.3g}"
                + (f" — {chk['description']}" if chk.get("description") else ""))
            if kind == "under_accepting" and chk["name"].startswith("first_acceptance"):
                observed, expected = _acceptance_below(chk)
                message = (f"{chk['name']}: under-accepting: every law check of the case passes, but the first "
                           f"draft is accepted with frequency {observed:.4g}, below its scheme's law's P(N >= 1) = "
                           f"{expected:.4g}"
                           f"; p={float(chk['pvalue']):.3g} <= {level:.3g}")
            elif kind == "under_accepting":
                d = chk["details"]
                optimum = d.get("tokenwise_optimum_mean_accepted_length")
                message = (f"{chk['name']}: under-accepting: every law check of the case passes, but the mean "
                           f"accepted length {d['mean_accepted_length']:.4g} is below its "
                           f"{d.get('scheme', 'tokenwise')} law's {d['expected_mean_accepted_length']:.4g}"
                           + (f" (token-wise optimum {optimum:.4g})" if isinstance(optimum, (int, float)) else "")
                           + f"; p={float(chk['pvalue']):.3g} <= {level:.3g}")
            findings.append({
                "source": "check",
                "case": case["name"],
                "check": chk["name"],
                "kind": kind,
                "tier": tier_of_check(chk["name"], kind),
                "message": message,
                "pvalue": chk["pvalue"],
                "worst": [list(w) for w in chk.get("worst", [])],
                "defect": case.get("defect"),
                "reproduction": _reproduction(case, settings, sampler),
            })
    combined = _combined(flat, settings)
    if combined is not None and not combined["passed"]:
        findings.append(_combined_finding(combined, settings, sampler,
                                          combined_kind(flat, case_dicts, combined, seed=settings.get("seed")),
                                          [c.get("config", {}) for c in case_dicts]))
    if fuzz is not None:  # each fuzz finding with its tier, also in the fuzz section
        fuzz = {**fuzz, "findings": [{**f, "tier": tier_of(f)} for f in fuzz.get("findings") or []]}
    findings += fuzz_report_findings(fuzz, sampler)
    strict = bool(settings.get("strict_inputs", False))
    # By tier (audit/tiers.py): hardening findings fail the audit only with strict_inputs.
    verdict = "fail" if (fails(findings, strict) or any(c["verdict"] != "pass" for c in case_dicts)) else "pass"
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
        "combined": combined,
        "tiers": tier_counts(findings),
        "accepted_length": accepted_length_histograms(flat),
        "acceptance": acceptance_rows(flat),
        "lossy_measurements": lossy_measurements(flat),
    }
    report["notes"] = [f"{r['case']} / {r['check']}: {r['note']}" for r in report["acceptance"] if r["note"]]
    if shards is not None:
        report["shards"] = shards
    if fuzz is not None:
        report["fuzz"] = fuzz
    add_diagnosis(report)
    return report


def _combined(flat: list, settings: dict) -> dict | None:
    """The combined check (since 1.7, :mod:`specexact.audit.combined`) of the report's checks,
    at ``settings.combination.false_fail_rate`` (a shard's share of it in a shard's report:
    the merged report combines every shard's checks at the whole rate); None for a report
    of an older version (no ``settings.combination``)."""
    comb = settings.get("combination")
    if not comb:
        return None
    shard = settings.get("shard")
    count = int(shard["count"]) if shard else 1
    return combined_check(flat, float(comb["false_fail_rate"]) / count, seed=settings.get("seed"))


def combined_kind(flat: Sequence[dict], case_dicts: Sequence[dict], combined: dict, seed: int | None = None) -> str:
    """The kind of a failing combined check's finding: ``under_accepting`` or ``inexactness``.

    The combined check mixes the accepted-length checks' p-values with the law checks'. Its
    failure is read as *exact but under-accepting* (as :func:`under_accepting` reads one
    accepted-length check) when the acceptance evidence that makes it fail reads below the
    law: the same combination (same members, same threshold) *without* the accepted-length
    checks passes, and the combination of the law checks and only those accepted-length
    checks whose mean lies below their law's, in cases whose law checks all pass, still
    fails. Otherwise (the law checks' evidence alone suffices, or the acceptance evidence
    that matters reads above the law or lies in a case with a failing law check) it is
    ``inexactness``. Only the tier's reading changes: whether the audit fails is decided by
    the combined check alone, so a correct sampler's false-fail rate is unchanged.

    Parameters
    ----------
    flat : sequence of dict
        The report's flat checks (``case``, ``name``, ``pvalue``, ``passed``, ``dof``,
        ``detectable_tv``, ``details``).
    case_dicts : sequence of dict
        The report's cases (``name``, ``checks``).
    combined : dict
        The failing combined check (:func:`~specexact.audit.combined.combined_check`).
    seed : int, optional
        The audit's seed, as the combined check read it (its randomised p-values).

    Returns
    -------
    str
    """
    rate = float(combined["false_fail_rate"])
    law = [c for c in flat if not _is_accepted_length(c)]
    if not combined_check(law, rate, seed)["passed"]:
        return "inexactness"
    cases = {c["name"]: c for c in case_dicts}

    def reads_below(chk: dict) -> bool:
        below = _acceptance_below(chk)
        case = cases.get(chk["case"])
        return below is not None and below[0] < below[1] and case is not None and _law_checks_pass(case)

    under = [c for c in flat if _is_accepted_length(c) and reads_below(c)]
    return "inexactness" if combined_check(law + under, rate, seed)["passed"] else "under_accepting"


def _combined_finding(combined: dict, settings: dict, sampler: dict, kind: str = "inexactness",
                      configs: Sequence[dict] = ()) -> dict:
    """The finding of a failing combined check, of ``kind`` (:func:`combined_kind`; tier
    ``inexact`` or ``under_accepting``); its reproduction reruns the whole audit (same seed,
    false-fail rate and sample sizes; an engine audit, all of whose case ``configs`` are
    end-to-end, with ``--engine`` and the cases' method, pair and requests per class)."""
    engine = bool(configs) and all(c.get("kind") == "e2e" for c in configs)
    strongest = ", ".join(f"{s['case']} / {s['check']} p={s['pvalue']:.3g}" for s in combined["strongest"])
    message = (f"combined: the Cauchy combination of {combined['num_pvalues']} checks' p-values is "
               f"p={combined['pvalue']:.3g} <= {combined['false_fail_rate']:.3g}: evidence spread over several checks, "
               f"none of which fails on its own"
               + (f" (the {combined['neutralised']} that fail on their own left out)" if combined["neutralised"] else "")
               + f"; strongest: {strongest}")
    if kind == "under_accepting":
        message += ("; under-accepting: without the accepted-length checks the combination passes, and their "
                    "evidence that makes it fail reads below the law, in cases whose law checks all pass")
    selects = _engine_arguments(sampler, configs) if engine else ["--sampler", _shell_quote(sampler["name"])]
    parts = ["specexact", "audit", *selects, "--seed", str(settings["seed"]),
             "--false-fail-rate", f"{settings['false_fail_rate']:.6g}"]
    if settings.get("num_batches"):
        parts += ["--batches", str(int(settings["num_batches"]))]
    if settings.get("case_set") == "quick":
        parts.append("--quick")
    if settings.get("device"):
        parts += ["--device", settings["device"]]
    if engine:
        methods = sorted({c.get("method") for c in configs})
        first = configs[0]
        load = ("from specexact.audit import run_audit\n"
                "from specexact.audit.e2e_case import e2e_cases\n"
                "from specexact.decoders.engines.registry import resolve_engine\n"
                f"verifier, _ = resolve_engine({_engine_name(sampler)!r})\n"
                f"cases = e2e_cases(verifier, {methods[0] if len(methods) == 1 else None!r}, "
                f"pair={first.get('pair')!r}, "
                f"num_speculative_tokens={first.get('num_speculative_tokens')!r}, "
                f"requests_per_class={first.get('requests_per_class')!r})\n")
        cases = "cases=cases, "
    else:
        load = ("from specexact.audit import resolve_sampler, run_audit\n"
                f"verifier, _ = resolve_sampler({sampler['name']!r})\n")
        cases = ""
    python = (load + f"report = run_audit(verifier, {cases}seed={settings['seed']!r}, false_fail_rate={settings['false_fail_rate']!r}, "
              f"num_batches={settings.get('num_batches')!r}, budget_s={settings.get('budget_s')!r}, "
              f"device={settings.get('device') or 'cpu'!r})\n"
              "print(report['combined'])")
    return {
        "source": "combined",
        "case": "(all cases)",
        "check": "combined",
        "kind": kind,
        "tier": tier_of_check("combined", kind),
        "message": message,
        "pvalue": combined["pvalue"],
        "worst": [],
        "defect": None,
        "reproduction": {"command": " ".join(parts), "python": python},
    }


def add_diagnosis(report: dict) -> dict:
    """Add the report's ``diagnosis`` (since 1.3; :func:`~specexact.audit.diagnosis.diagnose`):
    which part of the sampler the failing checks point at, one entry per part."""
    report["diagnosis"] = diagnose(report)
    return report
