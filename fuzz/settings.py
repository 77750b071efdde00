"""How much the fuzz phase explores, and how it maps onto the test suite's Hypothesis profiles.

:class:`FuzzSettings` is the fuzz phase's own settings object (the audit does not run
under the test suite's loaded Hypothesis profile; it builds its Hypothesis settings from
this). Two profiles mirror ``tests/conftest.py``:

==============  ===========================================  ======================================
profile         like the suite's                              fuzz phase
==============  ===========================================  ======================================
``"ci"``        ``ci``: derandomised, no database,           every Hypothesis run seeded from the
                30 examples                                  audit seed, the sampler and the family
                                                             (same examples in every process, so
                                                             ``-n 1`` and ``-n auto`` agree);
                                                             :data:`CI_EXAMPLES` examples per family
                                                             with ``--batches``; 1 generated case of
                                                             each statistical kind
``"nightly"``   ``nightly``: 2000 examples, every phase       :data:`NIGHTLY_EXAMPLES` per family with
                                                             ``--batches``; 3 generated cases of each
                                                             kind; the example database replays
                                                             earlier failures first
==============  ===========================================  ======================================

With a time budget the families run until their share of the fuzz time is spent (the
examples then depend on the machine's speed, never on the data; the report records them).
The database (``database_dir``) is used in either profile when given: the CLI puts it
beside the reports, ``<report-dir>/.fuzz-examples``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from hypothesis import Phase

__all__ = ["FuzzSettings", "PROFILES", "CI_EXAMPLES", "NIGHTLY_EXAMPLES"]

PROFILES = ("ci", "nightly")
CI_EXAMPLES = 25
"""Examples per family under the ``ci`` profile with a fixed sample size."""
NIGHTLY_EXAMPLES = 400
"""Examples per family under the ``nightly`` profile with a fixed sample size."""


@dataclass(frozen=True)
class FuzzSettings:
    """Settings of one fuzz phase.

    Parameters
    ----------
    profile : {"ci", "nightly"}
    seed : int
        The audit seed; every Hypothesis run and every generated case derives from it.
    time_s : float, optional
        Time for the exact families (all together); None: a fixed number of examples.
    examples : int, optional
        Examples per family (default: the profile's, :data:`CI_EXAMPLES` /
        :data:`NIGHTLY_EXAMPLES`; with ``time_s`` an upper bound, default none).
    database_dir : str, optional
        Hypothesis example database folder (earlier failures are replayed first).
    generated_cases : int, optional
        Statistical cases of each generated kind (row classes, per-example laws) the audit
        adds (default: the profile's, 1 / 3).
    call_timeout_s : float
        A call of the sampler on valid input taking longer is a ``no_hang`` finding.
    max_vocab : int, optional
        Cap on V (tests; default: the families' own, up to 262145).
    threads : int, optional
        torch intra-op threads during the phase (default 1: the examples are small and
        thread hand-offs dominate on a busy machine); None: leave torch's setting.

    Raises
    ------
    ValueError
        A value out of range (the message names the field).
    """

    profile: str = "ci"
    seed: int = 0
    time_s: float | None = None
    examples: int | None = None
    database_dir: str | None = None
    generated_cases: int | None = None
    call_timeout_s: float = 30.0
    max_vocab: int | None = None
    threads: int | None = 1

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"profile must be one of {PROFILES}, got {self.profile!r}")
        if int(self.seed) != self.seed:
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        if self.time_s is not None and not self.time_s > 0:
            raise ValueError(f"time_s must be > 0, got {self.time_s!r}")
        if self.examples is not None and (int(self.examples) != self.examples or self.examples < 1):
            raise ValueError(f"examples must be an integer >= 1, got {self.examples!r}")
        if self.generated_cases is not None and (int(self.generated_cases) != self.generated_cases
                                                 or self.generated_cases < 0):
            raise ValueError(f"generated_cases must be an integer >= 0, got {self.generated_cases!r}")
        if not self.call_timeout_s > 0:
            raise ValueError(f"call_timeout_s must be > 0, got {self.call_timeout_s!r}")
        if self.max_vocab is not None and self.max_vocab < 2:
            raise ValueError(f"max_vocab must be >= 2, got {self.max_vocab!r}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be >= 1 or None, got {self.threads!r}")
        if self.database_dir is not None and not isinstance(self.database_dir, str):
            object.__setattr__(self, "database_dir", os.fspath(self.database_dir))

    @property
    def examples_per_family(self) -> int | None:
        """The fixed number of examples per family (None: as many as the time allows)."""
        if self.examples is not None:
            return int(self.examples)
        if self.time_s is not None:
            return None
        return CI_EXAMPLES if self.profile == "ci" else NIGHTLY_EXAMPLES

    @property
    def num_generated_cases(self) -> int:
        if self.generated_cases is not None:
            return int(self.generated_cases)
        return 1 if self.profile == "ci" else 3

    @property
    def phases(self) -> tuple:
        """Hypothesis phases: explicit, reuse (the database), generate, shrink; the nightly
        profile adds target."""
        base = (Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink)
        return base + ((Phase.target,) if self.profile == "nightly" else ())

    @property
    def first_chunk(self) -> int:
        """Examples of the first Hypothesis run of a timed family (its speed is then known)."""
        return 8

    @property
    def max_chunk(self) -> int:
        """Largest Hypothesis run of a timed family."""
        return 200 if self.profile == "ci" else 1000

    def with_(self, **changes) -> "FuzzSettings":
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return {"profile": self.profile, "seed": self.seed, "time_s": self.time_s,
                "examples_per_family": self.examples_per_family, "database_dir": self.database_dir,
                "generated_cases": self.num_generated_cases, "call_timeout_s": self.call_timeout_s,
                "max_vocab": self.max_vocab, "threads": self.threads}
