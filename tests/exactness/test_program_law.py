"""Exact laws of decision programs, and the same programs as samplers."""

import numpy as np
import pytest
import torch

from specexact.exactness import chisquare_gof
from specexact.exactness.program_law import GeneratorRNG, program_law, program_paths


def geometric(rng, stop=0.3, cap=4):
    n = 0
    while n < cap and not rng.bernoulli(stop):
        n += 1
    return n


def test_law_of_a_capped_geometric_and_a_mixture():
    law = program_law(geometric)
    want = {k: 0.7 ** k * 0.3 for k in range(4)} | {4: 0.7 ** 4}
    assert set(law) == set(want) and all(abs(law[k] - want[k]) < 1e-15 for k in want)

    def mixture(rng):
        first = rng.categorical([1, 0, 3])  # 0 w.p. 1/4, 2 w.p. 3/4; index 1 never
        return (first, rng.bernoulli(0.5) if first == 0 else rng.categorical([2, 2]))

    law = program_law(mixture)
    assert law == pytest.approx({(0, True): 1 / 8, (0, False): 1 / 8, (2, 0): 3 / 8, (2, 1): 3 / 8})
    assert sum(w for _, w in program_paths(mixture)) == pytest.approx(1.0)


def test_invalid_decisions_and_the_run_cap():
    with pytest.raises(ValueError, match=r"bernoulli prob must be in \[0, 1\]"):
        program_law(lambda rng: rng.bernoulli(1.5))
    with pytest.raises(ValueError, match="positive sum"):
        program_law(lambda rng: rng.categorical([0.0, 0.0]))
    with pytest.raises(ValueError, match="finite and >= 0"):
        program_law(lambda rng: rng.categorical([1.0, -1.0]))
    with pytest.raises(ValueError, match="max_runs"):
        program_law(lambda rng: tuple(rng.categorical([1] * 4) for _ in range(6)), max_runs=100)


def test_a_program_that_catches_exception_still_branches():
    def careless(rng):
        try:
            return rng.bernoulli(0.25)
        except Exception:  # must not swallow the enumerator's branching signal
            return None

    assert program_law(careless) == pytest.approx({True: 0.25, False: 0.75})


def test_generator_rng_decisions():
    rng = GeneratorRNG(torch.Generator().manual_seed(0))
    u = torch.rand(3, generator=torch.Generator().manual_seed(0), dtype=torch.float64).tolist()
    assert rng.bernoulli(0.5) == (u[0] < 0.5)
    w = np.array([0.2, 0.0, 0.8])
    assert rng.categorical(w) == (0 if u[1] * 1.0 < 0.2 else 2)
    assert rng.categorical([0.0, 1.0, 0.0]) == 1
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        GeneratorRNG(3)


# 20 000 runs of a program with 5 outcomes: detectable TV about 0.025 at the per-check rate.
@pytest.mark.statistical(checks=1)
def test_generator_rng_samples_the_enumerated_law(alpha):
    law = program_law(geometric)
    rng = GeneratorRNG(torch.Generator().manual_seed(3))
    counts = np.bincount([geometric(rng) for _ in range(20_000)], minlength=5).astype(np.int64)
    result = chisquare_gof(counts, np.array([law[k] for k in range(5)]), false_fail_rate=alpha)
    assert result.passed, result
