"""Every benchmark runs end to end at tiny sizes and writes its JSON and Markdown.

Smoke tests only: nothing here asserts a timing (the numbers at these sizes mean nothing).
"""

import json
import math

import pytest
import torch

from benchmarks import __main__ as cli
from benchmarks import audit_power, decoder, verifier
from benchmarks._common import GiB, Timing, measure


@pytest.mark.parametrize("section,keys,title", [
    ("verifier", ["verifier"], "### Verifier throughput vs a copy of its inputs"),
    ("decoder", ["decoder"], "### Decoding: naive vs speculative (ToyLM)"),
    ("memory", ["memory"], "### Peak memory"),
    ("audit,goal", ["audit"], "### Audit power per second"),
    ("fastpath", ["fastpath"], "### Decoder-level audit sampling: before and after the shared-law fast path"),
])
def test_cli_smoke_writes_json_and_markdown(tmp_path, capsys, section, keys, title):
    assert cli.main(["--smoke", "--threads", "1", "--only", section, "--out", str(tmp_path)]) == 0
    (js,) = tmp_path.glob("bench-*.json")
    (md,) = tmp_path.glob("bench-*.md")
    data = json.loads(js.read_text())
    assert data["profile"] == "smoke" and all(k in data for k in keys)
    assert "environment" in data and data["environment"]["torch"] == torch.__version__
    text = md.read_text()
    assert title in text
    assert title in capsys.readouterr().out


def test_verifier_cells_have_every_measurement():
    r = verifier.run(vocabs={"5k": 5000}, ks=(2,), batches=(2,), repeats=1, max_time_s=0.1, tf_rows=2,
                     log=lambda *a: None)
    (cell,) = r["cells"]
    for name in ("copy", "verify_validate", "verify_no_validate", "reference_validate", "reference_no_validate"):
        assert isinstance(cell[name], Timing) and cell[name].median > 0
    assert cell["same_as_reference"] is True
    d = cell["derived"]
    assert d["verify_validate_rows_per_s"] > 0 and d["verify_no_validate_time_over_copy"] > 0
    if r["transformers"]["status"] == "ok":
        assert cell["transformers_rows"] >= 1 and d["transformers_rows_per_s"] > 0
    assert r["vllm"]["status"]  # "not installed" here
    json.dumps(verifier.to_json(r))


def test_memory_cap_shrinks_the_batch_and_says_so():
    B = verifier.fit_batch(1024, 8, 256000, 6 * GiB)
    assert 1 <= B < 1024
    assert verifier.peak_estimate(B, 8, 256000) + 600 * 2**20 <= 6 * GiB
    assert verifier.fit_batch(1024, 1, 32000, 6 * GiB) == 1024


def test_expected_tokens_per_target_call():
    assert decoder.expected_tokens_per_call(0.0, 4) == 1.0
    assert decoder.expected_tokens_per_call(1.0, 4) == 5.0
    assert math.isclose(decoder.expected_tokens_per_call(0.5, 2), 1.75)


def test_acceptance_stats_from_accepted_lengths():
    # gamma=2: rounds with 2, 0, 1 accepted (and a finished row's -1): alpha = 3 / (3 + 2)
    acc = torch.tensor([[2, 0], [1, -1]])
    s = decoder.acceptance_stats(acc, torch.tensor([4, 2]), 2)
    assert math.isclose(s["alpha"], 0.6)
    assert math.isclose(s["tokens_per_round_uncut"], 2.0)
    assert math.isclose(s["target_calls_per_token"], 3 / 6)


def test_required_samples_is_a_fixed_point_of_the_binning():
    x = torch.randn(3000, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 2
    probs = torch.softmax(x, 0).numpy()
    n, bins = audit_power.required_samples(probs, 0.05, 1e-6)
    from specexact.exactness.power import min_num_samples_chisquare

    assert bins == audit_power.num_bins(probs, n) or bins == 2
    assert min_num_samples_chisquare(0.05, num_bins=max(2, bins), false_fail_rate=1e-6) <= n


def test_measure_reports_median_and_spread():
    calls = []
    t = measure(lambda: calls.append(1), repeats=4, min_repeats=2, max_time_s=100, warmup=1)
    assert len(calls) == 5 and len(t.samples) == 4
    assert t.min <= t.median <= t.max
    assert set(t.to_dict()) >= {"median_s", "min_s", "max_s", "q1_s", "q3_s", "repeats"}


def test_fastpath_section_times_both_paths_and_finds_the_same_tokens(tmp_path):
    assert cli.main(["--smoke", "--threads", "1", "--only", "fastpath", "--out", str(tmp_path)]) == 0
    (js,) = tmp_path.glob("bench-*.json")
    (row,) = json.loads(js.read_text())["fastpath"]["rows"]
    assert row["identical_tokens"] is True
    assert row["before"]["samples_per_s"] > 0 and row["after"]["samples_per_s"] > 0
    assert [c["class"] for c in row["classes"]] == [0, 1]


def test_profile_decoder_times_the_fused_path_stage_by_stage():
    from benchmarks.profile_decoder import STAGES, profile

    after = profile(512, 16, fast=True, cpu=True)
    before = profile(512, 16, fast=False, cpu=True)
    assert after["fused_calls"] > 0 and before["fused_calls"] == 0  # the wrapped models keep the fused path
    for side in (after, before):
        assert set(side["stages_s"]) == set(STAGES)
        assert abs(sum(side["stages_s"].values()) - side["total_s"]) < 1e-9
    assert after["stages_s"]["logits pipeline"] > 0 and after["stages_s"]["models' forward"] > 0
