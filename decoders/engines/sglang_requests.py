"""Translating :class:`GenerationRequest` to SGLang's sampling parameters and SGLang's outputs back.

Layouts only (sglang 0.5.23, ``sglang/srt/sampling/sampling_params.py``,
``sglang/srt/managers/schedule_batch.py`` and ``tokenizer_manager.py``): ``Engine.generate``
takes one plain dict of sampling parameters per request (the keys of SGLang's
``SamplingParams``) and returns one dict per request.

========================  ==========================================================
specexact                 SGLang ``sampling_params`` key
========================  ==========================================================
``temperature``           ``temperature`` (``0``: greedy, SGLang sets ``top_k=1``;
                          SGLang also makes ``0 < T < 1e-6`` greedy: refused here)
``top_k`` (0 = off)       ``top_k`` (``-1`` = off; SGLang refuses 0)
``top_p``                 ``top_p`` (SGLang accepts ``(0, 1]``)
``min_p``                 refused when > 0: under ``enable_deterministic_inference``
                          (the adapter's setting, for seeds) SGLang asserts "With sampling
                          seed, multinomial_with_seed will provide wrong results"
                          (``top_k_top_p_min_p_sampling_from_probs_torch``)
penalties                 same names (frequency / presence in ``[-2, 2]``, repetition in
                          ``(0, 2]``: SGLang's ``verify``)
``max_tokens``            ``max_new_tokens``
``min_tokens``            ``min_new_tokens``
``seed``                  ``sampling_seed`` (honoured only under
                          ``enable_deterministic_inference``; ``None`` refused: SGLang
                          gives every unseeded row the seed 42 there)
``eos_token_id``          ``None``: ``ignore_eos=True`` (no token stops the request);
                          the model's EOS: ``stop_token_ids=[eos]``; ``no_stop_trim=True``
                          keeps the stop token in the output
========================  ==========================================================

EOS: unless ``ignore_eos``, ``Req._check_token_based_finish`` stops at ``stop_token_ids``
*and* at the model's own EOS ids (``eos_token_ids``, read from its config), and
``ignore_eos=True`` disables both. So a request whose EOS is another token than the
model's cannot be stated (refused), and ``min_new_tokens`` masks the model's EOS ids with
the request's (``BatchedMinNewTokensPenalizer``): declared, not repaired.

Outputs: ``output_ids`` (the stop token included: ``finished_len = matched_pos + 1``), and
with speculative decoding ``meta_info["spec_num_proposed_drafts"]`` and
``meta_info["spec_num_correct_drafts"]`` (``TokenizerManager._calculate_spec_decoding_metrics``);
SGLang reports no per-round counts, so ``first_round_accepted`` is ``None``.
"""

from __future__ import annotations

from typing import Any, Sequence

from .model_eos import model_eos_refusal
from .protocol import GenerationRequest, GenerationResult

__all__ = ["GREEDY_BELOW", "PENALTY_BOUND", "REPETITION_BOUND", "unsupported", "sampling_params",
           "generation_results"]

GREEDY_BELOW = 1e-6
"""SGLang's ``_SAMPLING_EPS``: a temperature in ``[0, GREEDY_BELOW)`` is greedy (``top_k=1``)."""

PENALTY_BOUND = 2.0
"""SGLang refuses a presence or frequency penalty outside ``[-PENALTY_BOUND, PENALTY_BOUND]``."""

REPETITION_BOUND = 2.0
"""SGLang refuses a repetition penalty outside ``(0, REPETITION_BOUND]``."""


