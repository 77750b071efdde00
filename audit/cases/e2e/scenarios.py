"""Generated end-to-end scenarios as audit cases: :func:`scenario_cases`.

A scenario (:class:`~specexact.strategies.Scenario`: γ, one to several request shapes of
any prompt length, sampling parameters and limits, sharing every generate call) becomes a
:class:`ScenarioCase`: an :class:`~specexact.audit.cases.e2e.case.E2ECase` whose classes are
the shapes, each repeated ``requests_per_class`` times in every call, checked like the long
case, token by token (:mod:`~specexact.audit.cases.e2e.token_checks`: every emitted token's
randomised PIT under its exact conditional law given its prefix, speculative and plain
paths, per output-position band of :data:`SCENARIO_BANDS` that the scenario reaches), plus
``reproducible``.

The scenarios are drawn by Hypothesis from a seed (the audit seed): one generate phase, no
database, no local-module constants (:mod:`specexact.fuzz.hypothesis_env`), so the same seed
gives the same scenarios in every process. Of the first :data:`CANDIDATES` distinct scenarios
drawn, the ``n`` that reach the most axes (:func:`coverage`) are kept, earliest first among
ties; each records where it was drawn (:attr:`ScenarioCase.draw`), so that a failing one
can be drawn again and shrunk (:mod:`~specexact.audit.cases.e2e.shrink`).

False-fail rate: a scenario case's checks are counted like every case's
(:meth:`~specexact.audit.cases.e2e.kind.E2EKind.checks`: two per band and one
``reproducible``) in the audit's split, so each runs at the audit's per-check rate and all
scenarios together stay within their checks' share of the audit's rate.
"""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass, replace

from hypothesis import HealthCheck, Phase, Verbosity, given
from hypothesis import seed as hypothesis_seed
from hypothesis import settings as hypothesis_settings

from specexact.audit.cases.e2e.case import E2ECase, E2ERowClass, seed_checks_of, within_context
from specexact.audit.cases.e2e.laws import likely_stop_token
from specexact.decoders.engines.protocol import GenerationRequest
from specexact.decoders.tiny_models import CATALOG
from specexact.fuzz.generation import within_processing
from specexact.fuzz.hypothesis_env import without_local_constants
from specexact.strategies.scenarios import Scenario, e2e_scenarios, scenario_axes

__all__ = ["ScenarioCase", "SCENARIO_BANDS", "SCENARIO_REQUESTS_PER_SHAPE", "SERIAL_REQUESTS_PER_SHAPE", "requests_per_shape", "KEY_AXES", "OTHER_AXES", "COST_CAP", "MAX_SCENARIOS", "SCHEDULER_KEY_AXES", "SCHEDULER_OTHER_AXES", "axes_reached", "cost", "CANDIDATES",
           "scenario_strategy", "draw_scenarios", "coverage", "scenario_case", "scenario_cases", "scenario_seed"]

SCENARIO_BANDS = ((0, 8), (8, 16), (16, 32), (32, 64))
"""Output-position bands of a scenario's per-token checks (those below its longest
``max_tokens``): within the first 16-token block, the rest of it, the second block, past 32."""

SCENARIO_REQUESTS_PER_SHAPE = 16
"""Requests of each shape in every generate call (the per-token checks' samples), for an
engine that runs a call's requests together (vLLM, the built-in engine)."""

SERIAL_REQUESTS_PER_SHAPE = 4
"""Requests of each shape in every generate call for an engine that runs them one at a time
(:func:`requests_per_shape`). Its call costs the sum of its requests, so 16 per shape bought
no speed and set the budget planner's floor (2 calls and the reproducibility pair) 4 times
higher: on a loaded 2-core machine (2026-12-07) mlx-lm's and transformers' 300 s audits left
out every scenario but a one-token one (mlx-lm: ≈729 s for scenario 2's floor). The planner
gives the smaller calls more of them: the same samples per second."""

CANDIDATES = 400
"""Scenarios Hypothesis draws before the best-covering are kept (:func:`draw_scenarios`). At
100, which key axes the first draws reach depended on Hypothesis' version (6.116: seed 0 had
no output past position 32; 6.170: seeds 1 and 3 had none); at 400 seeds 0-3 reach every axis
under both (3 s of drawing, once per process and seed: cached)."""


