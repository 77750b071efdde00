"""The seed checks of an end-to-end case (audit/cases/e2e/seed_checks.py): what an engine
promises about seeds (decoders/engines/seeds.py), its unseeded requests' independence and
its seeded requests in another mix or alone, on the built-in engine, an engine seeding each
request on its own, and the planted seed faults."""

from dataclasses import replace

import pytest
import torch

from specexact.audit.cases.dispatch import checks_per_case
from specexact.audit.cases.e2e.case import E2ECase, E2ERowClass, seed_checks_of
from specexact.audit.cases.e2e.catalog import e2e_cases
from specexact.audit.cases.e2e.checks import reproducible_check
from specexact.audit.cases.e2e.engine_call import ensure_loaded, generate_call
from specexact.audit.cases.e2e.sampling import run_e2e_case
from specexact.audit.cases.e2e.seed_checks import reproducible_alone_check, reproducible_in_mix_check
from specexact.audit.zoo.e2e import SeededStreamOfTheBatch, SeedStreamByPlace, SharedUnseededStream
from specexact.decoders.engines import EngineCapabilities, GenerationRequest, SeedPromise
from specexact.decoders.engines.builtin import BuiltinEngine
from specexact.decoders.params import SamplingParams

# two enumerable classes, two tokens each: one untruncated, one with a temperature and top-k
SMALL = E2ECase(name="e2e-seeds-small", pair="llama-v64", method="draft_model", num_speculative_tokens=2,
                row_classes=(E2ERowClass((3, 9, 4), SamplingParams(), max_tokens=2),
                             E2ERowClass((7, 1), SamplingParams(temperature=0.8, top_k=8), max_tokens=2)),
                requests_per_class=32, unseeded=True, check_in_mix=True)


def test_every_second_request_of_a_class_is_unseeded_and_the_mix_is_the_seeded_ones_reversed():
    reqs = SMALL.requests(eos_token_id=0, call=5)
    B = SMALL.batch_size
    assert [r.seed is None for r in reqs[:8]] == [False, False, True, True, False, False, True, True]
    assert [r.seed for r in reqs if r.seed is not None] == [5 * B + r for r in SMALL.seeded_rows()]
    mix = SMALL.mix_requests(eos_token_id=0, call=5)
    assert mix == [reqs[r] for r in reversed(SMALL.seeded_rows())] and len(mix) == B // 2
    # without unseeded requests every request is seeded, as before
    assert all(r.seed is not None for r in replace(SMALL, unseeded=False).requests(0, 5))
    # the checks: one per promise, and the in-mix pair among the fixed calls
    from specexact.audit.run.sample_sizes import fixed_calls

    assert checks_per_case(SMALL) == checks_per_case(replace(SMALL, unseeded=False, check_in_mix=False)) + 2
    assert fixed_calls(SMALL) == 2 and fixed_calls(replace(SMALL, check_in_mix=False)) == 1
    # alone: the first call's first seeded request, by itself; one more check and call pair
    assert SMALL.alone_requests(eos_token_id=0, call=5) == [reqs[SMALL.seeded_rows()[0]]]
    assert checks_per_case(replace(SMALL, check_alone=True)) == checks_per_case(SMALL) + 1
    assert fixed_calls(replace(SMALL, check_alone=True)) == 3


def test_engines_declare_their_promise_and_the_cases_follow_it():
    caps = BuiltinEngine().capabilities()
    assert caps.seeds.other_mix and caps.seeds.unseeded_independent and caps.seeds.source
    # the built-in engine's seeded stream is its group's (same shape, seeds sorted): not alone
    assert not caps.seeds.alone
    assert seed_checks_of(caps) == {"unseeded": True, "check_in_mix": True, "check_alone": False}
    (case,) = e2e_cases(BuiltinEngine(), "draft_model", requests_per_class=8)
    assert case.unseeded and case.check_in_mix and case.to_dict()["unseeded"] is True and not case.check_alone
    none = EngineCapabilities(methods=("draft_model",))
    assert seed_checks_of(none) == {"unseeded": False, "check_in_mix": False, "check_alone": False}  # nothing checked
    assert seed_checks_of(PerRequestSeeds().capabilities())["check_alone"]
    assert caps.to_dict()["seeds"]["other_mix"] is True
    with pytest.raises(TypeError, match="other_mix must be a bool, got 1"):
        SeedPromise(other_mix=1)
    with pytest.raises(TypeError, match="alone must be a bool, got 'yes'"):
        SeedPromise(alone="yes")
    with pytest.raises(TypeError, match="seeds must be a SeedPromise, got dict"):
        EngineCapabilities(methods=("draft_model",), seeds={})
    assert GenerationRequest((1,), seed=None).seed is None
    with pytest.raises(ValueError, match="seed must be >= 0, got -1"):
        GenerationRequest((1,), seed=-1)
    with pytest.raises(ValueError, match="seed must be an integer >= 0, got -2"):
        BuiltinEngine(seed=-2)


