"""Verifier throughput against a copy of its inputs, and side by side with third-party verifiers.

For every (V, K, B) cell, one set of inputs is made (uniform random, unnormalised
probability rows: ``verify``'s cost does not depend on the values, only on where each
row stops, and about 3/4 of the drafts are accepted with such inputs) and, in this order:

- ``copy``: ``dst.copy_(src)`` of the three input tensors into preallocated, pre-touched
  buffers: one read and one write of every input byte, the memory-bandwidth reference;
- ``verify`` (``specexact.decoders.verify``, the fast path) with ``validate=True`` and
  ``validate=False``;
- its readable reference (``specexact.decoders.rejection_sampling.verify_reference``), both
  ways, and whether the two returned the same tokens from the same seed on these inputs;
- transformers' ``_speculative_sampling``, row by row, on ``log(probs)`` (logits are what it
  takes; the conversion is outside the timing), on at most ``tf_rows`` rows: its cost per
  row does not depend on B, so rows/s from a subset is its rate at any B;
- vLLM: reported as not installed / not measured.

Cells whose estimated peak memory exceeds the cap run with a smaller B (halved until it
fits); the output names the requested and the used B.
"""

from __future__ import annotations

import math
import time

import torch

from specexact.decoders import verify as specexact_verify
from specexact.decoders.rejection_sampling import verify_reference

from ._common import (
    GiB,
    Timing,
    fits,
    fmt_bytes,
    fmt_ms,
    fmt_rate,
    fmt_ratio,
    markdown_table,
    measure,
    synchronize,
)
from .thirdparty import transformers_rows, vllm_status

VOCABS = {"1k": 1000, "32k": 32000, "128k": 128256, "256k": 256000}
"""Vocabulary sizes of the grid (those of common tokenizers: Llama-2, Llama-3, Gemma)."""
KS = (1, 4, 8)
BATCHES = (1, 64, 1024)
MEASURED = ("verify_validate", "verify_no_validate", "reference_validate", "reference_no_validate")
LABELS = (("verify_validate", "verify, validate=True"), ("verify_no_validate", "verify, validate=False"),
          ("reference_validate", "verify_reference, validate=True"),
          ("reference_no_validate", "verify_reference, validate=False"))


def input_bytes(B: int, K: int, V: int, element_size: int = 4) -> int:
    return B * (2 * K + 1) * V * element_size + B * K * 8


def peak_estimate(B: int, K: int, V: int, element_size: int = 4) -> int:
    """Inputs, plus the largest of: the copy's destination (freed before the verifiers run),
    ``verify_reference``'s ``[B, V]`` temporaries (about ten of them, float32/float64)."""
    inputs = input_bytes(B, K, V, element_size)
    return inputs + max(inputs, 10 * B * V * 4)


def fit_batch(B: int, K: int, V: int, cap_bytes: float) -> int:
    while B > 1 and not fits(peak_estimate(B, K, V), cap_bytes):
        B //= 2
    return B


def make_inputs(B: int, K: int, V: int, *, device, seed: int = 0, dtype=torch.float32):
    g = torch.Generator(device=device).manual_seed(seed)
    ids = torch.randint(0, V, (B, K), generator=g, device=device)
    draft_probs = torch.rand(B, K, V, generator=g, device=device, dtype=dtype)
    target_probs = torch.rand(B, K + 1, V, generator=g, device=device, dtype=dtype)
    return ids, draft_probs, target_probs


def _rate(rows: int, t: Timing) -> float:
    return rows / t.median if t.median > 0 else math.nan


def run_cell(V: int, K: int, B_requested: int, *, device, cap_bytes: float, repeats: int,
             max_time_s: float, tf_run, tf_rows: int, reference: bool, seed: int = 0) -> dict:
    B = fit_batch(B_requested, K, V, cap_bytes)
    rec: dict = {"V": V, "K": K, "B_requested": B_requested, "B": B,
                 "input_bytes": input_bytes(B, K, V), "peak_estimate_bytes": peak_estimate(B, K, V)}
    if B != B_requested:
        rec["note"] = (f"B={B_requested} needs ~{fmt_bytes(peak_estimate(B_requested, K, V))} > cap "
                       f"{fmt_bytes(cap_bytes)}: ran B={B}")
    ids, q, p = make_inputs(B, K, V, device=device, seed=seed)
    kw = dict(device=device, repeats=repeats, max_time_s=max_time_s)

    dst = [torch.zeros_like(t) for t in (ids, q, p)]

    def copy():
        for d, s in zip(dst, (ids, q, p)):
            d.copy_(s)

    rec["copy"] = measure(copy, **kw)
    dst.clear()  # free the destination before the verifiers run
    g = torch.Generator(device=device).manual_seed(seed + 1)
    runs = {
        "verify_validate": lambda: specexact_verify(ids, q, p, g),
        "verify_no_validate": lambda: specexact_verify(ids, q, p, g, validate=False),
    }
    if reference:
        runs["reference_validate"] = lambda: verify_reference(ids, q, p, g)
        runs["reference_no_validate"] = lambda: verify_reference(ids, q, p, g, validate=False)
    for name, fn in runs.items():
        rec[name] = measure(fn, **kw)
    if reference:  # same tokens from the same seed (tests/decoders/test_verify_fast.py proves it in general)
        fast = specexact_verify(ids, q, p, torch.Generator(device=device).manual_seed(seed))
        ref = verify_reference(ids, q, p, torch.Generator(device=device).manual_seed(seed))
        rec["same_as_reference"] = bool(torch.equal(fast, ref))

    if tf_run is not None and tf_rows > 0:
        # Rows for ~0.3 s per repeat (at least 16, at most B and tf_rows), from a few timed rows.
        R1 = min(B, 4)
        q_log1, p_log1 = torch.log(q[:R1]), torch.log(p[:R1])
        synchronize(device)
        t0 = time.perf_counter()
        tf_run(ids[:R1], q_log1, p_log1)
        synchronize(device)
        per_row = (time.perf_counter() - t0) / R1
        R = int(min(B, tf_rows, max(16, 0.3 / max(per_row, 1e-9))))
        q_log, p_log = torch.log(q[:R]), torch.log(p[:R])
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            rec["transformers"] = measure(lambda: tf_run(ids[:R], q_log, p_log), **kw)
        rec["transformers_rows"] = R
    return rec


