"""Every kind of audit case, imported by name: :func:`kind_of` finds the one that serves a case.

The registry a reader (and a tool) can follow: each kind's module is imported here and its
``CASE_KIND`` listed in :data:`KINDS`, in the order :func:`kind_of` asks them (the first that
handles a case serves it). A new kind is a new module of this room and one line here.
"""

from __future__ import annotations

from specexact.audit.cases.decoder_kind import CASE_KIND as DECODER_KIND
from specexact.audit.cases.e2e.kind import CASE_KIND as E2E_KIND
from specexact.audit.cases.protocol import CaseKind
from specexact.audit.cases.tree_kind import CASE_KIND as TREE_KIND
from specexact.audit.cases.verify_kind import CASE_KIND as VERIFY_KIND

__all__ = ["KINDS", "kinds", "kind_of"]

KINDS: tuple[CaseKind, ...] = (E2E_KIND, TREE_KIND, VERIFY_KIND, DECODER_KIND)
"""The kinds :func:`kind_of` asks, in order."""


def kinds() -> list[CaseKind]:
    """Every kind, in :data:`KINDS` order."""
    return list(KINDS)


def kind_of(case) -> CaseKind:
    """The kind that serves ``case``.

    Raises
    ------
    TypeError
        No kind handles ``case`` (the message names its type and the known kinds).
    """
    for kind in KINDS:
        if kind.handles(case):
            return kind
    raise TypeError(f"no case kind handles {type(case).__name__} {getattr(case, 'name', case)!r}; "
                    f"known kinds: {[k.name for k in KINDS]}")
