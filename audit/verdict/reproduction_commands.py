"""How each finding of a report is reproduced: the ``specexact audit`` (or ``specexact
fuzz``) command and the Python snippet of a failing case's check
(:func:`case_reproduction`: a catalogue case, an end-to-end case of an engine, a
fuzz-generated case), of a failing combined check (:func:`combined_reproduction`) and of
the fuzz phase (:func:`fuzz_command`). Used by :mod:`specexact.audit.verdict.findings`.
"""

from __future__ import annotations

import re
from typing import Sequence

from specexact.audit.cases.e2e.checks import e2e_num_checks
from specexact.audit.cases.e2e.shrink import shrunk_replay
from specexact.audit.cases.verify_case import VERIFY_CHECKS
from specexact.audit.checks.decisions_checks import DECISION_CHECKS
from specexact.audit.sampler.samplers import ENGINE_SAMPLER_PREFIX
from specexact.audit.verdict.finding_kinds import finding_kind
from specexact.decoders.engines.registry import engine_names

__all__ = ["ENGINE_SAMPLER_PREFIX", "case_reproduction", "combined_reproduction", "engine_argument", "fuzz_command"]


def _checks_of(config: dict) -> int:
    if config.get("kind") == "verify":
        return VERIFY_CHECKS
    if config.get("kind") == "e2e":  # audit/cases/e2e/kind.py, E2EKind.checks
        return e2e_num_checks(len(config.get("row_classes") or []),
                              sum(bool(a) for a in config.get("check_acceptance") or []),
                              len(config.get("position_bands") or []), bool(config.get("check_logprobs")),
                              bool(config.get("unseeded")), bool(config.get("check_in_mix")),
                              bool(config.get("check_alone")))
    return (4 if config.get("exact", True) else 5) * len(config.get("row_classes", []) or [1]) + DECISION_CHECKS


def case_reproduction(case: dict, settings: dict, sampler: dict) -> dict:
    """The reproduction of a finding of ``case``: the ``specexact audit`` command that reruns
    the case alone at the same per-check rate (an end-to-end or fuzz-generated case: see
    :func:`_e2e_reproduction`, :func:`_generated_reproduction`), the Python that does the
    same, and the sample sizes and rates they use."""
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
    # combined share too (audit/checks/combined.py)
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
    if execution.get("isolated") or finding_kind(case, {"name": "defect", "details": {}}) in ("timeout",):
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




def engine_argument(sampler: dict) -> str:
    """The ``--engine`` value that names the audited engine again: the sampler's name without
    :data:`ENGINE_SAMPLER_PREFIX` when that is a registered name (or no target says more),
    else the sampler's ``MODULE:CLASS`` target (``--engine MODULE:CLASS``, and
    ``specexact.testing.audit_engine`` of an engine that no entry point names)."""
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
    parts = ["--engine", _shell_quote(engine_argument(sampler))]
    methods = sorted({c.get("method") for c in configs})
    if len(methods) == 1:
        parts += ["--method", str(methods[0])]
    pairs = sorted({c.get("pair") for c in configs})
    if len(pairs) == 1:
        parts += ["--pair", str(pairs[0])]
    # the long case keeps its own size (LONG_REQUESTS_PER_CLASS), whatever --requests-per-class says
    sizes = sorted({int(c.get("requests_per_class") or 0) for c in configs if not c.get("position_bands")})
    if len(sizes) == 1 and sizes[0]:
        parts += ["--requests-per-class", str(sizes[0])]
    return parts