def derived(rec: dict) -> dict:
    """Rows/s and ratios of one cell (JSON-ready)."""
    B, copy_t = rec["B"], rec["copy"].median
    out = {"copy_GBps": 2 * rec["input_bytes"] / copy_t / 1e9 if copy_t > 0 else math.nan}
    for name in MEASURED:
        if name in rec:
            t = rec[name].median
            out[f"{name}_rows_per_s"] = _rate(B, rec[name])
            out[f"{name}_time_over_copy"] = t / copy_t if copy_t > 0 else math.nan
    if "transformers" in rec:
        tf_rate = _rate(rec["transformers_rows"], rec["transformers"])
        out["transformers_rows_per_s"] = tf_rate
        for name in MEASURED:
            if f"{name}_rows_per_s" in out:
                out[f"{name}_speedup_vs_transformers"] = out[f"{name}_rows_per_s"] / tf_rate
    return out


def run(*, vocabs: dict[str, int] = VOCABS, ks=KS, batches=BATCHES, device="cpu",
        cap_bytes: float = 6 * GiB, repeats: int = 5, max_time_s: float = 3.0, tf_rows: int = 256,
        reference: bool = True, transformers: bool = True, log=print) -> dict:
    """Run the grid; return ``{"cells": [...], "transformers": info, "vllm": info}``."""
    tf_run, tf_info = transformers_rows() if transformers else (None, {"status": "skipped (--no-transformers)"})
    if tf_run is not None and torch.device(device).type != "cpu":
        tf_run, tf_info = None, {"status": "skipped (CPU only in this benchmark)"}
    vllm = vllm_status()
    log(f"  transformers: {tf_info.get('version', tf_info['status'])}; vLLM: {vllm['status']}")
    cells = []
    for label, V in vocabs.items():
        for K in ks:
            for B in batches:
                start = time.perf_counter()
                rec = run_cell(V, K, B, device=device, cap_bytes=cap_bytes, repeats=repeats,
                               max_time_s=max_time_s, tf_run=tf_run, tf_rows=tf_rows, reference=reference)
                rec["V_label"] = label
                rec["derived"] = derived(rec)
                cells.append(rec)
                d = rec["derived"]
                log(f"  V={label:>4} K={K} B={rec['B']:>4}: copy {fmt_ms(rec['copy'].median)} ms, "
                    f"verify {fmt_ms(rec['verify_validate'].median)} / {fmt_ms(rec['verify_no_validate'].median)} ms "
                    f"(validate / not)"
                    + (f", reference {fmt_ms(rec['reference_validate'].median)} / "
                       f"{fmt_ms(rec['reference_no_validate'].median)} ms"
                       f"{'' if rec['same_as_reference'] else ' (OUTPUT DIFFERS)'}" if reference else "")
                    + (f", transformers {fmt_rate(d['transformers_rows_per_s'])} rows/s"
                       if "transformers_rows_per_s" in d else "")
                    + f"  [{time.perf_counter() - start:.1f} s]")
    return {"cells": cells, "transformers": tf_info, "vllm": vllm, "cap_bytes": cap_bytes}


def _cell_json(rec: dict) -> dict:
    return {k: (v.to_dict() if isinstance(v, Timing) else v) for k, v in rec.items()}


def to_json(result: dict) -> dict:
    return {**{k: v for k, v in result.items() if k != "cells"},
            "cells": [_cell_json(c) for c in result["cells"]]}


