"""Replay: transformers' assisted generation raises on ``min_new_tokens`` with an EOS token.

Run in an environment with transformers installed (the version sweep runs it in each swept
version's: ``python scripts/version_sweep.py``, ``reports/versions/transformers.md``):
``python scripts/replays/transformers_assisted_min_length_crash.py``; exit status 1 when it
reproduces (the ValueError below), 0 when ``generate`` runs. Found by the version sweep's
draft_model audit on transformers 5.0.0 (a ``defect`` finding: the audit's classes with EOS
crash on every speculative call).

Engine code path (transformers 5.0.0, ``generation/utils.py`` and
``generation/candidate_generator.py``): ``generate`` turns ``min_new_tokens`` into
``min_length = prompt length + min_new_tokens`` (``_prepare_generated_length``), so with an
EOS token ``_get_logits_processor`` builds a ``MinLengthLogitsProcessor`` (whenever
``min_length > 0``: ``min_new_tokens=0`` too, as ``min_length`` is then the prompt's length).
``AssistedCandidateGenerator.__init__`` receives the target's processor list and raises
``ValueError("Passing `MinLengthLogitsProcessor` when using `assisted_generation is
disabled. Please pass in `min_length` into `.generate()` instead")`` on finding it, although
the caller passed ``min_new_tokens`` to ``generate`` as asked and no processor of its own.
Plain sampling with the same arguments runs. Here: ``min_new_tokens=2`` (what the audit's
class 6 asks), then ``min_new_tokens=0`` (class 5), EOS 1, with the tiny Llama pair.
"""

import sys

import torch
from transformers import AutoModelForCausalLM

from specexact.decoders.tiny_models import catalog_pair

target_dir, draft_dir = catalog_pair("llama-v64")
target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
draft = AutoModelForCausalLM.from_pretrained(draft_dir, dtype=torch.float32)
prompt = torch.tensor([[15, 4, 53, 10]])
crashed = {}
for min_new in (2, 0):
    for assistant in (None, draft):
        torch.manual_seed(0)
        try:
            target.generate(prompt, attention_mask=torch.ones_like(prompt), assistant_model=assistant, do_sample=True,
                            temperature=2.0, top_k=8, max_new_tokens=4, min_new_tokens=min_new, eos_token_id=1,
                            pad_token_id=1)
            outcome = "runs"
        except ValueError as exc:
            if "MinLengthLogitsProcessor" not in str(exc):
                raise
            outcome = f"ValueError: {str(exc)[:90]}"
        crashed[min_new, assistant is not None] = outcome != "runs"
        print(f"min_new_tokens={min_new}, {'assistant_model=draft' if assistant is not None else 'no assistant'}: {outcome}")
reproduced = crashed[2, True] and not crashed[2, False]
print("finding reproduced" if reproduced else "not reproduced")
sys.exit(1 if reproduced else 0)
