"""Audit power per second: samples per second of each default audit case, and what they buy.

Per case (``audit.cases.default_cases``), :func:`specexact.audit.cases.dispatch.run_case` runs a
fixed small number of decoder calls with the built-in verifier; the time between calls
(after the first) gives samples per second. Projected to 60 s of sampling on that case
alone, each class's law check (``sequence_law`` against the enumerated law, or
``first_token_law`` for the large-vocabulary case) would have ``n60`` samples; the TV it
then detects with power 0.99 at the per-check false-fail rate of the default audit
(``1e-6`` split over all its checks) is computed with
:func:`specexact.exactness.power.min_detectable_tv_chisquare`, with the bins
:func:`specexact.exactness.binned_law` would form for that law at ``n60``.

The V=32k goal: the sample count a chi-square check needs to detect TV 1e-2 at
false-fail rate 1e-6 and power 0.99, with the binning a V=32k first-token law gets at
that sample count (a fixed point: more samples make more bins; bins of >= 50 and, as the
audit bins, >= 200 expected counts), against the first-token throughput of two routes:

- **verify-level** (what the goal line measures): the ``v32000-verify`` case
  (:mod:`specexact.audit.cases.verify_case`) calls the built-in verifier directly on rows that
  share the law pair, at several rows per call (one call: draws, verifier, output check);
- **decoder-level** (for comparison): the ``v4096-zipf`` case with V=32000, one
  speculative round per sample (``max_new_tokens=1``), naive target-only sampling beside it.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np
import torch

from specexact.audit.cases.decoder_case import default_cases
from specexact.audit.cases.dispatch import checks_per_case, run_case
from specexact.audit.cases.verify_case import verify_cases
from specexact.audit.cases.verify_kind import verify_call
from specexact.decoders import batch_params, naive_generate, process_logits, speculative_generate, verify
from specexact.exactness import binned_law
from specexact.exactness.enumeration import sequence_law
from specexact.exactness.power import min_detectable_tv_chisquare, min_num_samples_chisquare

from ._common import fmt_rate, markdown_table, measure

MIN_EXPECTED = 50.0  # chisquare_gof's default bin size
AUDIT_MIN_EXPECTED = 200.0  # the audit's bins (specexact.audit.cases.dispatch.MIN_EXPECTED)
VERIFY_BATCHES = (1024, 4096, 8192)
SUITE_FALSE_FAIL_RATE = 1e-6
BUDGET_S = 60.0


def num_bins(probs: np.ndarray, n: int, min_expected: float = MIN_EXPECTED) -> int:
    bins = binned_law(probs, n=n, min_expected=min_expected)
    return int(bins.max()) + 1 if bins.size and bins.max() >= 0 else 1


def class_law(case, c: int, device="cpu") -> np.ndarray:
    """The reference law of class ``c``'s main check (what the runner compares against)."""
    target, _ = case.models(device)
    rc = case.row_classes[c]
    prompt = torch.tensor(rc.prompt, dtype=torch.int64)
    if case.exact:
        return sequence_law(target, prompt, rc.target_params, length=case.length,
                            eos_token_id=case.eos_token_id).probs
    logits = target.to(dtype=torch.float64)(prompt[None], torch.tensor([[len(rc.prompt) - 1]]))[:, 0]
    return process_logits(logits, batch_params(rc.target_params, 1)).cpu().numpy()[0]


def detectable_tv(probs: np.ndarray, n: int, alpha: float) -> tuple[float, int]:
    k = num_bins(probs, n)
    if k < 2:
        return math.inf, k
    return min_detectable_tv_chisquare(n, num_bins=k, false_fail_rate=alpha), k


