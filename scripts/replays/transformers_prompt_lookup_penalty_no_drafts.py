"""Replay: transformers' prompt lookup proposes no drafts when a repetition penalty meets top-k.

Run in the main test environment or the end-to-end one:
``python scripts/replays/transformers_prompt_lookup_penalty_no_drafts.py``; exit status 1
when it reproduces. An efficiency finding, not an inexact one: without drafts every round is
plain sampling, so the output law stays the target's; only the speed-up is lost.

Engine code path (transformers 5.24.0, ``generation/candidate_generator.py``):
``PromptLookupCandidateGenerator.get_candidates`` drops a matched continuation token that the
target's logits processors would forbid, judged by running the processors on constant fake
logits (all ones). A repetition penalty lowers the fake logit of every token already in the
context to ``1 / penalty``; top-k then keeps the untouched tokens, which all tie at 1 above
them, and sets the context's tokens to ``-inf``. A prompt-lookup draft is always a context
token, so each one is "forbidden" and no round drafts. Here: a prompt that repeats its first
2-gram, top-k 8, 40 seeds, with and without ``repetition_penalty=1.5``; the candidate
generator's proposals are recorded on the way out, not changed (transformers 5.24.0: 83
draft tokens in 159 rounds without the penalty, 0 in 160 with it; with top-k off and the
penalty, 85 in 160: the penalty alone does not stop them).
"""

import sys

import torch
from transformers import AutoModelForCausalLM
from transformers.generation import candidate_generator

from specexact.decoders.tiny_models import catalog_pair

target_dir, _ = catalog_pair("llama-v64")
target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
proposed = []
get_candidates = candidate_generator.PromptLookupCandidateGenerator.get_candidates


def recording_get_candidates(self, input_ids, *args, **kwargs):  # records the drafts' count, changes nothing
    out = get_candidates(self, input_ids, *args, **kwargs)
    proposed.append(int(out[0].shape[-1] - input_ids.shape[-1]))
    return out


candidate_generator.PromptLookupCandidateGenerator.get_candidates = recording_get_candidates
prompt = torch.tensor([[34, 8, 58, 29, 34, 8]])  # "34 8" again: the lookup finds "58 29"
drafts = {}
for penalty in (1.0, 1.5):
    proposed.clear()
    for seed in range(40):
        torch.manual_seed(seed)
        target.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=True, top_k=8,
                        repetition_penalty=penalty, prompt_lookup_num_tokens=2, max_new_tokens=4,
                        eos_token_id=None, pad_token_id=0)
    drafts[penalty] = (sum(proposed), len(proposed))
    print(f"repetition_penalty={penalty}: {drafts[penalty][0]} draft tokens proposed in {drafts[penalty][1]} rounds")
reproduced = drafts[1.5][0] == 0 < drafts[1.0][0]
print("finding reproduced" if reproduced else "not reproduced")
sys.exit(1 if reproduced else 0)
