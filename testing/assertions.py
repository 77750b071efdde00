"""Exactness assertions for an engine's own tests: audit a verifier, fail with the findings.

In the style of TensorFlow Probability's statistical-testing helpers (``assert_true_cdf_equal_by_dkwm``
and friends: a calibrated test with a stated false-fail rate, failing with a readable
message), applied to a whole speculative-decoding verifier:

- :func:`audit_verifier` / :func:`audit_logits_verifier` run the audit
  (:func:`specexact.audit.run_audit`) and return an :class:`AuditResult` with the numbers;
- :func:`assert_verifier_exact` / :func:`assert_logits_verifier_exact` do the same and
  raise :class:`AssertionError` whose message lists every finding by severity tier
  (:mod:`specexact.audit.verdict.tiers`): the check, its p-value and detectable TV, the replay
  command, and a Python line that replays it.

An assertion fails on a finding of the tiers *inexact*, *defect on valid input* and
*under-accepting*; *hardening* findings (invalid input accepted, or refused with the wrong
exception: only the fuzz phase finds them) are listed in the message and
:attr:`AuditResult.findings` but fail it only with ``strict_inputs=True``.

The fuzz phase (:mod:`specexact.fuzz`: exact rules on generated inputs — the generator
used and reproducible, inputs unmodified, no zero-probability token, invalid input
refused — and its generated statistical cases) runs by default, as in ``specexact
audit``: a verifier drawing from torch's global RNG fails. ``fuzz=False`` leaves it out
(docs/ci/pytest-plugin.md states its cost). Every call of the verifier is limited to
``call_timeout_s`` seconds (default
:data:`~specexact.audit.sampler.call_timeout.DEFAULT_CALL_TIMEOUT_S`): a hanging verifier becomes
a *defect on valid input* (``timeout``) instead of hanging the test
(:mod:`specexact.audit.sampler.call_timeout`). A crash shows the verifier's traceback, and a
failing assertion's message ends with the part-by-part diagnosis.

A correct verifier fails an assertion with probability at most ``false_fail_rate`` (split
over the checks of the audit); a wrong one fails every check whose detectable TV its error
exceeds with probability 0.99 (``AuditResult.worst_detectable_tv`` says how small an error
the run could see). With ``batches`` the samples are identical on every run (given the
device, torch build and thread count), so a failure replays exactly.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Sequence

__all__ = ["AuditResult", "audit_verifier", "audit_logits_verifier", "assert_verifier_exact",
           "assert_logits_verifier_exact", "case_names", "sampler_name_of", "DEFAULT_BATCHES",
           "DEFAULT_CALL_TIMEOUT_S"]

#: Decoder calls per case when neither ``batches`` nor ``budget_s`` is given.
DEFAULT_BATCHES = 8

#: Seconds one call of the verifier may take before it counts as a hang (``call_timeout_s``).
DEFAULT_CALL_TIMEOUT_S = 120.0

_CASE_SETS = ("quick", "default", "all")


def case_names(which: str = "quick") -> list[str]:
    """Names of a case set, for ``pytest.mark.parametrize``.

    Parameters
    ----------
    which : {"quick", "default", "all"}
        ``"quick"``: the exact cases with 4x smaller batches (seconds per case);
        ``"default"``: the cases of ``specexact audit``; ``"all"``: those and the opt-in ones.

    Raises
    ------
    ValueError
        ``which`` is not one of these.
    """
    return [c.name for c in _case_set(which)]


def _case_set(which: str) -> list:
    from specexact.audit import default_cases, quick_cases
    from specexact.audit.cases.catalog import opt_in_cases

    if which == "quick":
        return quick_cases()
    if which == "default":
        return default_cases()
    if which == "all":
        return [*default_cases(), *opt_in_cases()]
    raise ValueError(f"cases must be one of {_CASE_SETS}, a list of case names or of cases, got {which!r}")


def _resolve_cases(cases) -> tuple[tuple, str]:
    """``(cases, case_set)`` for :class:`~specexact.audit.AuditSettings`."""
    if isinstance(cases, str):
        return tuple(_case_set(cases)), ("quick" if cases == "quick" else "default" if cases == "default" else "custom")
    if not isinstance(cases, Sequence) or not cases:
        raise ValueError(f"cases must be a non-empty list of case names or cases, or one of {_CASE_SETS}, "
                         f"got {cases!r}")
    names = [c for c in cases if isinstance(c, str)]
    if names and len(names) != len(cases):
        raise TypeError(f"cases must be all names or all case objects, got {cases!r}")
    if not names:
        return tuple(cases), "custom"
    quick = {c.name: c for c in _case_set("quick")}
    every = {c.name: c for c in _case_set("all")}
    unknown = [n for n in names if n not in every]
    if unknown:
        raise ValueError(f"unknown case name(s) {unknown}; known: {sorted(every)}")
    # Names of quick cases mean the quick cases (their replay uses --quick).
    if all(n in quick for n in names):
        return tuple(quick[n] for n in names), "quick"
    return tuple(every[n] for n in names), "default"


def sampler_name_of(obj) -> str:
    """``MODULE:NAME`` under which ``obj`` can be imported again (for replay commands).

    A function or class gives its ``__module__`` and ``__qualname__``; any other object
    (an adapter instance) the module-level name bound to it, if there is one; else
    ``MODULE:<TYPE instance>``, which names it for reading but not for importing.
    """
    module = getattr(obj, "__module__", None) or type(obj).__module__
    qualname = getattr(obj, "__qualname__", None)
    if isinstance(qualname, str) and "<locals>" not in qualname:
        return f"{module}:{qualname}"
    mod = sys.modules.get(type(obj).__module__)
    for name, value in vars(mod).items() if mod is not None else ():
        if value is obj and not name.startswith("_"):
            return f"{type(obj).__module__}:{name}"
    return f"{type(obj).__module__}:<{type(obj).__qualname__} instance>"


@dataclass(frozen=True)
class AuditResult:
    """The outcome of an audit run by :func:`audit_verifier`.

    Attributes
    ----------
    report : dict
        The full report (schema ``specexact.audit/1``, ``reports/schema.md``): what
        ``specexact audit`` writes as JSON.
    """

    report: dict

    @property
    def passed(self) -> bool:
        """No finding of a failing tier: no check failed, no case had a defect, no fuzz
        finding other than hardening (hardening too with ``strict_inputs``)."""
        return self.report["verdict"] == "pass"

    @property
    def findings(self) -> list[dict]:
        """The report's findings (failing checks, defects and fuzz findings), each with
        ``tier`` and ``reproduction``."""
        from specexact.audit.verdict.build import report_findings

        return report_findings(self.report)

    @property
    def tiers(self) -> dict:
        """Findings per tier: ``{"inexact": n, "defect": n, "under_accepting": n, "hardening": n}``."""
        from specexact.audit.verdict.tiers import tier_counts

        return tier_counts(self.findings)

    @property
    def failing_findings(self) -> list[dict]:
        """The findings whose tier fails the audit (hardening only with ``strict_inputs``)."""
        from specexact.audit.verdict.tiers import failing_tiers

        bad = failing_tiers(bool(self.report["settings"].get("strict_inputs")))
        return [f for f in self.findings if f["tier"] in bad]

    @property
    def checks(self) -> list[dict]:
        """Every check: ``case``, ``name``, ``pvalue``, ``n``, ``false_fail_rate``, ``detectable_tv``, ..."""
        return list(self.report["checks"])

    @property
    def num_sequences(self) -> int:
        return int(self.report["num_sequences"])

    @property
    def false_fail_rate(self) -> float:
        """The whole audit's false-fail rate."""
        return float(self.report["settings"]["false_fail_rate"])

    @property
    def per_check_false_fail_rate(self) -> float:
        return float(self.report["settings"]["per_check_false_fail_rate"])

    @property
    def worst_detectable_tv(self) -> float | None:
        """The largest detectable TV over the checks that guarantee one (None if none does):
        every check detects an error at least this large with probability 0.99."""
        tvs = [c["detectable_tv"] for c in self.report["checks"] if isinstance(c["detectable_tv"], (int, float))]
        return max(tvs) if tvs else None

    def detectable_tv(self, case: str, check: str) -> float | None:
        """The detectable TV of one check (None where it guarantees none)."""
        for c in self.report["checks"]:
            if c["case"] == case and c["name"] == check:
                tv = c["detectable_tv"]
                return tv if isinstance(tv, (int, float)) else None
        raise KeyError(f"no check {check!r} of case {case!r}")

    @property
    def message(self) -> str:
        """What an assertion prints: a one-line verdict, every finding by tier with its
        replay (a defect with the verifier's traceback), then the diagnosis part by part."""
        from specexact.audit.verdict.tiers import TIER_LABELS, TIERS, failing_tiers, findings_by_tier

        s = self.report["settings"]
        sizes = (f"{s['num_batches']} decoder calls per case" if s.get("num_batches") is not None
                 else f"a {s.get('budget_s'):g} s budget")
        threads = (s.get("threads") or {}).get("threads")
        counts = self.tiers
        by_tier = ", ".join(f"{TIER_LABELS[t]} {counts[t]}" for t in TIERS if counts[t])
        failing = len(self.failing_findings)
        if self.passed:
            verdict = "passed" + (f" with {len(self.findings)} finding(s) that do not fail it ({by_tier}; "
                                  "strict_inputs=True fails hardening findings)" if self.findings else "")
        else:
            verdict = f"is not exact: {failing} finding(s) of a failing tier ({by_tier})"
        head = (f"sampler {self.report['sampler']['name']} "
                + verdict
                + f" — {len(self.checks)} checks over {len(self.report['cases'])} case(s), {self.num_sequences:,} "
                f"sequences, {sizes}, seed {s['seed']}"
                + (f", {threads} torch thread(s)" if threads else "")
                + f"; false-fail rate {self.false_fail_rate:g} for the audit "
                f"({self.per_check_false_fail_rate:.3g} per check)")
        lines = [head]
        bad = failing_tiers(bool(s.get("strict_inputs")))
        shown: dict = {}  # tracebacks already in the message -> the finding that shows it
        for tier, group in findings_by_tier(self.findings):
            lines.append(f"{TIER_LABELS.get(tier, tier)} ({len(group)}): "
                         + ("fails the audit" if tier in bad else "listed, does not fail the audit"))
            for f in group:
                if f.get("source") == "fuzz":
                    lines.append(f"- {f['case']} / {f['check']} (fuzz, exact rule) — {f['message']}")
                    lines.append(f"  shrunk example: {f.get('example')}")
                    lines.append(f"  replay: {f['reproduction']['command']} (or the report's fuzz.findings"
                                 f"[{f.get('fuzz_index', 0)}].replay script)")
                    continue
                tv = (_fmt_tv(self.detectable_tv(f["case"], f["check"]))
                      if f["kind"] == "inexactness" and f.get("source") != "combined" else "-")
                lines.append(f"- {f['case']} / {f['check']} ({f['kind']}): p-value {f['pvalue']:.3g}, detectable TV "
                             f"{tv} — {f['message']}")
                worst = f.get("worst") or []
                if worst:
                    lines.append("  worst outcomes (observed / expected): "
                                 + "; ".join(f"{w[0]}: {_num(w[1])} / {_num(w[2])}" for w in worst[:3]))
                if f.get("defect"):
                    lines += _defect_lines(str(f["defect"]), f["message"], shown, f"{f['case']} / {f['check']}")
                repro = f["reproduction"]
                lines.append(f"  replay: {repro['command']}")
                lines.append(f"  python: {_python_replay(self.report, f)}")
        lines += _diagnosis_lines(self.report)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.message


