"""Exact laws of randomised programs, by enumerating every sequence of their decisions.

A *decision program* is a function ``program(rng) -> outcome`` (a hashable outcome) whose only
randomness is two calls on ``rng``:

- ``rng.bernoulli(prob) -> bool`` (``True`` with probability ``prob``);
- ``rng.categorical(weights) -> int`` (index ``i`` with probability ``weights[i] / sum``).

:func:`program_law` runs it on every path of decisions of positive probability (depth first,
re-running the program from the start with the decisions of the path replayed) and returns the
exact law of the outcome: each path's probability is the product of the probabilities of its
decisions, computed in float64 from the values the program itself passed. So the law is exact
for the algorithm as written, up to float64 rounding of those products. The same program run
with :class:`GeneratorRNG` is a sampler (one float64 uniform per decision), which is how the
audit can run a program and the exact checks can know its law.
"""

from __future__ import annotations

from typing import Callable, Hashable, Protocol

import numpy as np
import torch

__all__ = ["DecisionRNG", "GeneratorRNG", "program_law", "program_paths"]


class DecisionRNG(Protocol):
    """The randomness a decision program may use."""

    def bernoulli(self, prob: float) -> bool:
        """True with probability ``prob`` (in ``[0, 1]``)."""
        ...

    def categorical(self, weights) -> int:
        """Index ``i`` with probability ``weights[i] / sum(weights)`` (weights >= 0, positive sum)."""
        ...


def _check_prob(prob) -> float:
    prob = float(prob)
    if not (0.0 <= prob <= 1.0):
        raise ValueError(f"bernoulli prob must be in [0, 1], got {prob!r}")
    return prob


def _check_weights(weights) -> np.ndarray:
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0:
        raise ValueError(f"categorical weights must be a non-empty 1-d array, got shape {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError(f"categorical weights must be finite and >= 0, got {w!r}")
    if not w.sum() > 0:
        raise ValueError("categorical weights must have a positive sum")
    return w


class _Branch(BaseException):
    """Raised at the first decision past the replayed path (BaseException: programs that
    catch Exception do not swallow it)."""

    def __init__(self, num_options: int) -> None:
        self.num_options = num_options


class _ReplayRNG:
    def __init__(self, path: tuple[int, ...]) -> None:
        self.path = path
        self.step = 0
        self.weight = 1.0

    def _choose(self, options: list[tuple[object, float]]):
        if self.step < len(self.path):
            value, prob = options[self.path[self.step]]
            self.step += 1
            self.weight *= prob
            return value
        raise _Branch(len(options))

    def bernoulli(self, prob: float) -> bool:
        prob = _check_prob(prob)
        return self._choose([(v, pr) for v, pr in ((True, prob), (False, 1.0 - prob)) if pr > 0])

    def categorical(self, weights) -> int:
        w = _check_weights(weights)
        total = w.sum()
        return self._choose([(int(i), float(w[i] / total)) for i in np.flatnonzero(w > 0)])


def program_paths(program: Callable[[DecisionRNG], object], *, max_runs: int = 2_000_000):
    """Every decision path of ``program``: yields ``(outcome, probability)`` per path (outcomes
    need not be hashable; equal outcomes of different paths are not merged).

    Same parameters and errors as :func:`program_law`, which sums these by outcome.
    """
    stack: list[tuple[int, ...]] = [()]
    runs = 0
    while stack:
        path = stack.pop()
        runs += 1
        if runs > max_runs:
            raise ValueError(f"program_law needs more than max_runs={max_runs} runs")
        rng = _ReplayRNG(path)
        try:
            outcome = program(rng)
        except _Branch as branch:
            stack.extend(path + (k,) for k in range(branch.num_options - 1, -1, -1))
            continue
        yield outcome, rng.weight


def program_law(program: Callable[[DecisionRNG], Hashable], *, max_runs: int = 2_000_000) -> dict:
    """The exact law of ``program``'s outcome over all its decision paths.

    Parameters
    ----------
    program : callable
        ``program(rng) -> outcome``; deterministic given the decisions ``rng`` returns, and
        with a finite number of decisions on every path.
    max_runs : int
        Refuse to run the program more than this many times (each path costs one run per
        branching decision on it).

    Returns
    -------
    dict
        ``{outcome: probability}`` over outcomes of positive probability; the probabilities
        sum to 1 up to float64 rounding.

    Raises
    ------
    ValueError
        When the enumeration needs more than ``max_runs`` runs, or the program passes an
        invalid probability / weights.
    """
    law: dict = {}
    for outcome, weight in program_paths(program, max_runs=max_runs):
        law[outcome] = law.get(outcome, 0.0) + weight
    return law


class GeneratorRNG:
    """Decisions drawn from a ``torch.Generator``: one float64 uniform ``u`` per decision;
    ``bernoulli(prob)`` is ``u < prob``, ``categorical(weights)`` the inverse CDF of the float64
    cumulative weights at ``u * total`` (never an index of weight 0).

    Parameters
    ----------
    generator : torch.Generator or None
        Torch's default generator when None.
    """

    def __init__(self, generator: torch.Generator | None) -> None:
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        self.generator = generator

    def _uniform(self) -> float:
        return float(torch.rand((), generator=self.generator, dtype=torch.float64))

    def bernoulli(self, prob: float) -> bool:
        return self._uniform() < _check_prob(prob)

    def categorical(self, weights) -> int:
        w = _check_weights(weights)
        cdf = np.cumsum(w)
        i = int(np.searchsorted(cdf, self._uniform() * cdf[-1], side="right"))
        last = int(np.flatnonzero(w > 0)[-1])
        return min(i, last)

