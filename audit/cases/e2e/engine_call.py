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
:func:`crashing_classes` searches the classes that crash alone.
"""

from __future__ import annotations

import weakref

from specexact.audit.cases.e2e.case import E2ECase, model_dirs
from specexact.audit.cases.e2e.laws import case_models
from specexact.audit.sampler.call_timeout import SamplerCallTimeout
from specexact.decoders import VerifierProtocolError
from specexact.decoders.engines.protocol import check_generation_results

__all__ = ["mark_stale", "stale_reason", "stale_exception", "ensure_loaded", "engine_generate", "generate_call",
           "is_crash", "crashing_classes"]

_LOADED: "weakref.WeakKeyDictionary[object, tuple]" = weakref.WeakKeyDictionary()


def mark_stale(engine, exc: BaseException) -> None:
    """Record that ``engine`` raised ``exc`` from a call: its state is unknown (an engine may
    hang on the next call after a crash), so :func:`ensure_loaded` closes and loads it again."""
    try:
        if engine in _LOADED:
            current = _LOADED[engine]
            if current[0] == "stale":
                return  # the first raise is the cause; later ones (a refused call after a hang) follow from it
            _LOADED[engine] = ("stale", f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}", current, exc)
    except TypeError:
        pass


def stale_reason(engine) -> str | None:
    """What the engine raised before its next load (:func:`mark_stale`), or None."""
    try:
        current = _LOADED.get(engine)
    except TypeError:
        return None
    return current[1] if current is not None and current[0] == "stale" else None


def stale_exception(engine) -> BaseException | None:
    """The exception behind :func:`stale_reason`, or None."""
    try:
        current = _LOADED.get(engine)
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
    try:
        current = _LOADED.get(engine)
    except TypeError:  # not weak-referenceable: load every time
        current = None
    if current == key:
        return
    reload = getattr(engine, "reload", None)
    if current is not None and current[0] == "stale" and current[2] == key and callable(reload):
        reload()  # an adapter's own restart after a raise (it may keep what did not raise)
        _LOADED[engine] = key
        return
    if current is not None:
        engine.close()
    engine.load(target_dir, None if case.method in ("ngram", "prompt_lookup") else draft_dir, method=case.method,
                num_speculative_tokens=case.num_draft_tokens)
    try:
        _LOADED[engine] = key
    except TypeError:
        pass


def engine_generate(engine, requests, speculative: bool):
    """``engine.generate``; an engine that raised is marked for a fresh load (:func:`mark_stale`)."""
    try:
        return engine.generate(requests, speculative=speculative)
    except Exception as exc:
        mark_stale(engine, exc)
        raise


def generate_call(engine, case: E2ECase, call: int, *, speculative: bool):
    """One generate call of the case's requests for call ``call``: ``(requests, results)``.
    Raises what the engine raises; a break of the output protocol raises
    :class:`~specexact.decoders.VerifierProtocolError` (a defect)."""
    target, _ = case_models(case)
    requests = case.requests(target.eos_token_id, call)
    results = engine_generate(engine, requests, speculative)
    bad = check_generation_results(requests, results, target.vocab_size)
    if bad is not None:
        raise VerifierProtocolError(f"{'speculative' if speculative else 'plain'} generate: {bad}")
    return requests, list(results)


def is_crash(exc: BaseException) -> bool:
    """An exception the engine raised (not a hang, not a break of the output protocol)."""
    return not isinstance(exc, (SamplerCallTimeout, VerifierProtocolError))


def crashing_classes(case: E2ECase, engine, call: int, *, speculative: bool = True,
                     timed=None) -> tuple[list[int], str | None]:
    """The classes whose requests crash the engine when generated alone: ``(classes, note)``.

    Each class's requests of call ``call`` go in a generate call of their own, of the kind
    that crashed (``speculative`` or plain), on a freshly loaded engine after every crash
    (:func:`ensure_loaded`). ``note`` says why the search stopped early (a reload failed, a
    call hung), else None. ``timed(phase, fn, *args)``, when given, times the reloads
    (``engine_load``) and the calls (``crash_search``).
    """
    if timed is None:
        def timed(_phase, fn, *args, **kwargs):
            return fn(*args, **kwargs)
    target, _ = case_models(case)
    crashing = []
    for c in range(len(case.row_classes)):
        requests = case.restricted([c]).requests(target.eos_token_id, call)
        try:
            timed("engine_load", ensure_loaded, engine, case)
        except Exception as exc:  # noqa: BLE001
            return crashing, f"the engine could not be loaded again after a crash ({type(exc).__name__}: {exc})"
        try:
            timed("crash_search", engine_generate, engine, requests, speculative)
        except SamplerCallTimeout as exc:
            return crashing, f"class {case.class_id(c)} alone hung ({exc})"
        except Exception:  # noqa: BLE001 - the crash this search looks for
            crashing.append(c)
    return crashing, None
