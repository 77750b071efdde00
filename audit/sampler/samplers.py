"""Resolve ``--sampler`` names to verifiers with the ``verify`` protocol.

Accepted forms:

- ``builtin``: :func:`specexact.decoders.verify`;
- ``NAME`` registered in the entry-point group ``specexact.samplers`` (a project registers
  its sampler in its own ``pyproject.toml``:
  ``[project.entry-points."specexact.samplers"] mysampler = "mypkg.spec:verify"``);
- ``MODULE:CALLABLE`` (``CALLABLE`` may be dotted: ``pkg.mod:Class.method``).

specexact registers its own third-party adapters in the same group (``transformers``:
:mod:`specexact.decoders.adapters.transformers`, needs ``specexact[thirdparty]``).
A resolved sampler may carry report metadata (:func:`sampler_metadata`). A logits-level
adapter (``capabilities.logits_level``, a ``verify_logits`` method) is driven with raw
target logits and per-row parameters, and audited against the law of its declared order
of operations (:func:`specexact.decoders.adapters.check_auditable`).
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Callable

from specexact.decoders import verify
from specexact.decoders.adapters.protocol import check_auditable

__all__ = ["SamplerError", "resolve_sampler", "available_samplers", "sampler_metadata", "ENTRY_POINT_GROUP",
           "ENGINE_SAMPLER_PREFIX"]

ENTRY_POINT_GROUP = "specexact.samplers"

ENGINE_SAMPLER_PREFIX = "engine-"
"""An audit of an engine (``--engine NAME``) names its sampler ``engine-NAME`` in the report."""


class SamplerError(Exception):
    """The sampler named on the command line cannot be loaded (audit exit status 2)."""


def available_samplers() -> dict[str, str]:
    """``{name: target}`` of the built-in and entry-point samplers."""
    found = {"builtin": "specexact.decoders:verify"}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep.value)
    return found


#: Where each engine adapter's library is installed: its own environment (the engines
#: conflict with each other and with the suite), or a GPU machine.
_ENGINE_ENVS = {
    "vllm": "tox -e vllm-cpu (native kernels) or tox -e vllm-triton",
    "vllm_logits": "tox -e vllm-cpu",
    "sglang": "tox -e sglang",
    "lmdeploy": "tox -e lmdeploy",
    "mlx": "tox -e mlx",
    "eagle": "tox -e eagle",
    "flashinfer": "a CUDA machine: bash scripts/gpu_check.sh",
    "sglang_tree": "a CUDA machine: bash scripts/gpu_check.sh",
}


def _install_hint(target: str, exc: BaseException) -> str:
    prefix = "specexact.decoders.adapters."
    if not (isinstance(exc, ModuleNotFoundError) and target.startswith(prefix)):
        return ""
    module = target[len(prefix):].partition(":")[0]
    if module in _ENGINE_ENVS:
        return f" (the engine runs in its own environment: {_ENGINE_ENVS[module]}; see docs/engines/index.md)"
    return " (install the optional dependencies: pip install 'specexact[thirdparty]')"


def _load(spec: str) -> Callable:
    module_name, _, attr = spec.partition(":")
    try:
        obj = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the same finding
        raise SamplerError(f"cannot import module {module_name!r} for sampler {spec!r}: "
                           f"{type(exc).__name__}: {exc}{_install_hint(spec, exc)}") from exc
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
        Unknown name, import failure (with an install hint for specexact's own adapters),
        an object that is not callable, or a logits-level adapter (not auditable yet).
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
    eps = [] if ":" in name else [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if eps:
        try:
            obj = eps[0].load()
        except Exception as exc:  # noqa: BLE001
            raise SamplerError(f"cannot load sampler {name!r} ({target}): {type(exc).__name__}: {exc}"
                               f"{_install_hint(target, exc)}") from exc
    else:
        obj = _load(target)
    try:
        check_auditable(obj)
    except TypeError as exc:
        resolved = "" if target == name else f" ({target})"
        raise SamplerError(f"sampler {name!r}{resolved} cannot be audited: {exc}; it is a {type(obj).__name__}") from exc
    return obj, target


def sampler_metadata(verifier: Callable) -> dict | None:
    """Report metadata of a resolved sampler: ``verifier.metadata()`` for adapters (library,
    installed version, signature variant, capabilities), else ``None``.

    A failing ``metadata()`` is reported as ``{"error": ...}`` rather than raised: the audit
    of the sampler itself must still run.
    """
    meta = getattr(verifier, "metadata", None)
    if not callable(meta):
        return None
    try:
        out = meta()
    except Exception as exc:  # noqa: BLE001 - metadata is informative only
        return {"error": f"{type(exc).__name__}: {exc}"}
    return dict(out) if out is not None else None