def run_cases(*, num_batches: int = 4, device="cpu", budget_s: float = BUDGET_S, cases=None, log=print) -> dict:
    cases = default_cases() if cases is None else cases
    alpha = SUITE_FALSE_FAIL_RATE / sum(checks_per_case(c) for c in default_cases())
    out = []
    for case in cases:
        stamps = []
        start = time.perf_counter()
        result = run_case(case, verify, false_fail_rate=alpha, num_batches=num_batches, device=device,
                          progress=lambda n, b: stamps.append(time.perf_counter()))
        if result.defect:
            out.append({"case": case.name, "error": result.defect})
            log(f"  {case.name}: defect {result.defect.splitlines()[0]}")
            continue
        intervals = np.diff([start] + stamps)
        per_batch = float(np.median(intervals[1:])) if len(intervals) > 1 else float(intervals[0])
        rate = case.batch_size / per_batch
        C = len(case.row_classes)
        batches60 = max(2, int(budget_s / per_batch))
        n60 = batches60 * case.batch_size // C
        classes = []
        for c in range(C):
            check = next(ch for ch in result.checks
                         if ch.name in (f"sequence_law[class {c}]", f"first_token_law[class {c}]"))
            probs = class_law(case, c, device)
            tv60, bins60 = detectable_tv(probs, n60, alpha)
            classes.append({"class": c, "check": check.name, "n_measured": check.n,
                            "detectable_tv_measured": check.detectable_tv, "dof_measured": check.dof,
                            "n60": n60, "bins60": bins60, "detectable_tv_60s": tv60,
                            "outcomes": int(np.count_nonzero(probs))})
        rec = {"case": case.name, "exact": case.exact, "batch_size": case.batch_size, "classes_per_batch": C,
               "num_batches": result.num_batches, "seconds_per_batch": per_batch,
               "batch_intervals_s": intervals.tolist(), "samples_per_s": rate,
               "setup_s": float(intervals[0] - per_batch), "checks_s": result.wall_time_s - (stamps[-1] - start),
               "wall_time_s": result.wall_time_s, "classes": classes,
               "note": "" if case.exact else "includes the naive reference samples of the two-sample check"}
        out.append(rec)
        worst = max((cl["detectable_tv_60s"] for cl in classes if math.isfinite(cl["detectable_tv_60s"])),
                    default=math.inf)
        log(f"  {case.name}: {fmt_rate(rate)} sequences/s ({per_batch * 1e3:.0f} ms per batch of "
            f"{case.batch_size}); after {budget_s:.0f} s: n={n60} per class, detectable TV <= {worst:.3g}")
    return {"per_check_false_fail_rate": alpha, "budget_s": budget_s, "cases": out}


def required_samples(probs: np.ndarray, tv: float, alpha: float, beta: float = 0.01,
                     min_expected: float = MIN_EXPECTED) -> tuple[int, int]:
    """Smallest ``n`` (and its bin count) with ``min_num_samples_chisquare(tv, bins(n)) <= n``."""
    n = min_num_samples_chisquare(tv, num_bins=2, false_fail_rate=alpha, false_pass_rate=beta)
    for _ in range(100):
        k = max(2, num_bins(probs, n, min_expected))
        need = min_num_samples_chisquare(tv, num_bins=k, false_fail_rate=alpha, false_pass_rate=beta)
        if need <= n:
            return n, k
        n = need
    return n, k


def smoke_cases():
    """Two default cases at small batch sizes (for ``--smoke``)."""
    keep = {"v8-plain": 64, "v4096-zipf": 32}
    return [replace(c, batch_size=keep[c.name]) for c in default_cases() if c.name in keep]


def v32k_case(V: int = 32000):
    base = next(c for c in default_cases() if c.name == "v4096-zipf")
    return replace(base, name=f"v{V}-zipf", model=replace(base.model, vocab_size=V, eos_token_id=V - 1))


def verify_case_at(V: int = 32000):
    """The ``v32000-verify`` case with vocabulary ``V`` (the goal's law at V=32000)."""
    base = next(c for c in verify_cases() if c.name == "v32000-verify")
    return base if V == base.model.vocab_size else replace(base, model=replace(base.model, vocab_size=V,
                                                                                 eos_token_id=V - 1))


def run_verify_route(*, V: int = 32000, batches=VERIFY_BATCHES, device="cpu", repeats: int = 3,
                     max_time_s: float = 20.0) -> dict:
    """Samples/s of the verify-level case with the built-in verifier at each batch size."""
    base = verify_case_at(V)
    out = {"case": base.name, "law": base.row_classes[0].describe(), "num_draft_tokens": base.num_draft_tokens,
           "chosen_batch_size": base.batch_size, "by_batch_size": {}}
    for B in batches:
        case = replace(base, batch_size=B)
        laws = case.laws(device)
        g = torch.Generator(device=device).manual_seed(0)
        t = measure(lambda: verify_call(case, laws, verify, g), device=device, repeats=repeats, max_time_s=max_time_s)
        out["by_batch_size"][B] = {"time": t, "samples_per_s": B / t.median}
    best = max(out["by_batch_size"].values(), key=lambda r: r["samples_per_s"])
    out["samples_per_s"] = best["samples_per_s"]
    return out


