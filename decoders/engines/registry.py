"""Find an end-to-end engine by name: ``builtin``, an entry point, or ``MODULE:CLASS``.

Engines register under the entry-point group ``specexact.engines`` (pyproject); each value
is a class implementing :class:`~specexact.decoders.engines.EndToEndEngine`, made with no
arguments. A real engine's module imports the engine itself, which lives in its own
environment (``tox -e vllm-e2e``, ``mlx-e2e``; transformers is in the test extra).
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from .protocol import is_engine

__all__ = ["ENGINE_GROUP", "EngineError", "engine_names", "resolve_engine"]

ENGINE_GROUP = "specexact.engines"


class EngineError(ValueError):
    """An engine name that resolves to nothing usable (the message says why and what to do)."""


def engine_names() -> list[str]:
    """The registered engine names (entry points of :data:`ENGINE_GROUP`)."""
    return sorted({ep.name for ep in entry_points(group=ENGINE_GROUP)})


def _load(spec: str):
    eps = [ep for ep in entry_points(group=ENGINE_GROUP) if ep.name == spec]
    if eps:
        return eps[0].load(), eps[0].value
    if ":" not in spec:
        raise EngineError(f"unknown engine {spec!r}: registered engines are {engine_names()}, or give MODULE:CLASS")
    module, _, attr = spec.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj, spec


E2E_ENVS = {"vllm": "vllm-e2e", "transformers": "transformers-e2e", "mlx": "mlx-e2e", "llamacpp": "llamacpp-e2e",
            "sglang": "sglang-e2e", "lmdeploy": "lmdeploy-e2e"}
"""The tox env each registered engine's end-to-end audit runs in (tox.ini)."""


def _importable(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _where(spec: str) -> str:
    env = E2E_ENVS.get(spec)
    if env is not None:
        return f"run it in its own environment: tox -e {env} (tox.ini)"
    return "install the engine's library in this environment, or run specexact where it is installed"


def resolve_engine(spec: str):
    """``(engine, target)``: a new instance of the engine ``spec`` names and what it resolved to.

    Raises
    ------
    EngineError
        An unknown name, a module that cannot be imported (the engine is not installed in
        this environment: the message names the tox env to use), or an object that is not
        an end-to-end engine.
    """
    try:
        obj, target = _load(spec)
    except EngineError:
        raise
    except ImportError as exc:
        raise EngineError(f"engine {spec!r} cannot be imported here ({type(exc).__name__}: {exc}); "
                          f"{_where(spec)}") from exc
    except AttributeError as exc:
        raise EngineError(f"engine {spec!r}: {exc}") from exc
    missing = [m for m in getattr(obj, "requires", ()) if not _importable(m)]
    if missing:
        raise EngineError(f"engine {spec!r} needs {', '.join(missing)}, not installed here; {_where(spec)}")
    engine = obj() if isinstance(obj, type) else obj
    if not is_engine(engine):
        raise EngineError(f"engine {spec!r} resolved to {target}, which is not an end-to-end engine (it needs name, "
                          "capabilities(), load(), generate() and close(): specexact.decoders.engines.EndToEndEngine)")
    return engine, target
