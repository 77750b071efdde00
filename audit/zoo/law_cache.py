"""A cache of the exact reference laws the case runner enumerates, for the audit's
self-checks (:func:`cached_exact_laws`): the laws depend only on the case, not on the seed or
the verifier, so calibration runs and kill tables enumerate each once.
"""

from __future__ import annotations

import contextlib
import hashlib

import torch

from specexact.audit.cases import decoder_kind as _decoder_kind

__all__ = ["cached_exact_laws"]


def _model_key(model) -> tuple:
    """Configuration plus a digest of every tensor attribute (the weights) of a model."""
    digest = hashlib.sha1()
    tensors = sorted((name, value) for name, value in vars(model).items() if isinstance(value, torch.Tensor))
    if not tensors:
        raise TypeError(f"cannot fingerprint model {type(model).__name__}: it has no tensor attributes")
    for name, tensor in tensors:
        digest.update(name.encode())
        digest.update(tensor.detach().to("cpu", torch.float64).contiguous().numpy().tobytes())
    return (type(model).__name__, getattr(model, "config", None), digest.hexdigest())


def _params_key(params) -> str:
    return repr(params)


@contextlib.contextmanager
def cached_exact_laws():
    """Memoise the exact laws the case runner enumerates, for the duration of the block.

    The reference laws (:func:`~specexact.exactness.enumeration.sequence_law` and
    :func:`~specexact.exactness.enumeration.acceptance_law`) depend only on the case, not on
    the seed or the verifier, and their enumeration (with the outcome labels) dominates the
    cost of a small case. Inside the block the runner gets each law once per distinct
    (model weights, prompt, parameters, length); verdicts and p-values are unchanged.
    """
    original_sequence_law = _decoder_kind.sequence_law
    original_acceptance_law = _decoder_kind.acceptance_law
    laws: dict = {}

    def sequence_law(model, prompt_ids, params, **kwargs):
        key = ("sequence", _model_key(model), tuple(prompt_ids.tolist()), _params_key(params),
               tuple(sorted(kwargs.items())))
        if key not in laws:
            laws[key] = original_sequence_law(model, prompt_ids, params, **kwargs)
        return laws[key]

    def acceptance_law(target, draft, prompt_ids, target_params, draft_params, **kwargs):
        key = ("acceptance", _model_key(target), _model_key(draft), tuple(prompt_ids.tolist()),
               _params_key(target_params), _params_key(draft_params), tuple(sorted(kwargs.items())))
        if key not in laws:
            laws[key] = original_acceptance_law(target, draft, prompt_ids, target_params,
                                                draft_params, **kwargs)
        return laws[key].copy()

    _decoder_kind.sequence_law = sequence_law
    _decoder_kind.acceptance_law = acceptance_law
    try:
        yield laws
    finally:
        _decoder_kind.sequence_law = original_sequence_law
        _decoder_kind.acceptance_law = original_acceptance_law

