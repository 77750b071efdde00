"""Replay: transformers' assisted generation crashes on a long request ("cannot reshape tensor of 0 elements").

Run in an environment with transformers installed (the version sweep runs it in each swept
version's: ``python scripts/version_sweep.py``, ``reports/versions/transformers.md``):
``python scripts/replays/transformers_assisted_long_reshape_crash.py``; exit status 1 when it
reproduces (the RuntimeError below in some of the seeds tried), 0 when every call runs. Found
by the version sweep's draft_model audit of transformers 5.15.1, in the long end-to-end case
(``e2e-llama-v64-draft_model-long-g4``: 48 new tokens, γ = 4; tier ``defect``: its classes 0
and 1 crash, the only two that case ran in the 60 s budget).

Here: the long case's class 0 as the engine adapter calls it (prompt
``28 18 53 49 7 38 46``, ``temperature=1.6``, ``top_p=0.9``, ``repetition_penalty=1.3``,
``max_new_tokens=48``, no EOS; the assistant fixed to 4 tokens a round, schedule
``"constant"``, confidence threshold 0), 4 seeds, each with ``torch.manual_seed(seed)``
before ``generate``; the same with plain sampling (no assistant) for contrast. It prints the
crashing seeds and the first traceback's last frames, so the failing call of the engine's
code shows where the empty tensor arises, and records (without changing anything) the
input length and the cached length of each call of the assistant's ``generate``.
"""

import sys
import traceback

import torch
from transformers import AutoModelForCausalLM

from specexact.decoders.tiny_models import catalog_pair

target_dir, draft_dir = catalog_pair("llama-v64")
target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
draft = AutoModelForCausalLM.from_pretrained(draft_dir, dtype=torch.float32)
for model in (target, draft):
    model.generation_config.eos_token_id = None
draft.generation_config.num_assistant_tokens = 4
draft.generation_config.num_assistant_tokens_schedule = "constant"
draft.generation_config.assistant_confidence_threshold = 0.0
calls = []
assistant_generate = draft.generate


def recording_generate(*args, **kwargs):  # records what the assistant is asked, changes nothing
    ids = kwargs.get("input_ids", args[0] if args else None)
    cache = kwargs.get("past_key_values")
    calls.append((int(ids.shape[-1]), int(cache.get_seq_length()) if cache is not None else 0))
    return assistant_generate(*args, **kwargs)


draft.generate = recording_generate
prompt = torch.tensor([[28, 18, 53, 49, 7, 38, 46]])
crashes = {"assisted": [], "plain": []}
first = None
for label, assistant in (("assisted", draft), ("plain", None)):
    for seed in range(4):
        torch.manual_seed(seed)
        calls.clear()
        try:
            with torch.no_grad():
                target.generate(prompt, attention_mask=torch.ones_like(prompt), assistant_model=assistant,
                                do_sample=True, temperature=1.6, top_k=0, top_p=0.9, repetition_penalty=1.3,
                                max_new_tokens=48, eos_token_id=None, pad_token_id=0)
        except RuntimeError as exc:
            if "cannot reshape tensor of 0 elements" not in str(exc):
                raise
            crashes[label].append(seed)
            if first is None:
                first = traceback.format_exc()
                print(f"seed {seed}: the crashing assistant call got {calls[-1][0]} tokens with {calls[-1][1]} "
                      f"already in its cache (calls before: {calls[-4:-1]})")
    print(f"{label}: RuntimeError 'cannot reshape tensor of 0 elements' for seeds {crashes[label]} of 0-3")
if first:
    frames = [line.strip() for line in first.splitlines() if line.strip().startswith("File ")]
    print("first crash, outermost transformers frames: " + " <- ".join(
        f.split("site-packages/")[-1] for f in frames if "transformers/generation" in f)[-300:])
reproduced = bool(crashes["assisted"]) and not crashes["plain"]
print("finding reproduced" if reproduced else "not reproduced")
sys.exit(1 if reproduced else 0)
