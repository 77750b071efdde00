"""The model's own EOS ids, which some engines always stop at: read them, and refuse what they rule out.

SGLang and LMDeploy add the EOS ids of the model's configuration to every request's stop ids
unless the request ignores EOS, and then stop at none (``ignore_eos``); their ``min_new_tokens``
masks those ids too. A request whose EOS is another token than the model's, or one with
``min_tokens`` and no EOS, cannot be stated to them: :func:`model_eos_refusal` says why.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from .protocol import GenerationRequest

__all__ = ["model_eos_ids", "model_eos_refusal"]


def model_eos_ids(model_dir: Path) -> tuple[int, ...]:
    """The EOS ids of a model folder's ``config.json`` (``eos_token_id``: an int, a list or absent).

    Raises
    ------
    FileNotFoundError
        ``model_dir`` has no ``config.json``.
    """
    eos = json.loads((Path(model_dir) / "config.json").read_text()).get("eos_token_id")
    if eos is None:
        return ()
    return (int(eos),) if isinstance(eos, int) else tuple(int(t) for t in eos)


def model_eos_refusal(request: GenerationRequest, model_eos: Sequence[int], engine: str, where: str) -> str | None:
    """Why an engine that always stops at ``model_eos`` (or, ignoring EOS, at nothing) cannot
    run ``request``'s EOS and ``min_tokens`` as specexact states them, or ``None``.

    Parameters
    ----------
    request : GenerationRequest
    model_eos : sequence of int
        The model's EOS ids (:func:`model_eos_ids`).
    engine, where : str
        The engine's name and the code that adds the model's EOS ids, for the message.
    """
    eos = request.eos_token_id
    ids = sorted(int(t) for t in model_eos)
    if eos is not None and ids != [int(eos)]:
        return (f"eos_token_id={eos!r}: {engine} stops at the model's EOS ids {ids} as well as the request's "
                f"stop_token_ids ({where}), or at none of them (ignore_eos)")
    if request.min_tokens > 0 and eos is None and ids:
        return (f"min_tokens={request.min_tokens} without eos_token_id: {engine}'s min_new_tokens masks the model's "
                f"EOS ids {ids}, which ignore_eos does not let stop the request")
    return None