def _defect_lines(defect: str, message: str, shown: dict, label: str) -> list[str]:
    """The lines of a defect's details below its finding: the sampler's traceback (what
    :func:`specexact.audit.cases.result.sampler_failure` recorded), without the first line
    when it repeats the finding's message, and only once per message when several cases
    hit the same one (``shown`` remembers them)."""
    body = defect.rstrip().splitlines()
    if body and body[0].strip() and body[0].strip() in message:
        body = body[1:]
    if not body:
        return []
    key = "\n".join(body)
    if key in shown:
        return [f"  (same traceback as {shown[key]} above)"]
    shown[key] = label
    return ["  " + line for line in body]


def _diagnosis_lines(report: dict) -> list[str]:
    """The diagnosis (:func:`specexact.audit.verdict.diagnosis.diagnose`) part by part, as the
    Markdown report shows it (parts not tested left out), when anything was found."""
    from specexact.reports.diagnosis_text import diagnosis_rows

    diagnosis = report.get("diagnosis")
    if not diagnosis or not report.get("findings"):
        return []
    strict = bool(report["settings"].get("strict_inputs"))
    lines = [f"diagnosis: {diagnosis.get('summary')}"]
    for row in diagnosis_rows(diagnosis, strict=strict):
        if row["status"] != "not_tested":
            lines.append(f"  {row['symbol']} {row['label']}: {row['text']}")
    lines += [f"  note: {n}" for n in diagnosis.get("notes") or []]
    return lines


