"""Where one decoder-level audit call spends its time, before and after the fast path.

``python -m benchmarks.profile_decoder [--V 32000] [--B 2048] [--repeats 1] [--threads N]``

The call is the ``v4096-zipf`` case at vocabulary ``V`` and ``B`` rows (γ = 3, 3 tokens):
``speculative_generate`` with the built-in ``verify``, then ``naive_generate`` (the
two-sample reference), as :func:`specexact.audit.cases.dispatch.run_case` makes it per batch. Wall
time is split by wrapping the stages: the models' forward calls, the logits pipeline, the
draft / naive sampling, the verifier, the shared-law bookkeeping (grouping rows, building
the verifier's ``[A, γ(+1), V]`` inputs) and the rest of the loop. ``before`` is the
previous code path (:func:`benchmarks.decoder_audit.before_fast_path` with the every-row
reference decoders), ``after`` the fast path: for the toy models that is the fused path
(:mod:`specexact.decoders.law_engine`), whose stages are timed where they run: the
models' states and projections (forward), penalties and ``process_chunk`` (pipeline),
block masses and searches (sampling), grouping and the copies into the verifier's inputs
(bookkeeping). The model wrappers keep the models' state interface, so the fused path
still applies (``fused path calls`` counts the calls it took).
"""

from __future__ import annotations

import argparse
import collections
import sys
import time

import torch

import specexact.decoders.law_engine as law_engine
import specexact.decoders.law_table as law_table
from specexact.audit.core.allocator import allocator_setting, keep_freed_memory
import specexact.decoders.naive as naive_mod
import specexact.decoders.sampling as sampling
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
    """A model whose calls are timed as the forward stage; it keeps the state interface
    (``prefix_states`` / ``project`` / ``project_rows`` / ``logit_bound``) where the
    model has one, so the decoders' fused path applies to it as to the model."""

    def __init__(self, model, timer):
        self.model, self.timer = model, timer
        self.vocab_size, self.device = model.vocab_size, model.device
        self.dtype = getattr(model, "dtype", None)
        self._forward = timer.wrap(STAGES[0], model)
        for name in ("prefix_states", "project", "project_rows"):
            if hasattr(model, name):
                setattr(self, name, timer.wrap(STAGES[0], getattr(model, name)))
        if hasattr(model, "logit_bound"):
            self.logit_bound = model.logit_bound

    def __call__(self, *a):
        return self._forward(*a)


def profile(V: int, B: int, *, fast: bool, repeats: int = 1, cpu: bool = False, case_name: str | None = None) -> dict:
    case = headline_case(V, B) if case_name is None else _named_case(case_name, B)
    target, draft = case.models()
    prompts, tp, dp = case.batch()
    clock = time.process_time if cpu else time.perf_counter
    timer = _Timer(clock)
    patches = [
        (spec_mod, "process_logits", STAGES[1]), (naive_mod, "process_logits", STAGES[1]),
        (law_table, "sample_from_probs", STAGES[2]), (law_table, "sample_from_table", STAGES[2]),
        (law_table, "_confirm", STAGES[4]), (law_table, "distinct_rows", STAGES[4]),
        (law_table.LawTable, "rows", STAGES[4]), (spec_mod, "_stack_laws", STAGES[4]),
        # the fused path (law_engine), stage by stage
        (law_engine, "penalise_", STAGES[1]), (law_engine, "process_chunk", STAGES[1]),
        (law_engine, "search_blocks", STAGES[2]), (law_engine, "_inverse_cdf_fast", STAGES[2]),
        (sampling.BlockMasses, "__call__", STAGES[2]),
        (law_engine, "distinct_rows", STAGES[4]), (law_engine, "signatures", STAGES[4]),
        (law_engine, "_write_rows", STAGES[4]),
    ]
    fused_calls = [0]
    inner_fused = law_engine.fused_laws

    def counted(*a, **k):
        out = inner_fused(*a, **k)
        fused_calls[0] += out is not None
        return out
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in patches]
    try:
        for obj, name, stage in patches:
            setattr(obj, name, timer.wrap(stage, getattr(obj, name)))
        spec_mod.fused_laws = naive_mod.fused_laws = counted
        import benchmarks.decoder_audit as da
        da_verify = da.verify
        da.verify = timer.wrap(STAGES[3], da_verify)
        models = (_Model(target, timer), _Model(draft, timer))
        with (before_fast_path() if not fast else _nothing()):
            audit_call(case, *models, prompts, tp, dp, seed=0, fast=fast)  # warm-up
            timer.acc.clear()
            fused_calls[0] = 0
            start = clock()
            for r in range(repeats):
                audit_call(case, *models, prompts, tp, dp, seed=r + 1, fast=fast)
            total = (clock() - start) / repeats
    finally:
        for obj, name, fn in saved:
            setattr(obj, name, fn)
        da.verify = da_verify
        spec_mod.fused_laws = naive_mod.fused_laws = inner_fused
    out = {k: timer.acc[k] / repeats for k in STAGES[:-1]}
    out[STAGES[-1]] = total - sum(out.values())
    return {"total_s": total, "stages_s": out, "samples_per_s": B / total, "fused_calls": fused_calls[0] / repeats}


def _named_case(name: str, B: int):
    """The default audit case ``name`` with ``B`` rows (``V`` is the case's own)."""
    from dataclasses import replace

    from specexact.audit.cases.decoder_case import default_cases

    cases = {c.name: c for c in default_cases()}
    if name not in cases:
        raise SystemExit(f"--case: no default case named {name!r} (known: {', '.join(cases)})")
    return replace(cases[name], batch_size=B)


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
    lines.append(f"| fused path calls per audit call | {before['fused_calls']:.0f} | | {after['fused_calls']:.0f} | |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.profile_decoder", description=__doc__.splitlines()[0])
    ap.add_argument("--V", type=int, default=32000)
    ap.add_argument("--B", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--case", default=None,
                    help="profile this default audit case (its own vocabulary and classes; --V is ignored) "
                         "instead of the v4096-zipf case at --V")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--cpu-time", action="store_true",
                    help="time with the process's CPU time (on a busy machine, with --threads 1: the work done, "
                         "not the waits for a core)")
    args = ap.parse_args(argv)
    keep_freed_memory()  # as the specexact command does (SPECEXACT_MALLOC=default: glibc's default)
    if args.threads:
        torch.set_num_threads(args.threads)
    kw = dict(repeats=args.repeats, cpu=args.cpu_time, case_name=args.case)
    after = profile(args.V, args.B, fast=True, **kw)
    before = profile(args.V, args.B, fast=False, **kw)
    print(f"{'CPU' if args.cpu_time else 'wall'} seconds, torch threads {torch.get_num_threads()}, "
          f"allocator {allocator_setting()}")
    V = args.V if args.case is None else _named_case(args.case, args.B).model.vocab_size
    print(f"case: {args.case or 'v4096-zipf at --V'}")
    print(markdown(before, after, V, args.B))
    return 0


if __name__ == "__main__":
    sys.exit(main())
