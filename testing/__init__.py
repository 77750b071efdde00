"""specexact in an engine's own tests: exactness assertions, their results, and the pytest plugin.

``from specexact.testing import assert_verifier_exact`` — audit a probability-level
verifier and raise :class:`AssertionError` listing every finding (check, p-value,
detectable TV, replay command); :func:`assert_logits_verifier_exact` for a logits-level
adapter; :func:`audit_verifier` / :func:`audit_logits_verifier` return the
:class:`AuditResult` instead of raising. :func:`case_names` lists a case set for
``pytest.mark.parametrize``. The pytest plugin (:mod:`specexact.testing.plugin`, loaded
automatically) adds the ``specexact_check`` fixture, the ``specexact`` marker, the
session-wide ``--specexact-false-fail-rate`` and the Hypothesis profiles ``ci`` and
``nightly`` (:mod:`specexact.testing.profiles`). ``examples/test_engine_exactness.py`` is
a test file to copy. :func:`assert_engine_exact` / :func:`audit_engine` and the
``specexact_engine_check`` fixture audit an engine's own generate loop end to end
(:mod:`specexact.testing.engine`).
"""

from specexact.testing.assertions import (
    DEFAULT_BATCHES,
    DEFAULT_CALL_TIMEOUT_S,
    AuditResult,
    assert_logits_verifier_exact,
    assert_verifier_exact,
    audit_logits_verifier,
    audit_verifier,
    case_names,
    sampler_name_of,
)
from specexact.testing.engine import DEFAULT_ENGINE_BATCHES, EngineDidNotStart, assert_engine_exact, audit_engine
from specexact.testing.profiles import register_profiles

__all__ = [
    "AuditResult",
    "DEFAULT_ENGINE_BATCHES",
    "EngineDidNotStart",
    "assert_engine_exact",
    "audit_engine",
    "DEFAULT_BATCHES",
    "DEFAULT_CALL_TIMEOUT_S",
    "assert_logits_verifier_exact",
    "assert_verifier_exact",
    "audit_logits_verifier",
    "audit_verifier",
    "case_names",
    "register_profiles",
    "sampler_name_of",
]
