"""Naive vs speculative decoding with the built-in toy models: speed, target calls, memory.

Per (B, gamma): tokens per second of both decoders on the same prompts, target calls per
emitted token (per row: rounds the row took part in / tokens it emitted), the measured
acceptance rate ``alpha`` and the expectation ``(1 - alpha**(gamma+1)) / (1 - alpha)``
emitted tokens per target call (Leviathan et al. 2023, eq. 1) for i.i.d. acceptance.

``alpha`` is the maximum-likelihood estimate from the accepted counts of all rounds
(``sum N / (sum N + #rounds with N < gamma)``, a geometric law cut at gamma). The measured
tokens per round (``mean(N) + 1``, before EOS / ``max_new_tokens`` cut the last round) is
compared with the expectation; the emitted tokens per target call also counts the cut.

ToyLM's draft is as expensive as its target (same size), so speculative decoding is not
faster in wall time here: the target-call ratio is what an expensive target would gain.

Peak memory (B=4096, V=32k by default) is measured in a fresh subprocess per decoder: on
Linux the kernel's peak-RSS mark is reset after building the models (``/proc/self/clear_refs``)
and read back (``VmHWM``) after one decoder call, minus the RSS at the reset; elsewhere
``resource.getrusage(...).ru_maxrss`` (which then includes the setup); on CUDA
``torch.cuda.max_memory_allocated``. Each configuration first runs at a small B; it runs at
the full B only if that probe's peak, scaled to B, stays under the cap.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

import torch

from specexact.decoders import SamplingParams, ToyLM, ToyLMConfig, naive_generate, speculative_generate

from ._common import REPO_ROOT, Timing, fits, fmt_bytes, fmt_ms, fmt_rate, markdown_table, measure

VOCAB = 32000
MISMATCH = 0.4
PROMPT_LEN = 4
MAX_NEW_TOKENS = 32
GAMMAS = (1, 2, 4, 8)
BATCHES = (1, 64)
PARAMS = SamplingParams()  # T=1, no truncation: the pipeline's cheapest law
ESTIMATE_MARGIN = 1.15  # the two-probe line underestimated peaks by up to ~7% in our runs


def models(V: int, device, mismatch: float = MISMATCH):
    target = ToyLM(ToyLMConfig(vocab_size=V, seed=1), device=device)
    return target, target.draft(mismatch)


def prompts(B: int, V: int, device) -> torch.Tensor:
    return torch.randint(0, V, (B, PROMPT_LEN), generator=torch.Generator().manual_seed(0)).to(device)


def expected_tokens_per_call(alpha: float, gamma: int) -> float:
    """``(1 - alpha^(gamma+1)) / (1 - alpha)``; ``gamma + 1`` at ``alpha = 1``."""
    if alpha >= 1.0:
        return float(gamma + 1)
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def acceptance_stats(accepted_lengths: torch.Tensor, num_tokens: torch.Tensor, gamma: int) -> dict:
    acc = accepted_lengths.cpu()
    valid = acc >= 0
    N = acc[valid].to(torch.float64)
    rejections = float((N < gamma).sum())
    alpha = float(N.sum() / (N.sum() + rejections)) if float(N.sum()) + rejections > 0 else math.nan
    rounds = float(valid.sum())
    tokens = float(num_tokens.sum())
    return {
        "alpha": alpha,
        "rounds_per_row_total": rounds,
        "tokens_total": tokens,
        "tokens_per_round_uncut": float(N.mean() + 1) if N.numel() else math.nan,
        "tokens_per_target_call": tokens / rounds if rounds else math.nan,
        "target_calls_per_token": rounds / tokens if tokens else math.nan,
        "expected_tokens_per_target_call": expected_tokens_per_call(alpha, gamma),
    }


def run(*, V: int = VOCAB, batches=BATCHES, gammas=GAMMAS, max_new_tokens: int = MAX_NEW_TOKENS,
        mismatch: float = MISMATCH, device="cpu", repeats: int = 3, max_time_s: float = 10.0, log=print) -> dict:
    target, draft = models(V, device, mismatch)
    rows = []
    for B in batches:
        p = prompts(B, V, device)
        g = torch.Generator(device=device).manual_seed(0)
        out = {}

        def naive():
            out["naive"] = naive_generate(target, p, PARAMS, max_new_tokens=max_new_tokens, generator=g)

        t = measure(naive, device=device, repeats=repeats, max_time_s=max_time_s)
        n_tok = float(out["naive"].num_tokens.sum())
        rows.append({"decoder": "naive", "B": B, "gamma": None, "time": t, "tokens": n_tok,
                     "tokens_per_s": n_tok / t.median, "target_calls": out["naive"].target_calls,
                     "target_calls_per_token": 1.0})
        log(f"  B={B:>4} naive: {fmt_rate(n_tok / t.median)} tokens/s ({fmt_ms(t.median)} ms per call)")
        for gamma in gammas:
            def spec(gamma=gamma):
                out["spec"] = speculative_generate(target, draft, p, PARAMS, num_draft_tokens=gamma,
                                                   max_new_tokens=max_new_tokens, generator=g)

            t = measure(spec, device=device, repeats=repeats, max_time_s=max_time_s)
            o = out["spec"]
            stats = acceptance_stats(o.accepted_lengths, o.num_tokens, gamma)
            n_tok = stats["tokens_total"]
            rows.append({"decoder": "speculative", "B": B, "gamma": gamma, "time": t, "tokens": n_tok,
                         "tokens_per_s": n_tok / t.median, "target_calls": o.target_calls,
                         "draft_calls": o.draft_calls, **stats})
            log(f"  B={B:>4} speculative gamma={gamma}: {fmt_rate(n_tok / t.median)} tokens/s, "
                f"alpha={stats['alpha']:.3f}, tokens/round {stats['tokens_per_round_uncut']:.2f} "
                f"(expected {stats['expected_tokens_per_target_call']:.2f}), "
                f"target calls/token {stats['target_calls_per_token']:.3f}")
    return {"V": V, "mismatch": mismatch, "max_new_tokens": max_new_tokens, "prompt_len": PROMPT_LEN,
            "params": PARAMS.describe(), "rows": rows}


# --------------------------------------------------------------------------- peak memory


def _memory_worker(args) -> dict:
    """Runs in a fresh process: build, measure RSS, decode once, report the peak."""
    from ._common import current_rss_bytes, max_rss_bytes, peak_rss_bytes, reset_peak_rss

    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    target, draft = models(args.V, device)
    p = prompts(args.B, args.V, device)
    g = torch.Generator(device=device).manual_seed(0)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    else:
        # Without a reset, the peak would include the import of torch and the setup.
        reset = reset_peak_rss()
        base = current_rss_bytes()
    start = time.perf_counter()
    if args.decoder == "naive":
        naive_generate(target, p, PARAMS, max_new_tokens=args.max_new_tokens, generator=g)
    else:
        if args.verifier == "reference":
            from specexact.decoders.rejection_sampling import verify_reference as chosen
        else:
            from specexact.decoders import verify as chosen
        speculative_generate(target, draft, p, PARAMS, num_draft_tokens=args.gamma,
                             max_new_tokens=args.max_new_tokens, generator=g, verifier=chosen)
    elapsed = time.perf_counter() - start
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        peak, kind = torch.cuda.max_memory_allocated(device), "torch.cuda.max_memory_allocated"
    elif reset:
        peak, kind = peak_rss_bytes(), "VmHWM after clear_refs"
    else:
        peak, kind = max_rss_bytes(), "ru_maxrss (includes setup)"
    return {"base_bytes": base, "peak_bytes": peak, "delta_bytes": peak - base, "measure": kind,
            "seconds": elapsed}


def measure_peak(decoder: str, B: int, V: int, gamma: int | None, max_new_tokens: int, *, device="cpu",
                 threads: int = 0, verifier: str = "specexact", timeout_s: float = 600) -> dict:
    """Peak memory of one decoder call in a fresh subprocess (JSON on its last stdout line)."""
    cmd = [sys.executable, "-m", "benchmarks.decoder", "--memory-worker", "--decoder", decoder,
           "--B", str(B), "--V", str(V), "--gamma", str(gamma or 1), "--max-new-tokens", str(max_new_tokens),
           "--device", str(device), "--threads", str(threads), "--verifier", verifier]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout_s, env=env)
    if proc.returncode != 0:
        return {"error": (proc.stderr or proc.stdout).strip().splitlines()[-1:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def memory_configs(gammas=(1, 4), reference: bool = True) -> list[tuple[str, int | None, str]]:
    """(decoder, gamma, verifier) triples: naive, then speculative per gamma with the package's
    verify and, beside it, its readable reference ``verify_reference``."""
    out = [("naive", None, "specexact")]
    for g in gammas:
        out.append(("speculative", g, "specexact"))
        if reference:
            out.append(("speculative", g, "reference"))
    return out


def run_memory(*, B: int = 4096, V: int = VOCAB, configs=None, max_new_tokens: int = 4, probe_B: int = 256,
               device="cpu", cap_bytes: float = 6 * 1024**3, log=print) -> dict:
    """Peak memory of naive and speculative decoding at B rows.

    Each configuration first runs at ``probe_B`` and ``4 * probe_B`` rows (when below B);
    the line through the two peaks, taken at B, plus the process's own size must fit
    under the cap for the run at B to happen.
    """
    configs = memory_configs() if configs is None else configs
    out = []
    for decoder, gamma, verifier in configs:
        rec = {"decoder": decoder, "gamma": gamma, "verifier": verifier, "B": B, "V": V,
               "max_new_tokens": max_new_tokens}
        sizes = [b for b in (probe_B, 4 * probe_B) if b < B]
        probes = []
        for b in sizes:
            r = measure_peak(decoder, b, V, gamma, max_new_tokens, device=device, verifier=verifier)
            probes.append({"B": b, **r})
            if "error" in r:
                break
            if len(probes) == 1 and not fits(r["base_bytes"] + r["delta_bytes"] * 4, cap_bytes):
                break  # the second probe alone could exceed the cap
        rec["probes"] = probes
        if any("error" in p for p in probes):
            rec["status"] = f"probe failed: {[p['error'] for p in probes if 'error' in p][0]}"
        else:
            if len(probes) == 2:
                (b1, d1), (b2, d2) = ((p["B"], p["delta_bytes"]) for p in probes)
                estimate = d1 + (d2 - d1) * (B - b1) / (b2 - b1)
            elif probes:
                estimate = probes[0]["delta_bytes"] * B / probes[0]["B"]
            else:
                estimate = math.nan
            rec["estimate_bytes"] = estimate
            base = probes[0]["base_bytes"] if probes else 0
            if probes and not fits(base + ESTIMATE_MARGIN * estimate, cap_bytes):
                rec["status"] = (f"skipped: estimated {fmt_bytes(estimate)} (from probes at B="
                                 f"{', '.join(str(p['B']) for p in probes)}) exceeds the cap {fmt_bytes(cap_bytes)}")
            else:
                full = measure_peak(decoder, B, V, gamma, max_new_tokens, device=device, verifier=verifier)
                rec.update(full)
                rec["status"] = "ok" if "error" not in full else f"failed: {full['error']}"
        label = decoder + (f" gamma={gamma} ({verifier} verify)" if gamma else "")
        log(f"  peak memory {label}, B={B}, V={V}: "
            + (f"{fmt_bytes(rec['delta_bytes'])} above the {fmt_bytes(rec['base_bytes'])} after setup"
               if rec.get("status") == "ok" else rec["status"]))
        out.append(rec)
    return {"rows": out, "cap_bytes": cap_bytes}


# --------------------------------------------------------------------------- reports


def to_json(result: dict) -> dict:
    return {**result, "rows": [{k: (v.to_dict() if isinstance(v, Timing) else v) for k, v in r.items()}
                               for r in result["rows"]]}


def markdown(result: dict, memory: dict | None = None) -> str:
    headers = ["B", "decoder", "gamma", "tokens/s", "ms per call (min-max)", "alpha",
               "tokens/round: measured", "expected", "emitted tokens / target call", "target calls / token"]
    rows = []
    for r in result["rows"]:
        spec = r["decoder"] == "speculative"
        rows.append([r["B"], r["decoder"], r["gamma"] or "-", fmt_rate(r["tokens_per_s"]),
                     f"{fmt_ms(r['time'].median)} ({r['time'].spread()})",
                     f"{r['alpha']:.3f}" if spec else "-",
                     f"{r['tokens_per_round_uncut']:.2f}" if spec else "1",
                     f"{r['expected_tokens_per_target_call']:.2f}" if spec else "1",
                     f"{r['tokens_per_target_call']:.2f}" if spec else "1",
                     f"{r['target_calls_per_token']:.3f}"])
    out = ["### Decoding: naive vs speculative (ToyLM)", "",
           f"V={result['V']}, draft mismatch {result['mismatch']}, {result['max_new_tokens']} new tokens, "
           f"prompt length {result['prompt_len']}, sampling {result['params']}. alpha: maximum-likelihood "
           "acceptance rate of a draft (geometric law cut at gamma); expected tokens/round = "
           "(1 - alpha^(gamma+1)) / (1 - alpha); measured tokens/round = mean accepted + 1 (before the cut at "
           "max_new_tokens); emitted tokens / target call and target calls / token count the cut last round "
           "(per row: tokens / rounds). ToyLM's draft costs as much as its target, so tokens/s is not "
           "expected to improve here.", "", markdown_table(headers, rows)]
    if memory is not None:
        out += ["", markdown_memory(memory)]
    return "\n".join(out)


def markdown_memory(memory: dict) -> str:
    mrows = []
    for r in memory["rows"]:
        ok = r.get("status") == "ok"
        mrows.append([r["decoder"], r["gamma"] or "-", r["verifier"] if r["gamma"] else "-", r["B"], r["V"],
                      r["max_new_tokens"],
                      fmt_bytes(r["delta_bytes"]) if ok else "-",
                      fmt_bytes(r["peak_bytes"]) if ok else "-",
                      fmt_bytes(r.get("estimate_bytes", math.nan)),
                      r.get("measure", "") if ok else r["status"]])
    return "\n".join(["### Peak memory (one decoder call in a fresh subprocess)", "",
                      "Peak above setup = peak minus the process's memory after building the models and "
                      "prompts; the estimate is the line through two small-B probes, taken at B (runs "
                      "whose estimate exceeds the cap are skipped). verify `reference` = "
                      "`specexact.decoders.rejection_sampling.verify_reference`.",
                      "", markdown_table(["decoder", "gamma", "verify", "B", "V", "new tokens", "peak above setup",
                                          "process peak", "estimate from probe", "measure / status"], mrows)])


def _main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="memory worker of the decoder benchmark (internal)")
    ap.add_argument("--memory-worker", action="store_true", required=True)
    ap.add_argument("--decoder", choices=["naive", "speculative"], required=True)
    ap.add_argument("--B", type=int, required=True)
    ap.add_argument("--V", type=int, required=True)
    ap.add_argument("--gamma", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=4)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--verifier", choices=["specexact", "reference"], default="specexact")
    args = ap.parse_args(argv)
    print(json.dumps(_memory_worker(args)))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
