"""Replay: transformers' assistant applies the request's sampling warpers twice.

Run in the main test environment (transformers is in the ``test`` extra) or in the
end-to-end one (``tox -e transformers-e2e`` builds it):
``python scripts/replays/transformers_assistant_double_warpers.py`` or
``.tox/transformers-e2e/bin/python scripts/replays/transformers_assistant_double_warpers.py``;
exit status 1 when it reproduces (transformers 5.24.0: max |diff| 7.14 against ``raw / T``,
4.8e-06 against ``raw / T**2``).

Engine code path (transformers 5.24.0, ``generation/candidate_generator.py`` and
``generation/utils.py``): ``AssistedCandidateGenerator.__init__`` keeps the target's
``LogitsProcessorList`` (temperature, top-k, top-p, min-p warpers included) and a copy of the
target's ``GenerationConfig`` (``do_sample=True``, the same ``temperature`` / ``top_k`` /
``top_p`` / ``min_p``); ``_prepare_generation_args`` hands both to the assistant's
``generate``. There ``_get_logits_processor`` merges the passed list into its defaults
(``_merge_criteria_processor_list`` appends the passed warpers, which have no default
counterpart yet) and then, because ``do_sample`` is set, appends its own
``TemperatureLogitsWarper`` / ``TopKLogitsWarper`` / ``TopPLogitsWarper`` /
``MinPLogitsWarper`` again. The assistant drafts from logits divided by ``T**2`` (and top-p
applied twice). ``_speculative_sampling`` uses those same processed draft logits as ``q``, so
the output law stays the target's; only acceptance falls below what a draft sampled at the
request's parameters gives. Here: the assistant's first draft scores against its raw logits
after the prompt, at ``temperature=0.5``.
"""

import sys

import torch
from transformers import AutoModelForCausalLM

from specexact.decoders.tiny_models import catalog_pair

T = 0.5
target_dir, draft_dir = catalog_pair("llama-v64")  # tiny Llama folders (config.json + model.safetensors)
target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
draft = AutoModelForCausalLM.from_pretrained(draft_dir, dtype=torch.float32)
draft.generation_config.num_assistant_tokens = 3
draft.generation_config.num_assistant_tokens_schedule = "constant"
draft.generation_config.assistant_confidence_threshold = 0.0

calls = []
assistant_generate = draft.generate


def recording_generate(*args, **kwargs):  # records the assistant's output, changes nothing
    out = assistant_generate(*args, **kwargs)
    calls.append(out)
    return out


draft.generate = recording_generate
prompt = torch.tensor([[5, 6, 7, 8]])
torch.manual_seed(0)
target.generate(prompt, attention_mask=torch.ones_like(prompt), assistant_model=draft, do_sample=True,
                temperature=T, top_k=0, max_new_tokens=4, eos_token_id=None, pad_token_id=0)
scores = calls[0].scores[0][0]  # the assistant's processed logits of its first draft, [V]
with torch.no_grad():
    raw = draft(prompt).logits[0, -1].float()
once = (scores - raw / T).abs().max().item()
twice = (scores - raw / T**2).abs().max().item()
print(f"assistant's first draft logits vs raw / T: max |diff| = {once:.3g}; vs raw / T**2: {twice:.3g}")
reproduced = twice < 1e-4 < once
print("finding reproduced" if reproduced else "not reproduced")
sys.exit(1 if reproduced else 0)
