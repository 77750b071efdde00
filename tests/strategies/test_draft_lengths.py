"""γ as deployments use it: :func:`specexact.strategies.draft_lengths` reaches 1, 8 and 15
(a block drafter's block) and stays in bounds; :func:`capped_vocab_size` keeps
``B (γ+1) V`` within its budget."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specexact.strategies import (BLOCK_DRAFT_LENGTH, LONG_DRAFT_LENGTHS, InvalidArgument, capped_vocab_size,
                                  draft_lengths)


def test_every_deployed_length_is_reachable(reach):
    reach(draft_lengths(), lambda k: k if k in (1, 4, *LONG_DRAFT_LENGTHS, 16) else "other",
          [1, 4, 8, BLOCK_DRAFT_LENGTH, 16])


@given(st.integers(1, 40).flatmap(lambda m: st.tuples(st.just(m), draft_lengths(max_length=m))))
def test_lengths_stay_in_bounds(case):
    m, k = case
    assert isinstance(k, int) and 1 <= k <= m


def test_a_short_maximum_draws_the_short_range_only(every_example):
    assert set(every_example(draft_lengths(max_length=3), 50)) <= {1, 2, 3}


@given(cells=st.integers(1, 10**7), B=st.integers(1, 8), K=st.integers(1, 16), top=st.integers(1, 300_000))
def test_capped_vocab_size_keeps_the_budget(cells, B, K, top):
    V = capped_vocab_size(cells, B, K, max_vocab=top)
    assert 1 <= V <= top
    assert B * (K + 1) * V <= cells or V == min(8, top)  # only the floor may pass the budget


@pytest.mark.parametrize("kwargs, name", [({"max_length": 0}, "max_length"), ({"max_length": 2.5}, "max_length")])
def test_bad_arguments_are_named(kwargs, name):
    with pytest.raises(InvalidArgument, match=name):
        draft_lengths(**kwargs)


def test_capped_vocab_size_names_a_bad_argument():
    with pytest.raises(InvalidArgument, match="batch_size=0"):
        capped_vocab_size(100, 0, 1, max_vocab=10)
