"""Exactness of an engine's speculative-decoding sampler, checked in its own test suite.

Copy this file into your tests, replace the two lines marked ``# <- your engine``, and run
``pytest -n auto`` as usual. specexact's pytest plugin is active once specexact is
installed. It is on no package index: install it from its git repository pinned to a commit
(``pip install "specexact @ git+URL@REV"``) or from a path (``pip install
./third_party/specexact``), after your torch; docs/ci/pytest-plugin.md, "Installing
specexact in an engine's CI".

- Every audit here runs the sampler inside specexact's speculative decoder on small seeded
  models whose output laws are computed exactly, and fails with the findings: the check,
  its p-value and detectable TV, and a command that replays it.
- All audits of the session share one false-fail rate (``--specexact-false-fail-rate``,
  default 1e-6): the chance that a correct sampler fails any of them. It is split over the
  collected audits, identically under ``-n 1`` and ``-n auto``.
- ``batches`` fixes the sample sizes, so a run is reproducible; raise it (or pass
  ``budget_s``) nightly for more power: ``result.worst_detectable_tv`` is the smallest
  error every check detects with probability 0.99.
"""

import pytest

from specexact.decoders import verify as engine_verify  # <- your engine: a callable with the verify protocol
from specexact.decoders.adapters.builtin_logits import LogitsLevelVerifier as EngineLogitsAdapter  # <- your engine
from specexact.testing import audit_verifier, case_names

# Probability level: verify(draft_token_ids [B, K], draft_probs [B, K, V],
# target_probs [B, K+1, V], generator) -> [B, K+1] (accepted drafts, then the recovered or
# bonus token, -1 after). One test per case, so a failure names its case.


@pytest.mark.specexact(batches=8)
@pytest.mark.parametrize("case", case_names("quick"))
def test_verifier_is_exact(case, specexact_check):
    specexact_check(engine_verify, cases=[case])


# Logits level: an adapter whose verify_logits processes raw target logits itself
# (temperature, top-k / top-p / min-p, penalties per candidate prefix) in the order its
# Capabilities declare; cases needing an operation it lacks are skipped.


@pytest.mark.specexact(batches=8)
def test_logits_adapter_is_exact(specexact_check):
    result = specexact_check(EngineLogitsAdapter(), cases="quick")
    assert result.num_sequences > 0


# The numbers, for a test that asserts more than exactness: take the session's share of
# the budget from the fixture and look at the result.


@pytest.mark.specexact
def test_verifier_power_at_this_sample_size(specexact_false_fail_rate):
    result = audit_verifier(engine_verify, cases=["v8-plain"], batches=16, threads=1,
                            false_fail_rate=specexact_false_fail_rate)
    assert result.passed, result.message
    assert result.worst_detectable_tv is not None and result.worst_detectable_tv < 0.5
