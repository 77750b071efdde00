"""The engine call: how an end-to-end case loads an engine and calls its generate.

The sampler under audit is an :class:`~specexact.decoders.engines.EndToEndEngine`, loaded
once per configuration (model pair, method, γ) and reused by every case of that
configuration (:func:`ensure_loaded`). Every call of it goes through
:func:`engine_generate`, which marks an engine that raised for a fresh load
(:func:`mark_stale`); :func:`generate_call` makes one call of a case's requests and checks
the output protocol. An engine the audit limits in time is wrapped by
:class:`specexact.audit.sampler.call_timeout.TimedEngine` (its load and generate calls raise
:class:`~specexact.audit.sampler.call_timeout.SamplerCallTimeout` when they hang). After a
crash, :func:`is_crash` tells a crash from a hang or a protocol break and
:func:`search_crashing_classes` (:func:`crashing_classes`) searches the classes that crash alone.
An engine that cannot be loaded again in this process after a crash (vLLM after numba) leaves
the rest of its case to a fresh process: :class:`FreshProcessWork`.
"""

from __future__ import annotations

import contextlib

import weakref
from dataclasses import dataclass, field
from typing import Sequence

from specexact.audit.cases.e2e.case import E2ECase, model_dirs
from specexact.audit.cases.e2e.laws import case_models
from specexact.audit.sampler.call_timeout import SamplerCallTimeout, untimed
from specexact.decoders import VerifierProtocolError
from specexact.decoders.engines.protocol import check_generation_results

__all__ = ["mark_stale", "stale_reason", "stale_exception", "loaded_before", "ensure_loaded", "scheduler_for", "engine_generate", "generate_call",
           "is_crash", "crashing_classes", "search_crashing_classes", "CrashSearch", "FreshProcessWork",
           "LoadsOnlyInFreshProcess", "load_here"]

_LOADED: "weakref.WeakKeyDictionary[object, tuple]" = weakref.WeakKeyDictionary()
_EVER_LOADED: "weakref.WeakSet[object]" = weakref.WeakSet()
"""Engines that completed a load in this process (:func:`loaded_before`)."""


def _state_of(engine):
    """The object an engine's load state is kept under: the engine itself, not the audit's
    per-call limit around it (:func:`~specexact.audit.sampler.call_timeout.untimed`), so
    that a crash in the pilot's probes, which call the engine itself, is known to the
    case's calls through the limit (vLLM's n-gram audit: the pilot's call crashed, the case
    then could not load the engine and did not know why, 0 sequences)."""
    return untimed(engine)[0]


def mark_stale(engine, exc: BaseException) -> None:
    """Record that ``engine`` raised ``exc`` from a call: its state is unknown (an engine may
    hang on the next call after a crash), so :func:`ensure_loaded` closes and loads it again."""
    engine = _state_of(engine)
    try:
        if engine in _LOADED:
            current = _LOADED[engine]
            if current[0] == "stale":
                return  # the first raise is the cause; later ones (a refused call after a hang) follow from it
            _LOADED[engine] = ("stale", f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}", current, exc)
    except TypeError:
        pass


def loaded_before(engine) -> bool:
    """Whether ``engine`` completed a load in this process (any configuration): a load that
    fails after one may be the process's, not the configuration's (vLLM starts no second
    ``LLM`` once its n-gram proposer imported numba: scripts/replays/vllm_e2e_llvmlite_rebind.py),
    so the case is tried again in a fresh process (:mod:`.fresh_process`)."""
    try:
        return _state_of(engine) in _EVER_LOADED
    except TypeError:
        return False


def stale_reason(engine) -> str | None:
    """What the engine raised before its next load (:func:`mark_stale`), or None."""
    try:
        current = _LOADED.get(_state_of(engine))
    except TypeError:
        return None
    return current[1] if current is not None and current[0] == "stale" else None


def stale_exception(engine) -> BaseException | None:
    """The exception behind :func:`stale_reason`, or None."""
    try:
        current = _LOADED.get(_state_of(engine))
    except TypeError:
        return None
    return current[3] if current is not None and current[0] == "stale" else None


