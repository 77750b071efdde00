"""A per-call time limit for a sampler run in the audit's own process (without ``--isolate``).

``--isolate`` (:mod:`.isolation`) runs each case in a child process and kills it after
``--case-timeout``; in process nothing stopped a hanging sampler, so a hang hung the
pilot, the audit and a pytest session with it. :func:`with_call_timeout` wraps a sampler
so that every call of it (``verify``, ``verify_logits``, ``verify_with_uniforms``, a tree
sampler's entry points: every callable attribute) runs in a worker thread and the caller
waits at most ``seconds``; past that it raises :class:`SamplerCallTimeout` (a
``TimeoutError``), which the case runners record as a ``defect`` check of kind
``timeout`` (tier *defect on valid input*, :mod:`.tiers`) and the pilot skips like a
crash. A Python thread cannot be killed: the hung call is left running in its daemon
thread (it ends with the process), and every later call of the wrapped sampler raises at
once, without calling it again. Exceptions of the sampler pass through unchanged, with
their traceback.

What the worker thread changes: torch's thread-local grad mode and the caller's torch
thread count are carried over (:func:`carry_threads`: a call left running in another thread
may have changed the process-wide count since: a sampler that restores "its" count, read in
a thread started at another count, writes that count back); the rest of the process-wide
state (default generator, default dtype) is shared anyway.
The cost is one thread start per call (tens of microseconds).

An end-to-end engine (:class:`~specexact.decoders.engines.EndToEndEngine`) is wrapped by
:class:`TimedEngine`, a class with the protocol's members spelled out (a runtime protocol
check reads them statically, not through ``__getattr__``): ``load`` and ``generate`` are
timed, ``capabilities`` and ``name`` are read directly, and ``close`` is timed but never
raises for a hang (it runs after the audit, which must keep its results): after a hung call
it is not called at all, since the engine's state belongs to the hung thread.
"""

from __future__ import annotations

import functools
import math
import threading

import torch

from specexact.decoders.engines.protocol import is_engine
from specexact.fuzz.subject import CallTimeout

__all__ = ["SamplerCallTimeout", "TimedEngine", "with_call_timeout", "untimed", "start_worker", "carry_threads",
           "DEFAULT_CALL_TIMEOUT_S", "CALL_THREAD_PREFIX"]

DEFAULT_CALL_TIMEOUT_S = 120.0
"""The per-call limit of the pytest fixture and assertions (``specexact.testing``) unless
set: a call of the audit's small cases takes well under a second."""


CALL_THREAD_PREFIX = "specexact-call:"
"""The name of every worker thread a limited call runs in starts so (``specexact.cli.console_main``
looks for one still running at exit)."""


class SamplerCallTimeout(CallTimeout, TimeoutError):
    """A call of the sampler ran past the per-call time limit (:func:`with_call_timeout`).

    Also a :class:`specexact.fuzz.subject.CallTimeout`, so the fuzz phase records it as
    what it is, a hang (rule ``no_hang``), not as a crash."""


class _Limit:
    def __init__(self, seconds: float, name: str):
        self.seconds = seconds
        self.name = name
        self.hung: str | None = None

    def call(self, fn, what: str, args, kwargs):
        if self.hung is not None:
            raise SamplerCallTimeout(f"{self.name}.{what} not called: an earlier call ({self.hung}) gave no result "
                                     f"within {self.seconds:g} s and is still running")
        worker, box = start_worker(lambda: fn(*args, **kwargs), f"{CALL_THREAD_PREFIX}{self.name}.{what}")
        worker.join(self.seconds)
        if worker.is_alive():
            self.hung = what
            raise SamplerCallTimeout(f"{self.name}.{what}: no result within {self.seconds:g} s (a hang; the call is "
                                     "left running in a daemon thread, later calls are refused)")
        if "error" in box:
            raise box["error"]
        return box["value"]


def start_worker(fn, name: str) -> tuple[threading.Thread, dict]:
    """Start ``fn()`` in a daemon thread ``name`` with the caller's grad mode and torch thread
    count (:func:`carry_threads`); returns the thread and the box that receives its
    ``"value"`` or its ``"error"`` (the caller joins, with its own limit, and re-raises).
    Shared by the limited calls here and the pilot's probes (:mod:`specexact.audit.run.pilot`)."""
    box: dict = {}
    grad = torch.is_grad_enabled()
    threads = torch.get_num_threads()

    def target():
        try:
            carry_threads(threads)
            with torch.set_grad_enabled(grad):
                box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=target, name=name, daemon=True)
    worker.start()
    return worker, box