def _fmt_tv(tv) -> str:
    return "none (no TV guaranteed)" if tv is None else f"{tv:.3g}"


def _num(x) -> str:
    return f"{x:,.1f}" if isinstance(x, (int, float)) else str(x)


def _python_replay(report: dict, finding: dict) -> str:
    """A Python line that reruns the finding's case through :func:`audit_verifier` (same
    seed, sample size, per-check false-fail rate and threads: the same samples)."""
    repro = finding["reproduction"]
    rate = repro.get("false_fail_rate") or repro.get("per_check_false_fail_rate")
    threads = repro.get("threads")
    config = next((c.get("config") or {} for c in report["cases"] if c["name"] == finding["case"]), {})
    if config.get("kind") == "e2e":  # an engine's end-to-end case: audit_engine, built from the engine again
        from specexact.audit.verdict.reproduction_commands import engine_argument

        return ("from specexact.testing import audit_engine; "
                "from specexact.decoders.engines.registry import resolve_engine; "
                f"print(audit_engine(resolve_engine({engine_argument(report['sampler'])!r})[0], "
                f"method={config.get('method')!r}, pair={config.get('pair')!r}, "
                f"requests_per_class={config.get('requests_per_class')!r}, "
                f"num_speculative_tokens={config.get('num_speculative_tokens')!r}, batches={repro['num_batches']}, "
                f"seed={report['settings']['seed']}, threads={threads or 1}, false_fail_rate={rate:.6g}).message)")
    module, _, name = report["sampler"]["name"].partition(":")
    fn = "audit_logits_verifier" if (report["settings"].get("processing") or {}).get("level") == "logits" \
        else "audit_verifier"
    importable = name and name.isidentifier()
    obj = name if importable else "<your verifier>"
    head = f"from specexact.testing import {fn}; " + (f"from {module} import {name}; " if importable else "")
    tail = f"seed={report['settings']['seed']}" + (f", threads={threads}" if threads else "")
    generated = {c["name"] for c in report["cases"] if "fuzz" in ((c.get("config") or {}).get("tags") or ())}
    if finding["case"] in generated or finding.get("source") == "combined" or rate is None:
        # A case the fuzz phase generated: no name selects it, so the whole audit again (same
        # cases, seed, rate and calls: the same generated cases and per-check rate).
        cases = [c["name"] for c in report["cases"] if c["name"] not in generated]
        batches = repro.get("num_batches") or report["settings"].get("num_batches")
        return (head + f"print({fn}({obj}, cases={cases!r}, batches={batches}, {tail}, "
                f"false_fail_rate={report['settings']['false_fail_rate']:.6g}).message)")
    # One case alone, without the fuzz phase (its generated cases would change the per-check rate).
    return (head + f"print({fn}({obj}, cases=[{finding['case']!r}], batches={repro['num_batches']}, {tail}, "
            f"false_fail_rate={rate:.6g}, fuzz=False).message)")


