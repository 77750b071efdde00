"""Laws straight from a model's states: the decoders' fused fast path.

For a model that exposes its states (``prefix_states`` / ``project`` / ``logit_bound``, as
:class:`~specexact.decoders.ToyLM`), :func:`fused_laws` computes the laws a decoder step
needs without ever holding a ``[rows, V]`` tensor of logits or of distinct laws: rows are
grouped by the bits of their state, their sampling parameters and their penalty history
(each group has one law); the distinct laws are taken by signature (the operations they
need) a cache-sized chunk at a time, and each chunk is projected, penalised and processed
(:func:`~specexact.decoders.law_chunk.process_chunk`) while it stays in cache, then written
into the rows of ``dest`` that share it (the verifier's ``[A, γ(+1), V]`` inputs) and / or
sampled for every row that shares it.

Bit for bit what :func:`~specexact.decoders.law_table.model_laws` with ``share=False`` (the
reference: the model's forward and the logits pipeline on every row) gives, and the same
draws from the generator, because

- the logits of a row are ``project(state)``, row by row the same bits for any number of
  rows from 2 on (MKL's matrix-vector product for a single row rounds otherwise: every
  chunk is padded to :data:`~specexact.decoders.law_table.MIN_ROWS` rows, and calls of
  fewer rows than that return None, for the caller's reference path);
- the pipeline's only batch-wide decision that can change bits, the float32 overflow guard,
  is read from the model's bound on ``|logit|`` (the same decision whenever the bound
  rules widening out; otherwise None); finite states give finite logits (the reference's
  NaN / ``inf`` checks pass);
- :func:`~specexact.decoders.law_chunk.process_chunk` is the reference's law row by row;
- sampling is :func:`~specexact.decoders.sample_from_probs`' search on each row's own law
  (float64 block masses, or totals, per law, the same sums; the same mass check, then the
  same ``N`` uniforms from the generator).

``tests/decoders/test_law_engine.py`` and ``tests/decoders/test_law_table.py`` compare the
decoders with their references on seeded and Hypothesis inputs.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch

from .law_chunk import TOP_P, has_penalty, penalise_, process_chunk, signatures
from .law_table import MIN_ROWS, distinct_rows, params_key
from .models import one_cpu_thread, padded_rows
from .params import BatchedParams
from .pipeline import SERIAL_ROW, _OVERFLOW_GUARD, chunk_rows_for
from . import workspace
from .sampling import (BLOCK, BlockMasses, _check_mass, _inverse_cdf_fast, blocks_at, chunk_rows, search_blocks,
                       uniform)

__all__ = ["fused_model", "fused_laws", "FUSED"]

FUSED = True
"""Whether the decoders take the fused path where it applies (False: the law table's path,
:func:`~specexact.decoders.law_table.model_laws`; for benchmarks and tests)."""

MIN_VOCAB = 256
"""Smallest vocabulary of the fused path (the grouped pipeline's)."""

ONE_THREAD = True
"""Whether the fused path processes its chunks on one torch thread (then restores the
caller's count). Each chunk is a cache-sized ``[R, V]`` block and each operation on it is
short: an OpenMP parallel region per operation costs more than it saves, and on a shared
machine a second thread that has to wait for a core stalls every region (measured on a
busy 2-core machine, V = 32000: 2 threads took 66 s per audit call where 1 thread took
4.3 s). The large per-round tensors (the verifier, the sampling's searches) keep the
caller's threads. Row results do not depend on the thread count (each row of at most
:data:`~specexact.decoders.pipeline.SERIAL_ROW` entries is reduced by one thread; the
projection is checked at both counts, :func:`_projection`)."""


def _one_thread():
    """One torch thread for the fused path's chunks where :data:`ONE_THREAD` says so."""
    return one_cpu_thread() if ONE_THREAD else nullcontext()


def fused_model(model) -> bool:
    """Whether ``model`` can take the fused path: states exposed, float32 on CPU, a
    vocabulary the grouped pipeline takes, and a projection that gives each row the same
    bits whatever the rows beside it (:func:`_projection`)."""
    return (FUSED and all(hasattr(model, a) for a in ("prefix_states", "project", "logit_bound"))
            and torch.device(getattr(model, "device", "cpu")).type == "cpu"
            and getattr(model, "dtype", None) == torch.float32
            and MIN_VOCAB <= model.vocab_size <= SERIAL_ROW
            and _projection(model) is not None)


def _projection(model):
    """The projection the fused path uses for ``model`` (checked once per model and torch
    thread count, cached on the model): ``model.project_rows`` where it has one that gives
    :meth:`project`'s bits, else ``model.project``; None if ``project`` itself gives a row
    other bits when fewer rows are projected together (then the fused path does not apply:
    the reference projects every row of a call at once).

    The check projects 512 seeded states at once with the caller's threads (as the
    reference projects a call's rows) and in runs of 1 to 300 rows at several offsets (the
    chunk sizes of the fused path and remainders of a BLAS's row tiles), each run padded
    as the fused path pads a chunk (:func:`_project_chunk`), with the threads the fused
    path's chunks run on (:data:`ONE_THREAD`), and compares bit patterns. (Unpadded runs of
    2 or 3 rows failed this check with MKL on an AVX-512 CPU, so the fused path never applied
    there.)
    """
    threads = torch.get_num_threads()
    cache = getattr(model, "_fused_projection", None)
    if isinstance(cache, dict) and threads in cache:
        return cache[threads]
    g = torch.Generator().manual_seed(0)
    d = model.prefix_states(torch.zeros(1, 1, dtype=torch.int64)).shape[-1]
    states = torch.tanh(torch.randn(512, d, generator=g, dtype=torch.float64)).to(model.dtype)
    every = model.project(states).view(torch.int32)
    runs = [(0, 1), (5, 3), (9, 8), (30, 13), (0, 64), (100, 300)]

    def same(fn) -> bool:  # each run as the fused path projects it (padded to MIN_ROWS rows)
        return all(torch.equal(_project_chunk(fn, states[o:o + m]).view(torch.int32), every[o:o + m])
                   for o, m in runs)

    chosen = None
    with _one_thread():
        if same(model.project):
            rows = getattr(model, "project_rows", None)
            chosen = rows if rows is not None and same(rows) else model.project
    try:
        model._fused_projection = {**(cache if isinstance(cache, dict) else {}), threads: chosen}
    except AttributeError:  # a model that takes no attributes: check again next time
        pass
    return chosen


def _project_chunk(project, states: torch.Tensor) -> torch.Tensor:
    """``project(states)`` for a chunk of ``[R, d]`` states, padded with repeats of its
    first row to :data:`~specexact.decoders.law_table.MIN_ROWS` rows when shorter (a BLAS
    rounds a product of one to a few rows otherwise: MKL for one row with AVX2, for up to
    three rows with AVX-512). Shape: ``[R, d] -> [R, V]``."""
    flat, R = padded_rows(states, MIN_ROWS)
    return project(flat)[:R]


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.reshape(t.shape[0], -1).contiguous()
    if t.is_floating_point():
        t = t.view({8: torch.int64, 4: torch.int32, 2: torch.int16}[t.element_size()])
    return t.to(torch.int64)


def _widens(bound: float, params: BatchedParams, vocab_size: int) -> bool:
    """Whether the pipeline's float32 overflow guard could widen logits bounded by
    ``bound`` (:func:`~specexact.decoders.pipeline._widen_if_overflow`'s magnitude, with the
    bound for the largest logit)."""
    rep, temp = params.repetition_penalty, params.temperature
    factor = torch.maximum(rep, 1 / rep) / torch.where(temp > 0, temp, torch.ones_like(temp))
    magnitude = bound * float(factor.max()) + float(params.frequency_penalty.abs().max()
                                                    + params.presence_penalty.abs().max()) * vocab_size
    return not magnitude < _OVERFLOW_GUARD


def _write_rows(dest: torch.Tensor, laws: torch.Tensor, rows: list[int], row_law: list[int], first: int) -> None:
    """``dest[r] = laws[row_law[r] - first]`` for each ``r`` of ``rows`` (one copy per row:
    faster on CPU than ``index_copy_`` into a strided ``dest``)."""
    for r in rows:
        dest[r].copy_(laws[row_law[r] - first])


def fused_laws(model, input_ids: torch.Tensor, positions: torch.Tensor, params: BatchedParams,
               history: torch.Tensor, *, dest: torch.Tensor | None = None, sample: bool = False,
               generator: torch.Generator | None = None) -> torch.Tensor | bool | None:
    """The laws after the prefixes ``input_ids[b, : positions[b, j] + 1]``, written into
    ``dest`` and / or sampled.

    Shape: ``input_ids [B, T]``, ``positions [B, n]``, ``params`` and ``history`` with
    ``N = B * n`` rows (row ``b * n + j``); ``dest [N, V]`` (any row strides).

    Parameters
    ----------
    model : ToyLM or alike
        With ``prefix_states``, ``project`` and ``logit_bound`` (:func:`fused_model`).
    input_ids, positions : torch.LongTensor
        As the model takes them.
    params : BatchedParams
        ``N`` rows.
    history : torch.LongTensor
        Shape ``[N, H]``: the tokens each row's penalties count (``-1`` padding).
    dest : torch.Tensor, optional
        Float32 ``[N, V]``: row ``r`` receives row ``r``'s law.
    sample : bool
        Draw one token per row from its law: what ``sample_from_probs(laws, generator)``
        returns and draws.
    generator : torch.Generator, optional
        For ``sample``.

    Returns
    -------
    torch.LongTensor or bool or None
        The tokens ``[N]`` with ``sample``, else True; None where this path does not apply
        (fewer than :data:`~specexact.decoders.law_table.MIN_ROWS` rows, non-finite states,
        parameters the overflow guard might widen): then nothing was written or drawn.

    Raises
    ------
    ValueError
        As ``sample_from_probs`` (a law without positive finite mass; nothing is drawn), or
        history ids outside ``[0, V)``.
    """
    B, n = positions.shape
    N = B * n
    V = model.vocab_size
    if N < MIN_ROWS or not fused_model(model):
        return None
    states = model.prefix_states(input_ids, positions).reshape(N, -1)  # [N, d]
    if not bool(torch.isfinite(states).all()) or _widens(model.logit_bound(), params, V):
        return None
    device = states.device
    key = torch.cat([_bits(states), params_key(params).to(device), _bits(history)], 1)
    rep, inverse = distinct_rows(key, min_rows=1)  # [U], [N]
    U = rep.numel()
    sig = signatures(params.select(rep), V)  # [U]
    by_sig = torch.argsort(sig, stable=True)  # the laws in processing order
    rank = torch.empty_like(by_sig)
    rank[by_sig] = torch.arange(U, device=device)
    row_law = rank[inverse]  # [N]: each row's law, numbered in processing order
    sig_ends = torch.bincount(sig[by_sig], minlength=16).cumsum(0).tolist()
    first = rep[by_sig]  # [U]: a row of each law
    states = states.index_select(0, first)  # [U, d]
    p = params.select(first)
    hist = history.index_select(0, first)
    pen_list = (has_penalty(p) if hist.numel() else torch.zeros(U, dtype=torch.bool)).tolist()
    temperature = torch.where(p.temperature == 0, torch.ones_like(p.temperature), p.temperature).to(torch.float32)
    min_p, top_p = p.min_p.to(torch.float32), p.top_p.to(torch.float64)
    if dest is not None:  # the rows of each law, law by law
        row_order = torch.argsort(row_law, stable=True).tolist()
        ends = torch.bincount(row_law, minlength=U).cumsum(0).tolist()
        row_law_list = row_law.tolist()

    project = _projection(model)
    two_level = V > 4 * BLOCK
    if sample:
        # Each law's float64 block masses (or total), computed while its chunk is in cache;
        # the search then reads each row's law from ``dest`` or from a table of the laws.
        law_mass = torch.empty(U, -(-V // BLOCK) if two_level else 1, dtype=torch.float64, device=device)
        masses = BlockMasses(V, max(chunk_rows_for(V, TOP_P), MIN_ROWS)) if two_level else None
        table = workspace.take("laws", (U, V), device=device) if dest is None else None
    with _one_thread():  # cache-sized chunks: one thread (ONE_THREAD)
        start = 0
        for s_val in range(16):
            stop = sig_ends[s_val]
            step = chunk_rows_for(V, s_val)
            for g0 in range(start, stop, step):
                g1 = min(stop, g0 + step)
                X = _project_chunk(project, states[g0:g1])  # [R, V]
                if any(pen_list[g0:g1]):
                    penalise_(X, p.repetition_penalty[g0:g1], p.frequency_penalty[g0:g1],
                              p.presence_penalty[g0:g1], hist[g0:g1])
                P = process_chunk(X, s_val, temperature[g0:g1], min_p[g0:g1], p.top_k[g0:g1], top_p[g0:g1])
                if dest is not None:
                    _write_rows(dest, P, row_order[ends[g0 - 1] if g0 else 0:ends[g1 - 1]], row_law_list, g0)
                if sample:
                    if table is not None:
                        table[g0:g1].copy_(P)
                    if two_level:
                        masses(P, out=law_mass[g0:g1])
                    else:
                        torch.sum(P, -1, keepdim=True, dtype=torch.float64, out=law_mass[g0:g1])
            start = stop
    if not sample:
        return True
    source, src = (table, row_law) if dest is None else (dest, torch.arange(N, device=device))
    if two_level:  # sample_from_probs' two-level search on each row's own law
        return search_blocks(law_mass.index_select(0, row_law),
                             lambda s, e, b: blocks_at(source, (src[s:e],), b), generator)
    total = law_mass.index_select(0, row_law)  # [N, 1]: each row's float64 total, as sample_from_probs sums it
    _check_mass(total)
    target = uniform((N, 1), generator, device) * total
    out = torch.empty(N, dtype=torch.int64, device=device)
    rows = chunk_rows(V)
    for s in range(0, N, rows):
        out[s:s + rows] = _inverse_cdf_fast(source.index_select(0, src[s:s + rows]), target[s:s + rows])[:, 0]
    return out
