"""Small, deterministic, prefix-dependent language models that drive the samplers.

:class:`ToyLM` is a tiny recurrent model: the state after a prefix depends on every token
of it, and the next-token logits are a Zipf-like head (a seeded ranking of the vocabulary
with ``logit = -s * log(rank + 1)``) shifted by a projection of that state. Its draft
(:meth:`ToyLM.draft`) shares the recurrence and perturbs the head and the projection by a
controlled amount, so the draft/target mismatch is a single number.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from .prefix_match import reusable_prefix

__all__ = ["ToyLM", "ToyLMConfig", "PROJECT_MIN_ROWS", "one_cpu_thread", "padded_rows"]

PROJECT_MIN_ROWS = 8
"""Fewest rows :meth:`ToyLM.project` multiplies at once (fewer are padded with repeats of
the first)."""


@contextmanager
def one_cpu_thread(device: torch.device | str = "cpu"):
    """Run the enclosed CPU work on one torch thread (then restore the caller's count);
    nothing changes for another device."""
    threads = torch.get_num_threads()
    if torch.device(device).type != "cpu" or threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def padded_rows(states: torch.Tensor, min_rows: int = PROJECT_MIN_ROWS) -> tuple[torch.Tensor, int]:
    """``states`` as ``[R', d]`` with ``R' >= min_rows`` (repeats of the first row appended
    to a non-empty ``R < min_rows``), and its own row count ``R``."""
    flat = states.reshape(-1, states.shape[-1])
    R = flat.shape[0]
    if 0 < R < min_rows:
        flat = torch.cat([flat, flat[:1].expand(min_rows - R, -1)])
    return flat, R


@dataclass(frozen=True)
class ToyLMConfig:
    """Shape and law parameters of a :class:`ToyLM`.

    Parameters
    ----------
    vocab_size : int
        V, from 1 up (256k and more work; the projection has ``V * hidden_size`` floats).
    seed : int
        Fixes every weight.
    hidden_size : int
        State width d.
    zipf_exponent : float
        s in ``logit = -s * log(rank + 1)`` of the prefix-free head.
    context_strength : float
        Scale of the prefix-dependent part of the logits (0: the law ignores the prefix).
    eos_token_id : int or None
        Token that ends a sequence, or None for no EOS.
    eos_logit : float
        Head logit of the EOS token (before the context term).
    """

    vocab_size: int
    seed: int = 0
    hidden_size: int = 16
    zipf_exponent: float = 1.1
    context_strength: float = 2.0
    eos_token_id: int | None = None
    eos_logit: float = -1.0

    def __post_init__(self) -> None:
        if int(self.vocab_size) != self.vocab_size or self.vocab_size < 1:
            raise ValueError(f"vocab_size must be an integer >= 1, got {self.vocab_size!r}")
        if self.hidden_size < 1:
            raise ValueError(f"hidden_size must be >= 1, got {self.hidden_size!r}")
        if not math.isfinite(self.zipf_exponent) or not math.isfinite(self.context_strength):
            raise ValueError(
                f"zipf_exponent and context_strength must be finite, got "
                f"{self.zipf_exponent!r}, {self.context_strength!r}"
            )
        if self.eos_token_id is not None and not 0 <= self.eos_token_id < self.vocab_size:
            raise ValueError(
                f"eos_token_id must be in [0, {self.vocab_size}) or None, got {self.eos_token_id!r}"
            )


class ToyLM:
    """A seeded recurrent toy language model, batched, on any device.

    Shape: ``input_ids [B, T] -> logits [B, n, V]`` at ``n`` requested positions.

    Parameters
    ----------
    config : ToyLMConfig
        Sizes and law parameters.
    device : torch.device or str, optional
        Where the weights live (``"cuda"`` when available is the caller's choice).
    dtype : torch.dtype
        float32 (default) or float64 (exact-law enumeration uses float64).

    Notes
    -----
    State recurrence: ``s_t = tanh(s_{t-1} W + E[x_t])`` from a seeded ``s_{-1}``; the
    logits after prefix ``x_0 .. x_t`` are ``head + c * s_t U^T``. The law therefore depends
    on the whole prefix, not just the last token.

    Calls reuse the states of the previous call (same batch size) up to the first column
    where the ``input_ids`` differ, and stop at the last requested position; the logits
    are bit for bit those of :meth:`states` recomputed from scratch (a decoder's calls
    extend one prefix, so each call costs the new columns only). Set
    ``cache_states = False`` on an instance to always recompute.
    """

    cache_states: bool = True

    def __init__(self, config: ToyLMConfig, *, device: torch.device | str | None = None,
                 dtype: torch.dtype = torch.float32, _weights: dict | None = None) -> None:
        self.config = config
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.dtype = dtype
        weights = _weights if _weights is not None else self._init_weights(config)
        self._weights = weights  # float64, CPU: the canonical copy
        self.head = weights["head"].to(self.device, dtype)  # [V]
        self.proj = weights["proj"].to(self.device, dtype)  # [V, d]
        self.embed = weights["embed"].to(self.device, dtype)  # [V, d]
        self.recur = weights["recur"].to(self.device, dtype)  # [d, d]
        self.init_state = weights["init_state"].to(self.device, dtype)  # [d]
        self._state_cache: tuple[torch.Tensor, torch.Tensor] | None = None  # (ids, states)

    @staticmethod
    def _init_weights(config: ToyLMConfig) -> dict:
        g = torch.Generator().manual_seed(config.seed)
        V, d = config.vocab_size, config.hidden_size
        rank = torch.randperm(V, generator=g).to(torch.float64)
        head = -config.zipf_exponent * torch.log1p(rank)
        if config.eos_token_id is not None:
            head[config.eos_token_id] = config.eos_logit
        return {
            "head": head,
            "proj": torch.randn(V, d, generator=g, dtype=torch.float64)
            * (config.context_strength / math.sqrt(d)),
            "embed": torch.randn(V, d, generator=g, dtype=torch.float64),
            "recur": torch.randn(d, d, generator=g, dtype=torch.float64) / math.sqrt(d),
            "init_state": torch.randn(d, generator=g, dtype=torch.float64) * 0.5,
        }

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    @property
    def eos_token_id(self) -> int | None:
        return self.config.eos_token_id

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> "ToyLM":
        """A copy of the model on another device and/or dtype (same weights)."""
        return ToyLM(self.config, device=device or self.device, dtype=dtype or self.dtype,
                     _weights=self._weights)

    def draft(self, mismatch: float, *, seed: int | None = None) -> "ToyLM":
        """A draft model that differs from this one by ``mismatch``.

        The draft shares the recurrence (the same prefix state) and perturbs the head and
        the projection by ``mismatch`` times seeded standard-normal noise: ``mismatch=0``
        gives identical logits; larger values lower the acceptance rate smoothly.

        Raises
        ------
        ValueError
            If ``mismatch`` is negative or not finite.
        """
        if not math.isfinite(mismatch) or mismatch < 0:
            raise ValueError(f"mismatch must be finite and >= 0, got {mismatch!r}")
        g = torch.Generator().manual_seed(self.config.seed + 1_000_003 if seed is None else seed)
        V, d = self.config.vocab_size, self.config.hidden_size
        w = dict(self._weights)
        w["head"] = w["head"] + mismatch * torch.randn(V, generator=g, dtype=torch.float64)
        w["proj"] = w["proj"] + mismatch * torch.randn(V, d, generator=g, dtype=torch.float64) * (
            self.config.context_strength / math.sqrt(d))
        return ToyLM(self.config, device=self.device, dtype=self.dtype, _weights=w)

    def states(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Recurrent state after each prefix. Shape: ``[B, T] -> [B, T, d]``.

        ``-1`` ids (right padding) are read as token 0; states at or after padding are
        meaningless, states before it are unaffected.
        """
        B, T = input_ids.shape
        x = self.embed[input_ids.clamp_min(0)]  # [B, T, d]
        s = self.init_state.expand(B, -1)  # [B, d]
        out = torch.empty(B, T, self.config.hidden_size, device=self.device, dtype=self.dtype)
        for t in range(T):
            s = torch.tanh(s @ self.recur + x[:, t])
            out[:, t] = s
        return out

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Next-token logits after the prefixes ending at ``positions``.

        Shape: ``input_ids [B, T], positions [B, n] -> logits [B, n, V]``.

        Parameters
        ----------
        input_ids : torch.LongTensor
            Shape ``[B, T]``, ``T >= 1``; ids in ``[0, V)``, ``-1`` for right padding.
        positions : torch.LongTensor, optional
            Shape ``[B, n]``; index ``t`` asks for the law of the token after
            ``input_ids[:, :t + 1]``. Default: every position (``n = T``).

        Returns
        -------
        torch.Tensor
            Shape ``[B, n, V]`` in the model's dtype. As in any causal LM, the logits at
            position ``t`` predict token ``t + 1``. Equal, bit for bit, to
            ``project(prefix_states(input_ids, positions))``.

        Raises
        ------
        ValueError
            On an empty prefix, ids ``>= V``, or positions outside ``[0, T)``.
        """
        return self.project(self.prefix_states(input_ids, positions))

    def prefix_states(self, input_ids: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """The recurrent states the logits at ``positions`` are projected from.

        Shape: ``input_ids [B, T], positions [B, n] -> states [B, n, d]`` (model dtype).

        Parameters and errors as :meth:`__call__`. The state after a prefix determines its
        logits (:meth:`project`), so rows with the same state have the same law: the
        decoders' fast path (:mod:`specexact.decoders.law_table`) computes the logits of
        each distinct state once.
        """
        if input_ids.dim() != 2 or input_ids.shape[1] == 0:
            raise ValueError(f"input_ids must have shape [B, T] with T >= 1, got {tuple(input_ids.shape)}")
        if input_ids.numel() and int(input_ids.max()) >= self.vocab_size:
            raise ValueError(f"input_ids must be < vocab_size={self.vocab_size}, got {int(input_ids.max())}")
        input_ids = input_ids.to(self.device)
        if positions is not None:
            positions = positions.to(self.device)
            if positions.numel() and (int(positions.min()) < 0 or int(positions.max()) >= input_ids.shape[1]):
                raise ValueError(
                    f"positions must lie in [0, {input_ids.shape[1]}), got "
                    f"[{int(positions.min())}, {int(positions.max())}]"
                )
        if not self.cache_states:
            states = self.states(input_ids)  # [B, T, d]
        else:
            needed = input_ids.shape[1] if positions is None or positions.numel() == 0 else int(positions.max()) + 1
            states = self._states_cached(input_ids, needed)  # [B, needed, d]
        if positions is not None:
            states = states.gather(1, positions[:, :, None].expand(-1, -1, states.shape[-1]))
        return states

    def project(self, states: torch.Tensor) -> torch.Tensor:
        """Logits of states: ``head + states @ proj.T``. Shape: ``[..., d] -> [..., V]``.

        Row ``i`` of the result depends on row ``i`` of ``states`` only, bit for bit, on
        every BLAS that computes each row of a one-thread product of at least
        :data:`PROJECT_MIN_ROWS` rows the same way whatever the rows beside it (MKL does in
        float32, seen with its AVX2 and AVX-512 kernels; in float64 its one-thread product
        still rounds the last ``R mod 4`` rows of ``R >= 9`` otherwise, and the fused path
        takes float32 models only): on CPU the product runs on one thread, in
        at least that many rows (fewer are padded). A BLAS picks its kernel by shape, and
        with several threads it splits the rows among them: with MKL a product of one to
        three rows, and the last rows of an odd-sized product split over two threads
        (e.g. rows 8-10 of 11), round otherwise. The decoders' fused path
        (:mod:`specexact.decoders.law_engine`) projects distinct states a chunk at a time and
        relies on this; it checks it once per model (:func:`~specexact.decoders.law_engine.fused_model`).
        """
        flat, R = padded_rows(states)
        with one_cpu_thread(flat.device):
            logits = torch.addmm(self.head, flat, self.proj.T)  # [R', V]: head + states @ proj.T
        return logits[:R].view(*states.shape[:-1], self.vocab_size)

    def project_rows(self, states: torch.Tensor) -> torch.Tensor:
        """:meth:`project` of a ``[R, d]`` matrix of states with the projection stored
        ``[d, V]`` (contiguous rows of the product: about 1.5x faster on CPU).

        Shape: ``[R, d] -> [R, V]``. The same bits as :meth:`project` wherever the BLAS
        computes each entry of a product the same way whatever the layout of the
        right-hand side (MKL does); the decoders' fused path checks that once per model
        (:func:`specexact.decoders.law_engine.fused_model`) and uses :meth:`project`
        otherwise.
        """
        if getattr(self, "_proj_t", None) is None:
            self._proj_t = self.proj.T.contiguous()  # [d, V]
        flat, R = padded_rows(states)
        with one_cpu_thread(flat.device):
            logits = torch.addmm(self.head, flat, self._proj_t)
        return logits[:R]

    def logit_bound(self) -> float:
        """An upper bound on ``|logit|`` of every finite state's logits (float).

        States are ``tanh`` outputs, so ``|s_k| <= 1`` and ``|head_v + s . proj_v| <=
        max |head| + sum_k max_v |proj_vk|``; the bound is that, in float64, widened by 1 %
        for the rounding of a float32 or float64 projection (``d + 1`` rounded terms).
        The decoders' fused path (:mod:`specexact.decoders.law_engine`) reads the logits
        pipeline's float32 overflow guard from it without computing every logit first.
        """
        if getattr(self, "_logit_bound", None) is None:
            w = self._weights
            self._logit_bound = 1.01 * (float(w["head"].abs().max()) + float(w["proj"].abs().amax(0).sum()))
        return self._logit_bound

    def _states_cached(self, input_ids: torch.Tensor, needed: int) -> torch.Tensor:
        """:meth:`states` of ``input_ids[:, :needed]``, resuming the previous call's states.

        The recurrence step is the same tensor operation on the same ``[B, d]`` batch, so
        resumed states equal recomputed ones bit for bit (a row's result may depend on the
        batch it is computed in, hence the reuse only for the same batch size and only
        up to the first column where any row differs).
        """
        B = input_ids.shape[0]
        ids = input_ids[:, :needed]
        cache = self._state_cache
        _, start = reusable_prefix(None if cache is None else cache[0], ids)  # same rows only
        states = torch.empty(B, needed, self.config.hidden_size, device=self.device, dtype=self.dtype)
        if start > 0:
            states[:, :start] = cache[1][:, :start]
            s = states[:, start - 1].contiguous()
        else:
            s = self.init_state.expand(B, -1)  # [B, d], as in states()
        x = self.embed[ids[:, start:].clamp_min(0)]  # [B, needed - start, d]
        for t in range(start, needed):
            s = torch.tanh(s @ self.recur + x[:, t - start])
            states[:, t] = s
        self._state_cache = (ids.clone(), states)
        return states