def _audit(verifier, *, level: str, cases, batches, budget_s, false_fail_rate, seed, device, threads,
           sampler_name, fuzz=True, fuzz_examples=None, strict_inputs=False,
           call_timeout_s=DEFAULT_CALL_TIMEOUT_S) -> AuditResult:
    from specexact.audit import AuditSettings, run_audit
    from specexact.audit.sampler.call_timeout import with_call_timeout
    from specexact.decoders.adapters.protocol import is_logits_level

    if level == "logits" and not is_logits_level(verifier):
        raise TypeError(f"verifier must be a logits-level adapter (capabilities.logits_level and verify_logits), "
                        f"got {type(verifier).__name__}; use audit_verifier for the probability level")
    if level == "probability" and (is_logits_level(verifier) or not callable(verifier)):
        raise TypeError(f"verifier must be a callable with the verify protocol, got {type(verifier).__name__}"
                        + ("; use audit_logits_verifier for a logits-level adapter" if is_logits_level(verifier)
                           else ""))
    if batches is not None and budget_s is not None:
        raise ValueError(f"give batches or budget_s, not both (got batches={batches!r}, budget_s={budget_s!r})")
    if batches is None and budget_s is None:
        batches = DEFAULT_BATCHES
    chosen, case_set = _resolve_cases(cases)
    name = sampler_name or sampler_name_of(verifier)
    settings = AuditSettings(sampler_name=name, sampler_target=name, cases=chosen, case_set=case_set,
                             false_fail_rate=false_fail_rate, budget_s=budget_s if batches is None else None,
                             num_batches=batches, seed=seed, device=str(device), threads=threads,
                             fuzz=bool(fuzz), fuzz_examples=fuzz_examples, strict_inputs=bool(strict_inputs))
    return AuditResult(run_audit(with_call_timeout(verifier, call_timeout_s), settings))


