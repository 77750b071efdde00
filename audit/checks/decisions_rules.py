"""What a correct sampler must do at each decision, exactly, and with which float tolerance.

The per-event checks (:mod:`~specexact.audit.checks.decisions`) judge every decision against the
laws the verifier was handed (float32 ``draft_probs`` ``q`` and ``target_probs`` ``p``, read
in float64). For the token-wise scheme (modified rejection sampling, Leviathan et al. 2023,
arXiv:2211.17192, Algorithm 1; Chen et al. 2023, arXiv:2302.01318):

- draft ``d`` is accepted with probability ``a = min(1, p(d) / q(d))``
  (:func:`acceptance_prob`); a draft with ``p(d) >= q(d)`` is accepted *surely* and one with
  ``p(d) = 0`` is rejected surely (:func:`must_accept`, :func:`must_reject`);
- after a rejection the emitted token follows ``max(p - q, 0) / sum`` (:func:`residual_rows`)
  and so has ``p(t) > q(t)`` (:func:`recovered_support_ok`).

For the sample-and-compare scheme (the target samples its own token and the draft is kept
while they agree; mlx-lm, llama.cpp) ``a = p(d)`` and the emitted token after a rejection
follows ``p`` with ``d`` removed.

Float tolerance
---------------
A correct sampler may renormalise the float32 laws, process logits in another order of
float operations (a logits-level sampler) or compare in another precision. Each of these
moves ``p(v) / q(v)`` by a relative ``~1e-6`` at most (a float32 softmax sums to 1 within
``log2(V) * 2**-24``; one renormalisation divides by such a sum). The rules therefore
allow a relative slack :data:`KAPPA` ``= 2**-16`` (1.5e-5, >= 10x that):

- *sure acceptance* needs ``p(d) >= (1 + KAPPA) q(d)``: at ``p(d) = q(d)`` exactly a
  correct sampler that renormalises may reject with probability ``~1e-7``;
- a *recovered token* ``t`` is in the support if ``p(t) > 0`` and
  ``(1 + KAPPA) p(t) > q(t)`` (a renormalising sampler sees ``p(t) > q(t)`` there);
- if *no* token has ``p(v) > (1 + KAPPA) q(v)`` the residual is empty up to rounding (the
  exact rejection probability is then below ``KAPPA``): the sampler may fall back to the
  target law, so any token with ``p(t) > 0`` is accepted (the built-in verifier falls back
  when the float32 residual is exactly 0).

A draft with ``p(d) = q(d) = 1`` in two one-hot laws (greedy rows) is also accepted surely:
every form of the test and every renormalisation gives the ratio 1 exactly there (the
observer checks the two laws' sums, in float64, before calling a rejection a violation).
``p(d) = 0`` needs no slack: no correct form of the test (``u q < p``, ``u < p / q`` with
``u`` in ``[0, 1)``, float32 or float64, renormalised or not) accepts it; ``u q < q <= p``
holds in float64 and float32 for every ``u < 1`` (the product rounds below ``q``), so
``p >= q`` is accepted by every such form. With these rules the exact checks cannot fail a
correct sampler (false-fail rate 0); the faults they target (a draft law rounded to
bfloat16, ``2**-9`` relative; acceptance scaled by 0.99) are >= 100x the slack.
"""

from __future__ import annotations

import torch

__all__ = ["KAPPA", "SCHEMES_CHECKED", "acceptance_prob", "must_accept", "must_reject", "residual_rows",
           "recovered_support_ok"]

KAPPA = 2.0 ** -16
"""Relative float slack of the exact rules (module docstring)."""

SCHEMES_CHECKED = ("tokenwise", "sample_compare")
"""Verification schemes whose every decision has a known law; for the others (block,
multi-draft, tree, lossy) the per-decision checks are not applicable."""


def _check_scheme(scheme: str) -> None:
    if scheme not in SCHEMES_CHECKED:
        raise ValueError(f"scheme must be one of {SCHEMES_CHECKED}, got {scheme!r}")


