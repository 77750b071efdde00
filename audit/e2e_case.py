"""End-to-end cases: an engine's own speculative generate loop on tiny real-architecture models.

The case kind of :class:`E2ECase` (:mod:`.case_kind`). The sampler under audit is an
:class:`~specexact.decoders.engines.EndToEndEngine`: it loads a target and a draft from disk
(:mod:`specexact.decoders.tiny_models`), drafts, runs the target forward, processes logits
per position and keeps its own books; specexact only hands it requests (prompt token ids,
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

and per case ``reproducible`` (defect): the first call's requests generated again, speculative
and plain, must give the same outputs token for token (the engine's seeds are used), and
``defect``: a crash or a break of the output protocol
(:func:`~specexact.decoders.engines.check_generation_results`).

Sampled, not injected: an engine's randomness cannot be injected, so every law here is
checked on samples (chi-square, at the audit's per-check false-fail rate divided by
``CHI2_TAIL_INFLATION``), each check with its detectable TV.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from specexact.decoders.engines.protocol import (
    SPECULATIVE_METHODS,
    EngineCapabilities,
    GenerationRequest,
    check_generation_results,
    is_engine,
)
from specexact.decoders.params import SamplingParams
from specexact.exactness.enumeration import encode_sequences
from specexact.exactness.two_sample import chisquare_homogeneity

from .acceptance import accepted_length_check
from .case_result import CaseResult, case_seed, defect_check, enough_calls, sampler_failure
from .cases import checked_keep
from .errors import AuditInternalError
from .levels import CHI2_TAIL_INFLATION, MIN_EXPECTED
from .sequence_checks import sequence_law_check

__all__ = ["E2ERowClass", "E2ECase", "E2EKind", "CASE_KIND", "e2e_cases", "DRAFT_MODEL_METHODS", "E2E_CHECKS_PER_CLASS",
           "LOOKUP_METHODS", "e2e_num_checks"]

DRAFT_MODEL_METHODS = ("draft_model", "draft_model_greedy")
"""Methods whose drafts come from a draft model (their acceptance has an exact law)."""

E2E_CHECKS_PER_CLASS = 3
"""``sequence_law``, ``plain_sequence_law``, ``sequences_vs_plain`` (plus ``accepted_length``
where the case checks acceptance)."""


def e2e_num_checks(num_classes: int, num_acceptance_checked: int) -> int:
    """Checks of an end-to-end case: :data:`E2E_CHECKS_PER_CLASS` per class, ``reproducible``,
    and one ``accepted_length`` per class that checks acceptance (the report reads the same
    count from a case's config)."""
    return E2E_CHECKS_PER_CLASS * num_classes + 1 + num_acceptance_checked


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
    """

    prompt: tuple[int, ...]
    params: SamplingParams
    max_tokens: int
    min_tokens: int = 0
    eos: bool = False

    def describe(self) -> str:
        lim = f"max_tokens={self.max_tokens}" + (f" min_tokens={self.min_tokens}" if self.min_tokens else "")
        return f"prompt {list(self.prompt)}; {self.params.describe() or 'plain'}; {lim}; eos {'on' if self.eos else 'off'}"

    def request(self, eos_token_id: int, seed: int) -> GenerationRequest:
        return GenerationRequest(prompt_token_ids=self.prompt, params=self.params, max_tokens=self.max_tokens,
                                 min_tokens=self.min_tokens, eos_token_id=eos_token_id if self.eos else None,
                                 seed=seed)


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
        for an engine, :func:`e2e_cases`); default none.
    engine : str
        The engine's name the case was made for (reports).
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

    def requests(self, eos_token_id: int, call: int) -> list[GenerationRequest]:
        """The requests of generate call ``call``: classes interleaved, seed ``call * B + r``."""
        C, B = len(self.row_classes), self.batch_size
        return [self.row_classes[r % C].request(eos_token_id, call * B + r) for r in range(B)]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["row_classes"] = [rc.describe() for rc in self.row_classes]
        d["kind"] = "e2e"
        d["num_draft_tokens"] = self.num_draft_tokens
        return d


# --- the engine, loaded once per configuration --------------------------------------------

_LOADED: "weakref.WeakKeyDictionary[object, tuple]" = weakref.WeakKeyDictionary()


def model_dirs(case: E2ECase) -> tuple[Path, Path]:
    """``(target_dir, draft_dir)`` of the case's pair, made on first use."""
    from specexact.decoders.tiny_models import catalog_pair

    return catalog_pair(case.pair)


def mark_stale(engine, exc: BaseException) -> None:
    """Record that ``engine`` raised ``exc`` from a call: its state is unknown (an engine may
    hang on the next call after a crash), so :func:`ensure_loaded` closes and loads it again."""
    try:
        if engine in _LOADED:
            current = _LOADED[engine]
            if current[0] == "stale":
                return  # the first raise is the cause; later ones (a refused call after a hang) follow from it
            _LOADED[engine] = ("stale", f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}", current, exc)
    except TypeError:
        pass


def stale_reason(engine) -> str | None:
    """What the engine raised before its next load (:func:`mark_stale`), or None."""
    try:
        current = _LOADED.get(engine)
    except TypeError:
        return None
    return current[1] if current is not None and current[0] == "stale" else None


def stale_exception(engine) -> BaseException | None:
    """The exception behind :func:`stale_reason`, or None."""
    try:
        current = _LOADED.get(engine)
    except TypeError:
        return None
    return current[3] if current is not None and current[0] == "stale" else None


def ensure_loaded(engine, case: E2ECase) -> None:
    """Load ``engine`` for the case's configuration unless it already is (it is closed and
    loaded again when the configuration changes, or after a call of it raised:
    :func:`mark_stale`; then an engine with a ``reload()`` method, such as the vLLM adapter,
    restarts itself instead)."""
    target_dir, draft_dir = model_dirs(case)
    key = (str(target_dir), str(draft_dir), case.method, case.num_draft_tokens)
    try:
        current = _LOADED.get(engine)
    except TypeError:  # not weak-referenceable: load every time
        current = None
    if current == key:
        return
    reload = getattr(engine, "reload", None)
    if current is not None and current[0] == "stale" and current[2] == key and callable(reload):
        reload()  # an adapter's own restart after a raise (it may keep what did not raise)
        _LOADED[engine] = key
        return
    if current is not None:
        engine.close()
    engine.load(target_dir, None if case.method in ("ngram", "prompt_lookup") else draft_dir, method=case.method,
                num_speculative_tokens=case.num_draft_tokens)
    try:
        _LOADED[engine] = key
    except TypeError:
        pass


@dataclass
class _Laws:
    """Reference laws of one class, computed once per process."""

    sequence: object  # SequenceLaw
    acceptance: np.ndarray | None  # [γ + 1] P(N = k), or None


_LAW_CACHE: dict = {}


def _target(case: E2ECase):
    from specexact.decoders.tiny_models import load_model

    target_dir, draft_dir = model_dirs(case)
    key = ("models", str(target_dir), str(draft_dir))
    if key not in _LAW_CACHE:
        _LAW_CACHE[key] = (load_model(target_dir), load_model(draft_dir))
    return _LAW_CACHE[key]


def draft_params_of(caps: EngineCapabilities, params: SamplingParams, method: str) -> SamplingParams:
    """The parameters the engine samples its draft model with (``caps.draft_sampling``)."""
    if method == "draft_model_greedy" or caps.draft_sampling == "greedy":
        return SamplingParams(temperature=0.0)
    if caps.draft_sampling == "temperature":
        return SamplingParams(temperature=params.temperature)
    return params


def acceptance_law(case: E2ECase, c: int, caps: EngineCapabilities) -> np.ndarray:
    """``P(N = k)``, ``k = 0..γ``: the exact law of the drafts the engine accepts in a
    request's first round (its context: the prompt, or the prompt and one target-sampled
    token when ``caps.first_round_after_token``; then mixed over that token's law)."""
    from specexact.decoders.tiny_models import exact_sequence_law, expected_acceptance

    rc = case.row_classes[c]
    target, draft = _target(case)
    gamma = case.num_draft_tokens
    d_params = draft_params_of(caps, rc.params, case.method)
    kw = dict(num_speculative_tokens=gamma, draft_processing=None, scheme=caps.acceptance_scheme,
              processing=caps.processing, eos_token_id=target.eos_token_id)
    if not caps.first_round_after_token:
        at_least = expected_acceptance(target, draft, rc.prompt, rc.params, d_params, min_tokens=rc.min_tokens, **kw)
    else:
        first = exact_sequence_law(target, rc.prompt, rc.params, caps.processing, max_tokens=1,
                                   min_tokens=min(rc.min_tokens, 1), eos_token_id=target.eos_token_id)
        at_least = np.zeros(gamma)
        for (tok,), w in zip(first.sequences.tolist(), first.probs.tolist()):
            at_least += w * expected_acceptance(target, draft, (*rc.prompt, int(tok)), rc.params, d_params,
                                                min_tokens=max(rc.min_tokens - 1, 0), **kw)
    ge = np.concatenate([[1.0], at_least, [0.0]])
    return np.clip(ge[:-1] - ge[1:], 0.0, 1.0)


def class_laws(case: E2ECase, c: int, caps: EngineCapabilities) -> _Laws:
    """The class's exact sequence law (with the engine's declared processing) and, where the
    case checks it, the first round's acceptance law (cached per process)."""
    from specexact.decoders.tiny_models import exact_sequence_law

    rc = case.row_classes[c]
    key = ("laws", case.pair, case.method, case.num_draft_tokens, rc, case.acceptance_checked(c),
           repr(caps.processing.to_dict()), caps.acceptance_scheme, caps.draft_sampling, caps.first_round_after_token)
    if key not in _LAW_CACHE:
        target, _ = _target(case)
        seq = exact_sequence_law(target, rc.prompt, rc.params, caps.processing, max_tokens=rc.max_tokens,
                                 min_tokens=rc.min_tokens, eos_token_id=target.eos_token_id if rc.eos else None)
        acc = acceptance_law(case, c, caps) if case.acceptance_checked(c) else None
        _LAW_CACHE[key] = _Laws(sequence=seq, acceptance=acc)
    return _LAW_CACHE[key]


# --- one generate call ---------------------------------------------------------------------

def _padded(results, length: int) -> torch.Tensor:
    out = torch.full((len(results), length), -1, dtype=torch.int64)
    for i, r in enumerate(results):
        toks = list(r.token_ids)[:length]
        if toks:
            out[i, : len(toks)] = torch.tensor(toks, dtype=torch.int64)
    return out


def _generate(engine, requests, speculative: bool):
    """``engine.generate``; an engine that raised is marked for a fresh load (:func:`mark_stale`)."""
    try:
        return engine.generate(requests, speculative=speculative)
    except Exception as exc:
        mark_stale(engine, exc)
        raise


def generate_call(engine, case: E2ECase, call: int, *, speculative: bool):
    """One generate call of the case's requests for call ``call``: ``(requests, results)``.
    Raises what the engine raises; a break of the output protocol raises
    :class:`~specexact.decoders.VerifierProtocolError` (a defect)."""
    from specexact.decoders import VerifierProtocolError

    target, _ = _target(case)
    requests = case.requests(target.eos_token_id, call)
    results = _generate(engine, requests, speculative)
    bad = check_generation_results(requests, results, target.vocab_size)
    if bad is not None:
        raise VerifierProtocolError(f"{'speculative' if speculative else 'plain'} generate: {bad}")
    return requests, list(results)


def run_e2e_case(case: E2ECase, engine, *, false_fail_rate: float, seed: int = 0, num_batches: int | None = None,
                 time_budget_s: float | None = None, min_batches: int = 2, device: torch.device | str = "cpu",
                 progress: Callable[[int, int], None] | None = None,
                 min_expected: float = MIN_EXPECTED) -> CaseResult:
    """Run ``case`` on ``engine`` and check its laws (module docstring); the arguments and
    the result are those of :func:`~specexact.audit.runner.run_case` (``device`` is the
    engine's own business; ``seed`` shifts every request's seed)."""
    if (num_batches is None) == (time_budget_s is None):
        raise ValueError("give exactly one of num_batches and time_budget_s")
    start = time.perf_counter()
    result = CaseResult(case=case, seed=case_seed(seed, case))
    shift = result.seed % (2**31)
    caps = engine.capabilities()
    C = len(case.row_classes)
    spec, plain, first_round = [], [], []
    b = 0
    phases = result.phase_times_s

    def timed(phase: str, fn, *args, **kwargs):
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            phases[phase] = phases.get(phase, 0.0) + time.perf_counter() - t

    try:
        earlier = stale_reason(engine)
        try:
            timed("engine_load", ensure_loaded, engine, case)
        except Exception as exc:  # noqa: BLE001 - an engine that cannot load the models is a defect
            from .call_timeout import SamplerCallTimeout

            cause = stale_exception(engine)
            if isinstance(cause, SamplerCallTimeout):  # it hung before (the pilot, an earlier case): the finding
                exc, where = cause, ("an earlier call of this engine (the audit's planning pilot or an earlier "
                                     "case); no call is made after a hang")
            else:
                where = "engine load" if earlier is None else (
                    f"engine load (loading it again after an earlier call raised {earlier})")
            result.defect, chk = sampler_failure(exc, where, false_fail_rate)
            result.checks.append(chk)
            return result
        where = "speculative generate call 0"
        try:
            while True:
                call = shift + b
                where = f"speculative generate call {b}"
                _, res = timed("speculative_calls", generate_call, engine, case, call, speculative=True)
                spec.append(_padded(res, case.length))
                first_round.append([r.first_round_accepted for r in res])
                where = f"plain generate call {b}"
                _, pres = timed("plain_calls", generate_call, engine, case, call, speculative=False)
                plain.append(_padded(pres, case.length))
                b += 1
                result.num_batches = b
                result.num_sequences = b * case.batch_size
                if progress is not None:
                    progress(result.num_sequences, b)
                if enough_calls(b, num_batches, time_budget_s, time.perf_counter() - start, min_batches):
                    break
            where = "the reproducibility calls"
            again = _padded(timed("speculative_calls", generate_call, engine, case, shift, speculative=True)[1],
                            case.length)
            again_plain = _padded(timed("plain_calls", generate_call, engine, case, shift, speculative=False)[1],
                                  case.length)
        except AuditInternalError:
            raise
        except Exception as exc:  # noqa: BLE001 - a crash or protocol break of the engine is a finding
            note, rest = "", None
            if _is_crash(exc) and C > 1:
                note, rest = _without_crashing_classes(case, engine, shift, false_fail_rate, timed,
                                                       speculative=where.startswith("speculative"),
                                                       seed=seed, num_batches=num_batches,
                                                       time_budget_s=time_budget_s, start=start,
                                                       min_batches=min_batches, device=device, progress=progress,
                                                       min_expected=min_expected)
            result.defect, chk = sampler_failure(exc, where, false_fail_rate, note=note)
            result.checks.append(chk)
            if rest is not None:  # the other classes, audited after the crash
                result.checks.extend(rest.checks)
                if rest.defect:
                    result.defect += f"\nthen, on the other classes: {rest.defect}"
                result.num_batches, result.num_sequences = rest.num_batches, rest.num_sequences
                for k, v in rest.phase_times_s.items():
                    phases[k] = phases.get(k, 0.0) + v
            return result
        t = time.perf_counter()
        result.checks.append(_reproducible(again, spec[0], again_plain, plain[0], false_fail_rate))
        all_spec, all_plain = torch.cat(spec), torch.cat(plain)  # [b * B, L]
        for c in range(C):
            result.checks.extend(_class_checks(case, c, caps, all_spec[c::C], all_plain[c::C],
                                               [row[c::C] for row in first_round], false_fail_rate, min_expected))
        phases["checks"] = phases.get("checks", 0.0) + time.perf_counter() - t
        return result
    finally:
        result.wall_time_s = time.perf_counter() - start


def _is_crash(exc: BaseException) -> bool:
    """An exception the engine raised (not a hang, not a break of the output protocol)."""
    from specexact.decoders import VerifierProtocolError

    from .call_timeout import SamplerCallTimeout

    return not isinstance(exc, (SamplerCallTimeout, VerifierProtocolError))


def crashing_classes(case: E2ECase, engine, call: int, *, speculative: bool = True,
                     timed=None) -> tuple[list[int], str | None]:
    """The classes whose requests crash the engine when generated alone: ``(classes, note)``.

    Each class's requests of call ``call`` go in a generate call of their own, of the kind
    that crashed (``speculative`` or plain), on a freshly loaded engine after every crash
    (:func:`ensure_loaded`). ``note`` says why the search stopped early (a reload failed, a
    call hung), else None. ``timed(phase, fn, *args)``, when given, times the reloads
    (``engine_load``) and the calls (``crash_search``).
    """
    from .call_timeout import SamplerCallTimeout

    if timed is None:
        def timed(_phase, fn, *args, **kwargs):
            return fn(*args, **kwargs)
    target, _ = _target(case)
    crashing = []
    for c in range(len(case.row_classes)):
        requests = case.restricted([c]).requests(target.eos_token_id, call)
        try:
            timed("engine_load", ensure_loaded, engine, case)
        except Exception as exc:  # noqa: BLE001
            return crashing, f"the engine could not be loaded again after a crash ({type(exc).__name__}: {exc})"
        try:
            timed("crash_search", _generate, engine, requests, speculative)
        except SamplerCallTimeout as exc:
            return crashing, f"class {case.class_id(c)} alone hung ({exc})"
        except Exception:  # noqa: BLE001 - the crash this search looks for
            crashing.append(c)
    return crashing, None


def _without_crashing_classes(case: E2ECase, engine, call: int, alpha: float, timed, *, speculative: bool,
                              time_budget_s: float | None, start: float, **run):
    """After a crash of a call holding every class: ``(note, rest)``. The classes that crash
    alone (:func:`crashing_classes`) are named in ``note`` (each one's request shape is its
    replay); ``rest`` is a fresh run of the case restricted to the other classes, in what is
    left of ``time_budget_s`` (counted from ``start``: the search is paid from the case's
    time), None when none is left, no class crashes alone or the search stopped."""
    crashing, stopped = crashing_classes(case, engine, call, speculative=speculative, timed=timed)
    named = "; ".join(f"class {case.class_id(c)} ({case.row_classes[c].describe()})" for c in crashing)
    keep = [c for c in range(len(case.row_classes)) if c not in crashing]
    if stopped is not None:
        return (f"; alone, these crash: {named}" if crashing else "") + f"; {stopped}", None
    note = f"; alone, these crash: {named}" if crashing else "; no class crashes alone (only together)"
    if not crashing or not keep:
        return note, None
    note += f"; the case went on with classes {', '.join(str(case.class_id(c)) for c in keep)}"
    budget = None if time_budget_s is None else max(time_budget_s - (time.perf_counter() - start), 0.0)
    return note, run_e2e_case(case.restricted(keep), engine, false_fail_rate=alpha, time_budget_s=budget, **run)


def _reproducible(again, first, again_plain, first_plain, alpha: float):
    """The exact reproducibility check: the first call's requests again, same seeds."""
    from specexact.exactness.results import CheckResult

    diff = int((again != first).any(1).sum())
    diff_plain = int((again_plain != first_plain).any(1).sum())
    n = int(first.shape[0])
    if diff or diff_plain:
        chk = defect_check("reproducible", f"same requests, same seeds, different outputs: {diff} of {n} speculative "
                           f"and {diff_plain} of {n} plain requests (the engine does not use the seeds)", alpha)
        return replace(chk, description="seeded reproducibility: same seed, same output (exact)",
                       details={**chk.details, "speculative_differ": diff, "plain_differ": diff_plain, "requests": n})
    return CheckResult(name="reproducible", method="exact", statistic=0.0, pvalue=1.0, dof=None, n=2 * n,
                       false_fail_rate=alpha, detectable_tv=0.0, false_pass_rate=0.01, passed=True, worst=(),
                       details={"speculative_differ": 0, "plain_differ": 0, "requests": n},
                       description="seeded reproducibility: same seed, same output (exact)")


def _class_checks(case: E2ECase, c: int, caps: EngineCapabilities, spec: torch.Tensor, plain: torch.Tensor,
                  first_round: list, alpha: float, min_expected: float) -> list:
    label = f"class {case.class_id(c)}"
    rc = case.row_classes[c]
    laws = class_laws(case, c, caps)
    alpha_chi2 = alpha / CHI2_TAIL_INFLATION
    L = rc.max_tokens
    spec, plain = spec[:, :L], plain[:, :L]
    checks = [sequence_law_check(laws.sequence, spec, false_fail_rate=alpha_chi2, min_expected=min_expected,
                                 name=f"sequence_law[{label}]")[0],
              sequence_law_check(laws.sequence, plain, false_fail_rate=alpha_chi2, min_expected=min_expected,
                                 name=f"plain_sequence_law[{label}]")[0]]
    V = laws.sequence.vocab_size
    a, p = encode_sequences(spec, V), encode_sequences(plain, V)
    support, inv = np.unique(np.concatenate([a, p]), return_inverse=True)
    checks.append(chisquare_homogeneity(np.bincount(inv[: len(a)], minlength=len(support)),
                                        np.bincount(inv[len(a):], minlength=len(support)),
                                        false_fail_rate=alpha_chi2, min_expected=min_expected,
                                        name=f"sequences_vs_plain[{label}]", outcome_codes=support))
    if case.acceptance_checked(c):
        counts = [x for row in first_round for x in row]
        if any(x is None for x in counts):
            raise AuditInternalError(f"case {case.name!r} checks acceptance but the engine reported no "
                                     "first_round_accepted (its capabilities say reports_acceptance)")
        checks.append(accepted_length_check(np.asarray(counts, dtype=np.int64), laws.acceptance,
                                            scheme=caps.acceptance_scheme, false_fail_rate=alpha_chi2,
                                            min_expected=min_expected, name=f"accepted_length[{label}]"))
    return checks


# --- the cases an engine is audited with -----------------------------------------------------

def acceptance_known(caps: EngineCapabilities, method: str, rc: E2ERowClass, gamma: int) -> bool:
    """Whether the first round's acceptance of class ``rc`` has a known exact law here: a
    draft-model method, an engine that reports it, no EOS (a round cut by EOS reports what
    the engine's books say), ``max_tokens`` past the first round, and no output-scoped
    penalties when the first round follows a target-sampled token (that token would count)."""
    if method not in DRAFT_MODEL_METHODS or not caps.reports_acceptance or rc.eos:
        return False
    if rc.max_tokens < gamma + 1 + int(caps.first_round_after_token):
        return False
    p = rc.params
    if caps.first_round_after_token and (p.presence_penalty or p.frequency_penalty or p.repetition_penalty != 1.0):
        return False
    return True


LOOKUP_METHODS = ("ngram", "prompt_lookup")
"""Methods that draft by matching the context's n-grams: their cases' prompts repeat themselves."""


def _row_classes(caps: EngineCapabilities, gamma: int, seed: int, lookup: bool = False) -> list[E2ERowClass]:
    """Row classes within what the engine implements: plain, temperature, top-k, top-p,
    min-p, the three penalties, EOS reachable, ``min_tokens``; each with a support small enough
    to enumerate (V=64: 3 tokens untruncated, 4 with top-k 8). With ``lookup`` (an n-gram
    method, :data:`LOOKUP_METHODS`) each prompt of 4 random tokens ``a b c d`` is followed by
    ``a b`` again, so the first round finds the 2-gram ``a b`` in the context and drafts from
    what followed it (random 4-token prompts rarely repeat one: transformers' prompt lookup
    then drafts in a few requests in a hundred and speculation is hardly tested)."""
    g = torch.Generator().manual_seed(seed)

    def prompt():
        base = tuple(int(t) for t in torch.randint(2, 64, (4,), generator=g))
        return base + base[:2] if lookup else base

    sp = SamplingParams
    extra = int(caps.first_round_after_token)
    long = gamma + 2 + extra  # the first round can end with its bonus token
    wanted = [
        E2ERowClass(prompt(), sp(), max_tokens=3),
        E2ERowClass(prompt(), sp(temperature=0.6, top_k=8), max_tokens=min(long, 4)),
        E2ERowClass(prompt(), sp(temperature=1.3, top_p=0.8), max_tokens=3),
        E2ERowClass(prompt(), sp(temperature=0.8, min_p=0.05), max_tokens=3),
        E2ERowClass(prompt(), sp(top_k=8, repetition_penalty=1.5), max_tokens=min(long, 4)),
        E2ERowClass(prompt(), sp(top_k=8, presence_penalty=0.8, frequency_penalty=0.4), max_tokens=min(long, 4)),
        E2ERowClass(prompt(), sp(temperature=2.0, top_k=8), max_tokens=4, eos=True),
    ]
    if caps.min_tokens:
        wanted.append(E2ERowClass(prompt(), sp(temperature=2.0, top_k=8), max_tokens=4, min_tokens=2, eos=True))
    return [rc for rc in wanted if not (rc.eos and not caps.eos)]


def e2e_cases(engine, method: str | None = None, *, pair: str = "llama-v64", num_speculative_tokens: int = 2,
              requests_per_class: int = 256, seed: int = 0) -> list[E2ECase]:
    """The end-to-end cases of ``engine``: one per method it declares (or ``method`` only),
    with the row classes of :func:`_row_classes` its processing implements.

    Raises
    ------
    ValueError
        ``method`` is not one the engine declares (the message lists them), or ``pair`` is
        not a catalog name.
    """
    from specexact.decoders.tiny_models import CATALOG

    caps = engine.capabilities()
    if pair not in CATALOG:
        raise ValueError(f"pair must be one of {sorted(CATALOG)}, got {pair!r}")
    methods = caps.methods if method is None else (method,)
    bad = [m for m in methods if m not in caps.methods]
    if bad:
        raise ValueError(f"method {bad[0]!r} is not one engine {engine.name!r} runs; it declares {list(caps.methods)}")
    cases = []
    for m in methods:
        classes = [rc for rc in _row_classes(caps, num_speculative_tokens, seed, lookup=m in LOOKUP_METHODS)
                   if not caps.processing.unsupported(rc.params)]
        cases.append(E2ECase(
            name=f"e2e-{pair}-{m}-g{num_speculative_tokens}", pair=pair, method=m,
            num_speculative_tokens=num_speculative_tokens, row_classes=tuple(classes),
            requests_per_class=requests_per_class, engine=engine.name,
            check_acceptance=tuple(acceptance_known(caps, m, rc, num_speculative_tokens) for rc in classes),
            description=f"{engine.name} {m}, γ={num_speculative_tokens}, on {pair}: the engine's own generate loop",
            tags=("e2e",)))
    return cases


# --- the kind -------------------------------------------------------------------------------------

class E2EKind:
    """The :class:`~specexact.audit.case_kind.CaseKind` of end-to-end cases."""

    name = "e2e"

    def handles(self, case) -> bool:
        return isinstance(case, E2ECase)

    def checks(self, case: E2ECase) -> int:
        C = len(case.row_classes)
        return e2e_num_checks(C, sum(case.acceptance_checked(c) for c in range(C)))

    def restrict(self, case: E2ECase, engine):
        if not is_engine(engine):
            return None, ("an end-to-end case runs an engine's own generate loop "
                          "(specexact.decoders.engines.EndToEndEngine); this sampler is a verify function")
        caps = engine.capabilities()
        if case.method not in caps.methods:
            return None, f"method {case.method!r}: the engine declares {list(caps.methods)}"
        keep, why = [], []
        for c, rc in enumerate(case.row_classes):
            bad = list(caps.processing.unsupported(rc.params))
            if rc.min_tokens and not caps.min_tokens:
                bad.append("min_tokens")
            if rc.eos and not caps.eos:
                bad.append("eos_token_id")
            (why.append(f"class {case.class_id(c)}: {', '.join(bad)}") if bad else keep.append(c))
        reason = f"the engine does not implement {'; '.join(why)}" if why else None
        if not keep:
            return None, reason
        return case.restricted(keep), reason

    def planning_checks(self, case: E2ECase) -> list[tuple[int, bool]]:
        from .plan import PLAN_MAX_BINS, support_size

        bins = min(support_size(64, case.length), PLAN_MAX_BINS)
        return [(bins, False), (bins, True)]

    def prepare(self, case: E2ECase, device, engine):
        ensure_loaded(engine, case)
        _target(case)
        return None

    def call(self, case: E2ECase, prepared, engine, *, rows: int | None, device, full: bool) -> None:
        if not is_engine(engine):  # the pilot's fall-back to the built-in verifier: nothing to time
            return
        if rows is not None:
            target, _ = _target(case)
            _generate(engine, case.requests(target.eos_token_id, 0)[:rows], True)
            return
        generate_call(engine, case, 0, speculative=True)
        generate_call(engine, case, 0, speculative=False)

    def run(self, case, engine, **kwargs) -> CaseResult:
        return run_e2e_case(case, engine, **kwargs)

    def event_inputs(self, case, event: dict, sampler) -> dict:
        raise ValueError(f"case {case.name!r} is an end-to-end case: its checks record no per-event replays")


CASE_KIND = E2EKind()
"""End-to-end cases' kind (:mod:`~specexact.audit.case_kind`)."""