class PerRequestSeeds(BuiltinEngine):
    """The built-in engine with each seeded request generated as its own group (its stream
    seeded from its seed alone): it keeps the promise of a seeded request alone."""

    def capabilities(self):
        caps = super().capabilities()
        return replace(caps, seeds=replace(caps.seeds, alone=True))

    def generate(self, requests, *, speculative):
        out = [None] * len(requests)
        unseeded = [i for i, r in enumerate(requests) if r.seed is None]
        for i, res in zip(unseeded, super().generate([requests[i] for i in unseeded], speculative=speculative)
                          if unseeded else ()):
            out[i] = res
        for i, r in enumerate(requests):
            if r.seed is not None:
                (out[i],) = super().generate([r], speculative=speculative)
        return out


@pytest.fixture(scope="module")
def builtin_calls():
    engine = BuiltinEngine()
    ensure_loaded(engine, SMALL)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = {(path, kind): [r.token_ids for r in generate_call(engine, SMALL, 3, speculative=path,
                                                                   mix=kind == "mix")[1]]
               for path in (True, False) for kind in ("first", "again", "mix")}
    finally:
        torch.set_num_threads(threads)
    return out


def test_the_builtin_engine_keeps_its_promise(builtin_calls):
    seeded = SMALL.seeded_rows()
    for path in (True, False):
        first, again, mix = (builtin_calls[(path, k)] for k in ("first", "again", "mix"))
        # seeded: the same call again, and reversed without the unseeded ones, give the same outputs
        assert [again[r] for r in seeded] == [first[r] for r in seeded]
        assert mix == [first[r] for r in reversed(seeded)]
        # unseeded: the engine's stream goes on, so the call again draws afresh
        unseeded = [r for r in range(SMALL.batch_size) if r not in seeded]
        assert [again[r] for r in unseeded] != [first[r] for r in unseeded]


def test_the_reproducibility_checks_compare_the_seeded_requests_only():
    first = torch.tensor([[1, 2], [3, 4], [5, 6]])
    again = torch.tensor([[1, 2], [9, 9], [5, 6]])  # row 1 unseeded: drawn afresh
    assert reproducible_check(again, first, again, first, 1e-6, rows=[0, 2]).passed
    assert not reproducible_check(again, first, again, first, 1e-6).passed
    bad = reproducible_in_mix_check(again[[2, 1]], first[[2, 1]], first[[2, 1]], first[[2, 1]], 1e-6)
    assert not bad.passed and bad.details["speculative_differ"] == 1 and bad.details["plain_differ"] == 0
    assert "reversed and without the unseeded ones" in bad.details["message"]
    alone = reproducible_alone_check(again[[1]], first[[1]], first[[1]], first[[1]], 1e-6)
    assert not alone.passed and alone.details["speculative_differ"] == 1 and "alone in its call" in alone.details["message"]
    assert reproducible_alone_check(first[[1]], first[[1]], first[[1]], first[[1]], 1e-6).passed


@pytest.mark.statistical(checks=checks_per_case(SMALL))
def test_the_builtin_engine_passes_the_seed_checks(alpha):
    res = run_e2e_case(SMALL, BuiltinEngine(), false_fail_rate=alpha, num_batches=2)
    assert res.defect is None and all(c.passed for c in res.checks), [str(c) for c in res.checks if not c.passed]
    chk = {c.name: c for c in res.checks}
    ind = chk["independent_requests"]
    # 8 pairs per class, call and path: 2 calls x 2 paths x 8 = 32 pairs per class, both classes
    assert ind.n == 64 and ind.details["compared"] == "outputs" and ind.detectable_tv < 1
    assert 0 < ind.details["detectable_shared_fraction"] < 1
    assert chk["reproducible_in_mix"].details["requests"] == SMALL.batch_size // 2
    assert chk["reproducible"].details["requests"] == SMALL.batch_size // 2  # the seeded ones


@pytest.mark.statistical(checks=checks_per_case(replace(SMALL, check_alone=True)))
def test_an_engine_seeding_each_request_on_its_own_passes_reproducible_alone(alpha):
    case = replace(SMALL, check_alone=True)
    res = run_e2e_case(case, PerRequestSeeds(), false_fail_rate=alpha, num_batches=2)
    assert res.defect is None and all(c.passed for c in res.checks), [str(c) for c in res.checks if not c.passed]
    assert {c.name: c for c in res.checks}["reproducible_alone"].details["requests"] == 1


@pytest.mark.statistical(checks=0)  # planted faults: only a false pass is at stake
@pytest.mark.parametrize("engine_class, failing", [(SharedUnseededStream, "independent_requests"),
                                                   (SeedStreamByPlace, "reproducible_in_mix"),
                                                   (SeededStreamOfTheBatch, "reproducible_alone")])
def test_each_planted_seed_fault_fails_its_check(engine_class, failing, alpha):
    case = replace(SMALL, check_alone=engine_class().capabilities().seeds.alone)
    res = run_e2e_case(case, engine_class(), false_fail_rate=alpha, num_batches=2)
    failed = {c.name for c in res.checks if not c.passed}
    assert failing in failed, failed
    assert "reproducible" not in failed  # the same call again reproduces under both faults