def unsupported(request: GenerationRequest, *, model_eos_ids: Sequence[int]) -> str | None:
    """Why SGLang cannot run ``request`` as specexact states it, or ``None``.

    Parameters
    ----------
    request : GenerationRequest
    model_eos_ids : sequence of int
        The model's EOS ids (its ``config.json``), which SGLang always stops at unless
        ``ignore_eos``.

    Returns
    -------
    str or None
        A message naming the field and its value.
    """
    p = request.params
    if 0 < p.temperature < GREEDY_BELOW:
        return (f"temperature={p.temperature!r}: SGLang makes a temperature below {GREEDY_BELOW} greedy "
                "(sampling_params.py, _SAMPLING_EPS)")
    if p.min_p != 0:
        return (f"min_p={p.min_p!r}: SGLang's seeded sampling (enable_deterministic_inference, which per-request "
                "seeds need) asserts on min-p ('With sampling seed, multinomial_with_seed will provide wrong results')")
    for name in ("presence_penalty", "frequency_penalty"):
        value = getattr(p, name)
        if not -PENALTY_BOUND <= value <= PENALTY_BOUND:
            return f"{name}={value!r}: SGLang accepts [-{PENALTY_BOUND}, {PENALTY_BOUND}]"
    if not 0 < p.repetition_penalty <= REPETITION_BOUND:
        return f"repetition_penalty={p.repetition_penalty!r}: SGLang accepts (0, {REPETITION_BOUND}]"
    if request.seed is None:
        return ("seed=None: under enable_deterministic_inference SGLang seeds every unseeded request with 42 "
                "(sampling_batch_info.py), so unseeded requests are not independent")
    return model_eos_refusal(request, model_eos_ids, "SGLang", "Req._check_token_based_finish")


def sampling_params(request: GenerationRequest, *, model_eos_ids: Sequence[int]) -> dict:
    """SGLang's sampling-parameter dict for ``request`` (module docstring).

    Raises
    ------
    ValueError
        What SGLang cannot express (:func:`unsupported`): the message names the field.
    """
    why = unsupported(request, model_eos_ids=model_eos_ids)
    if why is not None:
        raise ValueError(why)
    p = request.params
    eos = request.eos_token_id
    return {"temperature": float(p.temperature), "top_k": int(p.top_k) if p.top_k > 0 else -1,
            "top_p": float(p.top_p), "min_p": 0.0, "repetition_penalty": float(p.repetition_penalty),
            "presence_penalty": float(p.presence_penalty), "frequency_penalty": float(p.frequency_penalty),
            "max_new_tokens": int(request.max_tokens), "min_new_tokens": int(request.min_tokens),
            "sampling_seed": int(request.seed), "ignore_eos": eos is None,
            "stop_token_ids": None if eos is None else [int(eos)], "no_stop_trim": True}


def generation_results(outputs: Sequence[Any], *, speculative: bool) -> list[GenerationResult]:
    """``GenerationResult`` per SGLang output dict, in order.

    Parameters
    ----------
    outputs : sequence of dict
        ``Engine.generate``'s outputs: ``output_ids`` and ``meta_info``.
    speculative : bool
        Whether the speculative engine produced them (then the draft counts are read).

    Returns
    -------
    list of GenerationResult
        ``token_ids`` as SGLang returns them; ``num_draft_tokens`` /
        ``num_accepted_tokens`` from ``meta_info``'s ``spec_num_proposed_drafts`` /
        ``spec_num_correct_drafts`` where present (SGLang leaves them out of a request
        that had no verify step), else ``None``; no logprobs (not declared).

    Raises
    ------
    ValueError
        An output without ``output_ids``.
    """
    results = []
    for i, out in enumerate(outputs):
        if not isinstance(out, dict) or "output_ids" not in out:
            raise ValueError(f"outputs[{i}] has no output_ids (got {type(out).__name__})")
        tokens = tuple(int(t) for t in out["output_ids"])
        meta = out.get("meta_info") or {}
        drafted = meta.get("spec_num_proposed_drafts") if speculative else None
        accepted = meta.get("spec_num_correct_drafts") if speculative else None
        results.append(GenerationResult(token_ids=tokens, num_draft_tokens=None if drafted is None else int(drafted),
                                        num_accepted_tokens=None if accepted is None else int(accepted)))
    return results
