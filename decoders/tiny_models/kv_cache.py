"""A prefix key / value cache for :class:`~specexact.decoders.tiny_models.TinyCausalLM`.

A decoder calls its models with a growing token tensor: the draft once per drafted token, the
target once per round, each call repeating the columns of the call before it up to the
first rejected draft. Attention is causal, so a column's keys, values and hidden state depend
on its row's ids up to it only: :class:`PrefixKVCache` keeps each layer's keys and values
(and the final hidden states) of the last call and, on the next one, resumes every row from
a cached row with the same ids in the longest prefix of columns all rows share
(:func:`~specexact.decoders.prefix_match.reusable_prefix`, any cached row), computing only the
columns after it: their queries attend to the cached and the new keys. The result is the
uncached forward's up to floating-point rounding (the products run on other shapes):
the same law. Opt-in per model instance (``TinyCausalLM(..., kv_cache=True)``): the
built-in engine turns it on; the exact-law code (teacher-forced forwards) leaves it off.
"""

from __future__ import annotations

import torch

from specexact.decoders.prefix_match import row_prefixes

__all__ = ["PrefixKVCache"]


class PrefixKVCache:
    """The keys, values and hidden states of a model's last call, and what reuse saved.

    Attributes
    ----------
    ids : torch.LongTensor or None
        ``[C, S]``: the last call's ids (padding read as token 0).
    keys, values : list of torch.Tensor
        Per layer, ``[C, K, S, hd]`` (rotated keys; ``K`` key / value heads).
    hidden : torch.Tensor or None
        ``[C, S, D]``: the final-norm hidden states.
    computed_columns, reused_columns : int
        Row-columns computed and row-columns resumed from the cache, over all calls: a row
        that resumes ``m`` columns and needs ``e`` adds ``e - m`` and ``m`` (the columns a
        row's window computes past its end are not counted).
    """

    def __init__(self) -> None:
        self.ids: torch.Tensor | None = None
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.hidden: torch.Tensor | None = None
        self.computed_columns = 0
        self.reused_columns = 0

    def clear(self) -> None:
        """Forget the last call (the counters stay)."""
        self.ids, self.keys, self.values, self.hidden = None, [], [], None

    def hidden_states(self, model, ids: torch.Tensor, ends: torch.Tensor | None = None) -> torch.Tensor:
        """``model``'s final-norm hidden states of ``ids``, resuming the last call's columns.

        Shape: ``ids [B, T], ends [B] -> [B, T, D]`` (model dtype). ``ids`` are checked and
        clamped (padding as token 0) by the caller, on ``model.device``; row ``i`` needs its
        columns before ``ends[i]`` (default ``T``); its columns from there on may be left
        uncomputed (meaningless). Row ``i`` resumes the cached row sharing its longest
        prefix (:func:`~specexact.decoders.prefix_match.row_prefixes`) and computes the
        columns after it up to ``ends[i]`` (at least its last one); all rows compute windows
        of the widest such width, a row's window past its end or past ``T`` discarded. Rows
        are computed in chunks of ``model.rows_per_forward`` (bounded memory). The keys,
        values and hidden states of this call replace the cached ones.
        """
        B, T = ids.shape
        dev = ids.device
        if B == 0:
            return torch.zeros(0, T, model.config.hidden_size, dtype=model.dtype, device=dev)
        ends = torch.full((B,), T, dtype=torch.int64, device=dev) if ends is None else ends.to(dev)
        source, length = row_prefixes(self.ids, ids)
        first = torch.minimum(length, ends - 1)  # [B]: each row's first computed column
        n = int((ends - first).max())  # window width
        columns = first[:, None] + torch.arange(n, device=dev)  # [B, n]
        inside = columns < T
        new_ids = ids.gather(1, columns.clamp(max=T - 1)).masked_fill(~inside, 0)  # [B, n]
        S = max(T, int(columns.max()) + 1)  # key columns: every row's window fits
        c = model.config
        K, hd, layers = c.num_key_value_heads, c.head_dim, c.num_hidden_layers
        rows = model.rows_per_forward(n, S)
        common = int(first[0]) if bool((first == first[0]).all()) else None  # one start: no scatter
        hidden, keys, values = [], [[] for _ in range(layers)], [[] for _ in range(layers)]
        for i in range(0, B, rows):
            src = source[i:i + rows]
            if common is not None:
                past = [(self._prefix(self.keys, n_, src, common, (K, hd), model),
                         self._prefix(self.values, n_, src, common, (K, hd), model)) for n_ in range(layers)]
            else:
                past = [(self._take(self.keys, n_, src, S, (K, hd), model),
                         self._take(self.values, n_, src, S, (K, hd), model)) for n_ in range(layers)]
            h, kv = model.forward_columns(new_ids[i:i + rows], columns[i:i + rows], past)  # [b, n, D]
            hidden.append(h)
            for n_, (k, v) in enumerate(kv):
                keys[n_].append(k[:, :, :T])
                values[n_].append(v[:, :, :T])
        new = torch.cat(hidden)  # [B, n, D]
        if common is not None:
            out = new if not common else torch.cat([self.hidden[source, :common], new], 1)
            if out.shape[1] < T:  # every row ends before T: the columns after are not computed
                out = torch.cat([out, out.new_zeros(B, T - out.shape[1], out.shape[2])], 1)
        else:
            out = self._take_hidden(source, S, c.hidden_size, model)  # [B, S, D]
            out.scatter_(1, columns[:, :, None].expand(-1, -1, new.shape[-1]), new)
        out = out[:, :T]
        valid = torch.minimum(first + n, torch.full_like(first, T))  # [B]: columns now held
        held = ids.masked_fill(torch.arange(T, device=dev)[None] >= valid[:, None], -2)  # -2: never reused
        self.ids, self.hidden = held, out
        self.keys = [torch.cat(k) for k in keys]
        self.values = [torch.cat(v) for v in values]
        self.computed_columns += int((ends - first).sum())
        self.reused_columns += int(first.sum())
        return out

    def _take(self, cached: list[torch.Tensor], layer: int, src: torch.Tensor, S: int, shape: tuple, model
              ) -> torch.Tensor:
        """``[b, K, S, hd]``: cached rows ``src`` of a layer's keys or values, zero-padded to
        ``S`` columns (zeros with nothing cached)."""
        out = torch.zeros(src.shape[0], shape[0], S, shape[1], dtype=model.dtype, device=model.device)
        if cached:
            held = cached[layer][src, :, :S]
            out[:, :, : held.shape[2]] = held
        return out

    def _prefix(self, cached: list[torch.Tensor], layer: int, src: torch.Tensor, m: int, shape: tuple, model
                ) -> torch.Tensor:
        """``[b, K, m, hd]``: the first ``m`` columns of cached rows ``src`` of a layer's keys
        or values (every row resumes at least ``m``)."""
        if not m:
            return torch.zeros(src.shape[0], shape[0], 0, shape[1], dtype=model.dtype, device=model.device)
        return cached[layer][src, :, :m]

    def _take_hidden(self, src: torch.Tensor, S: int, D: int, model) -> torch.Tensor:
        """``[B, S, D]``: cached rows ``src`` of the hidden states, zero-padded to ``S`` columns."""
        out = torch.zeros(src.shape[0], S, D, dtype=model.dtype, device=model.device)
        if self.hidden is not None:
            held = self.hidden[src, :S]
            out[:, : held.shape[1]] = held
        return out
