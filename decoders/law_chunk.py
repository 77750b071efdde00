"""One cache-sized chunk of rows through the logits pipeline, bit for bit as its reference.

:func:`process_chunk` turns a chunk of float32 logits whose rows need the same operations
(one *signature*: greedy, min-p, top-k, top-p) into their laws, as
:func:`~specexact.decoders.pipeline.process_logits_reference` computes those rows; the
chunk is small enough (:data:`~specexact.decoders.pipeline.GROUP_CHUNK_ELEMENTS`) that each
operation reads it from cache. It is the body of the pipeline's grouped path and of the
decoders' fused path (:mod:`~specexact.decoders.law_engine`).

Why the rows agree with the reference, bit for bit (float32 logits on CPU, rows of at most
32768 entries, all finite, no float64 widening):

- every step is row-wise, and a row of at most 32768 entries is reduced by one thread in the
  same order whether it is alone or among others (softmax, sums, maxima);
- masks are float32 ``1.0`` / ``0.0`` multiplied in: ``p * 1 == p`` and ``p * 0 == +0.0``
  for ``p >= 0``, the reference's ``where(keep, p, 0)``; a comparison written into a
  float32 tensor costs a quarter of one into a bool tensor on CPU;
- the division by the temperature runs only where one differs from 1 (``x / 1 == x``);
- top-p takes :func:`~specexact.decoders.nucleus.nucleus_of_chunk` (the reference's set on
  every token of positive probability);
- penalties touch the history's ``(row, token)`` pairs only, with the reference's
  arithmetic (an unseen token's logit is left as is, where the reference subtracts zeros:
  at most the sign of a zero logit differs, which no later step can see).
"""

from __future__ import annotations

import torch

from .nucleus import TOP_K_MAX, cut_to_nucleus_of_top_k_, nucleus_of_chunk
from .params import BatchedParams

__all__ = ["GREEDY", "MIN_P", "TOP_K", "TOP_P", "signatures", "penalise_", "process_chunk", "has_penalty"]

GREEDY, MIN_P, TOP_K, TOP_P = 8, 4, 2, 1
"""Signature bits: the operations a row needs (greedy excludes the others)."""


def signatures(params: BatchedParams, vocab_size: int) -> torch.Tensor:
    """Each row's operations as signature bits. Shape: ``[N]`` int64."""
    greedy = params.temperature == 0
    use_m = (params.min_p > 0) & ~greedy
    use_k = (params.top_k > 0) & (params.top_k < vocab_size) & ~greedy
    use_p = (params.top_p < 1) & ~greedy
    return greedy.to(torch.int64) * GREEDY + use_m * MIN_P + use_k * TOP_K + use_p * TOP_P


def has_penalty(params: BatchedParams) -> torch.Tensor:
    """Rows whose penalties change any logit. Shape: ``[N]`` bool."""
    return (params.repetition_penalty != 1) | (params.presence_penalty != 0) | (params.frequency_penalty != 0)


def penalise_(logits: torch.Tensor, repetition: torch.Tensor, frequency: torch.Tensor, presence: torch.Tensor,
              history: torch.Tensor) -> torch.Tensor:
    """Apply the penalties to the ``(row, token)`` pairs of ``history``, in place.

    Shape: ``logits [R, V]`` float32, the three penalties ``[R]`` (float64), ``history
    [R, H]`` (ids, ``-1`` padding) -> ``logits``.

    The arithmetic of :func:`~specexact.decoders.pipeline._apply_penalties` on a seen
    token, operation for operation: repetition (divide a positive logit, multiply a
    negative one), then ``- frequency * count``, then ``- presence``.

    Raises
    ------
    ValueError
        If a history id is ``>= V`` or ``< -1``.
    """
    R, V = logits.shape
    if history.numel() == 0:
        return logits
    if int(history.max()) >= V or int(history.min()) < -1:
        raise ValueError(f"history ids must be in [0, {V}) or -1 (padding), got range "
                         f"[{int(history.min())}, {int(history.max())}]")
    dtype = logits.dtype
    valid = history >= 0
    rows = torch.arange(R, device=history.device)[:, None].expand_as(history)[valid]
    pairs, counts = torch.unique(rows * V + history[valid], return_counts=True)  # [P]
    r, t = pairs // V, pairs % V
    x = logits[r, t]
    c = counts.to(torch.float32).to(dtype)
    rep = repetition.to(dtype)[r]
    x = torch.where(x > 0, x / rep, x * rep)
    x = x - frequency.to(dtype)[r] * c
    x = x - presence.to(dtype)[r] * torch.ones_like(x)
    logits[r, t] = x
    return logits


def process_chunk(logits: torch.Tensor, signature: int, temperature: torch.Tensor, min_p: torch.Tensor,
                  top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """The laws of a chunk of rows that share one signature.

    Shape: ``logits [R, V]`` float32 (after the penalties; overwritten), ``temperature``
    ``[R]`` float32 (1 for greedy rows), ``min_p [R]`` float32, ``top_k [R]`` int64,
    ``top_p [R]`` float64 -> probs ``[R, V]`` float32 (a new tensor).

    The rows' laws as :func:`~specexact.decoders.pipeline.process_logits_reference` gives
    them, bit for bit (module docstring).
    """
    X = logits
    if signature & GREEDY:  # a point mass on the argmax (lowest id among ties)
        return torch.zeros_like(X).scatter_(1, X.argmax(-1, keepdim=True), 1.0)
    if bool((temperature != 1).any()):
        X.div_(temperature[:, None])
    P = torch.ops.aten._softmax(X, -1, False)  # [R, V]
    mask = None
    if signature & MIN_P:
        mask = torch.ge(P, min_p[:, None] * P.amax(-1, keepdim=True), out=torch.empty_like(P))
    few = False  # top-p from the top-k tokens alone (nucleus.cut_to_nucleus_of_top_k_)
    if signature & TOP_K:
        k_max = int(top_k.max())
        few = bool(signature & TOP_P) and k_max <= TOP_K_MAX
        # (a TOP_K row has 0 < top_k < V: the (k+1)-th largest logit exists)
        top = torch.topk(X, k_max + 1 if few else k_max, dim=-1)
        kth = top.values.gather(1, (top_k - 1)[:, None])
        if few:  # the (k+1)-th largest logit below the k-th: the mask keeps exactly the top k
            tie_free = top.values.gather(1, top_k[:, None])[:, 0] < kth[:, 0]
        in_top = torch.ge(X, kth, out=X)  # ties at the k-th value are all kept; the logits are done
        mask = in_top if mask is None else mask.mul_(in_top)
    if mask is not None:
        P.mul_(mask)  # the kept probabilities
    if signature & TOP_P:
        if few:
            cut_to_nucleus_of_top_k_(P, top_p, top.indices, top_k, tie_free)
        else:
            P.mul_(nucleus_of_chunk(P, top_p))
    return P.div_(P.sum(-1, keepdim=True))
