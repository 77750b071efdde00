"""Regression mode: compare an audit report with an earlier one (its *baseline*).

:func:`compare_to_baseline` finds what got worse:

- **new failures**: a check (same case, same name) that passed in the baseline, or did
  not exist there, fails now;
- **new defects**: a case that crashed or broke the protocol now but not in the baseline;
- **acceptance drops**: per case and row class, the drafts accepted in the first round
  fell by more than chance allows. The mean accepted length (or, for two-sample cases,
  the first-draft acceptance rate) of the two reports is compared with a one-sided
  two-sample test at ``false_alarm_rate`` split equally (Bonferroni) over the
  comparisons, so an unchanged sampler is flagged with probability at most
  ``false_alarm_rate`` in all. Each comparison states the drop it detects with
  probability 0.99 (:mod:`~specexact.audit.verdict.acceptance_drop`).

A regression is any of the three. Checks failing in both reports ("still failing") and
checks fixed since are listed but are not regressions. The severity tiers
(:mod:`specexact.audit.verdict.tiers`) hold here too: a new finding of the ``hardening`` tier
(invalid input accepted, or refused with the wrong exception) is listed and counted as
``new_hardening`` but is a regression only with ``strict_inputs`` (``--strict-inputs``),
as it fails an audit only then.

The fuzz phase's findings (exact rules, no statistics) take part as checks of the pseudo
case ``"fuzz"`` named ``family / rule[example family]`` (:func:`fuzz_finding_key`): the
family of the shrunk failing example — the corruption for invalid inputs, the pair family
(``draft_above``, ``identical``, ...) otherwise — and, for the acceptance rule, whether the
sampler rejected a draft it must accept or accepted one it must reject. A family stops at
its first failure, so a second defect under a rule that already fails shows only as a
different failing example: keyed by the rule alone it would hide behind the recorded one
(a sampler scaling acceptance by 0.97 passed against SGLang's baseline that way). A
finding absent from the baseline is a new failure, one in both is still failing, one in
the baseline only is fixed — provided the baseline ran the fuzz phase (otherwise its
findings are new). The same seed and ``--fuzz-examples`` give the same examples, hence
the same keys, for an unchanged sampler; with another seed a known defect may shrink to
another example family and show as new (a false alarm to read, never a silent pass). A fuzz finding has no p-value: it is
recorded with ``pvalue`` 0 and ``false_fail_rate`` 0 (exact).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from specexact.audit.verdict.acceptance_drop import AcceptanceComparison, acceptance_stats, compare_acceptance
from specexact.audit.verdict.tiers import failing_tiers, tier_of_fuzz_rule

__all__ = ["BaselineDiff", "compare_to_baseline", "fuzz_finding_key", "fuzz_finding_keys"]


@dataclass
class BaselineDiff:
    """What changed between a baseline report and the current one.

    ``regressed`` is True on any new failure, new defect or acceptance drop (a new finding
    of the ``hardening`` tier is a new failure only with ``strict_inputs``; otherwise it is
    in ``new_hardening``, listed, not a regression).
    """

    new_failures: list[dict] = field(default_factory=list)
    new_hardening: list[dict] = field(default_factory=list)
    strict_inputs: bool = False
    new_defects: list[dict] = field(default_factory=list)
    acceptance: list[AcceptanceComparison] = field(default_factory=list)
    still_failing: list[dict] = field(default_factory=list)
    fixed: list[dict] = field(default_factory=list)
    not_compared: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    false_alarm_rate: float = 1e-6

    @property
    def acceptance_drops(self) -> list[AcceptanceComparison]:
        return [c for c in self.acceptance if c.dropped]

    @property
    def regressed(self) -> bool:
        return bool(self.new_failures or self.new_defects or self.acceptance_drops)

    def to_dict(self) -> dict:
        """JSON-ready form (for a report's ``baseline`` section)."""
        return {
            "regressed": self.regressed,
            "new_failures": self.new_failures,
            "new_hardening": self.new_hardening,
            "strict_inputs": self.strict_inputs,
            "new_defects": self.new_defects,
            "acceptance": [asdict(c) for c in self.acceptance],
            "still_failing": self.still_failing,
            "fixed": self.fixed,
            "not_compared": self.not_compared,
            "notes": self.notes,
            "false_alarm_rate": self.false_alarm_rate,
        }

    def summary(self) -> str:
        """A few readable lines: the verdict, then every regression, then the rest."""
        lines = [f"baseline comparison: {'REGRESSED' if self.regressed else 'no regression'} "
                 f"({len(self.new_failures)} new failures, {len(self.new_defects)} new defects, "
                 f"{len(self.acceptance_drops)} acceptance drops of {len(self.acceptance)} compared)"]
        for f in self.new_failures:
            if f["case"] == "fuzz":
                lines.append(f"  new failure  fuzz / {f['check']}: an exact rule broken (baseline: no such finding)")
                continue
            was = "absent" if f["baseline_pvalue"] is None else f"passed, p={f['baseline_pvalue']:.3g}"
            lines.append(f"  new failure  {f['case']} / {f['check']}: p={f['pvalue']:.3g} "
                         f"<= {f['false_fail_rate']:.3g} (baseline: {was})")
        for d in self.new_defects:
            lines.append(f"  new defect   {d['case']}: {d['defect'].splitlines()[0]}")
        for f in self.new_hardening:
            lines.append(f"  new hardening fuzz / {f['check']}: invalid input not refused (not a regression: "
                         "--strict-inputs makes it one)")
        for c in self.acceptance_drops:
            lines.append(f"  acceptance   {c.case} / {c.row_class}: {c.statistic} {c.baseline:.4g} -> {c.current:.4g} "
                         f"(drop {c.drop:.3g} > allowed {c.allowed_drop:.3g}, p={c.pvalue:.3g})")
        for f in self.still_failing:
            lines.append(f"  still failing {f['case']} / {f['check']}: p={f['pvalue']:.3g}")
        for f in self.fixed:
            lines.append(f"  fixed        {f['case']} / {f['check']}: p={f['pvalue']:.3g}")
        if self.acceptance and not self.acceptance_drops:
            worst = max(self.acceptance, key=lambda c: c.detectable_drop)
            lines.append(f"  acceptance: no drop in {len(self.acceptance)} comparisons; largest detectable drop "
                         f"{worst.detectable_drop:.3g} ({worst.case} / {worst.row_class}, {worst.statistic})")
        for s in self.not_compared:
            lines.append(f"  not compared {s}")
        for s in self.notes:
            lines.append(f"  note: {s}")
        return "\n".join(lines)


def _checks(report: Mapping[str, Any]) -> dict[tuple[str, str], dict]:
    return {(c["case"], c["name"]): c for c in report.get("checks", [])}


def fuzz_finding_key(finding: Mapping[str, Any]) -> str:
    """``family / rule[example family]`` of one fuzz finding, with the direction for an
    acceptance-rule finding (``, rejects`` a draft it must accept / ``, accepts`` one it
    must reject): the identity regression mode compares (module docstring)."""
    kind = (finding.get("example_summary") or {}).get("family", "?")
    direction = ""
    if finding["rule"] in ("acceptance_rule", "declared_processing"):
        message = finding.get("message") or ""
        direction = ", rejects" if "must accept" in message else ", accepts" if "must reject" in message else ""
    return f"{finding['family']} / {finding['rule']}[{kind}{direction}]"


def fuzz_finding_keys(report: Mapping[str, Any]) -> list[str]:
    """:func:`fuzz_finding_key` of each fuzz finding of ``report``, sorted, without repeats."""
    return sorted(_fuzz_rules(report))


def _fuzz_rules(report: Mapping[str, Any]) -> dict[str, str]:
    """``{fuzz_finding_key: rule}`` of the fuzz findings of ``report``."""
    return {fuzz_finding_key(f): f["rule"] for f in ((report.get("fuzz") or {}).get("findings") or [])}


def _compare_fuzz(report: Mapping[str, Any], baseline: Mapping[str, Any], diff: "BaselineDiff") -> None:
    if not report.get("fuzz"):
        for key in fuzz_finding_keys(baseline):
            diff.not_compared.append(f"fuzz / {key}: in the baseline; this audit ran no fuzz phase")
        return

    rules = _fuzz_rules(report)
    now, before = set(rules), set(fuzz_finding_keys(baseline))
    ran_before = bool(baseline.get("fuzz"))
    if not ran_before:
        diff.notes.append("the baseline ran no fuzz phase: every fuzz finding counts as new")
    failing = failing_tiers(diff.strict_inputs)
    for key in sorted(now):
        tier = tier_of_fuzz_rule(rules[key])
        entry = {"case": "fuzz", "check": key, "pvalue": 0.0, "false_fail_rate": 0.0,
                 "baseline_pvalue": 0.0 if key in before else None, "tier": tier}
        if key in before:
            diff.still_failing.append(entry)
        elif tier in failing:
            diff.new_failures.append(entry)
        else:
            diff.new_hardening.append(entry)
    for key in sorted(before - now):
        diff.fixed.append({"case": "fuzz", "check": key, "pvalue": 1.0, "false_fail_rate": 0.0,
                           "baseline_pvalue": 0.0})


def compare_to_baseline(report: Mapping[str, Any], baseline: Mapping[str, Any], *,
                        false_alarm_rate: float = 1e-6, strict_inputs: bool | None = None) -> BaselineDiff:
    """Compare the current audit ``report`` with an earlier ``baseline`` report.

    Parameters
    ----------
    report, baseline : dict
        Audit reports (``run_audit`` output or their JSON), schema ``specexact.audit/1``.
    false_alarm_rate : float
        Chance that an unchanged sampler shows an acceptance drop (split over the
        comparisons). New failures are judged at each check's own false-fail rate.
    strict_inputs : bool, optional
        Whether a new ``hardening`` finding is a regression (default: the report's own
        ``settings.strict_inputs``, i.e. ``--strict-inputs`` of the current audit).

    Returns
    -------
    BaselineDiff

    Raises
    ------
    ValueError
        If the schemas differ or ``false_alarm_rate`` is not in (0, 1).
    """
    if not 0 < false_alarm_rate < 1:
        raise ValueError(f"false_alarm_rate must be in (0, 1), got {false_alarm_rate!r}")
    if report.get("schema") != baseline.get("schema"):
        raise ValueError(f"report schema {report.get('schema')!r} differs from baseline schema "
                         f"{baseline.get('schema')!r}")
    if strict_inputs is None:
        strict_inputs = bool((report.get("settings") or {}).get("strict_inputs"))
    diff = BaselineDiff(false_alarm_rate=false_alarm_rate, strict_inputs=bool(strict_inputs))
    now, before = _checks(report), _checks(baseline)
    for key, chk in now.items():
        if chk["name"] == "defect":
            continue
        entry = {"case": key[0], "check": key[1], "pvalue": chk["pvalue"],
                 "false_fail_rate": chk["false_fail_rate"],
                 "baseline_pvalue": before[key]["pvalue"] if key in before else None}
        was_passing = key not in before or before[key]["passed"]
        if not chk["passed"]:
            (diff.new_failures if was_passing else diff.still_failing).append(entry)
        elif key in before and not before[key]["passed"]:
            diff.fixed.append(entry)
    base_defects = {c["name"]: c.get("defect") for c in baseline.get("cases", [])}
    for case in report.get("cases", []):
        if case.get("defect"):
            entry = {"case": case["name"], "defect": case["defect"]}
            if base_defects.get(case["name"]):
                diff.still_failing.append({"case": case["name"], "check": "defect", "pvalue": 0.0,
                                           "false_fail_rate": 0.0, "baseline_pvalue": 0.0})
            else:
                diff.new_defects.append(entry)
        elif base_defects.get(case["name"]):
            diff.fixed.append({"case": case["name"], "check": "defect", "pvalue": 1.0,
                               "false_fail_rate": 0.0, "baseline_pvalue": 0.0})
    for key in sorted(set(before) - set(now)):
        if before[key]["name"] != "defect":
            diff.not_compared.append(f"{key[0]} / {key[1]}: in the baseline only")
    _compare_fuzz(report, baseline, diff)

    acc_now, acc_before = acceptance_stats(report), acceptance_stats(baseline)
    pairs = [(k, acc_before[k], acc_now[k]) for k in sorted(set(acc_now) & set(acc_before))
             if acc_before[k].kind == acc_now[k].kind and acc_before[k].n >= 2 and acc_now[k].n >= 2]
    for k in sorted((set(acc_now) | set(acc_before)) - {p[0] for p in pairs}):
        diff.not_compared.append(f"{k[0]} / {k[1]}: acceptance statistics missing in one report")
    alpha = false_alarm_rate / max(len(pairs), 1)
    diff.acceptance = [compare_acceptance(k[0], k[1], b, c, alpha) for k, b, c in pairs]

    s_now, s_before = report.get("sampler", {}), baseline.get("sampler", {})
    if s_now.get("name") != s_before.get("name"):
        diff.notes.append(f"sampler differs: baseline {s_before.get('name')!r}, now {s_now.get('name')!r}")
    for name in ("seed", "false_fail_rate", "num_checks"):
        a, b = baseline.get("settings", {}).get(name), report.get("settings", {}).get(name)
        if a != b:
            diff.notes.append(f"setting {name} differs: baseline {a!r}, now {b!r}")
    return diff