def carry_threads(threads: int) -> None:
    """Set torch's thread count to ``threads`` (the caller's) in a worker thread, where it
    differs: the count is process-wide, and a call still running in another thread (left
    past its limit, or a pilot probe abandoned at another count) may have written its own."""
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


class _Timed:
    """The wrapped sampler: attributes are the sampler's; callable ones are timed."""

    def __init__(self, sampler, limit: _Limit):
        object.__setattr__(self, "_sampler", sampler)
        object.__setattr__(self, "_limit", limit)
        object.__setattr__(self, "__wrapped__", sampler)  # the sampler itself (its module's FINDINGS, ...)

    def __getattr__(self, name):
        value = getattr(self._sampler, name)
        if callable(value) and not isinstance(value, type) and not name.startswith("__"):
            limit = self._limit

            @functools.wraps(value)
            def timed(*args, **kwargs):
                return limit.call(value, name, args, kwargs)

            return timed
        return value

    def __repr__(self) -> str:
        return f"with_call_timeout({self._sampler!r}, {self._limit.seconds:g})"


class TimedEngine:
    """An end-to-end engine with its ``load`` and ``generate`` calls limited (module
    docstring); made by :func:`with_call_timeout`. Other attributes are the engine's."""

    def __init__(self, engine, limit: _Limit):
        self._engine = engine
        self._limit = limit
        self.__wrapped__ = engine

    @property
    def name(self) -> str:
        return self._engine.name

    def capabilities(self):
        return self._engine.capabilities()

    def load(self, *args, **kwargs):
        return self._limit.call(self._engine.load, "load", args, kwargs)

    def generate(self, *args, **kwargs):
        return self._limit.call(self._engine.generate, "generate", args, kwargs)

    def close(self) -> None:
        if self._limit.hung is not None:
            return
        try:
            self._limit.call(self._engine.close, "close", (), {})
        except SamplerCallTimeout:
            pass  # left running in its daemon thread; the audit's results come first

    def __getattr__(self, name):
        value = getattr(self._engine, name)
        if name == "reload" and callable(value):  # an adapter's own restart (audit.cases.e2e.engine_call.ensure_loaded)
            return lambda: self._limit.call(value, "reload", (), {})
        return value

    def __repr__(self) -> str:
        return f"with_call_timeout({self._engine!r}, {self._limit.seconds:g})"


class _TimedCallable(_Timed):
    def __call__(self, *args, **kwargs):
        return self._limit.call(self._sampler, "__call__", args, kwargs)


def with_call_timeout(sampler, seconds: float | None):
    """``sampler`` with every call limited to ``seconds`` (module docstring).

    Parameters
    ----------
    sampler : callable or adapter object
        A ``verify``-protocol callable, a logits-level adapter, a tree sampler, or an
        end-to-end engine (wrapped by :class:`TimedEngine`).
    seconds : float or None
        The limit per call, > 0; None returns ``sampler`` itself (no limit).

    Returns
    -------
    object
        A wrapper with the sampler's attributes (``capabilities``, ``name``, ...), callable
        if the sampler is; a :class:`TimedEngine` for an engine.

    Raises
    ------
    ValueError
        ``seconds`` is not a positive finite number.
    """
    if seconds is None:
        return sampler
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not (
            math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"call timeout must be a positive number of seconds, got {seconds!r}")

    if is_engine(sampler):
        return TimedEngine(sampler, _Limit(float(seconds), f"engine {sampler.name}"))
    name = getattr(sampler, "__qualname__", None) or type(sampler).__name__
    limit = _Limit(float(seconds), str(name))
    return (_TimedCallable if callable(sampler) else _Timed)(sampler, limit)


def untimed(sampler) -> tuple[object, float | None]:
    """``(the sampler itself, its per-call limit in seconds)`` of a sampler wrapped by
    :func:`with_call_timeout`; ``(sampler, None)`` for any other object (a user's own
    wrappers are not looked into). The pilot times its probes with the sampler itself, so
    that a slow probe never marks the audit's sampler as hung
    (:mod:`specexact.audit.run.pilot`)."""
    if isinstance(sampler, TimedEngine):
        return sampler._engine, sampler._limit.seconds
    if isinstance(sampler, _Timed):
        return sampler._sampler, sampler._limit.seconds
    return sampler, None
