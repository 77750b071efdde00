"""What an end-to-end engine promises about its seeds: :class:`SeedPromise`.

Every engine promises that the same call again (the same requests, in the same order, with
the same seeds) gives its seeded requests the same outputs (the audit's ``reproducible``
check, :mod:`specexact.decoders.engines.protocol`). Beyond that, engines differ, and each
adapter declares what its engine's documentation and source promise
(:attr:`~specexact.decoders.engines.EngineCapabilities.seeds`):

- ``other_mix``: a seeded request gives the same output in another call that holds the same
  seeded requests in another order, without the call's unseeded requests (the audit's
  ``reproducible_in_mix`` check: the first call's seeded requests again, reversed, alone);
- ``alone``: a seeded request gives the same output when it is the only request of a call
  (the audit's ``reproducible_alone`` check: the first call's first seeded request again,
  alone);
- ``unseeded_independent``: the unseeded requests (``seed=None``) of one call are independent
  draws (the audit's ``independent_requests`` check: pairs of unseeded requests of one row
  class agree no more often than two independent draws of its law; a shared stream, as in
  TensorRT-LLM #19487, makes them agree).

A promise the engine declares and breaks is a finding; one it does not declare is not
checked (the audit says so in the case's configuration).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["SeedPromise"]


@dataclass(frozen=True)
class SeedPromise:
    """An engine's promise about seeded and unseeded requests (module docstring).

    Parameters
    ----------
    other_mix : bool, default False
        A seeded request's output does not change when the call's other requests change
        (the unseeded ones left out) and the seeded ones come in another order.
    alone : bool, default False
        A seeded request's output does not change when it is the only request of the call.
    unseeded_independent : bool, default False
        Unseeded requests (``GenerationRequest.seed is None``) of one call are independent
        draws; the engine accepts them.
    source : str, default ""
        Where the promise is read (the engine's documentation or source), for reports.

    Raises
    ------
    TypeError
        ``other_mix``, ``unseeded_independent`` or ``alone`` not a bool, ``source`` not a str.
    """

    other_mix: bool = False
    unseeded_independent: bool = False
    source: str = ""
    alone: bool = False

    def __post_init__(self) -> None:
        for name in ("other_mix", "unseeded_independent", "alone"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if not isinstance(self.source, str):
            raise TypeError(f"source must be a str, got {self.source!r}")

    def to_dict(self) -> dict:
        """JSON-ready form, for reports."""
        return asdict(self)
