"""Replay: transformers' universal assisted generation (sampling) returns a q it did not sample from.

Run in an environment with transformers installed:
``python scripts/replays/transformers_uag_q_columns.py``; exit status 1 when it reproduces
(the q handed to ``_speculative_sampling`` is not the law the draft token was sampled from,
and the first token's output law is not the target's), 0 when it does not. Found reading the
code path while adding the ``uag`` method to the transformers adapter (issue 34), confirmed by
its end-to-end audit (``reports/engines/transformers-e2e``).

Engine code path (transformers 5.25.0, ``generation/candidate_generator.py``): with
``do_sample=True``, ``generate(assistant_model=draft, tokenizer=..., assistant_tokenizer=...)``
builds ``UniversalSpeculativeDecodingGenerator`` with an ``AssistantToTargetTranslator``
(``GenerationMixin._get_candidate_generator``, ``assistant_prune_lm_head=True``). Where the
draft's vocabulary is not a subset of the target's, the translator prunes the draft's
``lm_head`` to ``assistant_overlap_token_ids = list(target_to_assistant_input_ids.values())``
-- the shared tokens in the order ``assistant_tokenizer.get_vocab()`` yields them (a hash map's
order, not by id). The draft samples column ``j`` of that pruned head, which
``get_target_ids`` maps correctly (``_assistant_to_target_input_ids[overlap[j]]``); but
``get_target_logits`` writes the pruned logits into
``target_logits[..., _assistant_to_target_input_ids[mask]]``, the shared tokens in ascending
*assistant id* order. Column ``j`` lands on another target token unless the two orders agree,
so ``q`` (``candidate_logits``) is a permutation of the law the draft sampled from, and
``_assisted_decoding`` → ``_speculative_sampling`` accepts with ``min(1, p/q)`` against the
wrong q: the output is no longer the target's law (the #47932 kind of fault).

Here: the adapter's tokenizers and renumbered draft
(``specexact.decoders.engines.transformers_methods``: the tiny Llama pair, the target's words
``t<i>``, the draft's vocabulary those words under other ids plus 8 two-word tokens), the
translator made as ``generate`` makes it, at temperature 1 (no warper), the prompt
``5 6 7 8 5 6``. Printed: whether the pruned order is ascending, the total variation between
q and the law the draft samples from, and the exact first-token law of
``_speculative_sampling`` with that draft law and that q against the target's; then 300
seeded ``generate`` calls (4 new tokens, γ = 3) whose first tokens are compared with both
laws (χ², printed, not part of the verdict).
"""

import sys

import numpy as np
import torch
from specexact.decoders.engines.transformers_methods import (
    renumber_draft,
    word_tokenizers,
)
from specexact.decoders.tiny_models import catalog_pair
from transformers import AutoModelForCausalLM, GenerationConfig
from transformers.generation.candidate_generator import AssistantVocabTranslatorCache

target_dir, draft_dir = catalog_pair("llama-v64")
target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
draft = AutoModelForCausalLM.from_pretrained(draft_dir, dtype=torch.float32).eval()
V = target.config.vocab_size
renumber_draft(draft, V)
target_tok, draft_tok = word_tokenizers(V)
for m in (target, draft):
    m.generation_config.eos_token_id = None
draft.generation_config.num_assistant_tokens = 3
draft.generation_config.num_assistant_tokens_schedule = "constant"
draft.generation_config.assistant_confidence_threshold = 0.0

prompt = [5, 6, 7, 8, 5, 6]
translator = AssistantVocabTranslatorCache.get_translator(target_tok, draft_tok, V, assistant_model=draft,
                                                          assistant_prune_lm_head=True)
overlap = translator.assistant_overlap_token_ids
a2t = translator._assistant_to_target_input_ids
ascending = bool((overlap[1:] > overlap[:-1]).all())
print(f"pruned lm_head order ascending by assistant id: {ascending} (first ids {overlap[:8].tolist()})")

draft_ids = draft_tok(target_tok.decode(prompt), add_special_tokens=False, return_tensors="pt")["input_ids"]
translator.unmap_input_ids()  # the prefill reads the draft's own ids, as in get_candidates
with torch.no_grad():
    pruned = draft(draft_ids).logits[0, -1].double()  # the pruned head: one logit per shared token
    p = target(torch.tensor([prompt])).logits[0, -1].double().softmax(-1)
q = translator.get_target_logits(pruned[None].float())[0].double().softmax(-1)  # what USD hands on as q
d = torch.zeros(V, dtype=torch.float64)
d.index_add_(0, a2t[overlap].long(), pruned.softmax(-1))  # the law of the token it samples, in target ids
tv_q = 0.5 * float((q - d).abs().sum())
print(f"TV(q handed to _speculative_sampling, law the draft samples) = {tv_q:.4f}")


def first_token_law(draft_law, q_law, target_law):
    """The first emitted token's law under _speculative_sampling (accept min(1, p/q), else the residual)."""
    accept = draft_law * torch.clamp(target_law / q_law, max=1.0)
    accept = torch.nan_to_num(accept)
    residual = torch.clamp(target_law - q_law, min=0.0)
    return accept + (1 - accept.sum()) * residual / residual.sum()


out_wrong = first_token_law(d, q, p)
tv_out = 0.5 * float((out_wrong - p).abs().sum())
tv_right = 0.5 * float((first_token_law(d, d, p) - p).abs().sum())
print(f"first token, exact: TV(output law with that q, target law) = {tv_out:.4f} (with q = the draft's law: "
      f"{tv_right:.1e})")

N = 300
counts = np.zeros(V)
cfg = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, max_new_tokens=4, pad_token_id=0)
x = torch.tensor([prompt])
for seed in range(N):
    torch.manual_seed(seed)
    with torch.no_grad():
        out = target.generate(x, attention_mask=torch.ones_like(x), generation_config=cfg, assistant_model=draft,
                              tokenizer=target_tok, assistant_tokenizer=draft_tok)
    counts[int(out[0, len(prompt)])] += 1


def chi2(law):
    expected = N * law.numpy()
    keep = expected > 0
    return float(((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum()), int(keep.sum() - 1)


for name, law in (("target law", p), ("predicted law with that q", out_wrong)):
    stat, dof = chi2(law)
    print(f"{N} generate calls, first token vs {name}: chi2 = {stat:.1f} on {dof} dof")
reproduced = not ascending and tv_q > 0.05 and tv_out > 0.01
print("finding reproduced" if reproduced else "not reproduced")
sys.exit(1 if reproduced else 0)
