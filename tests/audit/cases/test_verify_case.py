"""The verify-level audit case: the verifier called directly on rows sharing one law pair."""

import json
from dataclasses import replace

import pytest
import torch

from specexact.audit import run_audit
from specexact.audit.cases.catalog import all_cases, opt_in_cases
from specexact.audit.run.isolation import run_case_isolated
from specexact.audit.run.journal import Journal, journal_path
from specexact.audit.run.pilot import pilot_costs
from specexact.audit.run.sample_sizes import approx_detectable_tv, planning_checks, rows_per_class
from specexact.audit.cases.dispatch import checks_per_case, restrict_to_sampler, run_case
from specexact.audit.cases.verify_case import VERIFY_CHECKS, VerifyCase, draw_drafts, verify_cases
from specexact.audit.zoo import WRONG
from specexact.cli import main
from specexact.decoders import validate_verify_inputs, verify
from specexact.decoders.adapters.builtin_logits import verify_logits_level
from specexact.reports import validate_report

CASE = next(c for c in verify_cases() if c.name == "v32000-verify")
SMALL = replace(CASE, batch_size=1024)  # for the zoo's verifiers, which build [B, V] float64 temporaries
NAMES = ["first_token_law", "accepted_length", "recovered_token_law", "bonus_token_law", "independent_rows",
         "independent_calls", "acceptance_exact", "acceptance", "recovered_support"]
V8_CHECKS = checks_per_case(next(c for c in all_cases(quick=True) if c.name == "v8-plain"))


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread (the isolated child copies it): on a busy machine more threads wait
    for each other. Under pytest-xdist the workers already use one."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_case_is_opt_in_and_named():
    assert CASE in opt_in_cases() and CASE.name in {c.name for c in all_cases()}
    assert CASE.model.vocab_size == 32000 and CASE.target_params.top_p == 0.95
    assert checks_per_case(CASE) == VERIFY_CHECKS == len(NAMES)
    assert rows_per_class(CASE) == CASE.batch_size
    assert planning_checks(CASE) == [(32, False), (CASE.num_draft_tokens + 1, False)]
    with pytest.raises(ValueError, match="multiple of 4"):
        replace(CASE, batch_size=6)
    with pytest.raises(ValueError, match="continuation"):
        replace(CASE, num_draft_tokens=2, continuation=(1,))


def test_laws_and_drafts():
    laws = CASE.laws()
    K, V = CASE.num_draft_tokens, CASE.model.vocab_size
    assert laws.draft32.shape == (K, V) and laws.target32.shape == (K + 1, V)
    assert laws.draft32.dtype == torch.float32 and laws.target64.dtype.name == "float64"
    assert abs(laws.target64.sum(1) - 1).max() < 1e-12
    assert (laws.target64[0] == 0).sum() > V // 2  # top-p truncates the Zipf tail
    acc = laws.accepted_length_law()
    assert acc.shape == (K + 1,) and abs(acc.sum() - 1) < 1e-12 and acc[0] == pytest.approx(1 - laws.acceptance[0])
    res = laws.residual()
    assert abs(res.sum() - 1) < 1e-12 and (res[laws.target64[0] <= laws.draft64[0]] == 0).all()
    ids = draw_drafts(laws, 4096, torch.Generator().manual_seed(1))
    assert ids.shape == (4096, K) and bool((laws.draft64[0][ids[:, 0].numpy()] > 0).all())


def test_validation_of_broadcast_laws():
    # The built-in verifier checks a law broadcast by expand once per stored row, and still
    # sees a bad value in it.
    laws = CASE.laws()
    B, K, V = 8, CASE.num_draft_tokens, CASE.model.vocab_size
    ids = torch.zeros(B, K, dtype=torch.int64)
    validate_verify_inputs(ids, laws.draft32[None].expand(B, K, V), laws.target32[None].expand(B, K + 1, V))
    bad = laws.target32.clone()
    bad[K, 5] = -1e-3
    with pytest.raises(ValueError, match="target_probs"):
        validate_verify_inputs(ids, laws.draft32[None].expand(B, K, V), bad[None].expand(B, K + 1, V))


@pytest.mark.statistical(checks=VERIFY_CHECKS)
def test_builtin_verifier_passes(alpha):
    res = run_case(CASE, verify, false_fail_rate=alpha, num_batches=4)
    assert res.defect is None and [c.name for c in res.checks] == NAMES
    assert res.passed, [str(c) for c in res.checks if not c.passed]
    assert res.num_sequences == 4 * CASE.batch_size
    first = res.checks[0]
    assert first.n == res.num_sequences and first.false_fail_rate == pytest.approx(alpha / 3)
    assert res.checks[2].n + res.checks[3].n == res.num_sequences  # K=1: a row rejects or gets a bonus


# Rows and calls per planted bug: the first four break an exact rule (recovered_support or
# acceptance_exact fail at p = 0 on 512 rows x 2 calls, a quarter of the work); the reseeded
# verifier is seen only across calls (independent_calls: p = 2.2e-12 on 1024 x 4, 5.9e-6 on
# 512 x 4, above the per-check rate).
WRONG_SAMPLES = {"resample_from_target": (512, 2), "residual_absolute": (512, 2), "always_accept": (512, 2),
                 "inverted_ratio": (512, 2), "reseeded_each_call": (SMALL.batch_size, 4)}


