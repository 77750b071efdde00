"""The fuzz phase: the sampler under audit on generated inputs, held to exact rules.

:func:`run_fuzz` is the one entry point (the audit's *fuzz* stage and ``specexact fuzz``
call it): Hypothesis draws inputs from the project's strategies within what the sampler
declares (:mod:`.generation`, :mod:`.families`), every example is held to exact rules
(:mod:`.rules`, :mod:`.invariants`), acceptance uniforms are probed where they can be
supplied (:mod:`.probes`), invalid inputs must be refused (:mod:`.invalid`), failures are
shrunk and become findings with replay scripts (:mod:`.engine`, :mod:`.findings`,
:mod:`.replay`). The statistical part, generated row classes and per-example exact laws
that the audit adds to its cases, is in :mod:`.generated_cases`. :mod:`.settings` maps
the fuzz phase onto the test suite's Hypothesis profiles.
"""

from importlib import import_module

__all__ = ["RULES", "Finding", "FuzzResult", "FuzzSettings", "FuzzerError", "RuleBroken", "run_fuzz"]

_WHERE = {"RULES": "rules", "FuzzerError": "rules", "RuleBroken": "rules", "Finding": "findings",
          "FuzzResult": "findings", "FuzzSettings": "settings", "run_fuzz": "run"}


def __getattr__(name: str):
    """The public names, imported on first use (``specexact.cli_fuzz`` is imported by the
    command line at start-up and must not pull in torch and Hypothesis)."""
    if name in _WHERE:
        return getattr(import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
