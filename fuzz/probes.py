"""Boundary-uniform probes of the acceptance rule, for samplers that take supplied uniforms.

Every drafted token of an example is probed on its own, as a ``K = 1`` call (draft
position ``i`` with the target laws of positions ``i`` and ``i+1``; at the logits level
the history also holds the drafts before ``i``), all of them as rows of one call:

1. fixed probes: ``u = 0`` (must reject where ``p(d) = 0``, must accept where
   ``p(d) > 0``), the smallest positive uniform, ``u`` just below, at and just above
   ``p(d)/q(d)`` on the sampler's uniform grid, and the largest uniform below 1 (must
   accept where the ratio is >= 1);
2. bisection: the acceptance threshold of each draft, by bisection over the bit patterns
   of the uniform grid (monotone for non-negative floats), compared with
   ``min(1, p(d)/q(d))`` within the slack of :func:`~specexact.fuzz.reference.acceptance_band`.

A decision outside the band is an ``acceptance_rule`` finding whose replay is one call
with that uniform. Every probe call's output is also checked for the protocol, for
emitted tokens of target probability 0 and for crashes (a rejection there reaches the
residual: an empty residual without its float guard crashes).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from specexact.decoders.adapters.protocol import LogitsVerifyInputs

from specexact.fuzz.declared_order import order_message, swap_allowing_decision
from specexact.fuzz.examples import ProbInputs
from specexact.fuzz.invariants import checked_call
from specexact.fuzz.reference import acceptance_band, forbidden_tokens, target_law
from specexact.fuzz.rules import RuleBroken, rule_error
from specexact.fuzz.subject import Call, Subject

__all__ = ["position_inputs", "probe_rows", "all_probe_rows", "zeroed_rows", "stack_rows", "probe_call", "probe_example", "grid_values"]

_INT_VIEW = {torch.float64: torch.int64, torch.float32: torch.int32, torch.float16: torch.int16,
             torch.bfloat16: torch.int16}


def position_inputs(inputs, i: int):
    """The ``K = 1`` inputs of draft position ``i`` (logits level: the drafts before ``i``
    appended to each row's history)."""
    if isinstance(inputs, ProbInputs):
        return inputs.position(i)
    out = inputs.output_token_ids
    rows = []
    for b in range(inputs.batch_size):
        r = out[b][out[b] >= 0].tolist() + inputs.draft_token_ids[b, :i].tolist()
        rows.append(r)
    width = max((len(r) for r in rows), default=0)
    hist = torch.tensor([r + [-1] * (width - len(r)) for r in rows], dtype=torch.int64).reshape(len(rows), width)
    return replace(inputs, draft_token_ids=inputs.draft_token_ids[:, i:i + 1].contiguous(),
                   draft_probs=inputs.draft_probs[:, i:i + 1].contiguous(),
                   target_logits=inputs.target_logits[:, i:i + 2].contiguous(), output_token_ids=hist)


def probe_rows(inputs) -> list:
    """Every drafted token of ``inputs`` as its own one-row ``K = 1`` input, row-major ``(b, i)``."""
    B, K = inputs.draft_token_ids.shape
    parts = [position_inputs(inputs, i) for i in range(K)]
    return [_row(parts[i], b) for b in range(B) for i in range(K)]


def all_probe_rows(inputs) -> list:
    """:func:`probe_rows` of ``inputs`` followed by their :func:`zeroed_rows` (what
    :func:`probe_example` probes; a finding's replay indexes into it)."""
    rows = probe_rows(inputs)
    return rows + zeroed_rows(rows)


def zeroed_rows(rows: list) -> list:
    """For every one-row ``K = 1`` input, a companion whose target gives the drafted token
    probability 0 (its entry zeroed; at the logits level its logit set to ``-inf``), where
    the target keeps mass elsewhere: every example then probes ``u = 0`` on a draft of target
    probability 0."""
    out = []
    for r in rows:
        d = int(r.draft_token_ids[0, 0])
        if isinstance(r, ProbInputs):
            p = r.target_probs.clone()
            p[0, 0, d] = 0
            if float(p[0, 0].to(torch.float64).sum()) > 0:
                out.append(ProbInputs(r.draft_token_ids, r.draft_probs, p))
        else:
            x = r.target_logits.clone()
            x[0, 0, d] = -torch.inf
            if bool(torch.isfinite(x[0, 0]).any()):
                out.append(replace(r, target_logits=x))
    return out


def stack_rows(parts: list):
    """Rows of several K=1 inputs as one batch."""
    if isinstance(parts[0], ProbInputs):
        return ProbInputs(torch.cat([p.draft_token_ids for p in parts]), torch.cat([p.draft_probs for p in parts]),
                          torch.cat([p.target_probs for p in parts]))
    width = max(p.output_token_ids.shape[1] for p in parts)
    hist = [torch.nn.functional.pad(p.output_token_ids, (0, width - p.output_token_ids.shape[1]), value=-1)
            for p in parts]
    return LogitsVerifyInputs(
        draft_token_ids=torch.cat([p.draft_token_ids for p in parts]),
        draft_probs=torch.cat([p.draft_probs for p in parts]),
        target_logits=torch.cat([p.target_logits for p in parts]),
        target_params=tuple(sp for p in parts for sp in p.target_params),
        prompt_token_ids=torch.cat([p.prompt_token_ids for p in parts]),
        output_token_ids=torch.cat(hist))


def _row(inputs, k: int):
    """Row ``k`` of a stacked K=1 batch, as a batch of one."""
    if isinstance(inputs, ProbInputs):
        return ProbInputs(inputs.draft_token_ids[k:k + 1], inputs.draft_probs[k:k + 1], inputs.target_probs[k:k + 1])
    return replace(inputs, draft_token_ids=inputs.draft_token_ids[k:k + 1], draft_probs=inputs.draft_probs[k:k + 1],
                   target_logits=inputs.target_logits[k:k + 1], target_params=inputs.target_params[k:k + 1],
                   prompt_token_ids=inputs.prompt_token_ids[k:k + 1], output_token_ids=inputs.output_token_ids[k:k + 1])


def grid_values(dtype: torch.dtype) -> tuple[float, float]:
    """(smallest positive, largest below 1) of ``dtype``'s uniforms in ``[0, 1)``."""
    one = torch.ones((), dtype=dtype)
    zero = torch.zeros((), dtype=dtype)
    return float(torch.nextafter(zero, one)), float(torch.nextafter(one, zero))


def _on_grid(u: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``u`` rounded to ``dtype`` and back, kept in ``[0, 1)``."""
    top = grid_values(dtype)[1]
    return u.clamp(0.0, top).to(dtype).to(torch.float64).clamp(0.0, top)


def probe_call(subject: Subject, inputs, uniforms: torch.Tensor, *, generator_seed: int, source: str,
               forbidden: torch.Tensor) -> torch.Tensor:
    """One call with supplied ``uniforms [N, 1]``; returns ``accepted [N]`` (bool).

    ``inputs`` is ``stack_rows(rows)`` and ``source`` the Python expression of ``rows``.

    Raises the call's :class:`RuleBroken` (crash, hang, protocol, zero-probability token);
    for a crash of a several-row call, the row that crashes alone is named when there is one.
    """
    entry = "verify_logits_with_uniforms" if subject.logits_level else "verify_with_uniforms"
    call = Call(entry=entry, inputs=inputs, uniforms=uniforms, generator_seed=generator_seed,
                source=f"stack_rows({source})")
    failure = None
    try:
        out = checked_call(subject, call, forbidden=forbidden)
    except RuleBroken as exc:
        failure = exc
    if failure is None:
        return (out.detach().long().cpu() >= 0).sum(1) == 2
    # Outside the handler, so that a row's own failure carries no context of the batch's
    # (Hypothesis tells failures apart by their origin, context included).
    n = inputs.draft_token_ids.shape[0]
    for k in range(n if n > 1 else 0):
        one = Call(entry=entry, inputs=_row(inputs, k), uniforms=uniforms[k:k + 1],
                   generator_seed=generator_seed, source=f"{source}[{k}]")
        try:
            checked_call(subject, one, forbidden=forbidden[k:k + 1])
        except RuleBroken as single:
            if single.rule == failure.rule:
                failure = single
                break
    raise failure


def _violation(subject, inputs, band, k: int, u: float, accepted: bool, generator_seed: int, source: str) -> RuleBroken:
    p, q = float(band.p_d[k]), float(band.q_d[k])
    lo, hi = float(band.low[k]), float(band.high[k])
    d = int(inputs.draft_token_ids[k, 0])
    need = "reject" if accepted else "accept"
    why = ("p(d) = 0" if bool(band.zero[k]) else
           f"min(1, p(d)/q(d)) in [{lo!r}, {hi!r}] with relative slack {float(band.rel[k]):.3g}")
    entry = "verify_logits_with_uniforms" if subject.logits_level else "verify_with_uniforms"
    call = Call(entry=entry, inputs=_row(inputs, k), uniforms=torch.tensor([[u]], dtype=torch.float64),
                generator_seed=generator_seed, source=f"{source}[{k}]")
    what = (f"draft {d} with p(d)={p!r}, q(d)={q!r}: {'accepted' if accepted else 'rejected'} at u={u!r}, "
            f"must {need} ({why})")
    swap = swap_allowing_decision(subject, call.inputs, u, accepted)
    err = (rule_error("acceptance_rule", what, call) if not swap
           else rule_error("declared_processing", order_message(subject, what, swap), call))
    err.must_accept = not accepted
    return err


def probe_example(subject: Subject, inputs, *, generator_seed: int = 0, source: str = "",
                  max_steps: int | None = None) -> dict:
    """Probe every drafted token of ``inputs`` (module docstring); return counts
    ``{"probes": ..., "calls": ...}``. ``source`` is the Python expression of ``inputs``
    (for the findings' replays).

    Raises
    ------
    RuleBroken
        ``acceptance_rule`` for a decision outside the band, or what a probe call raises.
    """
    rows = all_probe_rows(inputs)  # ordered (b, i), as acceptance_band flattens them, then the zeroed ones
    stacked = stack_rows(rows)
    law = target_law(subject, stacked)
    forbidden = forbidden_tokens(subject, stacked, law)
    band = acceptance_band(subject, stacked, law)
    dtype = subject.uniforms_dtype or torch.float64
    smallest, top = grid_values(dtype)
    N = len(rows)
    ratio = band.low.clamp(0.0, 1.0)
    # Rejections first (largest uniform, just above / at / just below the ratio: they reach
    # the residual), then the smallest uniforms (u = 0 on the drafts of target probability 0).
    fixed = [torch.full((N,), top, dtype=torch.float64),
             _on_grid(torch.nextafter(_on_grid(band.high, dtype).to(dtype),
                                      torch.ones((), dtype=dtype)).to(torch.float64), dtype),
             _on_grid(ratio, dtype),
             torch.nextafter(_on_grid(ratio, dtype).to(dtype), torch.zeros((), dtype=dtype)).to(torch.float64),
             torch.full((N,), smallest, dtype=torch.float64), torch.zeros(N, dtype=torch.float64)]
    calls = 0

    def decide(u: torch.Tensor) -> torch.Tensor:
        nonlocal calls
        calls += 1
        u = u.clamp(0.0, top)
        accepted = probe_call(subject, stacked, u[:, None], generator_seed=generator_seed,
                              source=f"all_probe_rows({source})", forbidden=forbidden)
        wrong = (accepted & band.must_reject(u)) | (~accepted & band.must_accept(u))
        if bool(wrong.any()):
            k = int(wrong.nonzero()[0, 0])
            raise _violation(subject, stacked, band, k, float(u[k]), bool(accepted[k]), generator_seed,
                             f"all_probe_rows({source})")
        return accepted

    results = [decide(u) for u in fixed]
    # Bisection over the grid's bit patterns, between an accepted and a rejected uniform.
    ints = _INT_VIEW[dtype]
    lo_u, hi_u = fixed[-1].clone(), fixed[0].clone()
    acc_lo, acc_hi = results[-1], results[0]
    active = acc_lo & ~acc_hi & ~band.unclear
    lo_i = lo_u.to(dtype).view(ints).to(torch.int64)
    hi_i = hi_u.to(dtype).view(ints).to(torch.int64)
    steps = 0
    limit = max_steps if max_steps is not None else (64 if dtype == torch.float64 else 34)
    while bool(active.any()) and steps < limit:
        done = (hi_i - lo_i) <= 1
        u_lo = lo_i.to(ints).view(dtype).to(torch.float64)
        u_hi = hi_i.to(ints).view(dtype).to(torch.float64)
        inside = (u_lo >= band.low * (1 - band.rel) - band.abs_slack) & (u_hi <= band.high * (1 + band.rel)
                                                                         + band.abs_slack)
        active = active & ~done & ~inside
        if not bool(active.any()):
            break
        mid_i = torch.where(active, (lo_i + hi_i) // 2, lo_i)
        u_mid = mid_i.to(ints).view(dtype).to(torch.float64)
        acc = decide(u_mid)
        lo_i = torch.where(active & acc, mid_i, lo_i)
        hi_i = torch.where(active & ~acc, mid_i, hi_i)
        steps += 1
    return {"probes": N, "calls": calls}
