"""Where one decoder-level audit call spends its time, before and after the fast path.

``python -m benchmarks.profile_decoder [--V 32000] [--B 2048] [--repeats 1] [--threads N]``

The call is the ``v4096-zipf`` case at vocabulary ``V`` and ``B`` rows (γ = 3, 3 tokens):
``speculative_generate`` with the built-in ``verify``, then ``naive_generate`` (the
two-sample reference), as :func:`specexact.audit.runner.run_case` makes it per batch. Wall
time is split by wrapping the stages: the models' forward calls, the logits pipeline, the
draft / naive sampling, the verifier, the shared-law bookkeeping (grouping rows, building
the verifier's ``[A, γ(+1), V]`` inputs) and the rest of the loop. ``before`` is the
previous code path (:func:`benchmarks.decoder_audit.before_fast_path` with the every-row
reference decoders), ``after`` the fast path.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time

import torch

import specexact.decoders.law_table as law_table
from specexact.audit.allocator import allocator_setting, keep_freed_memory
import specexact.decoders.naive as naive_mod
import specexact.decoders.speculative as spec_mod
from .decoder_audit import audit_call, before_fast_path, headline_case

STAGES = ("models' forward", "logits pipeline", "sampling (draft + naive)", "verify (the sampler under audit)",
          "law table: grouping, verifier inputs", "loop and the rest")


class _Timer:
    def __init__(self, clock):
        self.clock = clock
        self.acc = collections.defaultdict(float)
        self.depth = 0

    def wrap(self, name, fn):
        def timed(*a, **k):
            if self.depth:  # count nested stages once, in the outer one
                return fn(*a, **k)
            self.depth += 1
            t = self.clock()
            try:
                return fn(*a, **k)
            finally:
                self.acc[name] += self.clock() - t
                self.depth -= 1
        return timed


class _Model:
    def __init__(self, model, timer):
        self.model, self.timer = model, timer
        self.vocab_size, self.device = model.vocab_size, model.device

    def __call__(self, *a):
        return self.timer.wrap(STAGES[0], self.model)(*a)


def profile(V: int, B: int, *, fast: bool, repeats: int = 1, cpu: bool = False) -> dict:
    case = headline_case(V, B)
    target, draft = case.models()
    prompts, tp, dp = case.batch()
    clock = time.process_time if cpu else time.perf_counter
    timer = _Timer(clock)
    patches = [
        (spec_mod, "process_logits", STAGES[1]), (naive_mod, "process_logits", STAGES[1]),
        (law_table, "sample_from_probs", STAGES[2]), (law_table, "sample_from_table", STAGES[2]),
        (law_table, "_confirm", STAGES[4]), (law_table, "distinct_rows", STAGES[4]),
        (law_table.LawTable, "rows", STAGES[4]), (spec_mod, "_stack_laws", STAGES[4]),
    ]
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in patches]
    try:
        for obj, name, stage in patches:
            setattr(obj, name, timer.wrap(stage, getattr(obj, name)))
        import benchmarks.decoder_audit as da
        da_verify = da.verify
        da.verify = timer.wrap(STAGES[3], da_verify)
        models = (_Model(target, timer), _Model(draft, timer))
        with (before_fast_path() if not fast else _nothing()):
            audit_call(case, *models, prompts, tp, dp, seed=0, fast=fast)  # warm-up
            timer.acc.clear()
            start = clock()
            for r in range(repeats):
                audit_call(case, *models, prompts, tp, dp, seed=r + 1, fast=fast)
            total = (clock() - start) / repeats
    finally:
        for obj, name, fn in saved:
            setattr(obj, name, fn)
        da.verify = da_verify
    out = {k: timer.acc[k] / repeats for k in STAGES[:-1]}
    out[STAGES[-1]] = total - sum(out.values())
    return {"total_s": total, "stages_s": out, "samples_per_s": B / total}


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def markdown(before: dict, after: dict, V: int, B: int) -> str:
    lines = [f"| stage (V={V}, B={B}, γ=3, 3 tokens) | before s | share | after s | share |", "|---|---|---|---|---|"]
    for k in STAGES:
        b, a = before["stages_s"][k], after["stages_s"][k]
        lines.append(f"| {k} | {b:.2f} | {b / before['total_s']:.0%} | {a:.2f} | {a / after['total_s']:.0%} |")
    lines.append(f"| **one audit call** | **{before['total_s']:.2f}** | | **{after['total_s']:.2f}** | |")
    lines.append(f"| samples/s | {before['samples_per_s']:.0f} | | {after['samples_per_s']:.0f} | "
                 f"x{before['total_s'] / after['total_s']:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.profile_decoder", description=__doc__.splitlines()[0])
    ap.add_argument("--V", type=int, default=32000)
    ap.add_argument("--B", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--cpu-time", action="store_true",
                    help="time with the process's CPU time (on a busy machine, with --threads 1: the work done, "
                         "not the waits for a core)")
    args = ap.parse_args(argv)
    keep_freed_memory()  # as the specexact command does (SPECEXACT_MALLOC=default: glibc's default)
    if args.threads:
        torch.set_num_threads(args.threads)
    after = profile(args.V, args.B, fast=True, repeats=args.repeats, cpu=args.cpu_time)
    before = profile(args.V, args.B, fast=False, repeats=args.repeats, cpu=args.cpu_time)
    print(f"{'CPU' if args.cpu_time else 'wall'} seconds, torch threads {torch.get_num_threads()}, "
          f"allocator {allocator_setting()}")
    print(markdown(before, after, args.V, args.B))
    return 0


if __name__ == "__main__":
    sys.exit(main())
