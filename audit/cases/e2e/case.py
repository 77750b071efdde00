"""The end-to-end case: a tiny model pair, a drafting method and request shapes.

:class:`E2ERowClass` is one request shape (prompt, sampling parameters, length limits) and
:class:`E2ECase` one configuration of an engine's own generate loop: which tiny model pair
(:mod:`specexact.decoders.tiny_models`), which drafting method and γ, which row classes and
how many requests of each per generate call; :func:`model_dirs` is where its models are on
disk. The cases an engine is audited with are made by
:func:`~specexact.audit.cases.e2e.catalog.e2e_cases`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Sequence

from specexact.audit.cases.decoder_case import checked_keep
from specexact.decoders.engines.protocol import SPECULATIVE_METHODS, GenerationRequest
from specexact.decoders.params import SamplingParams
from specexact.decoders.tiny_models import catalog_pair

__all__ = ["E2ERowClass", "E2ECase", "model_dirs", "seed_checks_of", "within_context"]


@dataclass(frozen=True)
class E2ERowClass:
    """One request shape: a prompt, the target's sampling parameters and the length limits.

    Parameters
    ----------
    prompt : tuple of int
    params : SamplingParams
    max_tokens : int
    min_tokens : int, default 0
    eos : bool, default False
        Whether the request stops at the model's EOS token (``eos_token_id`` set).
    arrival : int, default 0
        The engine step at which the class's requests arrive (an engine that declares the
        ``"arrival"`` scheduler axis adds them then; others ignore it).
    stop_token : int or None, default None
        The id that ends the class's requests in place of the model's EOS (``eos`` on; an
        engine that declares ``stop_tokens``); ``None``: the model's EOS.
    """

    prompt: tuple[int, ...]
    params: SamplingParams
    max_tokens: int
    min_tokens: int = 0
    eos: bool = False
    arrival: int = 0
    stop_token: int | None = None

    def __post_init__(self) -> None:
        if self.stop_token is not None and (not self.eos or int(self.stop_token) < 0):
            raise ValueError(f"stop_token must be an id >= 0 of a class with eos on, got {self.stop_token!r} "
                             f"(eos {'on' if self.eos else 'off'})")

    def eos_id(self, model_eos: int | None) -> int | None:
        """The id that ends the class's requests: ``None`` with EOS off, else ``stop_token``
        or the model's EOS ``model_eos``."""
        if not self.eos:
            return None
        return model_eos if self.stop_token is None else int(self.stop_token)

    def describe(self) -> str:
        lim = f"max_tokens={self.max_tokens}" + (f" min_tokens={self.min_tokens}" if self.min_tokens else "")
        at = f"; arrives at step {self.arrival}" if self.arrival else ""
        return (f"prompt {list(self.prompt)}; {self.params.describe() or 'plain'}; {lim}; "
                f"eos {'on' if self.eos else 'off'}"
                + (f" (stop token {self.stop_token})" if self.stop_token is not None else "") + at)

    def request(self, eos_token_id: int, seed: int | None, logprobs: bool = False) -> GenerationRequest:
        return GenerationRequest(prompt_token_ids=self.prompt, params=self.params, max_tokens=self.max_tokens,
                                 min_tokens=self.min_tokens, eos_token_id=self.eos_id(eos_token_id),
                                 seed=seed, logprobs=logprobs, arrival=self.arrival)


def within_context(rc: E2ERowClass, max_context: int | None) -> E2ERowClass | None:
    """``rc`` within an engine's declared context
    (:attr:`~specexact.decoders.engines.EngineCapabilities.max_context`): ``max_tokens``
    lowered to ``max_context - len(prompt)`` where the prompt plus ``max_tokens`` would pass
    it (``min_tokens`` to at most the new ``max_tokens``), or ``None`` where the prompt leaves
    no room for one new token. Past its context an engine ends an output without EOS (vLLM),
    which no exact law describes: the request is made to fit, as a parameter the engine does
    not implement is set neutral.

    Raises
    ------
    ValueError
        ``max_context`` is not an integer >= 2 or None.
    """
    if max_context is None:
        return rc
    if isinstance(max_context, bool) or int(max_context) != max_context or max_context < 2:
        raise ValueError(f"max_context must be an integer >= 2 or None, got {max_context!r}")
    room = int(max_context) - len(rc.prompt)
    if room < 1:
        return None
    if rc.max_tokens <= room:
        return rc
    return replace(rc, max_tokens=room, min_tokens=min(rc.min_tokens, room))


