"""Modified rejection sampling for a chain of drafted tokens (the ``verify`` protocol).

The protocol is how the built-in decoder and any third-party verifier plug into the audit::

    verify(draft_token_ids: LongTensor[B, K],
           draft_probs: FloatTensor[B, K, V],
           target_probs: FloatTensor[B, K + 1, V],
           generator: torch.Generator | None) -> LongTensor[B, K + 1]

- :func:`verify_reference`: the algorithm, one ``[B, V]`` operation at a time;
- :func:`verify`: the same output from the same generator state, leaving the generator in
  the same state and raising the same errors (``tests/decoders/test_verify_fast.py``), at
  a fraction of the cost on CPU: a cache-blocked input check
  (:mod:`~specexact.decoders.verify_inputs`) and a residual draw that reads only the
  stopping rows (:mod:`~specexact.decoders.residual_sampling`). On other devices it runs
  the reference, whose ``[B, V]`` temporaries are cheap there.
- :func:`verify_with_uniforms`: :func:`verify` with the acceptance uniforms supplied by the
  caller (the fuzz phase's boundary-uniform probes); given the uniforms :func:`verify`
  would draw, it returns what :func:`verify` returns. ``verify.verify_with_uniforms`` and
  ``verify.uniforms_dtype`` (float64) make :func:`verify` a uniforms-taking sampler for
  :func:`~specexact.decoders.adapters.takes_uniforms`.
"""

from __future__ import annotations

import torch

from . import sampling
from .residual_sampling import sample_last_tokens
from .sampling import sample_from_probs_reference, uniform
from .verify_inputs import validate_verify_inputs, validate_verify_inputs_reference

__all__ = [
    "PLACEHOLDER_ID",
    "validate_verify_inputs",
    "validate_verify_inputs_reference",
    "verify",
    "verify_reference",
    "verify_with_uniforms",
]

PLACEHOLDER_ID = -1
"""Fills the positions of the output after the last emitted token."""


def verify(
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    generator: torch.Generator | None = None,
    *,
    validate: bool = True,
) -> torch.Tensor:
    """Accept or reject K drafted tokens per row; emit the recovered or the bonus token.

    Shape: ``draft_token_ids [B, K], draft_probs [B, K, V], target_probs [B, K+1, V]
    -> emitted [B, K+1]``.

    Modified rejection sampling (Leviathan et al. 2023, arXiv:2211.17192, Algorithm 1;
    Chen et al. 2023, arXiv:2302.01318, Algorithm 2): drafted token ``d_i`` is accepted
    with probability ``min(1, p_i(d_i) / q_i(d_i))``; the first rejection emits a token
    from ``max(p_i - q_i, 0)`` (normalised) and stops the row; if all K are accepted, a
    bonus token from ``p_K``. Every emitted sequence has the target's law.
    :func:`verify_reference` spells the algorithm out and documents its float guards;
    this function returns what it returns, from the same generator state, leaves the
    generator in the same state, and raises the same errors.

    Parameters
    ----------
    draft_token_ids : torch.LongTensor
        Shape ``[B, K]``, ``K >= 1``; ids in ``[0, V)`` (any integer dtype).
    draft_probs : torch.Tensor
        Shape ``[B, K, V]``, floating point; the law each draft was sampled from.
    target_probs : torch.Tensor
        Shape ``[B, K+1, V]``, floating point; the target's law after each prefix.
    generator : torch.Generator, optional
        The only source of randomness (torch's default generator when None); on the
        inputs' device. Draws ``B * K`` float64 uniforms, then ``B``.
    validate : bool, keyword-only
        Check inputs with :func:`validate_verify_inputs` (which accepts and refuses what
        :func:`validate_verify_inputs_reference` does). With ``validate=False`` the inputs
        must be valid.

    Returns
    -------
    torch.LongTensor
        Shape ``[B, K+1]``: the accepted drafts, then the recovered or bonus token,
        left-aligned; :data:`PLACEHOLDER_ID` (``-1``) after the last one.

    Raises
    ------
    TypeError, ValueError
        From :func:`validate_verify_inputs` on bad input; the message names the argument.
    ValueError
        If a stopping row's law has no positive finite mass (as :func:`verify_reference`).

    Notes
    -----
    What the reference computes on ``[B, V]`` rows (the stopping target rows, draft rows,
    residual, float64 block masses) is computed here a chunk of rows at a time from the
    rows themselves, and only the chosen vocabulary block of each row is read again for
    the final search (:func:`~specexact.decoders.residual_sampling.sample_last_tokens`).
    Every float operation is the reference's, row by row, so the results agree bit for bit.
    On devices other than the CPU, and when the ``B`` stopping rows hold at most
    :data:`~specexact.decoders.sampling.SMALL_ELEMENTS` entries, the reference runs.
    """
    _check_generator(generator)
    draft_probs, target_probs = _no_grad(draft_probs), _no_grad(target_probs)
    if validate:
        validate_verify_inputs(draft_token_ids, draft_probs, target_probs)
    B, K = draft_token_ids.shape
    u = uniform((B, K), generator, target_probs.device)  # [B, K]
    return _verify_given_uniforms(draft_token_ids, draft_probs, target_probs, u, generator)