# A planted bug risks only a false pass, which the false-fail ledger does not count.
@pytest.mark.statistical(checks=0)
@pytest.mark.parametrize("name", sorted(WRONG_SAMPLES))
def test_wrong_verifiers_fail(name, alpha):
    rows, calls = WRONG_SAMPLES[name]
    res = run_case(replace(CASE, batch_size=rows), WRONG[name], false_fail_rate=alpha, num_batches=calls)
    assert res.defect is None
    assert not res.passed
    if rows < SMALL.batch_size:  # caught by an exact rule, as the comment above says
        assert any(c.pvalue == 0 and c.name in ("recovered_support", "acceptance_exact")
                   for c in res.checks if not c.passed), [str(c) for c in res.checks]


def test_crash_and_protocol_violation_are_defects():
    def crash(ids, draft_probs, target_probs, generator=None):
        raise RuntimeError("boom")

    def wrong_shape(ids, draft_probs, target_probs, generator=None):
        return verify(ids, draft_probs, target_probs, generator)[:, :1]

    for v, kind in ((crash, "crash"), (wrong_shape, "protocol violation")):
        res = run_case(SMALL, v, false_fail_rate=1e-6, num_batches=2)
        assert not res.passed and res.defect.startswith(f"{kind} in verifier call 0")
        assert [c.name for c in res.checks] == ["defect"] and res.checks[0].pvalue == 0


def test_detectable_tv_falls_with_samples():
    tvs = [next(c for c in run_case(SMALL, verify, false_fail_rate=1e-6, num_batches=nb).checks
                if c.name == "first_token_law").detectable_tv for nb in (2, 8)]
    assert tvs[1] < tvs[0] < 1
    assert approx_detectable_tv(CASE, 10**6, 1e-8) < approx_detectable_tv(CASE, 10**5, 1e-8)


def test_skipped_for_a_logits_level_sampler():
    restricted, reason = restrict_to_sampler(CASE, verify_logits_level)
    assert restricted is None and "logits" in reason
    assert restrict_to_sampler(CASE, verify) == (CASE, None)
    with pytest.raises(ValueError, match="no audit case can drive"):
        run_audit(verify_logits_level, cases=[CASE], num_batches=2, budget_s=None)
    with pytest.raises(ValueError, match="cannot audit"):
        run_case(CASE, verify_logits_level, false_fail_rate=1e-6, num_batches=2)


def test_pilot_times_one_verifier_call():
    (cost,) = pilot_costs([SMALL])
    assert 0 < cost < 60


def test_isolated_run_equals_in_process():
    res, sampling = run_case_isolated(SMALL, "builtin", false_fail_rate=1e-6, seed=3, num_batches=2,
                                      timeout_s=300)
    here = run_case(SMALL, verify, false_fail_rate=1e-6, seed=3, num_batches=2)
    assert res.defect is None and sampling is not None
    assert [(c.name, c.n, c.statistic, c.pvalue) for c in res.checks] == \
        [(c.name, c.n, c.statistic, c.pvalue) for c in here.checks]


@pytest.mark.statistical(checks=V8_CHECKS + VERIFY_CHECKS)  # the sharded CLI audit below must pass
def test_journal_resume_shard_and_merge(tmp_path, alpha):
    cases = [SMALL]
    first = run_audit(verify, cases=cases, num_batches=2, budget_s=None, journal_dir=tmp_path)
    validate_report(first)
    path = journal_path(tmp_path, first["settings"]["audit_key"])
    _, state = Journal.open(path, first["settings"]["audit_key"], {})
    assert list(state.cases) == [SMALL.name]
    again = run_audit(verify, cases=cases, num_batches=2, budget_s=None, journal_dir=tmp_path)
    assert again["resumed_cases"] == [SMALL.name]
    assert [c["pvalue"] for c in again["checks"]] == [c["pvalue"] for c in first["checks"]]
    # the CLI names the opt-in case; two shards merge into one report
    paths = []
    for i in (1, 2):
        out = tmp_path / f"s{i}"
        code = main(["audit", "--quick", "--case", CASE.name, "--case", "v8-plain", "--batches", "2", "--no-fuzz", "--shard",
                     f"{i}/2", "--false-fail-rate", repr(alpha * (V8_CHECKS + VERIFY_CHECKS)), "--quiet", "--no-html", "--no-journal", "--report-dir", str(out)])
        assert code == 0
        paths.append(next(out.glob("audit-*.json")))
    assert main(["merge", *map(str, paths), "--report-dir", str(tmp_path / "m"), "--quiet", "--no-html"]) == 0
    merged = json.loads(next((tmp_path / "m").glob("audit-*.json")).read_text())
    validate_report(merged)
    assert [c["name"] for c in merged["cases"]] == ["v8-plain", CASE.name]
    assert merged["settings"]["num_checks"] == V8_CHECKS + VERIFY_CHECKS
    assert {c["name"] for c in merged["checks"] if c["case"] == CASE.name} == set(NAMES)


def test_verify_case_is_a_dataclass_of_its_own_kind():
    with pytest.raises(ValueError, match="kind"):
        VerifyCase(**{**{f: getattr(CASE, f) for f in CASE.__dataclass_fields__}, "kind": "decoder"})