def scenario_strategy(scheduler: bool = False):
    """The strategy the audit draws from: :func:`~specexact.strategies.e2e_scenarios` with
    γ up to 8, up to 4 shapes per call, prompts up to 48 tokens, up to 64 new tokens; with
    ``scheduler`` (an engine that declares scheduler axes) the scheduler axes too."""
    return e2e_scenarios(max_gamma=8, max_shapes=4, max_prompt=48, max_tokens=64, scheduler=bool(scheduler))


def scenario_seed(seed: int) -> int:
    """The Hypothesis seed of an audit's scenarios: a stable function of the audit seed."""
    return (int(seed) * 1_000_003 + zlib.crc32(b"specexact.e2e/scenarios")) % (2**63)


def hypothesis_run(prop, hseed: int, *, phases=(Phase.generate,), scheduler: bool = False):
    """``prop`` under the draw's Hypothesis settings (:data:`CANDIDATES` examples, seed
    ``hseed``, no database, quiet); the same draws in every process. Shared by the draw and
    the shrink, whose replays must meet the same examples in the same order."""
    test = given(scenario_strategy(scheduler))(prop)
    test = hypothesis_seed(hseed)(test)
    return hypothesis_settings(max_examples=CANDIDATES, database=None, deadline=None, derandomize=False,
                               phases=phases, suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet,
                               report_multiple_bugs=False, print_blob=False)(test)


KEY_AXES = ("gamma_ge_3", "mixed_prompt_lengths", "position_past_32", "min_tokens_with_eos")
"""The axes the issue's audit must reach (each weighs :data:`KEY_WEIGHT` in the draw)."""

OTHER_AXES = ("prompt_past_32", "penalties", "truncations", "combined")
"""The other axes the draw prefers (one each)."""

SCHEDULER_KEY_AXES = ("staggered_arrivals", "kv_pressure", "chunked_prefill", "rows_without_drafts")
"""The scheduler axes (issue 33) a draw for an engine with a scheduler must reach (key axes
there, :func:`~specexact.strategies.scenario_axes`); a draw without them never has them."""

SCHEDULER_OTHER_AXES = ("shared_prefix",)
"""The scheduler axis the draw prefers like :data:`OTHER_AXES` (two shapes of 16 or more
prompt tokens sharing a prefix, prefix caching on: rarer, and costlier, than the key axes;
seeds 0-2 do not reach it under :data:`COST_CAP`, seed 3 does)."""

KEY_WEIGHT = 10

COST_CAP = 6000.0
"""Most estimated work of one speculative and one plain call of all drawn scenarios
together (:func:`cost`): about 4 s per call pair at 16 requests per shape on the shared
2-core machine (measured 2026-12-07), what keeps the phase within the 60-second audit."""

MAX_SCENARIOS = 3
"""Most scenarios the draw keeps (each case's floor of calls costs time); one more with the
scheduler axes (:data:`SCHEDULER_KEY_AXES`: five more key axes to reach)."""


def axes_reached(scenario: Scenario) -> set[str]:
    """The axes of :data:`KEY_AXES` and :data:`OTHER_AXES` that ``scenario`` reaches
    (:func:`~specexact.strategies.scenario_axes`); γ ≥ 3 counts where some output is longer
    than a verify window (γ + 1 tokens)."""
    a = scenario_axes(scenario)
    full_window = a["last_position"] >= a["gamma"]  # some output reaches past a whole verify window
    flags = {"gamma_ge_3": a["gamma"] >= 3 and full_window, "mixed_prompt_lengths": a["mixed_prompt_lengths"],
             "position_past_32": a["last_position"] >= 32, "min_tokens_with_eos": a["min_tokens_with_eos"],
             "prompt_past_32": a["longest_prompt"] > 32, "penalties": a["penalties"],
             "truncations": a["truncations"], "combined": a["combined"]}
    flags.update({k: a.get(k, False) for k in SCHEDULER_KEY_AXES + SCHEDULER_OTHER_AXES})
    return {k for k, v in flags.items() if v}


def coverage(scenario: Scenario, covered: frozenset = frozenset()) -> int:
    """The weight of the axes ``scenario`` adds to ``covered`` (:data:`KEY_WEIGHT` per key
    axis, 1 per other axis). The score knows no planted fault."""
    new = axes_reached(scenario) - set(covered)
    return sum(KEY_WEIGHT if k in KEY_AXES + SCHEDULER_KEY_AXES else 1 for k in new)


