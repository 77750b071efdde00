"""Replay: mlx-lm's speculative generation leaves the prompt out of the penalties' context.

Run in the mlx-e2e environment (``tox --notest -e mlx-e2e`` builds it):
``.tox/mlx-e2e/bin/python scripts/replays/mlx_speculative_penalty_context.py``; exit status 1
when it reproduces.

Engine code path (mlx-lm 0.32.2, ``mlx_lm/generate.py``): ``generate_step`` adds every
prompt token it prefills to ``tokens``, the context its ``logits_processors`` see (the
repetition / presence / frequency penalties of ``make_logits_processors``, which then keep
the last ``context_size`` of them). ``speculative_generate_step`` keeps that context in
``prev_tokens``, but its ``_prefill`` runs the prompt through both models without adding it,
and ``_step`` starts ``prev_tokens`` at the last prompt token. So with a penalty the first
and later tokens of speculative generation are penalised only for the last prompt token and
the generated ones, and plain and speculative generation of the same request follow
different laws. Here, greedy (``temp=0``) with ``repetition_penalty=5``: the target's
argmax after a prompt, computed by hand from the model's logits with the penalty over the
whole prompt and over its last token only, against the first token of each generator.
"""

import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx_lm.generate import generate_step, speculative_generate_step
from mlx_lm.sample_utils import make_logits_processors, make_sampler
from mlx_lm.utils import load_model

from specexact.decoders.tiny_models import catalog_pair

PENALTY = 5.0
target_dir, draft_dir = catalog_pair("llama-v64")  # tiny Llama folders (config.json + model.safetensors)
target, _ = load_model(Path(target_dir))
draft, _ = load_model(Path(draft_dir))


def penalised_argmax(logits, context):
    x = np.array(logits, dtype=np.float64)
    ids = sorted(set(context))
    x[ids] = np.where(x[ids] < 0, x[ids] * PENALTY, x[ids] / PENALTY)
    return int(np.argmax(x))


def first_token(gen):
    token = int(next(gen)[0])
    gen.close()
    return token


rng = np.random.default_rng(0)
reproduced = None
for trial in range(50):
    prompt = [int(t) for t in rng.integers(2, 64, size=6)]
    raw = np.array(target(mx.array(prompt, dtype=mx.uint32)[None])[0, -1])
    sampler = make_sampler(temp=0.0)
    procs = make_logits_processors(repetition_penalty=PENALTY, repetition_context_size=20)
    plain = first_token(generate_step(mx.array(prompt, dtype=mx.uint32), target, max_tokens=4, sampler=sampler,
                                      logits_processors=procs))
    procs = make_logits_processors(repetition_penalty=PENALTY, repetition_context_size=20)
    spec = first_token(speculative_generate_step(mx.array(prompt, dtype=mx.uint32), target, draft,
                                                 num_draft_tokens=3, max_tokens=4, sampler=sampler,
                                                 logits_processors=procs))
    whole, last = penalised_argmax(raw, prompt), penalised_argmax(raw, prompt[-1:])
    if whole != last:
        print(f"prompt {prompt}: argmax with the penalty over the whole prompt {whole}, over its last token "
              f"only {last}; generate_step gives {plain}, speculative_generate_step gives {spec}")
        reproduced = plain == whole and spec == last
        break
print("finding reproduced" if reproduced else "not reproduced")
sys.exit(1 if reproduced else 0)