def _verify_given_uniforms(draft_token_ids, draft_probs, target_probs, u, generator) -> torch.Tensor:
    """:func:`verify` after its acceptance uniforms ``u [B, K]`` (float64) are drawn: the
    reference on small inputs and off the CPU, the fast path otherwise."""
    B, K = draft_token_ids.shape
    if target_probs.device.type != "cpu" or B * target_probs.shape[2] <= sampling.SMALL_ELEMENTS:
        return _reference_given_uniforms(draft_token_ids, draft_probs, target_probs, u, generator)
    ids = draft_token_ids.long()

    # Acceptance, as the reference: only p_i(d_i) and q_i(d_i) are read.
    p_d = target_probs[:, :K].gather(2, ids[:, :, None]).squeeze(2).to(torch.float64)  # [B, K]
    q_d = draft_probs.gather(2, ids[:, :, None]).squeeze(2).to(torch.float64)  # [B, K]
    stop = (u * q_d < p_d).to(torch.int64).cumprod(dim=1).sum(dim=1)  # [B], in [0, K]

    last = sample_last_tokens(target_probs, draft_probs, stop, generator)  # [B]

    out = torch.full((B, K + 1), PLACEHOLDER_ID, dtype=torch.int64)
    out[:, :K] = torch.where(torch.arange(K)[None, :] < stop[:, None], ids, PLACEHOLDER_ID)
    out[torch.arange(B), stop] = last
    return out


def _check_generator(generator) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")


def _no_grad(t):
    """The laws without autograd history (a law computed outside ``no_grad``): the emitted
    ids do not depend on it, and the fast path's ``out=`` kernels refuse such tensors."""
    return t.detach() if isinstance(t, torch.Tensor) and t.requires_grad else t


