"""Planted bugs and correct variants of the ``verify`` protocol, for self-checks.

The audit is only worth its stated error rates if it also *catches* wrong samplers. This
module holds deliberately wrong verifiers (``WRONG``), each a bug seen or plausible in real
engines, and correct verifiers written differently from the built-in one (``CORRECT``).
``tests/audit/zoo/test_zoo.py`` runs the default audit on all of them: every wrong one must
fail, every correct one must pass. Use them the same way to check a harness of your own:
``specexact audit --sampler specexact.audit.zoo:resample_from_target``.

All take and return what :func:`specexact.decoders.verify` does, and refuse invalid input
as it does (:func:`~specexact.decoders.validate_verify_inputs`: the fuzz phase holds every
sampler to that); randomness comes only from ``generator`` (unless the bug is about
randomness). The exception is ``UNHARDENED``: correct samplers that skip the validation, whose
only findings are of the hardening tier (:mod:`specexact.audit.verdict.tiers`): an audit passes
them unless ``--strict-inputs``.
"""

from __future__ import annotations

import torch

from specexact.decoders import PLACEHOLDER_ID, validate_verify_inputs, verify

__all__ = ["WRONG", "CORRECT", "UNHARDENED", "no_input_validation"]


def _assemble(ids: torch.Tensor, num_accepted: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    B, K = ids.shape
    out = torch.full((B, K + 1), PLACEHOLDER_ID, dtype=torch.int64, device=ids.device)
    pos = torch.arange(K, device=ids.device)[None]
    out[:, :K] = torch.where(pos < num_accepted[:, None], ids.long(), PLACEHOLDER_ID)
    out[torch.arange(B, device=ids.device), num_accepted] = last
    return out


def _chain(ids, draft_probs, target_probs, generator, *, uniforms=None, accept_scale=1.0,
           target_offset=0, final_row=None, sample=None, invert_ratio=False):
    """A configurable (and by default correct) chain verifier used to plant one bug at a time.

    final_row(target_row, draft_row, rejected) -> unnormalised law of the last token.
    """
    validate_verify_inputs(ids, draft_probs, target_probs)
    B, K = ids.shape
    dev = target_probs.device
    rows = torch.arange(B, device=dev)
    ids = ids.long()
    t_idx = (torch.arange(K, device=dev) + target_offset).clamp(max=K)
    p_d = target_probs[:, t_idx].gather(2, ids[:, :, None]).squeeze(2).double()
    q_d = draft_probs.gather(2, ids[:, :, None]).squeeze(2).double()
    u = torch.rand(B, K, generator=generator, dtype=torch.float64, device=dev) if uniforms is None else uniforms
    if invert_ratio:
        p_d, q_d = q_d, p_d
    accepted = u * q_d < accept_scale * p_d
    n = accepted.long().cumprod(1).sum(1)
    rejected = n < K
    t_row = target_probs[rows, n].double()
    d_row = draft_probs[rows, n.clamp(max=K - 1)].double() * rejected[:, None]
    law = (t_row - d_row).clamp_min(0) if final_row is None else final_row(t_row, d_row, rejected)
    law = torch.where((law.sum(-1) <= 0)[:, None], t_row, law)
    if sample is None:
        last = torch.multinomial(law, 1, generator=generator).squeeze(1)
    else:
        last = sample(law, generator)
    return _assemble(ids, n, last)


# --- wrong: each plants one bug ------------------------------------------------------------

def resample_from_target(ids, draft_probs, target_probs, generator=None):
    """After a rejection, sample from target_probs instead of the residual (biased)."""
    return _chain(ids, draft_probs, target_probs, generator, final_row=lambda t, d, rej: t)


def residual_absolute(ids, draft_probs, target_probs, generator=None):
    """Residual |target - draft| instead of max(target - draft, 0)."""
    return _chain(ids, draft_probs, target_probs, generator,
                  final_row=lambda t, d, rej: torch.where(rej[:, None], (t - d).abs(), t))


def inverted_ratio(ids, draft_probs, target_probs, generator=None):
    """Accept with min(1, draft/target) instead of min(1, target/draft)."""
    return _chain(ids, draft_probs, target_probs, generator, invert_ratio=True)


def always_accept(ids, draft_probs, target_probs, generator=None):
    """Accept every drafted token (lossy 'trust the draft')."""
    validate_verify_inputs(ids, draft_probs, target_probs)
    B, K = ids.shape
    last = torch.multinomial(target_probs[:, K].double(), 1, generator=generator).squeeze(1)
    return _assemble(ids, torch.full((B,), K, device=ids.device), last)


def shifted_alignment(ids, draft_probs, target_probs, generator=None):
    """Judge draft i with the target law of position i+1 (logits aligned one step off)."""
    return _chain(ids, draft_probs, target_probs, generator, target_offset=1)


def under_accept(ids, draft_probs, target_probs, generator=None):
    """Accept with 0.97 * min(1, target/draft): subtle under-acceptance, residual unchanged."""
    return _chain(ids, draft_probs, target_probs, generator, accept_scale=0.97)


def under_accept_1pct(ids, draft_probs, target_probs, generator=None):
    """Accept with 0.99 * min(1, target/draft): acceptance scaled by 0.99, residual unchanged
    (too small for the accepted-length law; the per-decision checks see it)."""
    return _chain(ids, draft_probs, target_probs, generator, accept_scale=0.99)


def draft_law_bfloat16(ids, draft_probs, target_probs, generator=None):
    """The ratio and the residual use a bfloat16-rounded, renormalised copy of draft_probs,
    while the drafts were sampled from the float32 law: the draft law is perturbed at the
    1e-3 level (bfloat16 keeps 8 significant bits). Now and then a recovered token falls
    where max(p - q, 0) is 0, or a draft with p >= q is rejected."""
    q = draft_probs.to(torch.bfloat16).to(draft_probs.dtype)
    q = q / q.sum(-1, keepdim=True)
    return _chain(ids, q, target_probs, generator)


def bonus_from_last_draft_position(ids, draft_probs, target_probs, generator=None):
    """On full acceptance, sample the bonus from target_probs[:, K-1] (off by one)."""
    K = ids.shape[1]
    fixed = torch.cat([target_probs[:, :K], target_probs[:, K - 1:K]], 1)
    return _chain(ids, draft_probs, fixed, generator)


def bonus_dropped(ids, draft_probs, target_probs, generator=None):
    """On full acceptance, return ``[d_1 .. d_K, -1]``: the bonus token left out (the emitted
    law stays exact, one token per fully accepted round is lost; the per-event checks read
    the row as ``d_K`` rejected and recovered as itself)."""
    out = verify(ids, draft_probs, target_probs, generator)
    K = ids.shape[1]
    full = (out[:, :K] != PLACEHOLDER_ID).all(1)
    out[full, K] = PLACEHOLDER_ID
    return out


def residual_from_first_position(ids, draft_probs, target_probs, generator=None):
    """Residual always formed with the draft law of position 0 (bug only past position 0)."""
    B, K = ids.shape
    fixed_draft = draft_probs[:, :1].expand(B, K, -1)

    def final(t, d, rej):
        return torch.where(rej[:, None], (t - fixed_draft[:, 0].double()).clamp_min(0), t)

    return _chain(ids, draft_probs, target_probs, generator, final_row=final)


def recovered_from_next_position(ids, draft_probs, target_probs, generator=None):
    """After rejecting draft i, draw the recovered token from max(p_{i+1} - q_i, 0) (the
    target row one position ahead: an off-by-one index into target_probs); acceptance and
    the bonus token are right."""
    validate_verify_inputs(ids, draft_probs, target_probs)
    B, K = ids.shape
    dev = target_probs.device
    rows = torch.arange(B, device=dev)
    ids = ids.long()
    p_d = target_probs[:, :K].gather(2, ids[:, :, None]).squeeze(2).double()
    q_d = draft_probs.gather(2, ids[:, :, None]).squeeze(2).double()
    u = torch.rand(B, K, generator=generator, dtype=torch.float64, device=dev)
    n = (u * q_d < p_d).long().cumprod(1).sum(1)
    rejected = n < K
    t_row = target_probs[rows, torch.where(rejected, n + 1, n)].double()
    d_row = draft_probs[rows, n.clamp(max=K - 1)].double() * rejected[:, None]
    law = (t_row - d_row).clamp_min(0)
    law = torch.where((law.sum(-1) <= 0)[:, None], t_row, law)
    return _assemble(ids, n, torch.multinomial(law, 1, generator=generator).squeeze(1))


def first_row_target(ids, draft_probs, target_probs, generator=None):
    """Uses the first batch row's target law for every row (a batching bug: only shows with
    heterogeneous rows)."""
    B = ids.shape[0]
    return _chain(ids, draft_probs, target_probs[:1].expand(B, -1, -1), generator)


def shared_uniforms_across_rows(ids, draft_probs, target_probs, generator=None):
    """One acceptance uniform per position shared by all rows (each row is exact alone, but
    rows are correlated)."""
    B, K = ids.shape
    u = torch.rand(1, K, generator=generator, dtype=torch.float64, device=ids.device).expand(B, K)

    def sample(law, g):
        v = torch.rand(1, 1, generator=g, dtype=torch.float64, device=law.device)
        cdf = law.cumsum(-1)
        return torch.searchsorted(cdf, v.expand(law.shape[0], 1) * cdf[:, -1:], right=True).squeeze(1).clamp(max=law.shape[1] - 1)

    return _chain(ids, draft_probs, target_probs, generator, uniforms=u, sample=sample)


def reseeded_each_call(ids, draft_probs, target_probs, generator=None):
    """Ignores the passed generator and reseeds a fresh one with 0 on every call (each call
    reuses the same randomness)."""
    g = torch.Generator(device=ids.device).manual_seed(0)
    return _chain(ids, draft_probs, target_probs, g)


def one_uniform_per_row(ids, draft_probs, target_probs, generator=None):
    """Reuses one uniform for all K acceptance decisions of a row (correlated positions)."""
    B, K = ids.shape
    u = torch.rand(B, 1, generator=generator, dtype=torch.float64, device=ids.device).expand(B, K)
    return _chain(ids, draft_probs, target_probs, generator, uniforms=u)


def half_precision_sampling(ids, draft_probs, target_probs, generator=None):
    """Samples the recovered / bonus token by inverse CDF in float16 (precision loss: small
    probabilities vanish or grow in the rounded cumulative sum)."""

    def sample(law, g):
        cdf = (law / law.sum(-1, keepdim=True)).half().cumsum(-1)
        v = torch.rand(law.shape[0], 1, generator=g, device=law.device).half()
        return torch.searchsorted(cdf, v * cdf[:, -1:], right=True).squeeze(1).clamp(max=law.shape[1] - 1)

    return _chain(ids, draft_probs, target_probs, generator, sample=sample)


# --- correct, written differently -----------------------------------------------------------

def loop_reference(ids, draft_probs, target_probs, generator=None):
    """Row by row, position by position, in float64: the textbook algorithm."""
    validate_verify_inputs(ids, draft_probs, target_probs)
    B, K = ids.shape
    out = torch.full((B, K + 1), PLACEHOLDER_ID, dtype=torch.int64)
    for b in range(B):
        for i in range(K):
            d = int(ids[b, i])
            p, q = float(target_probs[b, i, d]), float(draft_probs[b, i, d])
            u = float(torch.rand((), generator=generator, dtype=torch.float64))
            if q == 0.0 and p > 0.0 or u * q < p:
                out[b, i] = d
                continue
            residual = (target_probs[b, i].double() - draft_probs[b, i].double()).clamp_min(0)
            if float(residual.sum()) <= 0:
                residual = target_probs[b, i].double()
            out[b, i] = int(torch.multinomial(residual, 1, generator=generator))
            break
        else:
            out[b, K] = int(torch.multinomial(target_probs[b, K].double(), 1, generator=generator))
    return out.to(ids.device)


def exponential_race(ids, draft_probs, target_probs, generator=None):
    """Recovered / bonus token by an exponential race: argmax law / E with E ~ Exp(1)."""

    def sample(law, g):
        e = -torch.log1p(-torch.rand(law.shape, generator=g, dtype=torch.float64, device=law.device))
        return torch.where(law > 0, law / e, torch.full_like(law, -1.0)).argmax(-1)

    return _chain(ids, draft_probs, target_probs, generator, sample=sample)


def division_form(ids, draft_probs, target_probs, generator=None):
    """Acceptance by explicit ratio min(1, target/draft); the residual normalised by hand."""
    validate_verify_inputs(ids, draft_probs, target_probs)
    B, K = ids.shape
    ids = ids.long()
    p_d = target_probs[:, :K].gather(2, ids[:, :, None]).squeeze(2).double()
    q_d = draft_probs.gather(2, ids[:, :, None]).squeeze(2).double()
    ratio = torch.where(q_d > 0, p_d / q_d.clamp_min(1e-300), torch.where(p_d > 0, torch.inf, 0.0))
    u = torch.rand(B, K, generator=generator, dtype=torch.float64, device=ids.device)
    n = (u < ratio.clamp(max=1.0)).long().cumprod(1).sum(1)
    rows = torch.arange(B, device=ids.device)
    t_row = target_probs[rows, n].double()
    d_row = draft_probs[rows, n.clamp(max=K - 1)].double() * (n < K)[:, None]
    res = (t_row - d_row).clamp_min(0)
    res = torch.where((res.sum(-1) <= 0)[:, None], t_row, res)
    res = res / res.sum(-1, keepdim=True)
    last = torch.multinomial(res, 1, generator=generator).squeeze(1)
    return _assemble(ids, n, last)


# --- correct but unhardened ------------------------------------------------------------------

def no_input_validation(ids, draft_probs, target_probs, generator=None):
    """The built-in verifier without its input validation: exact on valid input, but invalid
    input (NaN, negative mass, ids out of range, wrong shapes) is not refused with a
    ``ValueError`` / ``TypeError`` (hardening findings only)."""
    return verify(ids, draft_probs, target_probs, generator, validate=False)


WRONG = {
    f.__name__: f
    for f in (
        resample_from_target, residual_absolute, inverted_ratio, always_accept, shifted_alignment,
        under_accept, under_accept_1pct, draft_law_bfloat16, bonus_from_last_draft_position, bonus_dropped,
        residual_from_first_position, recovered_from_next_position, first_row_target,
        shared_uniforms_across_rows, reseeded_each_call, one_uniform_per_row, half_precision_sampling,
    )
}
"""Deliberately wrong verifiers, by name."""

CORRECT = {"builtin": verify, "loop_reference": loop_reference, "exponential_race": exponential_race,
           "division_form": division_form}
"""Correct verifiers written differently, by name."""

UNHARDENED = {"no_input_validation": no_input_validation}
"""Correct verifiers that do not validate their input (hardening findings only), by name."""