def cost(scenario: Scenario) -> float:
    """Estimated work of one speculative and one plain call of the scenario, per request:
    per shape, ``max_tokens`` forwards of the plain path and ``max_tokens (γ + 1) / 2`` of
    the speculative one (about two tokens per round), each over the prompt and the output
    (``prompt_len + max_tokens`` positions: the built-in engine keeps no KV cache)."""
    return sum(s.max_tokens * (s.prompt_len + s.max_tokens) for s in scenario.shapes) * ((scenario.gamma + 1) / 2 + 1)


def draw_scenarios(seed: int, n: int | None = None, *, scheduler: bool = False) -> list[tuple[int, Scenario]]:
    """The scenarios of the audit seed ``seed`` (:func:`_draw_scenarios`, cached per process);
    ``scheduler``: with the scheduler axes (an engine that declares them)."""
    return list(_draw_scenarios(int(seed), None if n is None else int(n), CANDIDATES, bool(scheduler)))


@functools.lru_cache(maxsize=32)
def _draw_scenarios(seed: int, n: int | None, candidates: int,
                    scheduler: bool = False) -> tuple[tuple[int, Scenario], ...]:
    """The scenarios of the audit seed ``seed``, with the index of the Hypothesis call that
    drew each, in draw order. Of the first :data:`CANDIDATES` distinct ones drawn, greedily
    the one that adds the most axes (:func:`coverage`; the earliest among ties) while the
    total :func:`cost` stays within :data:`COST_CAP`, until every axis is reached, nothing
    adds one, or ``n`` (default :data:`MAX_SCENARIOS`) are kept."""
    drawn: list[tuple[int, Scenario]] = []
    calls = [0]

    def collect(s: Scenario) -> None:
        i = calls[0]
        calls[0] += 1
        if all(s != t for _, t in drawn):
            drawn.append((i, s))

    with without_local_constants():
        hypothesis_run(collect, scenario_seed(seed), scheduler=scheduler)()
    kept: list[int] = []
    covered: frozenset = frozenset()
    spent = 0.0
    limit = (MAX_SCENARIOS + (1 if scheduler else 0)) if n is None else int(n)
    while len(kept) < limit:
        fits = [k for k in range(len(drawn)) if k not in kept and spent + cost(drawn[k][1]) <= COST_CAP]
        gains = [(coverage(drawn[k][1], covered), -k) for k in fits]
        if not gains or max(gains)[0] == 0:
            break
        k = -max(gains)[1]
        kept.append(k)
        covered |= axes_reached(drawn[k][1])
        spent += cost(drawn[k][1])
    return tuple(drawn[k] for k in sorted(kept))


@dataclass(frozen=True)
class ScenarioCase(E2ECase):
    """An end-to-end case made from a :class:`~specexact.strategies.Scenario` (module docstring).

    Parameters
    ----------
    scenario : Scenario
        The scenario (its shapes are the row classes, within what the engine implements).
    draw : tuple of (int, int), optional
        ``(audit seed, index of the Hypothesis call)`` that drew it (:func:`draw_scenarios`),
        or None for a scenario given by hand (it cannot be shrunk).
    """

    scenario: Scenario | None = None
    draw: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.scenario, Scenario):
            raise ValueError(f"case {self.name!r}: scenario must be a Scenario, got {self.scenario!r}")

    def scheduler_settings(self):
        """The scenario's scheduler settings (:attr:`Scenario.scheduler`)."""
        return self.scenario.scheduler

    def requests(self, eos_token_id: int, call: int, logprobs: bool = False) -> list[GenerationRequest]:
        """The requests of call ``call``: as :meth:`E2ECase.requests`, every seed shifted by
        the scenario's seed (an unseeded request stays unseeded)."""
        return [r if r.seed is None else replace(r, seed=r.seed + int(self.scenario.seed))
                for r in super().requests(eos_token_id, call, logprobs)]

    def to_dict(self) -> dict:
        d = super().to_dict()
        d["scenario"] = self.scenario.to_dict()
        d["scenario_axes"] = scenario_axes(self.scenario)
        return d


def requests_per_shape(caps) -> int:
    """Requests of each shape per generate call for an engine of capabilities ``caps``:
    :data:`SERIAL_REQUESTS_PER_SHAPE` where it runs requests one at a time
    (``max_batch_size == 1``: transformers, mlx-lm), else :data:`SCENARIO_REQUESTS_PER_SHAPE`."""
    return SERIAL_REQUESTS_PER_SHAPE if caps.max_batch_size == 1 else SCENARIO_REQUESTS_PER_SHAPE


