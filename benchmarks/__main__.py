"""``python -m benchmarks``: run the performance benchmarks, print and save the results.

Run from the repository root. See ``benchmarks/README.md`` for what each section measures.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

from specexact.audit.core.allocator import keep_freed_memory

from . import audit_power, decoder, decoder_audit, verifier
from ._common import GiB, REPO_ROOT, busy_warning, environment

SECTIONS = ("verifier", "decoder", "memory", "audit", "goal", "fastpath")

PROFILES = {
    # The grid (about 10 minutes on a busy 2-core machine; less on a quiet one).
    "full": dict(vocabs=verifier.VOCABS, ks=verifier.KS, batches=verifier.BATCHES, repeats=5,
                 dec_V=decoder.VOCAB, dec_batches=decoder.BATCHES, dec_gammas=decoder.GAMMAS, dec_new=32,
                 mem_B=4096, mem_V=32000, mem_gammas=(1, 4), mem_reference=True, mem_probe=256, audit_batches=4,
                 goal_V=32000, goal_repeats=3, fast_B=2048, fast_cases="all", fast_repeats=3),
    # A subset (about 3 minutes on a busy 2-core machine).
    "quick": dict(vocabs={"1k": 1000, "32k": 32000}, ks=(1, 4), batches=(1, 64, 1024), repeats=3,
                  dec_V=decoder.VOCAB, dec_batches=(64,), dec_gammas=(1, 4), dec_new=16,
                  mem_B=4096, mem_V=32000, mem_gammas=(1,), mem_reference=False, mem_probe=256, audit_batches=2,
                  goal_V=32000, goal_repeats=2, fast_B=512, fast_cases="headline", fast_repeats=1),
    # Tiny sizes: checks that everything runs (tests/benchmarks); the numbers mean nothing.
    "smoke": dict(vocabs={"1k": 1000, "5k": 5000}, ks=(1, 2), batches=(1, 3), repeats=1,
                  dec_V=300, dec_batches=(2,), dec_gammas=(1, 2), dec_new=5,
                  mem_B=8, mem_V=300, mem_gammas=(1,), mem_reference=False, mem_probe=8, audit_batches=2,
                  goal_V=1000, goal_repeats=1, goal_verify_batches=(64,), fast_B=16, fast_V=5000,
                  fast_cases="headline", fast_repeats=1),
}


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="specexact performance benchmarks: verifier throughput vs a copy of its inputs, "
                    "side by side with transformers (and vLLM where installed), naive vs speculative "
                    "decoding, peak memory, and audit power per second. Prints Markdown tables and "
                    "writes JSON + Markdown to --out.")
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="a subset of the grid (a few minutes)")
    size.add_argument("--smoke", action="store_true", help="tiny sizes, to check that it runs (meaningless numbers)")
    ap.add_argument("--only", default=",".join(SECTIONS),
                    help=f"comma-separated sections to run, from {', '.join(SECTIONS)} (default: all)")
    ap.add_argument("--out", default=str(REPO_ROOT / "benchmarks" / "results"),
                    help="folder for bench-<time>.json and .md (default: benchmarks/results)")
    ap.add_argument("--device", default="cpu", help="torch device (default cpu; cuda is supported, untested)")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (default: torch's choice)")
    ap.add_argument("--repeats", type=int, default=None, help="timed repeats per measurement (median reported)")
    ap.add_argument("--memory-cap-gib", type=float, default=6.0,
                    help="largest estimated peak memory of one measurement; bigger cells are shrunk or skipped")
    ap.add_argument("--tf-rows", type=int, default=256,
                    help="at most this many rows through transformers per cell (its per-row cost is B-independent)")
    ap.add_argument("--no-transformers", action="store_true", help="skip the transformers side-by-side")
    ap.add_argument("--no-reference", action="store_true",
                    help="skip verify_reference (the readable reference of verify) in the verifier and memory sections")
    args = ap.parse_args(argv)
    unknown = set(args.only.split(",")) - set(SECTIONS)
    if unknown:
        ap.error(f"unknown sections {sorted(unknown)}; choose from {SECTIONS}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    keep_freed_memory()  # as the specexact command does (SPECEXACT_MALLOC=default: glibc's default)
    if args.threads:
        torch.set_num_threads(args.threads)
    profile_name = "smoke" if args.smoke else "quick" if args.quick else "full"
    prof = dict(PROFILES[profile_name])
    if args.repeats:
        prof["repeats"] = args.repeats
    sections = [s for s in SECTIONS if s in args.only.split(",")]
    device = torch.device(args.device)
    cap = args.memory_cap_gib * GiB
    env = environment(device)
    warning = busy_warning(env)
    started = time.perf_counter()

    print(f"specexact benchmarks ({profile_name}): {', '.join(sections)}")
    print(f"torch {env['torch']} on {env['device']} ({env['cpu']}, {env['usable_cores']} usable cores, "
          f"{env['torch_threads']} torch threads); memory cap {args.memory_cap_gib:g} GiB per measurement")
    if warning:
        print(warning)
    if device.type != "cuda":
        print("No GPU used: CPU timings only (the code is device-agnostic; pass --device cuda on a GPU machine).")
    sys.stdout.flush()

    results: dict = {"profile": profile_name, "environment": env, "sections": sections}
    parts: list[str] = []
    timings: dict = {}

    def section(name: str, title: str):
        print(f"\n== {title}")
        sys.stdout.flush()
        timings[name] = time.perf_counter()

    def done(name: str):
        timings[name] = time.perf_counter() - timings[name]
        print(f"   ({timings[name]:.0f} s)")

    if "verifier" in sections:
        section("verifier", "verifier throughput vs copy, and side by side with transformers / vLLM")
        r = verifier.run(vocabs=prof["vocabs"], ks=prof["ks"], batches=prof["batches"], device=device,
                         cap_bytes=cap, repeats=prof["repeats"], tf_rows=args.tf_rows,
                         reference=not args.no_reference, transformers=not args.no_transformers,
                         max_time_s=3.0 if profile_name == "full" else 1.0)
        results["verifier"] = verifier.to_json(r)
        parts.append(verifier.markdown(r))
        done("verifier")
    dec = mem = None
    if "decoder" in sections:
        section("decoder", "naive vs speculative decoding (ToyLM)")
        dec = decoder.run(V=prof["dec_V"], batches=prof["dec_batches"], gammas=prof["dec_gammas"],
                          max_new_tokens=prof["dec_new"], device=device, repeats=min(prof["repeats"], 3),
                          max_time_s=5.0)
        results["decoder"] = decoder.to_json(dec)
        done("decoder")
    if "memory" in sections:
        section("memory", f"peak memory at B={prof['mem_B']}, V={prof['mem_V']} (fresh subprocesses)")
        mem = decoder.run_memory(B=prof["mem_B"], V=prof["mem_V"], probe_B=prof["mem_probe"], device=device,
                                 configs=decoder.memory_configs(prof["mem_gammas"],
                                                                reference=prof["mem_reference"] and not args.no_reference),
                                 cap_bytes=cap)
        results["memory"] = mem
        done("memory")
    if dec is not None or mem is not None:
        parts.append(decoder.markdown(dec, mem) if dec is not None else decoder.markdown_memory(mem))
    cases = goal = None
    if "audit" in sections:
        section("audit", "audit power per second (default cases)")
        cases = audit_power.run_cases(num_batches=prof["audit_batches"], device=device,
                                      cases=audit_power.smoke_cases() if profile_name == "smoke" else None)
        done("audit")
    if "goal" in sections:
        section("goal", f"V={prof['goal_V']} first-token goal: TV 1e-2 at false-fail 1e-6 in 60 s")
        goal = audit_power.run_v32k_goal(V=prof["goal_V"], device=device, repeats=prof["goal_repeats"],
                                         verify_batches=prof.get("goal_verify_batches", audit_power.VERIFY_BATCHES))
        done("goal")
    if cases is not None or goal is not None:
        results["audit"] = audit_power.to_json(cases, goal)
        parts.append(audit_power.markdown(cases, goal))

    if "fastpath" in sections:
        B = prof["fast_B"]
        section("fastpath", f"decoder-level audit sampling before / after the shared-law fast path (V=32000 at B={B})")
        head = decoder_audit.headline_case(prof.get("fast_V", decoder_audit.HEADLINE_V), B)
        chosen = [head] if prof["fast_cases"] == "headline" else None
        if chosen is None:
            from specexact.audit.cases.decoder_case import default_cases
            chosen = [head, *default_cases()]
        fp = decoder_audit.run(chosen, device=device, repeats=prof["fast_repeats"])
        results["fastpath"] = decoder_audit.to_json(fp)
        parts.append(decoder_audit.markdown(fp))
        done("fastpath")

    results["section_seconds"] = timings
    results["total_seconds"] = time.perf_counter() - started
    header = [f"# specexact benchmarks ({profile_name})", "",
              f"{env['time']}; torch {env['torch']}, {env['torch_threads']} threads; {env['cpu']}, "
              f"{env['usable_cores']} usable cores; device {env['device']}; git {str(env.get('commit'))[:12]}"
              f"{' (dirty)' if env.get('dirty') else ''}; total {results['total_seconds']:.0f} s.", ""]
    if warning:
        header += [f"**{warning}**", ""]
    report = "\n".join(header) + "\n" + "\n\n".join(parts) + "\n"
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    json_path, md_path = out_dir / f"bench-{stamp}.json", out_dir / f"bench-{stamp}.md"
    json_path.write_text(json.dumps(results, indent=1, default=_json_default, allow_nan=True))
    md_path.write_text(report)
    print("\n" + report)
    print(f"Wrote {json_path} and {md_path}")
    return 0


def _json_default(obj):
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if isinstance(obj, torch.Tensor):
        return obj.tolist()
    if isinstance(obj, (torch.dtype, torch.device, Path)):
        return str(obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


if __name__ == "__main__":
    sys.exit(main())
