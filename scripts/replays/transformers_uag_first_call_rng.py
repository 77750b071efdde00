"""Replay: the first universal-assisted (sampling) call with a new draft ignores its seed's stream.

Run in an environment with transformers installed:
``python scripts/replays/transformers_uag_first_call_rng.py``; exit status 1 when it
reproduces (the first seeded call after loading the draft gives another output than the same
call again, and pruning a linear layer draws from torch's global RNG), 0 when it does not.
Found by the ``uag`` end-to-end audit (``reports/engines/transformers-e2e``: its scenario
cases' ``reproducible`` and ``reproducible_in_mix`` checks fail on one speculative request
each, the first request after each load).

Engine code path (transformers 5.25.0): the first sampled ``generate(assistant_model=draft,
tokenizer=..., assistant_tokenizer=...)`` with a tokenizer pair makes an
``AssistantToTargetTranslator`` (``GenerationMixin._get_candidate_generator`` →
``AssistantVocabTranslatorCache.get_translator``), which prunes the draft's ``lm_head``:
``_PruneReindexingLMHead.__init__`` → ``prune_linear_layer`` builds a new ``nn.Linear``,
whose ``reset_parameters`` (``kaiming_uniform_``) draws from torch's global RNG before the
pruned weights are copied in. That happens inside ``generate``, after the caller's
``torch.manual_seed``, so the first call's draws are shifted; the translator is cached per
tokenizer pair, so later calls do not draw and agree with each other. The law is unchanged
(the stream is still random); only the seed's promise breaks, once per new tokenizer pair.

Here: the adapter's tokenizers and renumbered draft (``transformers_methods``), the prompt
``5 6 7 8 5 6``, T = 0.7, 6 new tokens, γ = 3, seed 0 three times; then the RNG state before
and after ``prune_linear_layer`` on its own.
"""

import sys

import torch
from specexact.decoders.engines.transformers_methods import (
    renumber_draft,
    word_tokenizers,
)
from specexact.decoders.tiny_models import catalog_pair
from transformers import AutoModelForCausalLM, GenerationConfig
from transformers.pytorch_utils import prune_linear_layer

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

x = torch.tensor([[5, 6, 7, 8, 5, 6]])
cfg = GenerationConfig(do_sample=True, temperature=0.7, top_k=0, max_new_tokens=6, pad_token_id=0)
outputs = []
for call in range(3):
    torch.manual_seed(0)
    with torch.no_grad():
        out = target.generate(x, attention_mask=torch.ones_like(x), generation_config=cfg, assistant_model=draft,
                              tokenizer=target_tok, assistant_tokenizer=draft_tok)
    outputs.append(out[0, x.shape[1]:].tolist())
    print(f"call {call + 1}, seed 0: {outputs[-1]}")

torch.manual_seed(0)
before = torch.random.get_rng_state()
prune_linear_layer(torch.nn.Linear(4, 6, bias=False), torch.tensor([0, 2, 5]))
draws = not torch.equal(before, torch.random.get_rng_state())
print(f"prune_linear_layer advances torch's global RNG: {draws}")
reproduced = outputs[0] != outputs[1] and outputs[1] == outputs[2] and draws
print("finding reproduced" if reproduced else "not reproduced")
sys.exit(1 if reproduced else 0)
