"""FuzzSettings: the profiles and their validation."""

import pytest
from hypothesis import Phase

from specexact.fuzz.settings import CI_EXAMPLES, NIGHTLY_EXAMPLES, FuzzSettings


def test_profiles():
    ci, nightly = FuzzSettings(), FuzzSettings(profile="nightly")
    assert (ci.examples_per_family, ci.num_generated_cases) == (CI_EXAMPLES, 1)
    assert (nightly.examples_per_family, nightly.num_generated_cases) == (NIGHTLY_EXAMPLES, 3)
    assert Phase.target in nightly.phases and Phase.target not in ci.phases and Phase.reuse in ci.phases
    assert FuzzSettings(time_s=10).examples_per_family is None
    assert FuzzSettings(time_s=10, examples=5).examples_per_family == 5
    assert FuzzSettings(seed=3).to_dict()["seed"] == 3


@pytest.mark.parametrize("field,value", [("profile", "weekly"), ("time_s", 0), ("examples", 0), ("seed", 1.5),
                                         ("generated_cases", -1), ("call_timeout_s", 0), ("max_vocab", 1),
                                         ("threads", 0)])
def test_bad_values_are_named(field, value):
    with pytest.raises(ValueError, match=field):
        FuzzSettings(**{field: value})