def ensure_loaded(engine, case: E2ECase) -> None:
    """Load ``engine`` for the case's configuration unless it already is (it is closed and
    loaded again when the configuration changes, or after a call of it raised:
    :func:`mark_stale`; then an engine with a ``reload()`` method, such as the vLLM adapter,
    restarts itself instead)."""
    target_dir, draft_dir = model_dirs(case)
    key = (str(target_dir), str(draft_dir), case.method, case.num_draft_tokens)
    scheduler = scheduler_for(engine, case)
    if scheduler is not None:  # the settings are part of the configuration
        key += (scheduler,)
    state = _state_of(engine)  # loads go through ``engine`` (its limit), the state is the engine's own
    try:
        current = _LOADED.get(state)
    except TypeError:  # not weak-referenceable: load every time
        current = None
    if current == key:
        return
    reload = getattr(engine, "reload", None)
    if current is not None and current[0] == "stale" and current[2] == key and callable(reload):
        reload()  # an adapter's own restart after a raise (it may keep what did not raise)
        _LOADED[state] = key
        return
    if current is not None:
        engine.close()
    extra = {} if scheduler is None else {"scheduler": scheduler}
    try:
        engine.load(target_dir, None if case.method in ("ngram", "prompt_lookup") else draft_dir, method=case.method,
                    num_speculative_tokens=case.num_draft_tokens, **extra)
    except BaseException:
        # closed, and not loaded: the next case loads again (the earlier configuration is
        # gone); a stale mark (an earlier call raised: mark_stale) stays, it says why
        if current is not None and current[0] != "stale":
            with contextlib.suppress(TypeError, KeyError):
                del _LOADED[state]
        raise
    try:
        _LOADED[state] = key
        _EVER_LOADED.add(state)
    except TypeError:
        pass


class LoadsOnlyInFreshProcess(Exception):
    """A case's configuration did not load after another configuration was loaded in this
    process (:func:`loaded_before`): the case runs in a fresh process (:mod:`.fresh_process`),
    so it cannot be timed here (:func:`load_here`; the pilot then estimates its cost)."""


def load_here(engine, case: E2ECase) -> None:
    """:func:`ensure_loaded`, for a caller that only times the engine (the audit's pilot): a
    load that fails after another configuration was loaded in this process raises
    :class:`LoadsOnlyInFreshProcess` (from the engine's exception), since the case's own run
    then goes to a fresh process; any other failure raises as it is."""
    before = loaded_before(engine)
    try:
        ensure_loaded(engine, case)
    except Exception as exc:
        if before:
            raise LoadsOnlyInFreshProcess(f"{type(exc).__name__}: {exc}") from exc
        raise


def scheduler_for(engine, case: E2ECase):
    """The scheduler settings ``engine`` is loaded with for ``case``: the case's
    (:meth:`E2ECase.scheduler_settings`) where they are not the defaults and the engine
    declares scheduler axes beyond ``"arrival"`` (``EngineCapabilities.scheduler``), else None
    (``load`` is then called as before: an engine without a scheduler ignores them)."""
    settings = case.scheduler_settings()
    if settings is None or settings.is_default:
        return None
    axes = set(engine.capabilities().scheduler) - {"arrival"}
    return settings if axes else None


def engine_generate(engine, requests, speculative: bool):
    """``engine.generate``; an engine that raised is marked for a fresh load (:func:`mark_stale`)."""
    try:
        return engine.generate(requests, speculative=speculative)
    except Exception as exc:
        mark_stale(engine, exc)
        raise


def generate_call(engine, case: E2ECase, call: int, *, speculative: bool, logprobs: bool = False,
                  mix: bool = False, alone: bool = False):
    """One generate call of the case's requests for call ``call`` (with ``logprobs``, each
    asking for its tokens' logprobs; with ``mix``, the call's seeded requests in another mix:
    :meth:`~specexact.audit.cases.e2e.case.E2ECase.mix_requests`; with ``alone``, its first
    seeded request alone: :meth:`~specexact.audit.cases.e2e.case.E2ECase.alone_requests`):
    ``(requests, results)``.
    Raises what the engine raises; a break of the output protocol raises
    :class:`~specexact.decoders.VerifierProtocolError` (a defect)."""
    target, _ = case_models(case)
    make = case.alone_requests if alone else case.mix_requests if mix else case.requests
    requests = make(target.eos_token_id, call, logprobs)
    results = engine_generate(engine, requests, speculative)
    bad = check_generation_results(requests, results, target.vocab_size)
    if bad is not None:
        raise VerifierProtocolError(f"{'speculative' if speculative else 'plain'} generate: {bad}")
    return requests, list(results)


def is_crash(exc: BaseException) -> bool:
    """An exception the engine raised (not a hang, not a break of the output protocol)."""
    return not isinstance(exc, (SamplerCallTimeout, VerifierProtocolError))


@dataclass(frozen=True)
class CrashSearch:
    """What :func:`search_crashing_classes` found (class indices of the searched case).

    Attributes
    ----------
    crashing : tuple of int
        Classes whose requests crashed the engine when generated alone.
    ok : tuple of int
        Classes whose requests ran alone without a raise.
    pending : tuple of int
        Classes not searched: the search stopped before them (``stopped`` says why).
    stopped : str or None
        Why the search stopped early (a reload failed, a call hung), else None.
    unloadable : bool
        The search stopped because the engine could not be loaded again after a crash: a
        fresh process can go on with ``pending`` (:class:`FreshProcessWork`).
    """

    crashing: tuple = ()
    ok: tuple = ()
    pending: tuple = ()
    stopped: str | None = None
    unloadable: bool = False


