"""Resolve ``--sampler`` names to verifiers with the ``verify`` protocol.

Accepted forms:

- ``builtin``: :func:`specexact.decoders.verify`;
- ``NAME`` registered in the entry-point group ``specexact.samplers`` (a project registers
  its sampler in its own ``pyproject.toml``:
  ``[project.entry-points."specexact.samplers"] mysampler = "mypkg.spec:verify"``);
- ``MODULE:CALLABLE`` (``CALLABLE`` may be dotted: ``pkg.mod:Class.method``).
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Callable

from specexact.decoders import verify

__all__ = ["SamplerError", "resolve_sampler", "available_samplers", "ENTRY_POINT_GROUP"]

ENTRY_POINT_GROUP = "specexact.samplers"


class SamplerError(Exception):
    """The sampler named on the command line cannot be loaded (audit exit status 2)."""


def available_samplers() -> dict[str, str]:
    """``{name: target}`` of the built-in and entry-point samplers."""
    found = {"builtin": "specexact.decoders:verify"}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep.value)
    return found


def _load(spec: str) -> Callable:
    module_name, _, attr = spec.partition(":")
    try:
        obj = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the same finding
        raise SamplerError(f"cannot import module {module_name!r} for sampler {spec!r}: "
                           f"{type(exc).__name__}: {exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise SamplerError(f"module {module_name!r} has no attribute {attr!r} (sampler {spec!r})") from exc
    return obj


def resolve_sampler(name: str) -> tuple[Callable, str]:
    """Return ``(verifier, resolved_target)`` for a ``--sampler`` value.

    Raises
    ------
    SamplerError
        Unknown name, import failure, or an object that is not callable.
    """
    if not name:
        raise SamplerError("sampler name is empty")
    if ":" in name:
        target = name
    else:
        known = available_samplers()
        if name not in known:
            raise SamplerError(f"unknown sampler {name!r}; known: {sorted(known)} or MODULE:CALLABLE")
        target = known[name]
    if target == "specexact.decoders:verify":
        return verify, target
    if name in available_samplers() and ":" not in name:
        eps = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
        if eps:
            try:
                obj = eps[0].load()
            except Exception as exc:  # noqa: BLE001
                raise SamplerError(f"cannot load sampler {name!r} ({target}): {type(exc).__name__}: {exc}") from exc
        else:
            obj = _load(target)
    else:
        obj = _load(target)
    if not callable(obj):
        raise SamplerError(f"sampler {name!r} ({target}) is not callable: {type(obj).__name__}")
    return obj, target