def run_v32k_goal(*, V: int = 32000, tv: float = 1e-2, alpha: float = 1e-6, budget_s: float = BUDGET_S,
                  device="cpu", repeats: int = 3, max_time_s: float = 20.0, verify_batches=VERIFY_BATCHES,
                  log=print) -> dict:
    case = v32k_case(V)
    probs = class_law(case, 0, device)
    n_req, bins = required_samples(probs, tv, alpha)
    n_req200, bins200 = required_samples(probs, tv, alpha, min_expected=AUDIT_MIN_EXPECTED)
    vr = run_verify_route(V=V, batches=verify_batches, device=device, repeats=repeats, max_time_s=max_time_s)
    coarse = {}
    for k in (2, 10, 100):
        coarse[k] = min_num_samples_chisquare(tv, num_bins=k, false_fail_rate=alpha)
    target, draft = case.models(device)
    prompts, t_params, d_params = case.batch(device)
    C = len(case.row_classes)
    g = torch.Generator(device=device).manual_seed(0)
    spec_t = measure(lambda: speculative_generate(target, draft, prompts, t_params, d_params,
                                                  num_draft_tokens=case.num_draft_tokens, max_new_tokens=1,
                                                  generator=g, eos_token_id=case.eos_token_id),
                     device=device, repeats=repeats, max_time_s=max_time_s)
    naive_t = measure(lambda: naive_generate(target, prompts, t_params, max_new_tokens=1, generator=g,
                                             eos_token_id=case.eos_token_id),
                      device=device, repeats=repeats, max_time_s=max_time_s)
    per_law_spec = case.batch_size / C / spec_t.median
    per_law_naive = case.batch_size / C / naive_t.median
    rec = {"V": V, "tv": tv, "false_fail_rate": alpha, "false_pass_rate": 0.01, "budget_s": budget_s,
           "law": f"class 0 of {case.name}: {case.row_classes[0].describe()}",
           "law_support": int(np.count_nonzero(probs)), "required_n": n_req, "bins_at_required_n": bins,
           "required_n_with_fixed_bins": coarse, "batch_size": case.batch_size, "classes_per_batch": C,
           "num_draft_tokens": case.num_draft_tokens,
           "speculative_first_token_time": spec_t, "naive_first_token_time": naive_t,
           "samples_per_s_per_law_speculative": per_law_spec, "samples_per_s_per_law_naive": per_law_naive,
           "n_in_budget_speculative": int(per_law_spec * budget_s),
           "n_in_budget_naive": int(per_law_naive * budget_s),
           "needed_samples_per_s": n_req / budget_s,
           "required_n_audit_bins": n_req200, "bins_at_required_n_audit_bins": bins200,
           "verify_route": vr, "n_in_budget_verify": int(vr["samples_per_s"] * budget_s)}
    rec["met_decoder"] = rec["n_in_budget_speculative"] >= n_req
    rec["time_needed_s"] = n_req / per_law_spec
    rec["met"] = rec["n_in_budget_verify"] >= n_req
    rec["time_needed_verify_s"] = n_req / vr["samples_per_s"]
    log(f"  V={V} verify-level ({vr['case']}): " + ", ".join(
        f"B={B}: {fmt_rate(r['samples_per_s'])}/s" for B, r in vr["by_batch_size"].items())
        + f" -> {rec['n_in_budget_verify']:,} in {budget_s:.0f} s: "
        + ("met" if rec["met"] else f"not met (needs {rec['time_needed_verify_s']:.0f} s)"))
    log(f"  V={V} first-token law: TV {tv:g} at false-fail {alpha:g}, power 0.99 needs n={n_req:,} "
        f"({bins} bins); measured {fmt_rate(per_law_spec)} samples/s per law (speculative, gamma="
        f"{case.num_draft_tokens}) -> {rec['n_in_budget_speculative']:,} in {budget_s:.0f} s: "
        + ("met" if rec["met_decoder"] else f"not met (needs {rec['time_needed_s']:.0f} s)"))
    return rec


