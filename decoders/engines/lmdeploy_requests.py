"""Translating :class:`GenerationRequest` to LMDeploy's ``GenerationConfig`` and its outputs back.

Layouts only (lmdeploy 0.18.0, ``lmdeploy/messages.py``, ``lmdeploy/serve/core/async_engine.py``,
``lmdeploy/pytorch/engine/logits_process.py``):

========================  ==========================================================
specexact                 LMDeploy ``GenerationConfig``
========================  ==========================================================
``temperature``           ``temperature`` (LMDeploy accepts ``[0, 2]``) with
                          ``do_sample=True``; ``0``: ``do_sample=False`` (greedy: LMDeploy
                          then sets ``top_k=1`` and resets ``repetition_penalty`` to 1.0,
                          so greedy with a repetition penalty is refused)
``top_k`` (0 = off)       ``top_k`` (0 = off; LMDeploy's own default is 50: always sent)
``top_p``, ``min_p``      same names
``repetition_penalty``    same name (over the generated ids)
presence / frequency      refused unless 0 (LMDeploy has neither)
``max_tokens``            ``max_new_tokens``
``min_tokens``            ``min_new_tokens``
``seed``                  ``random_seed`` (per request, ``_multinomial_sampling`` with the
                          request's seed and step offset); ``None``: LMDeploy draws one
                          (``random.getrandbits(64)``)
``eos_token_id``          ``None``: ``ignore_eos=True``; the model's EOS:
                          ``stop_token_ids=[eos]``
========================  ==========================================================

EOS: LMDeploy adds the tokenizer's and the generation config's EOS ids to every request's
``stop_token_ids`` (``GenerationConfig.update_from_hf_gen_cfg``) and stops at none of them
under ``ignore_eos``; so a request whose EOS is another token than the model's is refused.
Output: ``AsyncEngine.generate`` streams each step's new ids in a ``GenOut`` (``token_ids``
from the detokenizer's offset on), then a last ``GenOut`` with ``finish_reason`` and no ids;
the stop token is cut from the output unless ``include_stop_str_in_output=True``, which the
adapter sets (the last ``GenOut`` then carries it: ``serve/core/async_engine.py``). A
request's output is the concatenation of its ``GenOut`` s' ``token_ids``, as LMDeploy's own
``Pipeline`` joins them (``Response.extend``).
"""

from __future__ import annotations

from typing import Any, Sequence

from .model_eos import model_eos_refusal
from .protocol import GenerationRequest, GenerationResult

__all__ = ["MAX_TEMPERATURE", "unsupported", "generation_config_kwargs", "generation_result"]

MAX_TEMPERATURE = 2.0
"""LMDeploy asserts a temperature in ``[0, MAX_TEMPERATURE]``."""


def unsupported(request: GenerationRequest, *, model_eos_ids: Sequence[int]) -> str | None:
    """Why LMDeploy cannot run ``request`` as specexact states it, or ``None`` (a message naming the field).

    Parameters
    ----------
    request : GenerationRequest
    model_eos_ids : sequence of int
        The model's EOS ids, which LMDeploy adds to every request's stop ids.
    """
    p = request.params
    if p.temperature > MAX_TEMPERATURE:
        return f"temperature={p.temperature!r}: LMDeploy accepts [0, {MAX_TEMPERATURE}] (GenerationConfig)"
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(p, name) != 0:
            return f"{name}={getattr(p, name)!r}: LMDeploy's GenerationConfig has no {name}"
    if p.temperature == 0 and p.repetition_penalty != 1.0:
        return (f"repetition_penalty={p.repetition_penalty!r} with temperature=0: LMDeploy's greedy decoding resets "
                "repetition_penalty to 1.0 (AsyncEngine._determine_gen_config)")
    return model_eos_refusal(request, model_eos_ids, "LMDeploy", "GenerationConfig.update_from_hf_gen_cfg")


def generation_config_kwargs(request: GenerationRequest, *, model_eos_ids: Sequence[int]) -> dict:
    """The keyword arguments of LMDeploy's ``GenerationConfig`` for ``request`` (module docstring).

    Raises
    ------
    ValueError
        What LMDeploy cannot express (:func:`unsupported`): the message names the field.
    """
    why = unsupported(request, model_eos_ids=model_eos_ids)
    if why is not None:
        raise ValueError(why)
    p = request.params
    eos = request.eos_token_id
    return dict(n=1, max_new_tokens=int(request.max_tokens), min_new_tokens=int(request.min_tokens),
                do_sample=p.temperature > 0, temperature=float(p.temperature) if p.temperature > 0 else 1.0,
                top_k=int(p.top_k), top_p=float(p.top_p), min_p=float(p.min_p),
                repetition_penalty=float(p.repetition_penalty),
                random_seed=None if request.seed is None else int(request.seed), ignore_eos=eos is None,
                stop_token_ids=None if eos is None else [int(eos)], skip_special_tokens=False,
                include_stop_str_in_output=True)


def generation_result(chunks: Sequence[Any], request: GenerationRequest) -> GenerationResult:
    """``GenerationResult`` of LMDeploy's ``GenOut`` s of ``request``, in the order yielded.

    ``token_ids``: every chunk's ``token_ids`` concatenated (module docstring), the stop token
    included (``include_stop_str_in_output``); LMDeploy reports no acceptance counts.

    Raises
    ------
    ValueError
        No chunk, or an output that finished with ``"error"`` or ``"abort"`` (the message
        quotes it).
    """
    chunks = list(chunks)
    if not chunks:
        raise ValueError("LMDeploy yielded no output for the request")
    last = chunks[-1]
    reason = getattr(last, "finish_reason", None)
    if reason in ("error", "abort"):
        raise ValueError(f"LMDeploy ended the request with finish_reason={reason!r}: "
                         f"{getattr(last, 'error_message', None) or getattr(last, 'response', '')!r}")
    return GenerationResult(token_ids=tuple(int(t) for c in chunks for t in (getattr(c, "token_ids", None) or ())))