_COMMON = """cases : {"quick", "default", "all"} or sequence of str or of cases
        What to run (default ``"quick"``: the exact cases with small batches, seconds each);
        names from :func:`case_names`, or :class:`~specexact.audit.AuditCase` objects.
    batches : int, optional
        Decoder calls per case (rounded up to even): reproducible sample sizes. Default
        :data:`DEFAULT_BATCHES` unless ``budget_s`` is given.
    budget_s : float, optional
        A time budget for the whole audit instead (sample sizes then depend on the
        machine's speed, never on the data).
    false_fail_rate : float
        Chance that a correct verifier fails, in (0, 1) (default 1e-6); split equally over
        every check. In a pytest session use the ``specexact_false_fail_rate`` fixture.
    seed : int
    device : str or torch.device
    threads : int, optional
        Torch threads for the audit (restored afterwards); default: torch's count with
        ``batches``, chosen by timing with ``budget_s``.
    sampler_name : str, optional
        ``MODULE:NAME`` of the verifier in replay commands (default
        :func:`sampler_name_of`).
    fuzz : bool
        Also run the fuzz phase (exact rules on generated inputs, boundary-uniform probes,
        invalid inputs, and its generated statistical cases); default True, as
        ``specexact audit``: a verifier that draws from torch's global RNG, ignores its
        generator or modifies its inputs fails. False leaves it out (faster; see
        docs/ci/pytest-plugin.md for the cost).
    fuzz_examples : int, optional
        With ``fuzz``: examples per exact family (default: the ``ci`` profile's).
    strict_inputs : bool
        Hardening findings (invalid input accepted, or refused with the wrong exception)
        fail the audit too; default False: listed, not failing.
    call_timeout_s : float or None
        Seconds one call of the verifier may take (default :data:`DEFAULT_CALL_TIMEOUT_S`);
        past it the call is a hang: a *defect on valid input* of kind ``timeout``, and the
        verifier is not called again (:func:`specexact.audit.sampler.call_timeout.with_call_timeout`).
        None: no limit."""


def audit_verifier(verify, *, cases="quick", batches: int | None = None, budget_s: float | None = None,
                   false_fail_rate: float = 1e-6, seed: int = 0, device="cpu", threads: int | None = None,
                   sampler_name: str | None = None, fuzz: bool = True, fuzz_examples: int | None = None,
                   strict_inputs: bool = False, call_timeout_s: float | None = DEFAULT_CALL_TIMEOUT_S) -> AuditResult:
    return _audit(verify, level="probability", cases=cases, batches=batches, budget_s=budget_s,
                  false_fail_rate=false_fail_rate, seed=seed, device=device, threads=threads,
                  sampler_name=sampler_name, fuzz=fuzz, fuzz_examples=fuzz_examples, strict_inputs=strict_inputs,
                  call_timeout_s=call_timeout_s)


def audit_logits_verifier(adapter, *, cases="quick", batches: int | None = None, budget_s: float | None = None,
                          false_fail_rate: float = 1e-6, seed: int = 0, device="cpu", threads: int | None = None,
                          sampler_name: str | None = None, fuzz: bool = True, fuzz_examples: int | None = None,
                          strict_inputs: bool = False,
                          call_timeout_s: float | None = DEFAULT_CALL_TIMEOUT_S) -> AuditResult:
    return _audit(adapter, level="logits", cases=cases, batches=batches, budget_s=budget_s,
                  false_fail_rate=false_fail_rate, seed=seed, device=device, threads=threads,
                  sampler_name=sampler_name, fuzz=fuzz, fuzz_examples=fuzz_examples, strict_inputs=strict_inputs,
                  call_timeout_s=call_timeout_s)


