"""Which swap of two operations explains a logits-level finding (rule ``declared_processing``).

At the logits level the exact rules judge the sampler against the law of its *declared*
order of operations. When a decision or an emitted token breaks them, these functions ask
whether the law of the declared order with two operations swapped
(:func:`~specexact.strategies.swapped_processing`, every pair of
:func:`~specexact.strategies.order_pairs`) allows it; if one does, the finding is the
``declared_processing`` rule's (the part at fault is the per-prefix processing, not the
acceptance rule or the residual), and its message names every swapped pair whose law
allows it, with the exact total variation distance between that law and the declared one
at the position. Only computed for a
finding (one row), never per example.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from specexact.decoders.adapters.protocol import LogitsVerifyInputs
from specexact.strategies import order_pairs, swapped_processing

from specexact.fuzz.reference import acceptance_band, forbidden_tokens, target_law

__all__ = ["swap_allowing_decision", "swap_allowing_token", "order_message"]


def _swapped_subjects(subject):
    for pair in order_pairs(subject.processing):
        yield pair, replace(subject, processing=swapped_processing(subject.processing, pair))


def swap_allowing_decision(subject, row: LogitsVerifyInputs, u: float, accepted: bool) -> list:
    """``[(pair, tv), ...]``: every swap whose law *requires* the decision ``accepted`` at
    ``u`` on the one-row ``K = 1`` input ``row`` (``u`` outside its acceptance band, slack
    included, on the side of the decision; an acceptance also where that law's ratio
    ``p(d)/q(d)`` is at least 1), ``tv`` the TV between the declared and the swapped law at
    the drafted position. Empty when no swap does, ``subject`` is not logits-level, or
    ``u = 0`` (a decision at ``u = 0`` is the zero-probability rule's: an acceptance there
    is ``u <= p/q`` as much as another order).
    """
    if not subject.logits_level or not isinstance(row, LogitsVerifyInputs) or u <= 0:
        return []
    declared = target_law(subject, row)
    u_t = torch.tensor([u], dtype=torch.float64)
    out = []
    for pair, other in _swapped_subjects(subject):
        law = target_law(other, row)
        tv = float(0.5 * (law[0, 0] - declared[0, 0]).abs().sum())
        if tv == 0:
            continue
        band = acceptance_band(other, row, law)
        if accepted:
            required = bool(band.must_accept(u_t)[0]) or bool(~band.zero[0] & ~band.unclear[0] & (band.low[0] >= 1))
        else:
            required = bool(band.must_reject(u_t)[0])
        if required:
            out.append((pair, tv))
    return out


def _one_row(inputs: LogitsVerifyInputs, b: int) -> LogitsVerifyInputs:
    return replace(inputs, draft_token_ids=inputs.draft_token_ids[b:b + 1], draft_probs=inputs.draft_probs[b:b + 1],
                   target_logits=inputs.target_logits[b:b + 1], target_params=inputs.target_params[b:b + 1],
                   prompt_token_ids=inputs.prompt_token_ids[b:b + 1], output_token_ids=inputs.output_token_ids[b:b + 1])


def swap_allowing_token(subject, inputs: LogitsVerifyInputs, b: int, j: int, token: int) -> list:
    """``[(pair, tv), ...]``: every swap whose law at row ``b``, position ``j`` gives
    ``token`` a probability a correct sampler may emit (not forbidden,
    :func:`~specexact.fuzz.reference.forbidden_tokens`); empty when no swap does or
    ``subject`` is not logits-level. (The caller leaves out an accepted draft at a supplied
    uniform of 0: :func:`swap_allowing_decision`.)"""
    if not subject.logits_level or not isinstance(inputs, LogitsVerifyInputs):
        return []
    row = _one_row(inputs, b)
    declared = target_law(subject, row)
    out = []
    for pair, other in _swapped_subjects(subject):
        law = target_law(other, row)
        if not bool(forbidden_tokens(other, row, law)[0, j, token]):
            out.append((pair, float(0.5 * (law[0, j] - declared[0, j]).abs().sum())))
    return out


def order_message(subject, what: str, swaps: list) -> str:
    """The ``declared_processing`` finding's message: ``what`` happened, and the swaps whose
    law allows it (with the TV between their law and the declared one there)."""
    named = "; ".join(f"{a} and {c} swapped (TV {tv:.3g})" for (a, c), tv in swaps)
    return (f"{what}; the declared order {tuple(subject.processing.order)} forbids it, the law of the declared order "
            f"with one of these swaps gives it: {named}: the target law is processed in another order than declared")
