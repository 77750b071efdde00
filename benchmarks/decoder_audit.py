"""The decoder-level audit's sampling, before and after the shared-law fast path, side by side.

Per case, one audit decoder call is what :func:`specexact.audit.cases.dispatch.run_case` makes per
batch: ``speculative_generate`` over the case's batch (``length`` tokens) and, for a
large-vocabulary case, ``naive_generate`` beside it (the two-sample reference). Timed two ways
in the same run, alternating:

- **before**: ``speculative_generate_reference`` / ``naive_generate_reference`` (the models
  and the logits pipeline on every row) with the pipeline's grouped path switched off
  (``specexact.decoders.pipeline.GROUPED = False``): the code path as it was before the fast
  path existed;
- **after**: ``speculative_generate`` / ``naive_generate`` (each distinct law of a call
  computed once, the grouped pipeline).

Both are fed the same generator seed and must return the same tokens (checked: the
``same`` column). From the samples per second each gives, the sample count of each class's
law check after 60 s on that case alone, and the TV that check then detects (power 0.99 at
the default audit's per-check false-fail rate, with the bins that law gets at that n,
:func:`benchmarks.audit_power.detectable_tv`).
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from dataclasses import replace

import torch

from specexact.audit.cases.decoder_case import default_cases
from specexact.audit.cases.dispatch import checks_per_case
from specexact.decoders import (
    naive_generate,
    naive_generate_reference,
    speculative_generate,
    speculative_generate_reference,
    verify,
)
from specexact.decoders import pipeline

from ._common import Timing, fmt_rate, markdown_table
from .audit_power import BUDGET_S, SUITE_FALSE_FAIL_RATE, class_law, detectable_tv

HEADLINE_V = 32000
HEADLINE_B = 2048


def headline_case(V: int = HEADLINE_V, batch_size: int = HEADLINE_B):
    """The issue's shape: the ``v4096-zipf`` case at vocabulary ``V`` and ``batch_size`` rows."""
    base = next(c for c in default_cases() if c.name == "v4096-zipf")
    return replace(base, name=f"v{V}-zipf-B{batch_size}", batch_size=batch_size,
                   model=replace(base.model, vocab_size=V, eos_token_id=V - 1))


@contextmanager
def before_fast_path():
    """The pipeline without its grouped path (restored on exit)."""
    saved = pipeline.GROUPED
    pipeline.GROUPED = False
    try:
        yield
    finally:
        pipeline.GROUPED = saved


