"""The end-to-end cases an engine is audited with: :func:`e2e_cases`.

One case per drafting method the engine declares, with the row classes its processing
implements (plain, temperature, top-k, top-p, min-p, the three penalties, EOS reachable,
``min_tokens``), and, per class, whether its first round's acceptance has a known exact
law (:func:`acceptance_known`); with ``long_case`` also one long case (:func:`long_case`):
48 new tokens, prompts of 1, 7, 19 and 41 tokens in one call, γ = 4, checked token by token.
"""

from __future__ import annotations

import torch

from specexact.audit.cases.e2e.case import E2ECase, E2ERowClass, seed_checks_of, within_context
from specexact.audit.cases.e2e.scenarios import scenario_cases
from specexact.decoders.engines.protocol import EngineCapabilities
from specexact.decoders.params import SamplingParams
from specexact.decoders.tiny_models import CATALOG

__all__ = ["DRAFT_MODEL_METHODS", "LOOKUP_METHODS", "LONG_BANDS", "LONG_GAMMA", "LONG_REQUESTS_PER_CLASS",
           "acceptance_known", "long_case", "e2e_cases"]

DRAFT_MODEL_METHODS = ("draft_model", "draft_model_greedy")
"""Methods whose drafts come from a draft model (their acceptance has an exact law)."""


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


LOOKUP_METHODS = ("ngram", "prompt_lookup", "suffix")
"""Methods that draft by matching the context's n-grams or suffixes (vLLM's suffix trees over
the request's own context): their cases' prompts repeat themselves."""


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


LONG_BANDS = ((0, 8), (8, 16), (16, 32), (32, 48))
"""Output-position bands of the long case's per-token checks: past one and two 16-token blocks."""

LONG_GAMMA = 4
"""γ of the long case (whatever the enumerable cases use)."""

LONG_REQUESTS_PER_CLASS = 8
"""Requests of each long-case class per generate call (its calls are long: 48 tokens)."""

LONG_PROMPT_LENGTHS = (1, 7, 19, 41)
"""Prompt lengths of the long case's classes, in one call: within one and past two 16-token blocks."""


def _long_row_classes(caps: EngineCapabilities, seed: int) -> list[E2ERowClass]:
    """The long case's classes: ``max_tokens`` 48, prompts of :data:`LONG_PROMPT_LENGTHS`
    random tokens, several sampling parameters together in each request, and EOS reachable
    with ``min_tokens`` 6 (its mask ends inside a γ = 4 verify window); the last class keeps
    its temperature and top-k without EOS where the engine sets none."""
    g = torch.Generator().manual_seed(seed + 4848)
    p = [tuple(int(t) for t in torch.randint(2, 64, (n,), generator=g)) for n in LONG_PROMPT_LENGTHS]
    sp = SamplingParams
    eos = bool(caps.eos)
    return [
        E2ERowClass(p[0], sp(temperature=0.5, top_k=16, presence_penalty=0.6, frequency_penalty=0.3), max_tokens=48),
        E2ERowClass(p[1], sp(temperature=1.6, top_p=0.9, repetition_penalty=1.3), max_tokens=48),
        E2ERowClass(p[2], sp(temperature=0.7, min_p=0.05, frequency_penalty=0.5), max_tokens=48),
        E2ERowClass(p[3], sp(temperature=2.0, top_k=32), max_tokens=48, eos=eos,
                    min_tokens=6 if eos and caps.min_tokens else 0),
    ]


