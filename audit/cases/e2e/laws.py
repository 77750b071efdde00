"""Reference laws of end-to-end cases: the tiny models' exact laws, per row class.

Each class's law is enumerated in float64 from the target's own weights with the engine's
declared processing (:func:`~specexact.decoders.tiny_models.exact_sequence_law`), and the
first round's acceptance law from the target and its draft
(:func:`~specexact.decoders.tiny_models.expected_acceptance`). The models and the laws are
computed once per process (:func:`case_models`, :func:`class_laws`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specexact.audit.cases.e2e.case import E2ECase
from specexact.decoders.engines.protocol import EngineCapabilities
from specexact.decoders.params import SamplingParams
from specexact.decoders.tiny_models import catalog_pair, exact_sequence_law, expected_acceptance, load_model

__all__ = ["ClassLaws", "pair_models", "case_models", "likely_stop_token", "draft_params_of", "acceptance_law", "class_laws"]


@dataclass
class ClassLaws:
    """Reference laws of one class, computed once per process."""

    sequence: object  # SequenceLaw
    acceptance: np.ndarray | None  # [γ + 1] P(N = k), or None


_LAW_CACHE: dict = {}


def pair_models(pair: str):
    """``(target, draft)``: the catalog pair ``pair``'s tiny models, loaded once per process."""
    target_dir, draft_dir = catalog_pair(pair)
    key = ("models", str(target_dir), str(draft_dir))
    if key not in _LAW_CACHE:
        _LAW_CACHE[key] = (load_model(target_dir), load_model(draft_dir))
    return _LAW_CACHE[key]


def case_models(case: E2ECase):
    """``(target, draft)``: the case's pair of tiny models, loaded once per process."""
    return pair_models(case.pair)


def likely_stop_token(pair: str, prompt, params: SamplingParams, processing) -> int:
    """The token a request's stop token is set to where the engine takes any
    (``EngineCapabilities.stop_tokens``): the most likely first output token under the
    target's processed law after ``prompt`` (the lowest id among ties), computed exactly.

    The tiny models' own EOS has probability below 0.01 at most positions, so a request that
    stops there almost never stops inside a verify window; a stop token of high probability
    makes the ``min_tokens`` mask, a stop inside a window and the tokens after it (which an
    engine must drop) happen in most calls. The choice depends on the target's law only,
    never on an engine.

    Parameters
    ----------
    pair : str
        A catalog pair.
    prompt : sequence of int
    params : SamplingParams
        The request's target parameters.
    processing : LogitsProcessing
        The engine's declared processing.

    Returns
    -------
    int
    """
    target, _ = pair_models(pair)
    first = exact_sequence_law(target, tuple(prompt), params, processing, max_tokens=1, min_tokens=0,
                               eos_token_id=None)
    probs = np.asarray(first.probs, dtype=np.float64)
    tokens = [int(t[0]) for t in first.sequences.tolist()]
    best = max(probs.tolist())
    return min(t for t, p in zip(tokens, probs.tolist()) if p == best)


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
    rc = case.row_classes[c]
    target, draft = case_models(case)
    gamma = case.num_draft_tokens
    d_params = draft_params_of(caps, rc.params, case.method)
    eos = rc.eos_id(target.eos_token_id) if rc.eos else target.eos_token_id
    kw = dict(num_speculative_tokens=gamma, draft_processing=None, scheme=caps.acceptance_scheme,
              processing=caps.processing, eos_token_id=eos)
    if not caps.first_round_after_token:
        at_least = expected_acceptance(target, draft, rc.prompt, rc.params, d_params, min_tokens=rc.min_tokens, **kw)
    else:
        first = exact_sequence_law(target, rc.prompt, rc.params, caps.processing, max_tokens=1,
                                   min_tokens=min(rc.min_tokens, 1), eos_token_id=eos)
        at_least = np.zeros(gamma)
        for (tok,), w in zip(first.sequences.tolist(), first.probs.tolist()):
            at_least += w * expected_acceptance(target, draft, (*rc.prompt, int(tok)), rc.params, d_params,
                                                min_tokens=max(rc.min_tokens - 1, 0), **kw)
    ge = np.concatenate([[1.0], at_least, [0.0]])
    return np.clip(ge[:-1] - ge[1:], 0.0, 1.0)


def class_laws(case: E2ECase, c: int, caps: EngineCapabilities) -> ClassLaws:
    """The class's exact sequence law (with the engine's declared processing) and, where the
    case checks it, the first round's acceptance law (cached per process)."""
    rc = case.row_classes[c]
    key = ("laws", case.pair, case.method, case.num_draft_tokens, rc, case.acceptance_checked(c),
           repr(caps.processing.to_dict()), caps.acceptance_scheme, caps.draft_sampling, caps.first_round_after_token)
    if key not in _LAW_CACHE:
        target, _ = case_models(case)
        seq = exact_sequence_law(target, rc.prompt, rc.params, caps.processing, max_tokens=rc.max_tokens,
                                 min_tokens=rc.min_tokens, eos_token_id=rc.eos_id(target.eos_token_id))
        acc = acceptance_law(case, c, caps) if case.acceptance_checked(c) else None
        _LAW_CACHE[key] = ClassLaws(sequence=seq, acceptance=acc)
    return _LAW_CACHE[key]
