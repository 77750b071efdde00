"""Per-row sampling parameters and their batched tensor form."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Sequence

import torch

__all__ = ["SamplingParams", "BatchedParams", "batch_params"]


@dataclass(frozen=True)
class SamplingParams:
    """Sampling parameters of one sequence (one batch row).

    Parameters
    ----------
    temperature : float
        Divides the logits; ``0`` means greedy (the law is a point mass on the argmax,
        lowest token id among ties). Must be finite and ``>= 0``.
    top_k : int
        Keep the tokens whose logit is at least the k-th largest (ties at the k-th value
        are all kept). ``0`` disables it. Must be ``>= 0``.
    top_p : float
        Keep the smallest set of most probable tokens whose mass is ``>= top_p`` (ties
        broken by lower token id first). ``1`` disables it. Must be in ``(0, 1]``.
    min_p : float
        Keep the tokens whose probability is ``>= min_p * max probability``. ``0`` disables
        it. Must be in ``[0, 1]``.
    repetition_penalty : float
        For every token in the history, divide a positive logit by it and multiply a
        negative logit by it (CTRL, Keskar et al. 2019, eq. 1). ``1`` disables it; must be
        ``> 0``.
    presence_penalty : float
        Subtracted once from the logit of every token that occurs in the history.
    frequency_penalty : float
        Subtracted from the logit of a token once per occurrence in the history.

    Raises
    ------
    ValueError
        If a value is out of its range; the message names the field and its value.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{f.name} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"{f.name} must be finite, got {value!r}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature!r}")
        if int(self.top_k) != self.top_k or self.top_k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0 = off), got {self.top_k!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not 0 <= self.min_p <= 1:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p!r}")
        if self.repetition_penalty <= 0:
            raise ValueError(
                f"repetition_penalty must be > 0 (1 = off), got {self.repetition_penalty!r}"
            )

    @property
    def greedy(self) -> bool:
        """True when ``temperature == 0``."""
        return self.temperature == 0

    def describe(self) -> str:
        """Short text of the non-default fields, e.g. ``"T=0.7 top_k=5"``."""
        names = {"temperature": "T"}
        parts = []
        for f in fields(self):
            value = getattr(self, f.name)
            if value != f.default:
                parts.append(f"{names.get(f.name, f.name)}={value:g}")
        return " ".join(parts) or "default"


@dataclass(frozen=True)
class BatchedParams:
    """Sampling parameters of B rows as tensors of shape ``[B]`` on one device.

    Built by :func:`batch_params`; ``top_k`` is int64, the rest float64.
    """

    temperature: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor
    min_p: torch.Tensor
    repetition_penalty: torch.Tensor
    presence_penalty: torch.Tensor
    frequency_penalty: torch.Tensor

    @property
    def batch_size(self) -> int:
        return int(self.temperature.shape[0])

    def repeat_interleave(self, repeats: int) -> "BatchedParams":
        """Each row repeated ``repeats`` times in place: ``[B] -> [B * repeats]``."""
        return BatchedParams(
            **{f.name: getattr(self, f.name).repeat_interleave(repeats) for f in fields(self)}
        )

    def select(self, rows: torch.Tensor) -> "BatchedParams":
        """The given rows only: ``[B] -> [len(rows)]``."""
        return BatchedParams(**{f.name: getattr(self, f.name)[rows] for f in fields(self)})

    @property
    def any_penalty(self) -> bool:
        return bool(
            (self.repetition_penalty != 1).any()
            or (self.presence_penalty != 0).any()
            or (self.frequency_penalty != 0).any()
        )


def batch_params(
    params: SamplingParams | Sequence[SamplingParams],
    batch_size: int,
    device: torch.device | str = "cpu",
) -> BatchedParams:
    """Stack per-row parameters into :class:`BatchedParams`.

    Parameters
    ----------
    params : SamplingParams or sequence of SamplingParams
        One value for all rows, or exactly ``batch_size`` values (one per row).
    batch_size : int
        Number of rows B.
    device : torch.device or str
        Device of the returned tensors.

    Raises
    ------
    ValueError
        If a sequence of the wrong length is given.
    TypeError
        If an element is not a :class:`SamplingParams`.
    """
    if isinstance(params, SamplingParams):
        rows = [params] * batch_size
    else:
        rows = list(params)
        if len(rows) != batch_size:
            raise ValueError(
                f"params must hold one SamplingParams per row ({batch_size}), got {len(rows)}"
            )
    for i, row in enumerate(rows):
        if not isinstance(row, SamplingParams):
            raise TypeError(f"params[{i}] must be a SamplingParams, got {type(row).__name__}")
    out = {}
    for f in fields(SamplingParams):
        dtype = torch.int64 if f.name == "top_k" else torch.float64
        out[f.name] = torch.tensor(
            [getattr(r, f.name) for r in rows], dtype=dtype, device=device
        )
    return BatchedParams(**out)
