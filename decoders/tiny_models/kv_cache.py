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

from specexact.decoders.prefix_match import reusable_prefix

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
        Row-columns computed and row-columns resumed from the cache, over all calls (a call
        of ``B`` rows resuming ``m`` of ``T`` columns adds ``B * (T - m)`` and ``B * m``).
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

    def hidden_states(self, model, ids: torch.Tensor) -> torch.Tensor:
        """``model``'s final-norm hidden states of ``ids``, resuming the last call's columns.

        Shape: ``ids [B, T] -> [B, T, D]`` (model dtype). ``ids`` are checked and clamped
        (padding as token 0) by the caller, on ``model.device``. At least the last column is
        computed; rows are computed in chunks of ``model.rows_per_forward`` (bounded memory).
        The keys, values and hidden states of this call replace the cached ones.
        """
        B, T = ids.shape
        source, start = reusable_prefix(self.ids, ids, any_row=True)
        start = min(start, T - 1)
        rows = model.rows_per_forward(T - start, T)
        layers = model.config.num_hidden_layers
        hidden, keys, values = [], [[] for _ in range(layers)], [[] for _ in range(layers)]
        for i in range(0, B, rows):
            past = None
            if start:
                src = source[i:i + rows]
                past = [(self.keys[n][src, :, :start], self.values[n][src, :, :start]) for n in range(layers)]
            h, kv = model.forward_columns(ids[i:i + rows], start, past)  # [b, T - start, D]
            hidden.append(h)
            for n, (k, v) in enumerate(kv):
                keys[n].append(k)
                values[n].append(v)
        new = torch.cat(hidden)
        out = new if not start else torch.cat([self.hidden[source, :start], new], 1)  # [B, T, D]
        self.ids, self.hidden = ids.clone(), out
        self.keys = [torch.cat(k) for k in keys]
        self.values = [torch.cat(v) for v in values]
        self.computed_columns += B * (T - start)
        self.reused_columns += B * start
        return out
