"""The public path of :mod:`specexact.audit.verdict.tiers` (kept when the module moved to its room: the docs' API reference names this path).

Re-exports its public names, and :func:`~specexact.audit.verdict.verdict.fails` (now in
:mod:`specexact.audit.verdict.verdict`); new code imports those modules.
"""

from specexact.audit.verdict.tiers import *  # noqa: F401,F403
from specexact.audit.verdict.tiers import __all__ as _tiers_all
from specexact.audit.verdict.verdict import fails  # noqa: F401

__all__ = [*_tiers_all, "fails"]
