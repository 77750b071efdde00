"""Running a family: deterministic from the seed, shrinks, stops on time, remembers failures."""

import torch
from hypothesis import strategies as st

from specexact.fuzz.engine import family_seed, run_family
from specexact.fuzz.families import Family
from specexact.fuzz.hypothesis_env import without_local_constants
from specexact.fuzz.rules import rule_error
from specexact.fuzz.settings import FuzzSettings


def toy_family(limit: int = 1000) -> Family:
    """Breaks ``no_crash`` for any list with a value above ``limit``: the shrunk example is
    ``[limit + 1]``."""

    def check(xs):
        if any(x > limit for x in xs):
            raise rule_error("no_crash", f"value above {limit}")

    return Family("toy", "integers", ("no_crash",), st.lists(st.integers(0, 10**6)), check, 1.0,
                  lambda xs: {"family": "long" if len(xs) > 3 else "short", "vocab_size": len(xs)})


def run(family, **kw):
    with without_local_constants():
        return run_family(family, FuzzSettings(), sampler="toy", **kw)


def test_failures_are_shrunk_and_the_run_is_deterministic():
    a = run(toy_family(), max_examples=50, time_limit_s=None, seed=4)
    b = run(toy_family(), max_examples=50, time_limit_s=None, seed=4)
    assert a.stopped == "failure" and len(a.failures) == 1
    assert a.failures[0].example == [1001] and a.failures[0].rule == "no_crash"
    assert (a.examples, a.examples_to_failure, a.calls, dict(a.tried)) == \
        (b.examples, b.examples_to_failure, b.calls, dict(b.tried))
    assert a.examples == a.examples_to_failure - 1


def test_a_passing_family_counts_what_it_tried_and_stops_on_time():
    done = run(toy_family(limit=10**7), max_examples=40, time_limit_s=None, seed=1)
    assert (done.stopped, done.examples, done.failures) == ("examples", 40, [])
    assert sum(done.tried.values()) == 40

    def slow(xs):
        import time

        time.sleep(0.05)

    timed = run(Family("slow", "", ("no_crash",), st.integers(), slow, 1.0, lambda x: {}),
                max_examples=None, time_limit_s=0.6, seed=1)
    # one example past the limit at most, plus Hypothesis' own start (generous: a loaded machine)
    assert timed.stopped == "time" and 2 <= timed.examples <= 20 and timed.time_s < 0.6 + 3.0


def test_a_database_replays_the_failure_first(tmp_path):
    from hypothesis.database import DirectoryBasedExampleDatabase

    db = DirectoryBasedExampleDatabase(str(tmp_path))
    first = run(toy_family(), max_examples=50, time_limit_s=None, seed=4, database=db)
    again = run(toy_family(), max_examples=50, time_limit_s=None, seed=9, database=db)
    assert first.examples_to_failure > 1 and again.examples_to_failure == 1
    assert again.failures[0].example == [1001]


def test_an_error_of_the_check_itself_is_an_error_not_a_finding():
    def broken(x):
        raise ZeroDivisionError("the fuzzer's own bug")

    out = run(Family("bad", "", ("no_crash",), st.integers(), broken, 1.0, lambda x: {}), max_examples=5,
              time_limit_s=None, seed=0)
    assert out.stopped == "error" and out.failures == [] and "ZeroDivisionError" in out.error


def test_family_seeds_depend_on_seed_sampler_family_and_chunk():
    seeds = {family_seed(s, n, f, c) for s in (0, 1) for n in ("a", "b") for f in ("x", "y") for c in (0, 1)}
    assert len(seeds) == 16 and family_seed(3, "a", "x", 0) == family_seed(3, "a", "x", 0)
    assert torch.get_num_threads() >= 1
