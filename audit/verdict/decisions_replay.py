"""Replay one event of a per-event check: rebuild its laws and call the sampler on them.

An event recorded by :class:`~specexact.audit.checks.decisions.DecisionObserver` (and copied into
a finding's diagnosis) names its case, row class, the tokens generated before its round
(``history``), the round's drafts and the position. The case's toy models are
deterministic, so :func:`event_laws` recomputes exactly the laws the decoder handed the
verifier (``draft_probs`` ``[1, γ, V]``, ``target_probs`` ``[1, γ+1, V]``, or the raw target
logits for a logits-level sampler), and :func:`replay_event` calls the sampler on many
copies of that one row with the same drafts and compares what it does at the event's
position with the exact law: the acceptance frequency of the draft, the tokens emitted
after a rejection there (against the normalised residual) or after a full acceptance
(against ``p_γ``). A replay is statistical (fresh randomness), not a re-run of the audit's
draw.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from specexact.audit.cases.catalog import find_case
from specexact.audit.cases.kinds import kind_of
from specexact.audit.checks.decisions_rules import acceptance_prob, residual_rows
from specexact.audit.sampler.samplers import resolve_sampler
from specexact.decoders import check_verifier_output
from specexact.decoders.adapters.protocol import LogitsVerifyInputs, is_logits_level

__all__ = ["EVENT_KEYS", "event_laws", "replay_event", "replay_snippet"]

EVENT_KEYS = ("case", "case_set", "class", "kind", "position", "history", "drafts", "token")
"""The keys of an event a replay needs."""


def _case_of(event: dict):
    return find_case(event["case"], quick=event.get("case_set") == "quick")


def event_laws(event: dict, verifier=None) -> dict:
    """The laws of ``event``'s row in its round, as the decoder computed them.

    Parameters
    ----------
    event : dict
        With the keys of :data:`EVENT_KEYS` (``case_set`` ``"quick"`` for a quick audit).
    verifier : optional
        The sampler; a logits-level one gets its declared processing (and the raw logits).

    Returns
    -------
    dict
        ``draft_token_ids [1, γ]``, ``draft_probs [1, γ, V]``, ``target_probs [1, γ+1, V]``
        (float32), and for decoder cases ``target_logits [1, γ+1, V]``, ``prompt [1, T0]``,
        ``history [1, H]`` and the row class's ``target_params``.

    Raises
    ------
    KeyError
        Unknown case or a missing key.
    ValueError
        A class index or drafts that do not fit the case.
    """
    case = _case_of(event)
    return kind_of(case).event_inputs(case, event, verifier)


def _call(verifier, laws: dict, rows: int, generator: torch.Generator) -> torch.Tensor:
    ids = laws["draft_token_ids"].expand(rows, -1).contiguous()
    dp = laws["draft_probs"].expand(rows, -1, -1)
    if is_logits_level(verifier):
        out = verifier.verify_logits(LogitsVerifyInputs(
            draft_token_ids=ids.clone(), draft_probs=dp, target_logits=laws["target_logits"].expand(rows, -1, -1),
            target_params=(laws["target_params"],) * rows, prompt_token_ids=laws["prompt"].expand(rows, -1),
            output_token_ids=laws["history"].expand(rows, -1)), generator)
    else:
        out = verifier(ids.clone(), dp, laws["target_probs"].expand(rows, -1, -1), generator)
    check_verifier_output(out, ids, laws["target_probs"].shape[2])
    return out.long()


def replay_event(event: dict, sampler: str | Callable, *, trials: int = 100_000, seed: int = 0,
                 rows_per_call: int = 4096) -> dict:
    """Call ``sampler`` ``trials`` times on ``event``'s laws and drafts; compare with the law.

    Parameters
    ----------
    event : dict
        An event of a check's ``details`` (keys :data:`EVENT_KEYS`).
    sampler : str or callable
        A ``--sampler`` name (resolved with :func:`~specexact.audit.resolve_sampler`) or the
        sampler itself.
    trials : int
        Rows in all (in calls of ``rows_per_call``).
    seed : int
        Seed of the generator handed to the sampler.

    Returns
    -------
    dict
        ``kind``, ``position``, ``trials``, ``reached`` (rows that decided at the position),
        and per kind: a ``decision``'s ``acceptance_prob`` (exact) vs ``accepted_fraction``;
        for ``recovered`` (rows that rejected there) and ``bonus`` (rows that accepted all)
        the emitted tokens' ``observed`` frequencies vs ``expected`` probabilities (the
        normalised residual / ``p_γ``), ``tv`` between them and the frequency of the
        event's own token.

    Raises
    ------
    KeyError, ValueError
        From :func:`event_laws`; ValueError for ``trials < 1``.
    """
    if int(trials) < 1:
        raise ValueError(f"trials must be >= 1, got {trials!r}")
    if isinstance(sampler, str):
        sampler, _ = resolve_sampler(sampler)
    laws = event_laws(event, sampler)
    gen = torch.Generator().manual_seed(int(seed))
    g = laws["draft_token_ids"].shape[1]
    V = laws["target_probs"].shape[2]
    i = int(event["position"])
    kind = event["kind"]
    counts = np.zeros(V, dtype=np.int64)
    reached = accepted = 0
    left = int(trials)
    while left > 0:
        rows = min(left, rows_per_call)
        out = _call(sampler, laws, rows, gen)
        n = (out >= 0).sum(1) - 1  # accepted drafts per row
        left -= rows
        if kind == "decision":
            reached += int((n >= i).sum())
            accepted += int((n > i).sum())
        else:
            sel = n == (i if kind == "recovered" else g)
            reached += int(sel.sum())
            counts += np.bincount(out[sel, i if kind == "recovered" else g].numpy(), minlength=V)
    p = laws["target_probs"][0].double()
    q = laws["draft_probs"][0].double()
    d = laws["draft_token_ids"][0]
    result = {"kind": kind, "position": i, "trials": int(trials), "reached": reached}
    if kind == "decision":
        a = float(acceptance_prob(p[i, d[i]], q[i, d[i]]))
        result.update(acceptance_prob=a, accepted_fraction=accepted / reached if reached else None,
                      p_draft=float(p[i, d[i]]), q_draft=float(q[i, d[i]]))
        return result
    law = (residual_rows(p[i][None], q[i][None], d[i:i + 1])[0] if kind == "recovered" else p[g])
    law = (law / law.sum()).numpy()
    freq = counts / max(reached, 1)
    tok = event.get("token")
    top = np.argsort(-(np.abs(freq - law)))[:8]
    result.update(tv=float(0.5 * np.abs(freq - law).sum()) if reached else None,
                  token=tok, token_expected=float(law[tok]) if tok is not None else None,
                  token_observed=float(freq[tok]) if tok is not None and reached else None,
                  largest_differences=[[int(v), float(freq[v]), float(law[v])] for v in top])
    return result


def replay_snippet(event: dict, sampler_name: str) -> str:
    """A short Python snippet that replays ``event`` with the named sampler."""
    ev = {k: event.get(k) for k in EVENT_KEYS}
    return ("from specexact.audit.decisions_replay import replay_event\n"
            f"event = {ev!r}\n"
            f"print(replay_event(event, {sampler_name!r}, trials=100_000))")