@dataclass(frozen=True)
class E2ECase:
    """One end-to-end configuration: a tiny model pair, a drafting method and request shapes.

    Parameters
    ----------
    name : str
    pair : str
        A :data:`~specexact.decoders.tiny_models.CATALOG` name (the target and its draft).
    method : str
        One of :data:`~specexact.decoders.engines.SPECULATIVE_METHODS`.
    num_speculative_tokens : int
        γ per round.
    row_classes : tuple of E2ERowClass
    requests_per_class : int
        Requests of each class per generate call (a call holds ``C * requests_per_class``
        requests, classes interleaved).
    check_acceptance : tuple of bool, optional
        Per class, whether its ``accepted_length`` check runs (decided when the case is made
        for an engine, :func:`~specexact.audit.cases.e2e.catalog.e2e_cases`); default none.
    engine : str
        The engine's name the case was made for (reports).
    position_bands : tuple of (int, int), optional
        Output-position bands ``[start, stop)`` of a *long* case, whose outputs are too long to
        enumerate: it checks every emitted token's randomised PIT under its conditional law,
        one check per band and path (:mod:`~specexact.audit.cases.e2e.token_checks`), instead
        of the per-class sequence laws. ``None`` (default): the enumerable case.
    check_logprobs : bool, default False
        Whether the first call's requests (and the reproducibility call's, the same) ask for
        logprobs and the two logprob checks run on them
        (:mod:`~specexact.audit.cases.e2e.logprob_checks`); set when the case is made for an
        engine that declares them.
    unseeded : bool, default False
        Whether every second request of each class (its odd-numbered ones in the call) is
        unseeded (``seed=None``), and the ``independent_requests`` check runs on them
        (:mod:`~specexact.audit.cases.e2e.seed_checks`); set when the case is made for an
        engine whose :class:`~specexact.decoders.engines.seeds.SeedPromise` says
        ``unseeded_independent``. ``reproducible`` then compares the seeded requests only.
    check_in_mix : bool, default False
        Whether the first call's seeded requests are generated again in another mix (reversed,
        the unseeded ones left out: :meth:`mix_requests`), speculative and plain, and the
        ``reproducible_in_mix`` check runs; set for an engine that promises ``other_mix``.
    check_alone : bool, default False
        Whether the first call's first seeded request is generated again as the only request
        of a call (:meth:`alone_requests`), speculative and plain, and the
        ``reproducible_alone`` check runs; set for an engine that promises ``alone``.
    """

    name: str
    pair: str
    method: str
    num_speculative_tokens: int
    row_classes: tuple[E2ERowClass, ...]
    requests_per_class: int = 256
    check_acceptance: tuple[bool, ...] | None = None
    engine: str = ""
    description: str = ""
    weight: float = 1.0
    tags: tuple[str, ...] = field(default_factory=tuple)
    class_ids: tuple[int, ...] | None = None
    exact: bool = True
    position_bands: tuple[tuple[int, int], ...] | None = None
    check_logprobs: bool = False
    unseeded: bool = False
    check_in_mix: bool = False
    check_alone: bool = False

    def __post_init__(self) -> None:
        if not self.row_classes:
            raise ValueError(f"case {self.name!r}: row_classes is empty")
        if self.method not in SPECULATIVE_METHODS:
            raise ValueError(f"case {self.name!r}: method must be one of {SPECULATIVE_METHODS}, got {self.method!r}")
        if int(self.num_speculative_tokens) < 1:
            raise ValueError(f"case {self.name!r}: num_speculative_tokens must be >= 1, "
                             f"got {self.num_speculative_tokens!r}")
        if int(self.requests_per_class) < 2:
            raise ValueError(f"case {self.name!r}: requests_per_class must be >= 2, got {self.requests_per_class!r}")
        if self.position_bands is not None:
            bands = tuple((int(a), int(b)) for a, b in self.position_bands)
            if not bands or any(not 0 <= a < b for a, b in bands) or any(
                    b0 > a1 for (_, b0), (a1, _) in zip(bands, bands[1:])):
                raise ValueError(f"case {self.name!r}: position_bands must be ascending, disjoint, non-empty "
                                 f"[start, stop) ranges, got {self.position_bands!r}")
            object.__setattr__(self, "position_bands", bands)
        C = len(self.row_classes)
        for name in ("check_acceptance", "class_ids"):
            v = getattr(self, name)
            if v is not None and len(v) != C:
                raise ValueError(f"case {self.name!r}: {name} has {len(v)} entries for {C} classes")

    # --- what the planner and the reports read -------------------------------------------
    @property
    def num_draft_tokens(self) -> int:
        return int(self.num_speculative_tokens)

    @property
    def batch_size(self) -> int:
        """Requests per generate call."""
        return len(self.row_classes) * int(self.requests_per_class)

    @property
    def length(self) -> int:
        return max(rc.max_tokens for rc in self.row_classes)

    def acceptance_checked(self, c: int) -> bool:
        return bool(self.check_acceptance[c]) if self.check_acceptance is not None else False

    def scheduler_settings(self):
        """The scheduler settings the engine is loaded with for this case
        (:class:`~specexact.strategies.SchedulerSettings`), or None: the engine's defaults
        (a generated scenario's: :class:`~specexact.audit.cases.e2e.scenarios.ScenarioCase`)."""
        return None

    def class_id(self, c: int) -> int:
        return c if self.class_ids is None else self.class_ids[c]

    def restricted(self, keep: Sequence[int]) -> "E2ECase":
        """The case with only the classes of indices ``keep`` (ascending), same name and seed."""
        keep = checked_keep(keep, len(self.row_classes))
        C = len(self.row_classes)
        if len(keep) == C:
            return self
        acc = None if self.check_acceptance is None else tuple(self.check_acceptance[c] for c in keep)
        return replace(self, row_classes=tuple(self.row_classes[c] for c in keep),
                       class_ids=tuple(self.class_id(c) for c in keep), check_acceptance=acc)

    def is_seeded(self, r: int) -> bool:
        """Whether request ``r`` of a call is seeded (all are, unless :attr:`unseeded`: then
        the requests of even rank within their class, ``(r // C) % 2 == 0``)."""
        return not self.unseeded or (int(r) // len(self.row_classes)) % 2 == 0

    def seeded_rows(self) -> list[int]:
        """The places of a call's seeded requests, ascending."""
        return [r for r in range(self.batch_size) if self.is_seeded(r)]

    def requests(self, eos_token_id: int, call: int, logprobs: bool = False) -> list[GenerationRequest]:
        """The requests of generate call ``call``: classes interleaved, seed ``call * B + r``
        (``None`` for an unseeded one: :meth:`is_seeded`); with ``logprobs`` each asks for its
        tokens' logprobs."""
        C, B = len(self.row_classes), self.batch_size
        return [self.row_classes[r % C].request(eos_token_id, call * B + r if self.is_seeded(r) else None, logprobs)
                for r in range(B)]

    def mix_requests(self, eos_token_id: int, call: int, logprobs: bool = False) -> list[GenerationRequest]:
        """Call ``call``'s seeded requests in another mix: reversed, without the unseeded ones
        (request ``j`` is request ``seeded_rows()[-1 - j]`` of :meth:`requests`)."""
        reqs = self.requests(eos_token_id, call, logprobs)
        return [reqs[r] for r in reversed(self.seeded_rows())]

    def alone_requests(self, eos_token_id: int, call: int, logprobs: bool = False) -> list[GenerationRequest]:
        """Call ``call``'s first seeded request alone (request ``seeded_rows()[0]`` of
        :meth:`requests`)."""
        return [self.requests(eos_token_id, call, logprobs)[self.seeded_rows()[0]]]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["row_classes"] = [rc.describe() for rc in self.row_classes]
        d["kind"] = "e2e"
        d["num_draft_tokens"] = self.num_draft_tokens
        return d


def seed_checks_of(caps) -> dict:
    """The seed-check fields of a case made for an engine of capabilities ``caps``
    (:class:`~specexact.decoders.engines.seeds.SeedPromise`): ``unseeded`` where it promises
    independent unseeded requests, ``check_in_mix`` where it promises seeded requests in
    another mix, ``check_alone`` where it promises a seeded request alone."""
    return {"unseeded": bool(caps.seeds.unseeded_independent), "check_in_mix": bool(caps.seeds.other_mix),
            "check_alone": bool(caps.seeds.alone)}


def model_dirs(case: E2ECase) -> tuple[Path, Path]:
    """``(target_dir, draft_dir)`` of the case's pair, made on first use."""
    return catalog_pair(case.pair)