def verify_reference(
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    generator: torch.Generator | None = None,
    *,
    validate: bool = True,
) -> torch.Tensor:
    """Accept or reject K drafted tokens per row; emit the recovered or the bonus token.

    Shape: ``draft_token_ids [B, K], draft_probs [B, K, V], target_probs [B, K+1, V]
    -> emitted [B, K+1]``.

    The readable reference of :func:`verify`, which returns the same tokens from the same
    generator state.

    Drafted token ``d_i ~ draft_probs[:, i]`` is accepted with probability
    ``min(1, target_probs[:, i, d_i] / draft_probs[:, i, d_i])``. At the first rejection the
    row emits a recovered token from the residual distribution
    ``max(target_probs[:, i] - draft_probs[:, i], 0)`` (normalised) and stops; if all K are
    accepted it emits a bonus token from ``target_probs[:, K]``. Every emitted sequence then
    has exactly the target's law (Leviathan et al. 2023, arXiv:2211.17192, Algorithm 1 and
    Theorem 1; Chen et al. 2023, arXiv:2302.01318, Algorithm 2).

    Parameters
    ----------
    draft_token_ids : torch.LongTensor
        Shape ``[B, K]``, ``K >= 1``; ids in ``[0, V)`` (any integer dtype).
    draft_probs : torch.Tensor
        Shape ``[B, K, V]``, floating point (float16, bfloat16, float32 or float64); the
        law each draft token was actually sampled from (after the draft's own temperature
        and truncation). Rows need not be normalised exactly.
    target_probs : torch.Tensor
        Shape ``[B, K+1, V]``, floating point; the target's processed law after each
        candidate prefix: row ``i`` is the law of the token after ``d_1 .. d_i`` (row 0:
        after the context alone).
    generator : torch.Generator, optional
        The only source of randomness (torch's default generator when None); on the
        inputs' device. Draws ``B * K`` float64 uniforms, then ``B``.
    validate : bool, keyword-only
        Check inputs with :func:`validate_verify_inputs_reference` (one pass over the
        tensors). With ``validate=False`` the inputs must be valid: invalid ones give
        unspecified output or errors.

    Returns
    -------
    torch.LongTensor
        Shape ``[B, K+1]``: the accepted draft tokens, then the recovered or bonus token,
        left-aligned; :data:`PLACEHOLDER_ID` (``-1``) after the last one. Each row emits
        between 1 and ``K+1`` tokens, all in ``[0, V)``.

    Raises
    ------
    TypeError, ValueError
        From :func:`validate_verify_inputs_reference` on bad input; the message names the
        argument.
    ValueError
        If a stopping row's law has no positive finite mass (only for inputs the
        validation refuses, or float64 rows whose sum overflows).

    Notes
    -----
    Float guards: a drafted token with ``draft_probs == 0`` (impossible in exact
    arithmetic) is accepted iff its target probability is positive (the ratio is taken as
    ``+inf``, or ``0`` for ``0/0``). The comparison ``u * q < p`` is made in float64 and
    avoids the division. The residual is formed in the inputs' precision (at least
    float32; one subtraction, so each entry is within half an ulp of ``max(p - q, 0)``); if
    rounding leaves it with no mass (target equal to the draft up to ulps) the row falls
    back to the target row, which is then the exact law to within that rounding. Sampling
    is by inverse CDF with float64 accumulation, so a zero-probability id is never emitted.
    """
    _check_generator(generator)
    if validate:
        validate_verify_inputs_reference(draft_token_ids, draft_probs, target_probs)
    B, K = draft_token_ids.shape
    u = uniform((B, K), generator, target_probs.device)  # [B, K]
    return _reference_given_uniforms(draft_token_ids, draft_probs, target_probs, u, generator)


def _reference_given_uniforms(draft_token_ids, draft_probs, target_probs, u, generator) -> torch.Tensor:
    """:func:`verify_reference` after its acceptance uniforms ``u [B, K]`` are drawn."""
    B, K = draft_token_ids.shape
    device = target_probs.device
    ids = draft_token_ids.long()
    rows = torch.arange(B, device=device)

    # Acceptance: only p_i(d_i) and q_i(d_i) are needed for the decisions.
    p_d = target_probs[:, :K].gather(2, ids[:, :, None]).squeeze(2).to(torch.float64)  # [B, K]
    q_d = draft_probs.gather(2, ids[:, :, None]).squeeze(2).to(torch.float64)  # [B, K]
    accepted = u * q_d < p_d  # [B, K]
    num_accepted = accepted.to(torch.int64).cumprod(dim=1).sum(dim=1)  # [B]

    # One full row at the stopping position: residual after a rejection, target for the bonus.
    stop = num_accepted  # [B], in [0, K]
    dtype = torch.promote_types(target_probs.dtype, torch.float32)
    target_row = target_probs[rows, stop].to(dtype)  # [B, V]
    rejected = stop < K
    draft_row = draft_probs[rows, stop.clamp(max=K - 1)].to(dtype)  # [B, V]
    residual = torch.where(rejected[:, None], (target_row - draft_row).clamp_min(0), target_row)
    no_mass = residual.amax(-1) <= 0
    if bool(no_mass.any()):
        residual = torch.where(no_mass[:, None], target_row, residual)
    last = sample_from_probs_reference(residual, generator)  # [B]

    out = torch.full((B, K + 1), PLACEHOLDER_ID, dtype=torch.int64, device=device)
    positions = torch.arange(K + 1, device=device)[None, :]  # [1, K+1]
    out[:, :K] = torch.where(positions[:, :K] < stop[:, None], ids, PLACEHOLDER_ID)
    out[rows, stop] = last
    return out