def to_json(cases: dict | None, goal: dict | None) -> dict:
    out = {}
    if cases is not None:
        out["cases"] = cases
    if goal is not None:
        def plain(v):
            if hasattr(v, "to_dict"):
                return v.to_dict()
            if isinstance(v, dict):
                return {str(k): plain(x) for k, x in v.items()}
            return v

        out["v32k_goal"] = plain(goal)
    return out


def markdown(cases: dict | None, goal: dict | None) -> str:
    out = ["### Audit power per second", ""]
    if cases is not None:
        out.append(f"Each default case sampled for a few decoder calls (`run_case`, built-in verify); "
                   f"n60 = samples per class after {cases['budget_s']:.0f} s on that case alone; detectable TV "
                   f"with power 0.99 at the default audit's per-check false-fail rate "
                   f"{cases['per_check_false_fail_rate']:.3g}, with the bins that law gets at n60.")
        rows = []
        for r in cases["cases"]:
            if "error" in r:
                rows.append([r["case"], "error", "", "", "", "", ""])
                continue
            for cl in r["classes"]:
                tv = (f"{cl['detectable_tv_60s']:.3g}" if math.isfinite(cl["detectable_tv_60s"])
                      else "- (one outcome: support check only)")
                rows.append([r["case"] if cl["class"] == 0 else "", fmt_rate(r["samples_per_s"]) if cl["class"] == 0 else "",
                             f"{cl['class']}: {cl['check'].split('[')[0]}", cl["outcomes"],
                             f"{cl['n60']:,}", cl["bins60"], tv])
        out += ["", markdown_table(["case", "sequences/s", "class: check", "outcomes", "n60 per class",
                                    "bins", f"detectable TV after {cases['budget_s']:.0f} s"], rows)]
    if goal is not None:
        g = goal
        out += ["", f"**Goal: TV {g['tv']:g} on a V={g['V']} first-token law at false-fail {g['false_fail_rate']:g}, "
                    f"power 0.99, within {g['budget_s']:.0f} s** ({g['law']}; support {g['law_support']:,} tokens)", "",
                f"- needed: n = {g['required_n']:,} samples of that law ({g['bins_at_required_n']} bins of >= "
                f"{MIN_EXPECTED:.0f} expected counts), i.e. {fmt_rate(g['needed_samples_per_s'])} samples/s; with a "
                "fixed coarse binning: " + ", ".join(f"{k} bins: {v:,}" for k, v in g["required_n_with_fixed_bins"].items()),
                f"- with the audit's bins (>= {AUDIT_MIN_EXPECTED:.0f} expected): n = {g['required_n_audit_bins']:,} "
                f"({g['bins_at_required_n_audit_bins']} bins)",
                f"- **verify-level route** (`{g['verify_route']['case']}`, built-in verify called directly on rows "
                f"sharing the law pair, gamma={g['verify_route']['num_draft_tokens']}): "
                + ", ".join(f"B={B}: {fmt_rate(r['samples_per_s'])}/s"
                            for B, r in g["verify_route"]["by_batch_size"].items())
                + f" -> {g['n_in_budget_verify']:,} in {g['budget_s']:.0f} s",
                f"- decoder-level route (B={g['batch_size']}, {g['classes_per_batch']} classes per "
                f"batch): speculative (gamma={g['num_draft_tokens']}, one round) {fmt_rate(g['samples_per_s_per_law_speculative'])}/s "
                f"-> {g['n_in_budget_speculative']:,} in {g['budget_s']:.0f} s; naive target-only "
                f"{fmt_rate(g['samples_per_s_per_law_naive'])}/s -> {g['n_in_budget_naive']:,}",
                "- verdict (verify-level): " + ("met" if g["met"] else f"not met: it would need "
                                                 f"{g['time_needed_verify_s']:.0f} s "
                                                 f"({g['time_needed_verify_s'] / g['budget_s']:.1f}x the budget)"),
                "- verdict (decoder-level): " + ("met" if g["met_decoder"] else f"not met: the speculative sampler "
                                                  f"would need {g['time_needed_s']:.0f} s "
                                                  f"({g['time_needed_s'] / g['budget_s']:.1f}x the budget)")]
    return "\n".join(out)