def _goal_lines(cells: list[dict]) -> list[str]:
    lines = []
    big = [c for c in cells if c["B_requested"] == 1024 and c["V"] >= 32000]
    for name, label in LABELS:
        if big and f"{name}_time_over_copy" in big[0]["derived"]:
            ratios = [c["derived"][f"{name}_time_over_copy"] for c in big]
            met = sum(r < 1 for r in ratios)
            lines.append(f"- faster than the copy at B=1024 (or the largest B under the cap), V>=32k ({label}): "
                         f"{met}/{len(big)} cells (time / copy time: {min(ratios):.2f}-{max(ratios):.2f})")
    tf = [c for c in big if "verify_validate_speedup_vs_transformers" in c["derived"]]
    for name, label in LABELS:
        if tf and f"{name}_speedup_vs_transformers" in tf[0]["derived"]:
            s = [c["derived"][f"{name}_speedup_vs_transformers"] for c in tf]
            lines.append(f"- >= 20x transformers per verified row at B=1024 (or the largest B under the cap), "
                         f"V>=32k ({label}): {sum(x >= 20 for x in s)}/{len(s)} cells "
                         f"(speed-up {min(s):.1f}x-{max(s):.1f}x)")
    return lines


def markdown(result: dict) -> str:
    cells = result["cells"]
    has_ref = bool(cells) and "reference_validate" in cells[0]
    headers = ["V", "K", "B", "inputs", "copy ms (GB/s)", "verify ms val / no-val", "verify rows/s (val)",
               "verify/copy val / no-val"]
    if has_ref:
        headers += ["reference ms val / no-val", "reference/copy val / no-val", "same tokens"]
    rows = []
    notes = []
    for c in cells:
        d = c["derived"]
        b = f"{c['B']}" + ("*" if c["B"] != c["B_requested"] else "")
        row = [c["V_label"], c["K"], b, fmt_bytes(c["input_bytes"]),
               f"{fmt_ms(c['copy'].median)} ({d['copy_GBps']:.1f})",
               f"{fmt_ms(c['verify_validate'].median)} / {fmt_ms(c['verify_no_validate'].median)}",
               fmt_rate(d["verify_validate_rows_per_s"]),
               f"{d['verify_validate_time_over_copy']:.2f} / {d['verify_no_validate_time_over_copy']:.2f}"]
        if has_ref:
            row += [f"{fmt_ms(c['reference_validate'].median)} / {fmt_ms(c['reference_no_validate'].median)}",
                    f"{d['reference_validate_time_over_copy']:.2f} / {d['reference_no_validate_time_over_copy']:.2f}",
                    "yes" if c["same_as_reference"] else "NO"]
        rows.append(row)
        if "note" in c:
            notes.append(f"- V={c['V_label']} K={c['K']}: {c['note']}")
    out = ["### Verifier throughput vs a copy of its inputs",
           "",
           "Median of repeated runs; `verify/copy` < 1 means verifying took less time than copying the "
           "inputs once (read + write). `verify` is the package's (fast) verifier, `reference` its readable "
           "reference `verify_reference` (same tokens from the same generator state; `same tokens` checks it "
           "on these inputs). Spread (min-max ms) is in the JSON.",
           "", markdown_table(headers, rows)]
    if notes:
        out += ["", f"`*` B reduced to stay under the memory cap ({fmt_bytes(result['cap_bytes'])}):", *notes]

    tf_info = result["transformers"]
    out += ["", "### Side by side: transformers and vLLM (same inputs, same run)", ""]
    if tf_info.get("status") == "ok":
        out.append(f"transformers {tf_info['version']} `{tf_info['function']}{tf_info['signature']}`, "
                   f"{tf_info['calling']}. Rows/s from the first `rows` rows (its cost per row does not depend "
                   "on B). Ratio = specexact rows/s / transformers rows/s.")
        headers = ["V", "K", "B", "transformers rows/s (rows)", "verify rows/s val", "ratio val / no-val"]
        if has_ref:
            headers += ["reference ratio val / no-val"]
        rows = []
        for c in cells:
            d = c["derived"]
            if "transformers_rows_per_s" not in d:
                continue
            row = [c["V_label"], c["K"], c["B"], f"{fmt_rate(d['transformers_rows_per_s'])} ({c['transformers_rows']})",
                   fmt_rate(d["verify_validate_rows_per_s"]),
                   f"{fmt_ratio(d['verify_validate_speedup_vs_transformers'])} / "
                   f"{fmt_ratio(d['verify_no_validate_speedup_vs_transformers'])}"]
            if has_ref:
                row += [f"{fmt_ratio(d['reference_validate_speedup_vs_transformers'])} / "
                        f"{fmt_ratio(d['reference_no_validate_speedup_vs_transformers'])}"]
            rows.append(row)
        out += ["", markdown_table(headers, rows)]
    else:
        out.append(f"transformers: {tf_info['status']}")
    out += ["", f"vLLM rejection sampler: {result['vllm']['status']}"]
    goals = _goal_lines(cells)
    if goals:
        out += ["", "Goals (issue 7):", *goals]
    return "\n".join(out)