def verify_with_uniforms(
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    uniforms: torch.Tensor,
    generator: torch.Generator | None = None,
    *,
    validate: bool = True,
) -> torch.Tensor:
    """:func:`verify` with the acceptance uniforms given instead of drawn.

    Shape: ``draft_token_ids [B, K], draft_probs [B, K, V], target_probs [B, K+1, V],
    uniforms [B, K] -> emitted [B, K+1]``.

    Draft ``i`` of row ``b`` is accepted iff ``uniforms[b, i] * q < p`` (float64, as in
    :func:`verify`); the recovered and bonus tokens are drawn from ``generator``. Given the
    uniforms :func:`verify` draws first (``torch.rand((B, K), generator=g, dtype=float64)``)
    and ``g`` after that draw, it returns exactly what ``verify(..., g)`` returns (tested in
    ``tests/decoders/test_verify_with_uniforms.py``). This is the uniforms-injection
    protocol of :func:`~specexact.decoders.adapters.takes_uniforms`, which the fuzz
    phase's boundary-uniform probes use (Leviathan et al. 2023, arXiv:2211.17192,
    Algorithm 1, with the uniform made explicit).

    Parameters
    ----------
    draft_token_ids, draft_probs, target_probs, generator, validate
        As :func:`verify`; ``generator`` draws only the ``B`` uniforms of the last tokens.
    uniforms : torch.Tensor
        Shape ``[B, K]``, floating point, values in ``[0, 1)``; taken in float64.

    Returns
    -------
    torch.LongTensor
        Shape ``[B, K+1]``, as :func:`verify`.

    Raises
    ------
    TypeError
        ``uniforms`` not a floating tensor, a bad generator, or (from the validation) bad
        input types.
    ValueError
        ``uniforms`` of the wrong shape or with a value outside ``[0, 1)`` (or NaN), and
        what :func:`verify` raises.
    """
    _check_generator(generator)
    draft_probs, target_probs = _no_grad(draft_probs), _no_grad(target_probs)
    if validate:
        validate_verify_inputs(draft_token_ids, draft_probs, target_probs)
    if not isinstance(uniforms, torch.Tensor) or not uniforms.is_floating_point():
        raise TypeError(f"uniforms must be a floating torch.Tensor, got "
                        f"{getattr(uniforms, 'dtype', type(uniforms).__name__)}")
    if tuple(uniforms.shape) != tuple(draft_token_ids.shape):
        raise ValueError(f"uniforms must have shape {tuple(draft_token_ids.shape)} (draft_token_ids), "
                         f"got {tuple(uniforms.shape)}")
    u = uniforms.detach().to(device=target_probs.device, dtype=torch.float64)
    if not bool(((u >= 0) & (u < 1)).all()):
        bad = (~((u >= 0) & (u < 1))).nonzero()[0].tolist()
        raise ValueError(f"uniforms must lie in [0, 1), got {u[tuple(bad)].item()!r} at {bad}")
    return _verify_given_uniforms(draft_token_ids, draft_probs, target_probs, u, generator)


verify.verify_with_uniforms = verify_with_uniforms  # the uniforms-injection protocol (adapters.protocol)
verify.uniforms_dtype = torch.float64