def _e2e_reproduction(case: dict, settings: dict, sampler: dict, nb: int, alpha: float, rate: float,
                      threads: int | None) -> dict:
    """The reproduction of an end-to-end case: ``--engine`` with the case's method, pair and
    requests per class (:func:`~specexact.audit.cases.e2e.catalog.e2e_cases` makes its cases
    from the engine) and ``--case`` its name, the case's calls and the rate that gives the same
    per-check rate; the Python rebuilds the case from the engine."""
    config = case.get("config", {})
    engine = engine_argument(sampler)
    parts = (["specexact", "audit"] + _engine_arguments(sampler, [config]) + ["--case", case["name"]]
             + ["--seed", str(settings["seed"]), "--batches", str(nb), "--false-fail-rate", f"{rate:.6g}"])
    if settings.get("device"):
        parts += ["--device", settings["device"]]
    if threads:
        parts += ["--threads", str(int(threads))]
    if config.get("scenario") is not None:  # a generated scenario: drawn again from the seed
        select = ("from specexact.audit.cases.e2e.scenarios import scenario_cases\n"
                  "from specexact.decoders.engines.registry import resolve_engine\n"
                  f"engine, _ = resolve_engine({engine!r})\n"
                  f"case = next(c for c in scenario_cases(engine, {config.get('method')!r}, seed={settings['seed']!r}, "
                  f"pair={config.get('pair')!r}) if c.name == {case['name']!r})\n")
    else:
        select = ("from specexact.audit.e2e_case import e2e_cases\n"
                  "from specexact.decoders.engines.registry import resolve_engine\n"
                  f"engine, _ = resolve_engine({engine!r})\n"
                  f"case = next(c for c in e2e_cases(engine, {config.get('method')!r}, pair={config.get('pair')!r}, "
                  + (f"long_case_too=True, long_requests_per_class={config.get('requests_per_class')!r}"
                     if config.get("position_bands") else
                     f"num_speculative_tokens={config.get('num_speculative_tokens')!r}, "
                     f"requests_per_class={config.get('requests_per_class')!r}")
                  + f") if c.name == {case['name']!r})\n")
    out = {
        "command": " ".join(parts),
        "python": (
            (f"import torch\ntorch.set_num_threads({int(threads)})\n" if threads else "")
            + "from specexact.audit import run_case\n" + select
            + f"result = run_case(case, engine, false_fail_rate={alpha!r}, seed={settings['seed']!r}, "
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
    shrunk = case.get("shrunk") or {}
    if shrunk.get("scenario") is not None:  # the smallest failing scenario and its replay
        calls = int(shrunk.get("num_batches") or case.get("num_batches") or nb)
        out["shrunk"] = {"scenario": shrunk["scenario"], "description": shrunk.get("description"),
                         "failing": shrunk.get("failing"), "num_batches": calls,
                         "python": shrunk_replay(case, shrunk["scenario"], engine, seed=settings["seed"],
                                                 num_batches=calls, alpha=alpha, threads=threads)}
    return out


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


def fuzz_command(sampler: dict, fuzz: dict) -> str:
    """The ``specexact fuzz`` command that reruns the exact families of the audit's fuzz phase."""
    fs = fuzz.get("settings") or {}
    parts = ["specexact", "fuzz", "--sampler", _shell_quote(sampler["name"]), "--seed", str(fs.get("seed", 0)),
             "--profile", str(fs.get("profile") or "ci"), "--exact-only"]
    if fs.get("examples_per_family"):
        parts += ["--examples", str(int(fs["examples_per_family"]))]
    return " ".join(parts)


def _shell_quote(text: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9_.:/=+-]+", text or ""):
        return text
    return "'" + (text or "").replace("'", "'\"'\"'") + "'"


def combined_reproduction(settings: dict, sampler: dict, configs: Sequence[dict] = ()) -> dict:
    """The reproduction of a failing combined check: it reruns the whole audit (same seed,
    false-fail rate and sample sizes; an engine audit, all of whose case ``configs`` are
    end-to-end, with ``--engine`` and the cases' method, pair and requests per class)."""
    engine = bool(configs) and all(c.get("kind") == "e2e" for c in configs)
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
        short = [c for c in configs if not c.get("position_bands")]
        first = short[0] if short else configs[0]
        longs = [c for c in configs if c.get("position_bands") and c.get("scenario") is None]
        drawn = any(c.get("scenario") is not None for c in configs)  # generated scenarios of the seed
        load = ("from specexact.audit import run_audit\n"
                "from specexact.audit.e2e_case import e2e_cases\n"
                "from specexact.decoders.engines.registry import resolve_engine\n"
                f"verifier, _ = resolve_engine({engine_argument(sampler)!r})\n"
                f"cases = e2e_cases(verifier, {methods[0] if len(methods) == 1 else None!r}, "
                f"pair={first.get('pair')!r}, "
                f"num_speculative_tokens={first.get('num_speculative_tokens')!r}, "
                f"requests_per_class={first.get('requests_per_class')!r}"
                + (f", long_case_too=True, long_requests_per_class={longs[0].get('requests_per_class')!r}"
                   if longs else "")
                + (f", scenarios=True, scenario_seed={settings['seed']!r}" if drawn else "") + ")\n")
        cases = "cases=cases, "
    else:
        load = ("from specexact.audit import resolve_sampler, run_audit\n"
                f"verifier, _ = resolve_sampler({sampler['name']!r})\n")
        cases = ""
    python = (load + f"report = run_audit(verifier, {cases}seed={settings['seed']!r}, false_fail_rate={settings['false_fail_rate']!r}, "
              f"num_batches={settings.get('num_batches')!r}, budget_s={settings.get('budget_s')!r}, "
              f"device={settings.get('device') or 'cpu'!r})\n"
              "print(report['combined'])")
    return {"command": " ".join(parts), "python": python}