def assert_verifier_exact(verify, *, cases="quick", batches: int | None = None, budget_s: float | None = None,
                          false_fail_rate: float = 1e-6, seed: int = 0, device="cpu", threads: int | None = None,
                          sampler_name: str | None = None, fuzz: bool = True, fuzz_examples: int | None = None,
                          strict_inputs: bool = False,
                          call_timeout_s: float | None = DEFAULT_CALL_TIMEOUT_S) -> AuditResult:
    __tracebackhide__ = True  # pytest shows the caller's line, not this one
    result = audit_verifier(verify, cases=cases, batches=batches, budget_s=budget_s, false_fail_rate=false_fail_rate,
                            seed=seed, device=device, threads=threads, sampler_name=sampler_name, fuzz=fuzz,
                            fuzz_examples=fuzz_examples, strict_inputs=strict_inputs, call_timeout_s=call_timeout_s)
    if not result.passed:
        raise AssertionError(result.message)
    return result


def assert_logits_verifier_exact(adapter, *, cases="quick", batches: int | None = None,
                                 budget_s: float | None = None, false_fail_rate: float = 1e-6, seed: int = 0,
                                 device="cpu", threads: int | None = None,
                                 sampler_name: str | None = None, fuzz: bool = True,
                                 fuzz_examples: int | None = None, strict_inputs: bool = False,
                                 call_timeout_s: float | None = DEFAULT_CALL_TIMEOUT_S) -> AuditResult:
    __tracebackhide__ = True
    result = audit_logits_verifier(adapter, cases=cases, batches=batches, budget_s=budget_s,
                                   false_fail_rate=false_fail_rate, seed=seed, device=device, threads=threads,
                                   sampler_name=sampler_name, fuzz=fuzz, fuzz_examples=fuzz_examples,
                                   strict_inputs=strict_inputs, call_timeout_s=call_timeout_s)
    if not result.passed:
        raise AssertionError(result.message)
    return result


audit_verifier.__doc__ = f"""Audit a probability-level verifier; return the result (never raises on a finding).

    The verifier runs inside the built-in speculative decoder (drafting, per-prefix target
    processing, EOS and ``max_new_tokens``) on small seeded models whose laws are
    enumerated exactly (``specexact audit``, docs/checks.md).

    Parameters
    ----------
    verify : callable
        ``verify(draft_token_ids [B, K] int64, draft_probs [B, K, V] float, target_probs
        [B, K+1, V] float, generator) -> [B, K+1] int64`` (the
        :func:`specexact.decoders.verify` protocol).
    {_COMMON}

    Returns
    -------
    AuditResult

    Raises
    ------
    TypeError
        ``verify`` is not callable, or is a logits-level adapter.
    ValueError
        Both ``batches`` and ``budget_s``, an unknown case name, a rate outside (0, 1).
    """

audit_logits_verifier.__doc__ = f"""Audit a logits-level adapter; return the result (never raises on a finding).

    The adapter gets raw target logits with per-row sampling parameters and processes them
    itself (docs/auditing/logits-level.md); the reference laws use its declared order of
    operations, and cases needing an operation it lacks are skipped (listed in
    ``report["settings"]["skipped_cases"]``).

    Parameters
    ----------
    adapter : object
        With ``capabilities`` (``Capabilities(logits_level=True, ...)``) and
        ``verify_logits(inputs: LogitsVerifyInputs, generator) -> [B, K+1] int64``
        (:mod:`specexact.decoders.adapters`).
    {_COMMON}

    Returns
    -------
    AuditResult

    Raises
    ------
    TypeError
        ``adapter`` is not a logits-level adapter.
    ValueError
        As :func:`audit_verifier`, or no selected case can drive the adapter.
    """

assert_verifier_exact.__doc__ = f"""Audit ``verify`` and raise :class:`AssertionError` on any finding.

    Parameters
    ----------
    verify : callable
        As :func:`audit_verifier`.
    {_COMMON}

    Returns
    -------
    AuditResult
        When the verifier passed (for the numbers).

    Raises
    ------
    AssertionError
        A finding of a failing tier: a check failed, a case had a defect, or a fuzz
        finding other than hardening (hardening too with ``strict_inputs``); the message
        is :attr:`AuditResult.message`: every finding by tier, with its check, p-value,
        detectable TV, replay command and Python replay.
    TypeError, ValueError
        As :func:`audit_verifier`.
    """

assert_logits_verifier_exact.__doc__ = f"""The logits-level twin of :func:`assert_verifier_exact`.

    Parameters
    ----------
    adapter : object
        As :func:`audit_logits_verifier`.
    {_COMMON}

    Returns
    -------
    AuditResult

    Raises
    ------
    AssertionError
        As :func:`assert_verifier_exact`.
    TypeError, ValueError
        As :func:`audit_logits_verifier`.
    """
