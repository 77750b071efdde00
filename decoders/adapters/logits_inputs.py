"""Input checks of the logits-level protocol (:class:`~.protocol.LogitsVerifyInputs`).

:func:`validate_logits_verify_inputs` is to ``verify_logits`` what
:func:`~specexact.decoders.validate_verify_inputs` is to ``verify``: a logits-level
adapter calls it first, so invalid input gets a clear ``ValueError`` / ``TypeError``
naming the field instead of a crash or a silent output deep inside an engine.
"""

from __future__ import annotations

import torch

from specexact.decoders.params import SamplingParams
from specexact.decoders.verify_inputs import validate_verify_inputs

from .protocol import LogitsVerifyInputs

__all__ = ["validate_logits_verify_inputs"]


def _ids(name: str, t, rows: int, V: int, *, padding: bool) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype.is_floating_point or t.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer tensor, got {t.dtype}")
    if t.dim() != 2 or t.shape[0] != rows:
        raise ValueError(f"{name} must have shape [B={rows}, T], got {tuple(t.shape)}")
    if t.numel() == 0:
        return
    lo = -1 if padding else 0
    bad = (t < lo) | (t >= V)
    if bool(bad.any()):
        b, j = bad.nonzero()[0].tolist()
        raise ValueError(f"{name} must lie in [{lo}, {V}), got {int(t[b, j])} at [{b}, {j}]")
    if padding:
        present = t >= 0
        left = present == (torch.arange(t.shape[1], device=t.device)[None] < present.sum(1, keepdim=True))
        if not bool(left.all()):
            raise ValueError(f"{name} row {int((~left.all(1)).nonzero()[0, 0])} has a token after its -1 padding")


def validate_logits_verify_inputs(inputs: LogitsVerifyInputs) -> None:
    """Check a logits-level round's inputs.

    Shapes: ``draft_token_ids [B, K]``, ``draft_probs [B, K, V]``, ``target_logits
    [B, K+1, V]``, ``target_params`` (``B`` entries), ``prompt_token_ids [B, T0]``,
    ``output_token_ids [B, H]``; returns None.

    Parameters
    ----------
    inputs : LogitsVerifyInputs
        ``draft_token_ids`` / ``draft_probs`` as for ``verify``
        (:func:`~specexact.decoders.validate_verify_inputs`); ``target_logits`` floating,
        without NaN or ``+inf``, no row all ``-inf``; ``target_params`` ``B``
        :class:`~specexact.decoders.SamplingParams`; prompt ids in ``[0, V)``; output ids
        in ``[0, V)`` left-aligned with ``-1`` padding after them.

    Raises
    ------
    TypeError
        ``inputs`` not a :class:`LogitsVerifyInputs`, a field of the wrong type or dtype.
    ValueError
        Mismatched shapes, ids out of range, NaN / ``+inf`` logits or an all ``-inf`` row,
        invalid draft probabilities; the message names the field and the value.
    """
    if not isinstance(inputs, LogitsVerifyInputs):
        raise TypeError(f"inputs must be a LogitsVerifyInputs, got {type(inputs).__name__}")
    ids, logits = inputs.draft_token_ids, inputs.target_logits
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"target_logits must be a torch.Tensor, got {type(logits).__name__}")
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        raise ValueError(f"draft_token_ids must be a tensor of shape [B, K], got "
                         f"{tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__}")
    B, K = ids.shape
    if logits.dim() != 3 or tuple(logits.shape[:2]) != (B, K + 1):
        raise ValueError(f"target_logits must have shape [B={B}, K+1={K + 1}, V], got {tuple(logits.shape)}")
    if not logits.is_floating_point():
        raise TypeError(f"target_logits must be floating point, got {logits.dtype}")
    # draft_probs and the ids as for verify (the target side is logits here: check it on its own)
    ones = torch.ones((), dtype=torch.float32, device=logits.device).expand(B, K + 1, logits.shape[2])
    validate_verify_inputs(ids, inputs.draft_probs, ones)
    V = logits.shape[2]
    row_max = logits.amax(dim=-1)
    if bool(torch.isnan(logits).any()):
        b, i = torch.isnan(logits).any(-1).nonzero()[0].tolist()
        raise ValueError(f"target_logits contain NaN (row {b}, position {i})")
    if bool(torch.isposinf(row_max).any()):
        b, i = torch.isposinf(row_max).nonzero()[0].tolist()
        raise ValueError(f"target_logits contain +inf (row {b}, position {i})")
    if bool(torch.isneginf(row_max).any()):
        b, i = torch.isneginf(row_max).nonzero()[0].tolist()
        raise ValueError(f"target_logits of row {b}, position {i} are all -inf: no token can be sampled")
    params = inputs.target_params
    if not isinstance(params, (tuple, list)) or len(params) != B:
        raise ValueError(f"target_params must hold B={B} SamplingParams, got "
                         f"{len(params) if isinstance(params, (tuple, list)) else type(params).__name__}")
    for j, sp in enumerate(params):
        if not isinstance(sp, SamplingParams):
            raise TypeError(f"target_params[{j}] must be a SamplingParams, got {type(sp).__name__}")
    _ids("prompt_token_ids", inputs.prompt_token_ids, B, V, padding=False)
    _ids("output_token_ids", inputs.output_token_ids, B, V, padding=True)