def acceptance_prob(p_d: torch.Tensor, q_d: torch.Tensor, scheme: str = "tokenwise") -> torch.Tensor:
    """Probability that a draft is accepted.

    Shape: ``p_d, q_d [...] -> [...]`` float64 (``p_d = p(d)``, ``q_d = q(d)``).

    Token-wise: ``min(1, p / q)``, with the built-in guard for ``q = 0`` (never drawn
    from ``q``): 1 if ``p > 0`` else 0. Sample-and-compare: ``p``.

    Raises
    ------
    ValueError
        Unknown ``scheme``.
    """
    _check_scheme(scheme)
    p, q = p_d.double(), q_d.double()
    if scheme == "sample_compare":
        return p.clamp(0.0, 1.0)
    ratio = torch.where(q > 0, p / q.clamp_min(torch.finfo(torch.float64).tiny), (p > 0).double())
    return ratio.clamp_(max=1.0)


def must_accept(p_d: torch.Tensor, q_d: torch.Tensor, scheme: str = "tokenwise") -> torch.Tensor:
    """Drafts a correct sampler accepts surely: ``p(d) >= (1 + KAPPA) q(d)`` and
    ``p(d) > 0`` (token-wise); none for sample-and-compare (``p(d) = 1`` exactly is rare
    and tolerance-sensitive). Shape ``[...] -> [...]`` bool."""
    _check_scheme(scheme)
    if scheme == "sample_compare":
        return torch.zeros(p_d.shape, dtype=torch.bool, device=p_d.device)
    p, q = p_d.double(), q_d.double()
    return (p > 0) & (p >= (1.0 + KAPPA) * q)


def must_reject(p_d: torch.Tensor) -> torch.Tensor:
    """Drafts a correct sampler rejects surely: ``p(d) == 0`` (both schemes)."""
    return p_d == 0


def residual_rows(p_rows: torch.Tensor, q_rows: torch.Tensor, drafts: torch.Tensor,
                  scheme: str = "tokenwise") -> torch.Tensor:
    """The (unnormalised) law of the token emitted after a rejection, in float64.

    Shape: ``p_rows, q_rows [n, V], drafts [n] -> [n, V]``.

    Token-wise: ``max(p - q, 0)``, or ``p`` for a row whose residual has no mass
    (the fallback every correct sampler may take then). Sample-and-compare: ``p`` with
    the rejected draft removed.
    """
    _check_scheme(scheme)
    p = p_rows.double()
    if scheme == "sample_compare":
        r = p.clone()
        r.scatter_(1, drafts.long()[:, None], 0.0)
        return r
    r = (p - q_rows.double()).clamp_min_(0.0)
    empty = r.sum(1) <= 0
    if bool(empty.any()):
        r[empty] = p[empty]
    return r


def recovered_support_ok(p_rows: torch.Tensor, q_rows: torch.Tensor, drafts: torch.Tensor,
                         tokens: torch.Tensor, scheme: str = "tokenwise") -> torch.Tensor:
    """Whether each token emitted after a rejection is one a correct sampler may emit.

    Shape: ``p_rows, q_rows [n, V], drafts, tokens [n] -> [n]`` bool.

    Token-wise: ``p(t) > 0`` and ``(1 + KAPPA) p(t) > q(t)``, or ``p(t) > 0`` when no
    token has ``p(v) > (1 + KAPPA) q(v)`` (residual empty up to rounding; module
    docstring). Sample-and-compare: ``p(t) > 0`` and ``t != d``.
    """
    _check_scheme(scheme)
    t = tokens.long()[:, None]
    p = p_rows.double()
    p_t = p.gather(1, t).squeeze(1)
    if scheme == "sample_compare":
        return (p_t > 0) & (tokens.long() != drafts.long())
    q = q_rows.double()
    q_t = q.gather(1, t).squeeze(1)
    lenient = (p_t > 0) & ((1.0 + KAPPA) * p_t > q_t)
    if bool(lenient.all()):
        return lenient
    strict_empty = ~(p > (1.0 + KAPPA) * q).any(1)
    return lenient | ((p_t > 0) & strict_empty)
