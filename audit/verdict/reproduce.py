"""Minimal reproductions of findings.

:func:`minimise` re-runs one failing check of an audit report (case, class, seed) with
fewer rows: the finding's row class alone when it still fails there, then the batch
halved while the check keeps failing, then the number of decoder calls halved the same
way. :func:`reproduction_script` prints a short stand-alone script for the result, or for
a deterministic finding recorded by an adapter (e.g.
:data:`specexact.decoders.adapters.transformers.ZERO_PROBABILITY_ACCEPTANCE`).

Each trial is one run of the check at the finding's per-check false-fail rate, so a
correct sampler yields a minimised "finding" only with that probability per trial.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Callable, Mapping, Sequence

from specexact.audit.cases.catalog import all_cases
from specexact.audit.cases.decoder_case import AuditCase
from specexact.audit.cases.dispatch import run_case

__all__ = ["Reproduction", "minimise", "reproduction_script"]

_CLASS = re.compile(r"^(?P<check>[^\[]+)\[class (?P<cls>\d+)\]$")


@dataclass(frozen=True)
class Reproduction:
    """The smallest configuration found that still fails ``check``.

    ``row_classes`` are indices into the original case's classes (the single-class case
    names its check ``...[class 0]``).
    """

    sampler: str
    case: str
    check: str
    row_classes: tuple[int, ...]
    batch_size: int
    num_batches: int
    seed: int
    false_fail_rate: float
    pvalue: float
    message: str = ""


def _failing(case: AuditCase, verifier: Callable, check: str, alpha: float, seed: int, nb: int):
    res = run_case(case, verifier, false_fail_rate=alpha, seed=seed, num_batches=nb)
    for chk in res.checks:
        if chk.name == check or chk.name == "defect":
            if not chk.passed:
                return chk
    return None


def minimise(verifier: Callable, finding: Mapping, *, seed: int = 0, false_fail_rate: float | None = None,
             num_batches: int | None = None, cases: Sequence[AuditCase] | None = None,
             sampler: str = "builtin", max_trials: int = 16) -> Reproduction | None:
    """Shrink a report finding to the smallest batch that still fails.

    Parameters
    ----------
    verifier : callable
        The sampler with the ``verify`` protocol.
    finding : mapping
        An entry of a report's ``findings``: ``case``, ``check`` and ``reproduction``
        (``num_batches``, ``per_check_false_fail_rate``); the two keyword arguments
        override the latter.
    seed : int
        The audit seed (report ``settings.seed``).
    cases : sequence of AuditCase, optional
        Where the case is looked up (default: :func:`~specexact.audit.cases.catalog.all_cases`:
        the default and the opt-in cases).

    Returns
    -------
    Reproduction or None
        None if the full case does not fail again (the finding did not reproduce).
    """
    repro = finding.get("reproduction") or {}
    if false_fail_rate is None and "per_check_false_fail_rate" not in repro:
        raise ValueError("pass false_fail_rate (the report's settings.per_check_false_fail_rate)")
    alpha = float(false_fail_rate if false_fail_rate is not None else repro["per_check_false_fail_rate"])
    nb = int(num_batches if num_batches is not None else repro.get("num_batches") or 2)
    by_name = {c.name: c for c in (all_cases() if cases is None else cases)}
    case = by_name[finding["case"]]
    check = finding["check"]
    trials = 0

    def attempt(c: AuditCase, name: str, n: int):
        nonlocal trials
        trials += 1
        return _failing(c, verifier, name, alpha, seed, n)

    chk = attempt(case, check, nb)
    if chk is None:
        return None
    best = (case, check, tuple(range(len(case.row_classes))), nb, chk)
    m = _CLASS.match(check)
    if m and len(case.row_classes) > 1:
        c = int(m.group("cls"))
        rows = max(4, (case.batch_size // len(case.row_classes)) // 4 * 4)
        single = replace(case, row_classes=(case.row_classes[c],), batch_size=rows)
        name = f"{m.group('check')}[class 0]"
        chk = attempt(single, name, nb)
        if chk is not None:
            best = (single, name, (c,), nb, chk)
    cur, name, classes, n, chk = best
    step = 4 * len(cur.row_classes)
    while trials < max_trials and cur.batch_size // 2 >= step and (cur.batch_size // 2) % step == 0:
        smaller = replace(cur, batch_size=cur.batch_size // 2)
        got = attempt(smaller, name, n)
        if got is None:
            break
        cur, chk = smaller, got
    while trials < max_trials and n // 2 >= 2:
        got = attempt(cur, name, n // 2)
        if got is None:
            break
        n, chk = n // 2, got
    return Reproduction(sampler=sampler, case=case.name, check=name, row_classes=classes,
                        batch_size=cur.batch_size, num_batches=n + n % 2, seed=seed, false_fail_rate=alpha,
                        pvalue=chk.pvalue, message=(chk.details or {}).get("message", str(chk)))


def reproduction_script(finding: Reproduction | Mapping) -> str:
    """A short Python script that replays ``finding``.

    Accepts a :class:`Reproduction` (re-runs the minimised case and prints the check) or a
    deterministic adapter finding (a mapping with ``kind == "deterministic"``: replays the
    recorded inputs with the recorded global seed and says whether it reproduced).
    """
    if isinstance(finding, Reproduction):
        r = finding
        base = next((c for c in all_cases() if c.name == r.case), None)
        # All classes kept (always so for a verify-level case, which has no row_classes field):
        # only the batch size changes.
        whole = base is not None and tuple(r.row_classes) == tuple(range(len(base.row_classes)))
        rows = "" if whole else f"row_classes=tuple(base.row_classes[i] for i in {r.row_classes!r}), "
        return (
            f"# {r.sampler}: {r.case} / {r.check} (p={r.pvalue:.3g} at false-fail rate {r.false_fail_rate:.3g})\n"
            "from dataclasses import replace\n"
            "from specexact.audit import resolve_sampler, run_case\n"
            "from specexact.audit.catalog import all_cases\n"
            f"verifier, _ = resolve_sampler({r.sampler!r})\n"
            f"base = next(c for c in all_cases() if c.name == {r.case!r})\n"
            f"case = replace(base, {rows}batch_size={r.batch_size})\n"
            f"res = run_case(case, verifier, false_fail_rate={r.false_fail_rate!r}, seed={r.seed}, "
            f"num_batches={r.num_batches})\n"
            f"print(res.defect or [str(c) for c in res.checks if c.name in ({r.check!r}, 'defect')])\n"
        )
    f = dict(finding)
    if f.get("kind") != "deterministic":
        raise ValueError("reproduction_script takes a Reproduction or a deterministic finding; "
                         "minimise() a report finding first")
    forbidden = f.get("forbidden")
    check = (f"bad = int(out[{forbidden['row']}, {forbidden['position']}]) == {forbidden['token']}\n"
             if forbidden else "bad = False\n")
    return (
        f"# {f['id']}: {f['summary']}\n"
        "import torch\n"
        "from specexact.audit import resolve_sampler\n"
        f"adapter, _ = resolve_sampler({f['sampler']!r})\n"
        f"args = [torch.tensor(x) for x in ({f['draft_token_ids']!r}, {f['draft_probs']!r}, {f['target_probs']!r})]\n"
        f"torch.manual_seed({f['global_seed']})  # the global RNG the sampler draws from\n"
        "try:\n"
        "    out = adapter.verify_rows(*args)\n"
        "except Exception as exc:\n"
        "    out, bad = f'{type(exc).__name__}: {exc}', True\n"
        "else:\n"
        + "".join("    " + line + "\n" for line in check.splitlines()) +
        f"print(out if isinstance(out, str) else out.tolist(), 'REPRODUCED' if bad else 'not reproduced', "
        f"'- expected:', {f['expected']!r})\n"
    )
