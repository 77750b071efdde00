"""Hypothesis draws that depend only on their seed, not on which modules are imported.

Hypothesis mixes constants found in the *local* modules of ``sys.modules`` (an editable
install, test files, a notebook) into generation. The fuzz phase's examples and
generated cases must be the same in every process for the same seed (an audit's key and
its journal, shards run by different jobs, ``-n 1`` and ``-n auto``), so its draws run
with an empty local-constant pool (:func:`without_local_constants`); the project's own
strategies aim at the float edges anyway. This uses Hypothesis internals; if they move,
the pool is left as it is and a warning says so (a Hypothesis without the pool, such as
the lowest version the pyproject allows, needs nothing done).
"""

from __future__ import annotations

import contextlib
import importlib.util
import warnings
from typing import Iterator

__all__ = ["without_local_constants"]


@contextlib.contextmanager
def without_local_constants() -> Iterator[None]:
    """Within the block Hypothesis draws no local-module constants (module docstring)."""
    if importlib.util.find_spec("hypothesis.internal.constants_ast") is None:
        yield  # a Hypothesis older than its local-constant pool (e.g. 6.116): nothing to empty
        return
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants

        original = providers._get_local_constants
        empty = Constants()
    except Exception as exc:  # pragma: no cover - depends on Hypothesis internals
        warnings.warn(f"could not empty Hypothesis' local-constant pool: {exc!r}", stacklevel=2)
        yield
        return
    providers._get_local_constants = lambda: empty
    providers.CONSTANTS_CACHE.cache.clear()
    try:
        yield
    finally:
        providers._get_local_constants = original
        providers.CONSTANTS_CACHE.cache.clear()
