"""End-to-end cases: an engine's own speculative generate loop on tiny real-architecture models.

The case kind of :class:`~.case.E2ECase` (:mod:`~specexact.audit.cases.protocol`). The sampler
under audit is an :class:`~specexact.decoders.engines.EndToEndEngine`: it loads a target and a
draft from disk (:mod:`specexact.decoders.tiny_models`), drafts, runs the target forward,
processes logits per position and keeps its own books; specexact only hands it requests (prompt token ids,
sampling parameters, length limits, one seed each) and reads back the generated ids. The
engine is loaded once per configuration (model pair, method, γ) and reused by every case of
that configuration.

Per row class ``c`` (one request shape), on ``n`` speculative and ``n`` plain sequences:

- ``sequence_law[c]`` (inexact): the engine's speculative outputs against their exact law,
  enumerated in float64 from the target's own weights with the engine's declared processing
  (:func:`~specexact.decoders.tiny_models.exact_sequence_law`); a sequence of probability 0
  fails at once;
- ``plain_sequence_law[c]`` (inexact): the engine's *plain* sampling (``speculative=False``)
  against the same law. When only this and ``sequence_law`` fail together, the declared
  processing is the likelier culprit; when only ``sequence_law`` fails, speculative decoding
  changed the law;
- ``sequences_vs_plain[c]`` (inexact): speculative against plain outputs of the same engine
  (chi-square homogeneity), the naive sampler of the two-sample check, in the same run;
- ``accepted_length[c]`` (under-accepting when the law checks pass): drafts accepted in each
  request's first round as the engine reports them (``GenerationResult.first_round_accepted``)
  against their exact law (:func:`~specexact.decoders.tiny_models.expected_acceptance`), for
  draft-model methods, engines that report it, and classes where the law is known (no EOS; no
  output penalties when the first round follows a target-sampled token);

(a long case, :func:`~.catalog.long_case`: instead, per path and band of output positions,
``token_law[positions a-b]`` and ``plain_token_law[...]``, the randomised PIT of every
emitted token under its conditional law, :mod:`.token_checks`) and per case
``reproducible`` (defect): the first call's requests generated again, speculative and plain,
must give the same outputs token for token (the engine's seeds are used), and
``defect``: a crash or a break of the output protocol
(:func:`~specexact.decoders.engines.check_generation_results`).

Sampled, not injected: an engine's randomness cannot be injected, so every law here is
checked on samples (chi-square, at the audit's per-check false-fail rate divided by
``CHI2_TAIL_INFLATION``), each check with its detectable TV.

The package, one module per job:

- :mod:`.case`: the case and its request shapes (:class:`~.case.E2ECase`,
  :class:`~.case.E2ERowClass`);
- :mod:`.catalog`: the cases an engine is audited with (:func:`~.catalog.e2e_cases`);
- :mod:`.laws`: the reference laws, exact, from the tiny models' weights;
- :mod:`.engine_call`: the engine call (loading the engine, its generate calls, crash
  detection and the search for the classes that crash alone);
- :mod:`.fresh_process`: a case whose engine cannot be loaded again after a crash goes on in
  fresh processes (the run room starts them);
- :mod:`.checks`: the checks and their count;
- :mod:`.token_checks`: the long case's per-token checks by position band;
- :mod:`.scenarios`: generated scenarios as cases (drawn from the audit seed, checked token
  by token like the long case);
- :mod:`.shrink`: shrinking a failing scenario to the smallest that still fails, and its replay;
- :mod:`.run`: running a case (:func:`~.run.run_e2e_case`);
- :mod:`.kind`: the case kind, :data:`~.kind.CASE_KIND`.
"""

from specexact.audit.cases.e2e.case import E2ECase, E2ERowClass
from specexact.audit.cases.e2e.catalog import DRAFT_MODEL_METHODS, LOOKUP_METHODS, e2e_cases
from specexact.audit.cases.e2e.checks import E2E_CHECKS_PER_CLASS, e2e_num_checks
from specexact.audit.cases.e2e.kind import CASE_KIND, E2EKind

__all__ = ["E2ERowClass", "E2ECase", "E2EKind", "CASE_KIND", "e2e_cases", "DRAFT_MODEL_METHODS", "E2E_CHECKS_PER_CLASS",
           "LOOKUP_METHODS", "e2e_num_checks"]