def long_case(engine, method: str, *, pair: str = "llama-v64", requests_per_class: int = LONG_REQUESTS_PER_CLASS,
              seed: int = 0) -> E2ECase:
    """The long end-to-end case of ``engine`` and ``method``: ``e2e-<pair>-<method>-long-g4``.

    Row classes of :func:`_long_row_classes` (those the engine's processing implements, each
    within the engine's declared context: :func:`~specexact.audit.cases.e2e.case.within_context`), γ =
    :data:`LONG_GAMMA`, per-token checks in the bands :data:`LONG_BANDS` instead of sequence
    laws (:mod:`~specexact.audit.cases.e2e.token_checks`), no acceptance check.
    """
    caps = engine.capabilities()
    classes = [within_context(rc, caps.max_context) for rc in _long_row_classes(caps, seed)
               if not caps.processing.unsupported(rc.params)]
    classes = [rc for rc in classes if rc is not None]
    return E2ECase(
        name=f"e2e-{pair}-{method}-long-g{LONG_GAMMA}", pair=pair, method=method, num_speculative_tokens=LONG_GAMMA,
        row_classes=tuple(classes), requests_per_class=requests_per_class, engine=engine.name,
        check_acceptance=(False,) * len(classes), position_bands=LONG_BANDS,
        check_logprobs=caps.logprobs is not None, **seed_checks_of(caps),
        description=(f"{engine.name} {method}, γ={LONG_GAMMA}, on {pair}: 48-token outputs, prompts of "
                     f"{', '.join(map(str, LONG_PROMPT_LENGTHS))} tokens in one call, every token checked"
                     + (f"; max_tokens within the engine's context of {caps.max_context} tokens (prompt + output): "
                        f"{', '.join(str(rc.max_tokens) for rc in classes)}"
                        if any(rc.max_tokens < 48 for rc in classes) else "")),
        tags=("e2e", "long"))


def e2e_cases(engine, method: str | None = None, *, pair: str = "llama-v64", num_speculative_tokens: int = 2,
              requests_per_class: int = 256, seed: int = 0, long_case_too: bool = False,
              long_requests_per_class: int = LONG_REQUESTS_PER_CLASS, scenarios: bool = False,
              scenario_seed: int = 0) -> list[E2ECase]:
    """The end-to-end cases of ``engine``: one per method it declares (or ``method`` only),
    with the row classes of :func:`_row_classes` its processing implements; with
    ``scenarios`` the generated scenario cases of the audit seed ``scenario_seed``
    (:func:`~specexact.audit.cases.e2e.scenarios.scenario_cases`) first (a budgeted audit's
    pilot times the cases in order and leaves out those it has no time to time: the
    scenarios are the cheapest, each a few seconds); with ``long_case_too`` then the long case (:func:`long_case`, ``long_requests_per_class`` requests per class).
    The scenarios and the long case use ``method``, or ``draft_model`` (else the first
    method) when no method is given.

    Raises
    ------
    ValueError
        ``method`` is not one the engine declares (the message lists them), or ``pair`` is
        not a catalog name.
    """
    caps = engine.capabilities()
    if pair not in CATALOG:
        raise ValueError(f"pair must be one of {sorted(CATALOG)}, got {pair!r}")
    methods = caps.methods if method is None else (method,)
    bad = [m for m in methods if m not in caps.methods]
    if bad:
        raise ValueError(f"engine {engine.name!r} does not run method {bad[0]!r}; it declares {list(caps.methods)}")
    cases = []
    for m in methods:
        classes = [within_context(rc, caps.max_context)
                   for rc in _row_classes(caps, num_speculative_tokens, seed, lookup=m in LOOKUP_METHODS)
                   if not caps.processing.unsupported(rc.params)]
        classes = [rc for rc in classes if rc is not None]
        cases.append(E2ECase(
            name=f"e2e-{pair}-{m}-g{num_speculative_tokens}", pair=pair, method=m,
            num_speculative_tokens=num_speculative_tokens, row_classes=tuple(classes),
            requests_per_class=requests_per_class, engine=engine.name,
            check_acceptance=tuple(acceptance_known(caps, m, rc, num_speculative_tokens) for rc in classes),
            check_logprobs=caps.logprobs is not None, **seed_checks_of(caps),
            description=f"{engine.name} {m}, γ={num_speculative_tokens}, on {pair}: the engine's own generate loop",
            tags=("e2e",)))
    m = method if method is not None else ("draft_model" if "draft_model" in methods else methods[0])
    if scenarios:  # first: a budgeted audit's pilot times the cases in order, and these are cheap
        cases[:0] = scenario_cases(engine, m, seed=scenario_seed, pair=pair)
    if long_case_too:
        cases.append(long_case(engine, m, pair=pair, requests_per_class=long_requests_per_class, seed=seed))
    return cases
