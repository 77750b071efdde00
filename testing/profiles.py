"""Hypothesis profiles for exactness property tests: ``ci`` (derandomised) and ``nightly``.

Registered by the pytest plugin (:mod:`specexact.testing.plugin`) when specexact is
installed, and by specexact's own ``tests/conftest.py``, so an engine's property tests
written with :mod:`specexact.strategies` run as specexact's own do. Load one with
Hypothesis' option: ``pytest --hypothesis-profile=ci`` (Hypothesis also loads ``ci`` by
itself when it detects a CI environment) or ``--hypothesis-profile=nightly``.

- ``ci``: ``derandomize=True`` (the examples are a function of the test alone: identical
  on every run and under ``-n 1`` and ``-n auto``), no example database, no deadline
  (a decoder call's time varies a hundredfold on a shared machine), ``max_examples=30``.
- ``nightly``: random examples (a new search every night), ``max_examples=2000``, every
  phase (``target()`` guides the search only past ~1000 examples).

Registering replaces Hypothesis' own ``ci`` profile (same intent: derandomised, no
database, no deadline, blobs printed) with this one.
"""

from __future__ import annotations

__all__ = ["register_profiles", "PROFILE_SETTINGS"]

#: Keyword arguments of ``hypothesis.settings`` per profile (health checks added by
#: :func:`register_profiles`: ``too_slow`` and ``data_too_large`` are suppressed, since
#: building a vocabulary-sized law from a drawn seed is both by design).
PROFILE_SETTINGS = {
    "ci": dict(derandomize=True, database=None, deadline=None, print_blob=True, max_examples=30),
    "nightly": dict(derandomize=False, database=None, deadline=None, print_blob=True, max_examples=2000),
}


def register_profiles() -> None:
    """Register the ``ci`` and ``nightly`` Hypothesis profiles (idempotent; loads none)."""
    from hypothesis import HealthCheck, Phase, settings

    suppress = [HealthCheck.too_slow, HealthCheck.data_too_large]
    settings.register_profile("ci", suppress_health_check=suppress, **PROFILE_SETTINGS["ci"])
    settings.register_profile("nightly", suppress_health_check=suppress, phases=list(Phase),
                              **PROFILE_SETTINGS["nightly"])
