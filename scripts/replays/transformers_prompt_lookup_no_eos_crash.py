"""Replay: transformers' prompt lookup raises a TypeError when no EOS token is set.

Run in an environment with transformers installed (the version sweep runs it in each swept
version's: ``python scripts/version_sweep.py``, ``reports/versions/transformers.md``):
``python scripts/replays/transformers_prompt_lookup_no_eos_crash.py``; exit status 1 when it
reproduces (the TypeError below), 0 when ``generate`` runs. Found by the version sweep's
prompt_lookup audit on transformers 5.0.0 (a ``defect`` finding: its classes without EOS
crash on every speculative call that finds a match).

Engine code path (transformers 5.0.0, ``generation/candidate_generator.py``):
``PromptLookupCandidateGenerator.get_candidates``, once an n-gram match gives candidate
tokens, removes those after an EOS with ``isin_mps_friendly(chosen_ids, self.eos_token_id)``;
with no EOS token (``eos_token_id=None`` in the generation config, as for a model that has
none) that is ``torch.isin(tensor, None)``, which raises ``TypeError: isin() received an
invalid combination of arguments``. Plain sampling with the same arguments runs. Here: a
prompt that repeats its first 2-gram (so the lookup matches), EOS off, with and without
``prompt_lookup_num_tokens=2``.
"""

import sys

import torch
from transformers import AutoModelForCausalLM

from specexact.decoders.tiny_models import catalog_pair

target_dir, _ = catalog_pair("llama-v64")
target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
target.generation_config.eos_token_id = None  # a model without EOS (the tiny models' config names 1)
prompt = torch.tensor([[20, 63, 17, 16, 20, 63]])  # "20 63" again: the lookup finds "17 16"
crashed = {}
for lookup in (None, 2):
    torch.manual_seed(0)
    try:
        target.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=True, max_new_tokens=3,
                        prompt_lookup_num_tokens=lookup, eos_token_id=None, pad_token_id=0)
        outcome = "runs"
    except TypeError as exc:
        if "isin" not in str(exc):
            raise
        outcome = f"TypeError: {str(exc).splitlines()[0][:90]}"
    crashed[lookup] = outcome != "runs"
    print(f"prompt_lookup_num_tokens={lookup}, eos_token_id=None: {outcome}")
reproduced = crashed[2] and not crashed[None]
print("finding reproduced" if reproduced else "not reproduced")
sys.exit(1 if reproduced else 0)