def scenario_case(engine, scenario: Scenario, method: str = "draft_model", *, pair: str = "llama-v64",
                  name: str = "scenario", requests_per_class: int | None = None,
                  draw: tuple[int, int] | None = None) -> ScenarioCase:
    """The case of ``scenario`` for ``engine``: ``e2e-<pair>-<method>-<name>``.

    ``requests_per_class`` requests of each shape per call (default: :func:`requests_per_shape`
    of the engine). Each shape's parameters within the engine's declared processing
    (:func:`~specexact.fuzz.generation.within_processing`), ``min_tokens`` and EOS only where
    it implements them, prompt plus ``max_tokens`` within its declared context
    (:func:`~specexact.audit.cases.e2e.case.within_context`: ``max_tokens`` lowered, a shape
    whose prompt leaves no room left out); an EOS shape of an engine that takes any stop token
    (``EngineCapabilities.stop_tokens``) stops at the token its law makes most likely
    (:func:`~specexact.audit.cases.e2e.laws.likely_stop_token`); the bands of :data:`SCENARIO_BANDS` below its
    longest output.

    Raises
    ------
    ValueError
        ``method`` is not one the engine declares, or no shape's prompt fits the engine's
        context.
    """
    caps = engine.capabilities()
    if method not in caps.methods:
        raise ValueError(f"engine {engine.name!r} does not run method {method!r}; it declares {list(caps.methods)}")
    if requests_per_class is None:
        requests_per_class = requests_per_shape(caps)
    if pair not in CATALOG:
        raise ValueError(f"pair must be one of {sorted(CATALOG)}, got {pair!r}")
    V = int(CATALOG[pair].spec.vocab_size)
    classes, clipped = [], False
    arrivals = "arrival" in caps.scheduler  # an engine without a scheduler ignores them (its law does not depend on them)
    for i, s in enumerate(scenario.shapes):
        eos = bool(s.eos and caps.eos)
        prompt, params = scenario.prompt(i, V), within_processing(s.params, caps.processing)
        stop = likely_stop_token(pair, prompt, params, caps.processing) if eos and caps.stop_tokens else None
        rc = E2ERowClass(prompt, params, max_tokens=s.max_tokens,
                         min_tokens=s.min_tokens if (eos and caps.min_tokens) else 0, eos=eos,
                         arrival=s.arrival if arrivals else 0, stop_token=stop)
        fit = within_context(rc, caps.max_context)
        clipped = clipped or fit != rc
        if fit is not None:
            classes.append(fit)
    if not classes:
        raise ValueError(f"scenario {scenario.describe()!r}: no prompt leaves room for a new token within the "
                         f"engine's context of {caps.max_context} tokens")
    length = max(rc.max_tokens for rc in classes)
    bands = tuple((a, b) for a, b in SCENARIO_BANDS if a < length)
    fitted = (f"; max_tokens within the engine's context of {caps.max_context} tokens (prompt + output)"
              if clipped else "")
    return ScenarioCase(
        name=f"e2e-{pair}-{method}-{name}", pair=pair, method=method, num_speculative_tokens=scenario.gamma,
        row_classes=tuple(classes), requests_per_class=requests_per_class, engine=engine.name,
        check_acceptance=(False,) * len(classes), position_bands=bands, **seed_checks_of(caps),
        description=f"{engine.name} {method} on {pair}, generated scenario: {scenario.describe()}{fitted}",
        tags=("e2e", "scenario"), scenario=scenario, draw=draw)


def scenario_cases(engine, method: str = "draft_model", *, seed: int = 0, n: int | None = None,
                   pair: str = "llama-v64", requests_per_class: int | None = None) -> list[ScenarioCase]:
    """``n`` generated scenario cases ``e2e-<pair>-<method>-scenario-1..n`` of the audit seed
    ``seed`` (:func:`draw_scenarios`, :func:`scenario_case`; ``requests_per_class`` default:
    :func:`requests_per_shape` of the engine); drawn with the scheduler axes where the engine
    declares any (``EngineCapabilities.scheduler``), else as before."""
    scheduler = bool(engine.capabilities().scheduler)
    return [scenario_case(engine, s, method, pair=pair, name=f"scenario-{k}", requests_per_class=requests_per_class,
                          draw=(int(seed), i))
            for k, (i, s) in enumerate(draw_scenarios(seed, n, scheduler=scheduler), 1)]
