"""Every case a name can select: the default (or quick) decoder-level cases, the tree-level
cases, then the opt-in ones (``--case NAME``), lookup by name, and the default cases of a
given sampler (:func:`default_cases_for`: its protocol's)."""

from __future__ import annotations

from specexact.audit.cases.decoder_case import default_cases, quick_cases
from specexact.audit.cases.tree_case import restrict_tree_case, tree_cases
from specexact.audit.cases.verify_case import verify_cases
from specexact.decoders.adapters.protocol import protocol_of

__all__ = ["opt_in_cases", "all_cases", "find_case", "default_cases_for"]


def default_cases_for(verifier, quick: bool = False) -> list:
    """The cases an audit of ``verifier`` runs when none are named.

    A tree-protocol sampler: every tree-protocol tree-level case
    (:func:`~specexact.audit.cases.tree_case.tree_cases`; those whose scheme or drafting rule it
    does not serve are then skipped with the reason). A chain sampler: the default (or quick)
    decoder-level cases, plus the chain tree-level cases of its declared scheme (``block-v3``
    for a block verifier); chain cases of other schemes are not listed at all.
    """
    trees = tree_cases(quick=quick)
    if protocol_of(verifier) == "tree":
        return [c for c in trees if c.protocol == "tree"]
    chain = quick_cases() if quick else default_cases()
    return [*chain, *(c for c in trees if c.protocol == "chain" and restrict_tree_case(c, verifier)[0] is not None)]


def opt_in_cases() -> list:
    """Cases outside the default audit, run when named (``--case NAME``): the verify-level
    cases (:func:`specexact.audit.cases.verify_case.verify_cases`). ``v32000-verify`` is not a
    default case because of the zoo self-check (``tests/audit/zoo/test_zoo.py``: 17 verifiers,
    4 calls per default case): one call of each zoo verifier on its V=32000 rows took
    28 s of single-thread CPU in all at 1024 rows per call (the zoo's verifiers build
    ``[B, V]`` float64 temporaries), so 4 calls would add ~55 s to a zoo run of ~92 s on 2
    workers at 1024 rows, about 4x that at the case's 4096 (measured on a loaded 2-core
    machine); see docs/checks.md ("What the audit checks")."""
    return verify_cases()


def all_cases(quick: bool = False) -> list:
    """The default (or quick) cases, the tree-level cases, then :func:`opt_in_cases`: every
    case a name can select."""
    return [*(quick_cases() if quick else default_cases()), *tree_cases(quick=quick), *opt_in_cases()]


def find_case(name: str, quick: bool = False):
    """The case named ``name`` among :func:`all_cases`.

    Raises
    ------
    KeyError
        No case has that name; the message lists the known names.
    """
    cases = all_cases(quick=quick)
    for c in cases:
        if c.name == name:
            return c
    raise KeyError(f"unknown case {name!r}; known: {sorted(c.name for c in cases)}")