def audit_call(case, target, draft, prompts, t_params, d_params, seed: int, *, fast: bool):
    """One audit decoder call of ``case``; returns the tokens (speculative, naive or None)."""
    spec = speculative_generate if fast else speculative_generate_reference
    naive = naive_generate if fast else naive_generate_reference
    device = target.device
    g = torch.Generator(device=device).manual_seed(seed)
    out = spec(target, draft, prompts, t_params, d_params, num_draft_tokens=case.num_draft_tokens,
               max_new_tokens=case.length, generator=g, eos_token_id=case.eos_token_id, verifier=verify)
    naive_tokens = None
    if not case.exact:
        ng = torch.Generator(device=device).manual_seed(seed ^ 0x5EED)
        naive_tokens = naive(target, prompts, t_params, max_new_tokens=case.length, generator=ng,
                             eos_token_id=case.eos_token_id).tokens
    return out.tokens, naive_tokens


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def run(cases=None, *, device="cpu", repeats: int = 3, budget_s: float = BUDGET_S, log=print) -> dict:
    """Before/after seconds per audit call, samples/s and detectable TV after ``budget_s``."""
    cases = [headline_case(), *default_cases()] if cases is None else cases
    alpha = SUITE_FALSE_FAIL_RATE / sum(checks_per_case(c) for c in default_cases())
    rows = []
    for case in cases:
        target, draft = case.models(device)
        prompts, t_params, d_params = case.batch(device)
        times = {"before": Timing(), "after": Timing()}
        same = True
        for r in range(repeats + 1):  # the first round warms up (not timed)
            got = {}
            for side in ("after", "before"):
                fast = side == "after"
                with (before_fast_path() if not fast else _nothing()):
                    _sync(device)
                    start = time.perf_counter()
                    got[side] = audit_call(case, target, draft, prompts, t_params, d_params, seed=r, fast=fast)
                    _sync(device)
                    elapsed = time.perf_counter() - start
                if r:
                    times[side].samples.append(elapsed)
            same &= all((a is None and b is None) or torch.equal(a, b) for a, b in zip(got["before"], got["after"]))
        C = len(case.row_classes)
        rec = {"case": case.name, "V": case.model.vocab_size, "batch_size": case.batch_size,
               "num_draft_tokens": case.num_draft_tokens, "length": case.length, "exact": case.exact,
               "identical_tokens": bool(same), "classes": []}
        for side in ("before", "after"):
            t = times[side]
            rec[side] = {"time": t, "samples_per_s": case.batch_size / t.median}
        rec["speed_up"] = times["before"].median / times["after"].median
        for c in range(C):
            probs = class_law(case, c, device)
            entry = {"class": c, "check": "sequence_law" if case.exact else "first_token_law"}
            for side in ("before", "after"):
                n = int(rec[side]["samples_per_s"] * budget_s) // C
                tv, bins = detectable_tv(probs, max(n, 1), alpha)
                entry[side] = {"n": n, "bins": bins, "detectable_tv": tv}
            rec["classes"].append(entry)
        rows.append(rec)
        log(f"  {case.name} (V={case.model.vocab_size}, B={case.batch_size}): before "
            f"{fmt_rate(rec['before']['samples_per_s'])}/s, after {fmt_rate(rec['after']['samples_per_s'])}/s, "
            f"x{rec['speed_up']:.2f}, same tokens: {same}")
    return {"per_check_false_fail_rate": alpha, "budget_s": budget_s, "repeats": repeats, "rows": rows}


@contextmanager
def _nothing():
    yield


def to_json(result: dict) -> dict:
    def plain(v):
        if isinstance(v, Timing):
            return v.to_dict()
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, list):
            return [plain(x) for x in v]
        return v

    return plain(result)


def markdown(result: dict) -> str:
    rows = []
    for r in result["rows"]:
        for cl in r["classes"]:
            first = cl["class"] == 0
            tv = [f"{cl[s]['detectable_tv']:.3g}" if math.isfinite(cl[s]["detectable_tv"]) else "- (support only)"
                  for s in ("before", "after")]
            rows.append([r["case"] if first else "", r["V"] if first else "", r["batch_size"] if first else "",
                         f"{r['before']['time'].median:.2f} s ({r['before']['time'].spread()} ms)" if first else "",
                         f"{r['after']['time'].median:.2f} s ({r['after']['time'].spread()} ms)" if first else "",
                         fmt_rate(r["before"]["samples_per_s"]) if first else "",
                         fmt_rate(r["after"]["samples_per_s"]) if first else "",
                         f"{r['speed_up']:.2f}x" if first else "", ("yes" if r["identical_tokens"] else "NO") if first else "",
                         f"{cl['class']}: {cl['check']}", tv[0], tv[1]])
    return "\n".join([
        "### Decoder-level audit sampling: before and after the shared-law fast path", "",
        "One audit call = `speculative_generate` over the case's batch (+ `naive_generate` for a large-V "
        "case), with the built-in `verify`. before: `*_generate_reference` with the pipeline's grouped path "
        "off (the previous code path); after: `speculative_generate` / `naive_generate`. Same seeds; `same` "
        "checks the tokens agree. Detectable TV: each class's law check after "
        f"{result['budget_s']:.0f} s on that case alone, power 0.99, per-check false-fail rate "
        f"{result['per_check_false_fail_rate']:.3g}. Seconds per call: median (min-max) of "
        f"{result['repeats']}.", "",
        markdown_table(["case", "V", "B", "s/call before", "s/call after", "samples/s before", "samples/s after",
                        "speed-up", "same", "class: check", "TV/min before", "TV/min after"], rows)])
