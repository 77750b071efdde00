"""The :class:`~specexact.audit.cases.protocol.CaseKind` of end-to-end cases: :data:`CASE_KIND`.

What the audit asks of every kind of case (:mod:`~specexact.audit.cases.protocol`), answered
for :class:`~specexact.audit.cases.e2e.case.E2ECase`: its check count, its restriction to
what an engine implements, its planning, the pilot's timed calls and its run
(:func:`~specexact.audit.cases.e2e.sampling.run_e2e_case`).
"""

from __future__ import annotations

from specexact.audit.cases.e2e.case import E2ECase
from specexact.audit.cases.e2e.checks import e2e_num_checks
from specexact.audit.cases.e2e.engine_call import engine_generate, generate_call, load_here
from specexact.audit.cases.e2e.laws import case_models
from specexact.audit.cases.e2e.sampling import run_e2e_case
from specexact.audit.cases.e2e.shrink import shrink_failures
from specexact.audit.cases.planning import PLAN_MAX_BINS, support_size
from specexact.audit.cases.result import CaseResult
from specexact.audit.core.levels import MIN_EXPECTED
from specexact.decoders.engines.protocol import is_engine
from specexact.exactness.pit import MAX_CELLS

__all__ = ["E2EKind", "CASE_KIND"]


class E2EKind:
    """The :class:`~specexact.audit.cases.protocol.CaseKind` of end-to-end cases."""

    name = "e2e"

    def handles(self, case) -> bool:
        return isinstance(case, E2ECase)

    def checks(self, case: E2ECase) -> int:
        C = len(case.row_classes)
        return e2e_num_checks(C, sum(case.acceptance_checked(c) for c in range(C)), len(case.position_bands or ()),
                              case.check_logprobs, case.unseeded, case.check_in_mix, case.check_alone)

    def restrict(self, case: E2ECase, engine):
        if not is_engine(engine):
            return None, ("an end-to-end case runs an engine's own generate loop "
                          "(specexact.decoders.engines.EndToEndEngine); this sampler is a verify function")
        caps = engine.capabilities()
        if case.method not in caps.methods:
            return None, f"method {case.method!r}: the engine declares {list(caps.methods)}"
        keep, why = [], []
        for c, rc in enumerate(case.row_classes):
            bad = list(caps.processing.unsupported(rc.params))
            if rc.min_tokens and not caps.min_tokens:
                bad.append("min_tokens")
            if rc.eos and not caps.eos:
                bad.append("eos_token_id")
            (why.append(f"class {case.class_id(c)}: {', '.join(bad)}") if bad else keep.append(c))
        reason = f"the engine does not implement {'; '.join(why)}" if why else None
        if not keep:
            return None, reason
        return case.restricted(keep), reason

    def fixed_calls(self, case: E2ECase) -> int:
        """The reproducibility pair (the first call's requests again, speculative and plain),
        and where the case checks it the in-mix pair (the first call's seeded requests again,
        reversed: :mod:`~specexact.audit.cases.e2e.seed_checks`), counted as a whole pair; the
        alone pair (one request) where the case checks it is counted as a pair too (an upper bound)."""
        return 1 + bool(case.check_in_mix) + bool(case.check_alone)

    def planning_checks(self, case: E2ECase) -> list[tuple[int, bool]]:
        if case.position_bands:  # a PIT check on MAX_CELLS cells, its slots at least the sequences (a stand-in)
            return [(MAX_CELLS, False)]
        bins = min(support_size(64, case.length), PLAN_MAX_BINS)
        return [(bins, False), (bins, True)]

    prepares_sampler = True
    """Preparing a case loads the engine in the case's configuration: the pilot prepares it
    again before each of its calls (:mod:`~specexact.audit.run.pilot`)."""

    def prepare(self, case: E2ECase, device, engine):
        """Load the case's configuration (raises
        :class:`~specexact.audit.cases.e2e.engine_call.LoadsOnlyInFreshProcess` where the case
        can only run in a fresh process) and its models."""
        load_here(engine, case)
        case_models(case)
        return None

    def call_size(self, case: E2ECase) -> int:
        """Token slots of one call of the case (prompt and new tokens over its requests): what
        the pilot scales a measured call by to estimate one it cannot time
        (:mod:`~specexact.audit.run.pilot`)."""
        return case.requests_per_class * sum(len(rc.prompt) + rc.max_tokens for rc in case.row_classes)

    def call(self, case: E2ECase, prepared, engine, *, rows: int | None, device, full: bool) -> None:
        if not is_engine(engine):  # the pilot's fall-back to the built-in verifier: nothing to time
            return
        if rows is not None:
            target, _ = case_models(case)
            engine_generate(engine, case.requests(target.eos_token_id, 0)[:rows], True)
            return
        generate_call(engine, case, 0, speculative=True)
        generate_call(engine, case, 0, speculative=False)

    def run(self, case, engine, **kwargs) -> CaseResult:
        """:func:`~specexact.audit.cases.e2e.sampling.run_e2e_case`; a drawn scenario case
        that fails on a fixed number of calls is then shrunk
        (:func:`~specexact.audit.cases.e2e.shrink.shrink_failures`: the shrunk scenario in the
        result's ``extras["shrunk"]``; its checks stay the original's: shrinking changes no
        verdict). Under a time budget the audit shrinks it after all its cases ran."""
        result = run_e2e_case(case, engine, **kwargs)
        if kwargs.get("time_budget_s") is None:
            shrink_failures([result], engine, false_fail_rate=kwargs["false_fail_rate"], seed=kwargs.get("seed", 0),
                            min_expected=kwargs.get("min_expected", MIN_EXPECTED), time_left_s=None)
        return result

    def event_inputs(self, case, event: dict, sampler) -> dict:
        raise ValueError(f"case {case.name!r} is an end-to-end case: its checks record no per-event replays")


CASE_KIND = E2EKind()
"""End-to-end cases' kind (:mod:`~specexact.audit.cases.protocol`)."""
