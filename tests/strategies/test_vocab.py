"""vocab_sizes: bounds, families, measured frequencies, argument validation."""

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from specexact.strategies import (
    REAL_VOCAB_SIZES,
    VOCAB_FAMILIES,
    InvalidArgument,
    vocab_size_family,
    vocab_sizes,
)


@given(st.data())
def test_sizes_respect_bounds_and_families(data):
    lo = data.draw(st.sampled_from([1, 2, 3, 100, 8193]), label="min_size")
    hi = data.draw(st.sampled_from([None, lo, 4097, 300000]).filter(lambda h: h is None or h >= lo),
                   label="max_size")
    v = data.draw(vocab_sizes(min_size=lo, max_size=hi), label="vocab_size")
    note(f"vocab_sizes(min_size={lo}, max_size={hi}) drew {v} ({vocab_size_family(v)})")
    assert isinstance(v, int) and lo <= v
    assert hi is None or v <= hi
    assert vocab_size_family(v) in VOCAB_FAMILIES


@pytest.mark.parametrize("family", VOCAB_FAMILIES)
@given(st.data())
def test_each_family_only_draws_its_values(family, data):
    v = data.draw(vocab_sizes(families=[family]))
    assert vocab_size_family(v) == family


@pytest.mark.parametrize(
    "size, family",
    [(1, "one"), (2, "two"), (3, "small_odd"), (63, "small_odd"), (127, "pow2_edge"),
     (2048, "pow2_edge"), (2049, "pow2_edge"), (4095, "tile_edge"), (8193, "tile_edge"),
     (262145, "tile_edge"), (32000, "real"), (128256, "real"), (151936, "real"),
     (256000, "real"), (64, "arbitrary"), (4096, "arbitrary"), (100, "arbitrary")],
)
def test_family_of_pinned_sizes(size, family):
    assert vocab_size_family(size) == family


def test_real_sizes_are_the_released_tokenizers():
    assert REAL_VOCAB_SIZES == (32000, 128256, 151936, 256000)


def test_every_family_is_reachable(reach):
    reach(vocab_sizes(), vocab_size_family, VOCAB_FAMILIES)


def test_every_edge_value_is_reachable(reach, every_example):
    reach(vocab_sizes(families=["real", "one", "two"]), lambda v: v, {1, 2, *REAL_VOCAB_SIZES})
    assert set(every_example(vocab_sizes(families=["real", "one", "two"]), n=50)) <= {
        1, 2, *REAL_VOCAB_SIZES}


def test_narrow_bounds_keep_only_fitting_families(reach, every_example):
    sizes = every_example(vocab_sizes(min_size=8000, max_size=9000), n=60)
    assert {vocab_size_family(v) for v in sizes} <= {"tile_edge", "arbitrary"}
    assert all(8000 <= v <= 9000 for v in sizes)
    reach(vocab_sizes(min_size=8000, max_size=9000), vocab_size_family,
          ["tile_edge", "arbitrary"])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"min_size": 0}, "min_size=0 must be >= 1"),
        ({"min_size": -1}, "min_size=-1 must be >= 1"),
        ({"min_size": 2.5}, "min_size=2.5 must be an integer"),
        ({"min_size": True}, "min_size=True must be an integer"),
        ({"max_size": 0}, "max_size=0 must be >= 1"),
        ({"min_size": 10, "max_size": 5}, "max_size=5 must be >= min_size=10"),
        ({"families": []}, "must name at least one family"),
        ({"families": "real"}, "must be a sequence of family names"),
        ({"families": ["huge"]}, "unknown family 'huge'"),
        ({"families": ["real", "real"]}, "names a family twice"),
        ({"min_size": 300000, "families": ["real"]}, "no vocabulary family"),
    ],
)
def test_bad_arguments_raise_eagerly(kwargs, match):
    with pytest.raises(InvalidArgument, match=match):
        vocab_sizes(**kwargs)
    with pytest.raises(ValueError):  # InvalidArgument is also a ValueError
        vocab_sizes(**kwargs)


def test_family_of_non_size_raises():
    with pytest.raises(InvalidArgument, match="vocab_size=0 must be >= 1"):
        vocab_size_family(0)
