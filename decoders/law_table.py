"""The laws of a batch's rows, computed once per distinct row (the decoders' fast path).

In an audit batch many rows share their law: every row of a class starts from the same
prompt, so the first draft and target laws of a round are the same for all of them, and a
Zipf-like head makes later drafts collide often (V=32000, 2048 rows: about half the laws
of one audit call are repeats). A row's processed law is a function of its logits, its
sampling parameters and its penalty history, so :func:`model_laws` runs the model on
every row as before, then processes each distinct ``(logits, parameters, history)`` once
and keeps an index from rows to them (:class:`LawTable`).

Bit for bit: what a row gets from the table equals what the reference (the logits
pipeline run on every row) gives it, because

- the logits are the model's, computed on the whole batch as by the reference; rows are
  grouped by the bits of a few logits, their parameters and history, and a row shares its
  group's law only if all its logits equal the representative's, bit for bit (checked);
- the logits pipeline is row-wise: a row's result does not depend on the other rows,
  provided at least :data:`MIN_ROWS` rows are processed together (a reduction over a
  single row longer than 32768 entries is split across threads); the table is padded to
  :data:`MIN_ROWS` rows, and batches of fewer rows take the reference;
- the pipeline's batch-wide decisions (the float32 overflow guard, which steps run at all)
  depend on the set of distinct rows only, which the table keeps;
- :meth:`LawTable.sample` draws one uniform per row, in row order, and searches the row's
  law as :func:`~specexact.decoders.sample_from_probs` does.

``tests/decoders/test_law_table.py`` compares the two decoders on seeded and Hypothesis
inputs. Any model callable ``model(input_ids, positions) -> logits`` works. Laws are shared
on CPU only (on a GPU a row's reductions may be split differently with the batch size, and
processing every row is cheap there): elsewhere the table holds every row, as the reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .params import BatchedParams
from .sampling import sample_from_probs, sample_from_table

__all__ = ["LawTable", "MIN_ROWS", "SHARE_MIN_VOCAB", "distinct_rows", "model_laws", "params_key", "shared_laws"]

MIN_ROWS = 8
"""Fewest rows processed at once (the table is padded with repeats), and fewest rows a
batch needs for the table to be used at all: a reduction over one row of more than 32768
entries is split across threads, so one row alone may round differently from the same row
in a batch."""

SHARE_MIN_VOCAB = 512
"""Smallest vocabulary whose laws are shared: below it processing every row costs less than
finding the repeats (measured: the audit's V <= 12 cases ran ~4x slower shared)."""

PROBE_COLUMNS = 32
"""Logits per row whose bits group rows (then every logit of a grouped row is compared)."""

Process = Callable[..., torch.Tensor]


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The bit patterns of ``t [N, ...]`` as ``int64 [N, m]`` (equal bits, equal keys)."""
    t = t.reshape(t.shape[0], -1).contiguous()
    if t.is_floating_point():
        t = t.view({8: torch.int64, 4: torch.int32, 2: torch.int16}[t.element_size()])
    return t.to(torch.int64)


def params_key(params: BatchedParams) -> torch.Tensor:
    """Bit patterns of every row's sampling parameters. Shape: ``[N, 7]`` int64."""
    return torch.cat([_bits(params.temperature), _bits(params.top_k), _bits(params.top_p), _bits(params.min_p),
                      _bits(params.repetition_penalty), _bits(params.presence_penalty),
                      _bits(params.frequency_penalty)], 1)


def distinct_rows(key: torch.Tensor, min_rows: int = MIN_ROWS) -> tuple[torch.Tensor, torch.Tensor]:
    """One representative row per distinct key, and each row's representative.

    Shape: ``key [N, m]`` (integer) -> ``representatives [U]``, ``inverse [N]`` with
    ``key[representatives[inverse]] == key`` row for row.

    The representatives are each key's first row, in order of first appearance, padded to
    ``min_rows`` entries by repeating the first when fewer keys are distinct (``inverse``
    points at the first copy). With ``N < min_rows`` every row is its own representative.
    """
    N = key.shape[0]
    device = key.device
    if N < min_rows:
        r = torch.arange(N, device=device)
        return r, r
    _, inverse = torch.unique(key, dim=0, return_inverse=True)  # [N], ids in sorted-key order
    U = int(inverse.max()) + 1
    first = torch.full((U,), N, dtype=torch.int64, device=device)
    first.scatter_reduce_(0, inverse, torch.arange(N, device=device), reduce="amin")  # [U]
    order = torch.argsort(first)  # keys in order of first appearance
    rank = torch.empty_like(order)
    rank[order] = torch.arange(U, device=device)
    representatives, inverse = first[order], rank[inverse]
    if U < min_rows:
        representatives = torch.cat([representatives, representatives[:1].expand(min_rows - U)])
    return representatives, inverse


@dataclass
class LawTable:
    """Laws of ``N`` rows stored once per distinct row.

    Attributes
    ----------
    probs : torch.Tensor or None
        Shape ``[U, V]``: the processed laws of the representative rows (None when only
        logits were asked for).
    logits : torch.Tensor or None
        Shape ``[N, V]``: every row's raw logits (kept when asked for).
    inverse : torch.LongTensor or None
        Shape ``[N]``: row ``n``'s law is ``probs[inverse[n]]``; None: row ``n`` is
        ``probs[n]`` (no sharing, ``U == N``).
    """

    probs: torch.Tensor | None
    logits: torch.Tensor | None
    inverse: torch.Tensor | None

    @property
    def num_rows(self) -> int:
        """N."""
        if self.inverse is not None:
            return self.inverse.shape[0]
        return (self.probs if self.probs is not None else self.logits).shape[0]

    def rows(self) -> torch.Tensor:
        """Every row's law. Shape: ``[N, V]`` (a fresh tensor when rows share laws)."""
        return self.probs if self.inverse is None else self.probs.index_select(0, self.inverse)

    def logits_rows(self) -> torch.Tensor:
        """Every row's raw logits. Shape: ``[N, V]``."""
        return self.logits

    def sample(self, generator: torch.Generator | None) -> torch.Tensor:
        """One token per row: what ``sample_from_probs(self.rows(), generator)`` returns,
        from the same draws, without building ``rows()``. Shape: ``[N]``."""
        if self.inverse is None:
            return sample_from_probs(self.probs, generator)
        return sample_from_table(self.probs, self.inverse, generator)


def _confirm(logits: torch.Tensor, rep: torch.Tensor, inverse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Split off the rows whose logits differ from their representative's in any bit.

    Shape: ``logits [N, V]``, ``rep [U]``, ``inverse [N]`` -> ``(rep [U'], inverse [N])``;
    a row that differs becomes its own representative.
    """
    N = logits.shape[0]
    rows = torch.arange(N, device=logits.device)
    others = (rep[inverse] != rows).nonzero().squeeze(1)  # rows that share another row's law
    if others.numel() == 0:
        return rep, inverse
    bits = logits
    if logits.is_floating_point():  # compare bit patterns: a view, no copy
        bits = logits.view({8: torch.int64, 4: torch.int32, 2: torch.int16}[logits.element_size()])
    partner = rep[inverse[others]]
    # Row against row (no gathered copies): torch.equal reads the two rows and stops early.
    differs = torch.tensor([not torch.equal(bits[o], bits[r]) for o, r in zip(others.tolist(), partner.tolist())],
                           dtype=torch.bool, device=logits.device)
    if bool(differs.any()):
        split = others[differs]
        inverse = inverse.clone()
        inverse[split] = rep.numel() + torch.arange(split.numel(), device=logits.device)
        rep = torch.cat([rep, split])
    return rep, inverse


def model_laws(
    model,
    input_ids: torch.Tensor,
    positions: torch.Tensor,
    params: BatchedParams,
    history: torch.Tensor,
    *,
    process: Process | None,
    extra: tuple[torch.Tensor, ...] = (),
    keep_logits: bool = False,
    share: bool = True,
) -> LawTable:
    """The processed laws after the prefixes ``input_ids[b, : positions[b, j] + 1]``.

    Shape: ``input_ids [B, T]``, ``positions [B, n]``, ``params`` and ``history`` with
    ``N = B * n`` rows (row ``b * n + j``) -> a :class:`LawTable` of ``N`` rows.

    Parameters
    ----------
    model : callable
        ``model(input_ids, positions) -> logits [B, n, V]``, called once on every row.
    input_ids, positions : torch.LongTensor
        As the model takes them.
    params : BatchedParams
        ``N`` rows.
    history : torch.LongTensor
        Shape ``[N, H]``: the tokens each row's penalties count (``-1`` padding).
    process : callable or None
        ``process(logits [U, V], params [U], history [U, H], *extra[U]) -> probs [U, V]``,
        e.g. :func:`~specexact.decoders.process_logits`; None: logits only.
    extra : tuple of torch.Tensor
        More per-row inputs of ``process``, each ``[N, ...]`` (e.g. prompt ids).
    keep_logits : bool
        Keep the raw logits in the table (as ``[N, V]``, every row).
    share : bool
        False: the reference, every row processed.

    Returns
    -------
    LawTable
    """
    B, n = positions.shape
    logits = model(input_ids, positions).reshape(B * n, -1)  # [N, V]
    return shared_laws(logits, params, history, process=process, extra=extra, keep_logits=keep_logits,
                       share=share)


def shared_laws(
    logits: torch.Tensor,
    params: BatchedParams,
    history: torch.Tensor,
    *,
    process: Process | None,
    extra: tuple[torch.Tensor, ...] = (),
    keep_logits: bool = False,
    share: bool = True,
) -> LawTable:
    """The processed laws of ``N`` rows of logits, each distinct row processed once.

    Shape: ``logits [N, V]``, ``params`` and ``history [N, H]`` with ``N`` rows -> a
    :class:`LawTable` of ``N`` rows whose :meth:`LawTable.rows` equal
    ``process(logits, params, history, *extra)`` bit for bit (the module docstring says
    why; ``process`` must be row-wise, as every processing of this package is).

    Parameters
    ----------
    logits : torch.Tensor
        Shape ``[N, V]``, floating point.
    params, history, process, extra, keep_logits, share
        As in :func:`model_laws`.

    Returns
    -------
    LawTable
    """
    N = logits.shape[0]
    if (not share or process is None or N < MIN_ROWS or logits.shape[1] < SHARE_MIN_VOCAB
            or logits.device.type != "cpu"):  # elsewhere a row's reduction may depend on the batch
        probs = process(logits, params, history, *extra) if process is not None else None
        return LawTable(probs=probs, logits=logits if keep_logits or process is None else None, inverse=None)
    V = logits.shape[1]
    probe = torch.linspace(0, V - 1, min(V, PROBE_COLUMNS), device=logits.device).round().long()
    key = torch.cat([_bits(logits.index_select(1, probe)), params_key(params).to(logits.device), _bits(history),
                     *(_bits(e) for e in extra)], 1)
    rep, inverse = distinct_rows(key, min_rows=1)
    rep, inverse = _confirm(logits, rep, inverse)
    if rep.numel() == N:
        probs = process(logits, params, history, *extra)  # nothing shared
        return LawTable(probs=probs, logits=logits if keep_logits else None, inverse=None)
    if rep.numel() < MIN_ROWS:
        rep = torch.cat([rep, rep[:1].expand(MIN_ROWS - rep.numel())])
    probs = process(logits.index_select(0, rep), params.select(rep), history.index_select(0, rep),
                    *(e.index_select(0, rep) for e in extra))
    return LawTable(probs=probs, logits=logits if keep_logits else None, inverse=inverse)
