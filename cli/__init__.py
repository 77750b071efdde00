"""specexact: statistical verification and fuzz testing for speculative decoding.

Subpackages
-----------
specexact.decoders
    Logits pipeline, naive and speculative samplers, the ``verify`` protocol, test models.
specexact.exactness
    Exact laws, calibrated tests, power and sample-size planning, false-fail budgets.
specexact.strategies
    Hypothesis strategies for vocabularies, probability pairs, truncations, penalties.
specexact.audit
    Audit cases and the runner behind ``specexact audit``.
specexact.reports
    JSON / Markdown / HTML report writers.
"""

__version__ = "0.1.0"
