"""Replay: a greedy universal-assisted call crashes once a sampled one has used the same draft.

Run in an environment with transformers installed:
``python scripts/replays/transformers_uag_greedy_after_sampling_crash.py``; exit status 1
when it reproduces (greedy runs on a fresh draft, then raises after a sampled call with the
same draft and tokenizers), 0 when it does not. Found probing the ``uag`` method for the
transformers adapter (issue 34); the audit's cases send no greedy request to ``uag``.

Engine code path (transformers 5.25.0, ``generation/candidate_generator.py``): a sampled call
builds ``UniversalSpeculativeDecodingGenerator`` with an ``AssistantToTargetTranslator``, which
changes the draft in place where its vocabulary is not a subset of the target's: its
``lm_head`` becomes ``_PruneReindexingLMHead`` (the shared tokens' rows only) and its input
embedding ``_MapInputEmbedding`` (pruned index → draft id, of the *last* input token only,
once its ``map`` flag is set by a first forward). A greedy call builds
``AssistedCandidateGeneratorDifferentTokenizers`` (no translator), whose draft ``generate`` then
runs on that changed draft: ``_MapInputEmbedding.forward``, ``map`` still ``True`` from the
sampled call, returns one embedding (``[1, 1, 64]``) for the 6-token prefill, whose position
ids and mask are for 6; ``LlamaAttention.forward`` then reshapes 6 positions' attention output
to the embedding's shape, ``[1, 1, 768]``, and ``o_proj`` raises ``RuntimeError: mat1 and mat2
shapes cannot be multiplied (1x768 and 128x64)``. The same greedy call on a fresh draft runs.

Here: the adapter's tokenizers and renumbered draft (``transformers_methods``), the prompt
``5 6 7 8 5 6``, 8 new tokens, γ = 3: greedy on a fresh draft, then one sampled call
(T = 0.7), then greedy again.
"""

import sys

import torch
from specexact.decoders.engines.transformers_methods import (
    renumber_draft,
    word_tokenizers,
)
from specexact.decoders.tiny_models import catalog_pair
from transformers import AutoModelForCausalLM, GenerationConfig

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


def run(do_sample: bool) -> str:
    cfg = GenerationConfig(do_sample=do_sample, max_new_tokens=8, pad_token_id=0,
                           **({"temperature": 0.7, "top_k": 0} if do_sample else {}))
    torch.manual_seed(0)
    try:
        with torch.no_grad():
            out = target.generate(x, attention_mask=torch.ones_like(x), generation_config=cfg, assistant_model=draft,
                                  tokenizer=target_tok, assistant_tokenizer=draft_tok)
    except RuntimeError as exc:
        return f"RuntimeError: {str(exc).splitlines()[0][:90]}"
    return f"runs: {out[0, x.shape[1]:].tolist()}"


outcomes = [run(False), run(True), run(False)]
for name, outcome in zip(("greedy, fresh draft", "sampled", "greedy after the sampled call"), outcomes):
    print(f"{name}: {outcome}")
reproduced = outcomes[0].startswith("runs") and outcomes[1].startswith("runs") and outcomes[2].startswith("Runtime")
print("finding reproduced" if reproduced else "not reproduced")
sys.exit(1 if reproduced else 0)