def search_crashing_classes(case: E2ECase, engine, call: int, *, classes: Sequence[int] | None = None,
                            speculative: bool = True, timed=None) -> CrashSearch:
    """Generate each class of ``classes`` (default: every class of ``case``) alone and say
    which crash the engine (:class:`CrashSearch`).

    Each class's requests of call ``call`` go in a generate call of their own, of the kind
    that crashed (``speculative`` or plain), on a freshly loaded engine after every crash
    (:func:`ensure_loaded`). The search stops at a reload that fails (``unloadable``) or at a
    call that hangs. ``timed(phase, fn, *args)``, when given, times the reloads
    (``engine_load``) and the calls (``crash_search``).
    """
    if timed is None:
        def timed(_phase, fn, *args, **kwargs):
            return fn(*args, **kwargs)
    target, _ = case_models(case)
    todo = list(range(len(case.row_classes))) if classes is None else [int(c) for c in classes]
    crashing, ok = [], []
    for i, c in enumerate(todo):
        if not 0 <= c < len(case.row_classes):
            raise ValueError(f"classes: index {c} is not a class of case {case.name!r} "
                             f"({len(case.row_classes)} classes)")
        requests = case.restricted([c]).requests(target.eos_token_id, call)
        try:
            timed("engine_load", ensure_loaded, engine, case)
        except Exception as exc:  # noqa: BLE001
            return CrashSearch(tuple(crashing), tuple(ok), tuple(todo[i:]),
                               f"the engine could not be loaded again after a crash ({type(exc).__name__}: {exc})",
                               unloadable=True)
        try:
            timed("crash_search", engine_generate, engine, requests, speculative)
        except SamplerCallTimeout as exc:
            return CrashSearch(tuple(crashing), tuple(ok), tuple(todo[i + 1:]),
                               f"class {case.class_id(c)} alone hung ({exc})")
        except Exception:  # noqa: BLE001 - the crash this search looks for
            crashing.append(c)
        else:
            ok.append(c)
    return CrashSearch(tuple(crashing), tuple(ok))


def crashing_classes(case: E2ECase, engine, call: int, *, speculative: bool = True,
                     timed=None) -> tuple[list[int], str | None]:
    """The classes whose requests crash the engine when generated alone: ``(classes, note)``
    (:func:`search_crashing_classes` over every class; ``note`` says why the search stopped
    early, else None)."""
    found = search_crashing_classes(case, engine, call, speculative=speculative, timed=timed)
    return list(found.crashing), found.stopped


@dataclass(frozen=True)
class FreshProcessWork:
    """What an end-to-end case leaves to a fresh process: its engine could not be loaded again
    in this one after a crash (vLLM: no second engine after numba). The run room
    (:mod:`specexact.audit.run.isolation`) starts one, which goes on with
    :func:`~specexact.audit.cases.e2e.sampling.run_e2e_fresh`: it searches the ``pending``
    classes alone, then checks the laws of the classes that do not crash, on a newly started
    engine. Class indices are those of the case the result holds (``CaseResult.case``).

    Attributes
    ----------
    call : int
        The generate call whose requests the crash search sends (the crashed call's).
    speculative : bool
        Whether the crash search's calls are speculative (as the crashed call was).
    crashing : tuple of int
        Classes already known to crash alone.
    ok : tuple of int
        Classes already known to run alone.
    pending : tuple of int
        Classes not searched yet.
    reason : str
        Why the process before could not go on (the failed load).
    whole_case : bool
        The case itself never ran: the engine was left unloadable by an earlier case's crash,
        so the fresh process runs the whole case (its result replaces the failed load's).
    """

    call: int
    speculative: bool
    crashing: tuple = ()
    ok: tuple = ()
    pending: tuple = ()
    reason: str = ""
    whole_case: bool = False
    searched: tuple = field(default=(), compare=False)
    """Classes the latest process searched (for the report: what ran where)."""

    def to_dict(self) -> dict:
        return {"call": self.call, "speculative": self.speculative, "crashing": list(self.crashing),
                "ok": list(self.ok), "pending": list(self.pending), "reason": self.reason,
                "whole_case": self.whole_case, "searched": list(self.searched)}

    @classmethod
    def from_dict(cls, d: dict) -> "FreshProcessWork":
        return cls(call=int(d["call"]), speculative=bool(d["speculative"]),
                   crashing=tuple(int(c) for c in d.get("crashing", ())), ok=tuple(int(c) for c in d.get("ok", ())),
                   pending=tuple(int(c) for c in d.get("pending", ())), reason=str(d.get("reason", "")),
                   whole_case=bool(d.get("whole_case", False)),
                   searched=tuple(int(c) for c in d.get("searched", ())))
