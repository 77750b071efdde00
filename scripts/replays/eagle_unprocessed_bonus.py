"""Replay: EAGLE's evaluate_posterior draws the bonus token from the *unprocessed* target logits.

Run in the eagle environment (``tox -e eagle`` builds it):
``.tox/eagle/bin/python scripts/replays/eagle_unprocessed_bonus.py``; exit status 1 when it
reproduces.

Engine code path (``eagle-llm`` 1.2.1, ``eagle/model/utils.py``, ``evaluate_posterior``,
sampling branch): at each depth the target logits are processed,
``gt_logits = logits_processor(None, logits[fi, i - 1][None])[0]``, before ``softmax``;
but after the loop, when every candidate was accepted (``adjustflag`` is False or
``accept_length == candidates.shape[1]``), it returns
``sample_p = torch.softmax(logits[best_candidate, accept_length - 1], dim=0)`` with no
``logits_processor``; ``update_inference_inputs`` then samples the next token from it with
``torch.multinomial``. With temperature != 1, top-p or top-k (``prepare_logits_processor``)
the bonus token follows the raw target law instead of the processed one. Here: top_k = 1
over logits [2.0, 1.9, 1.8, 1.7]: only token 0 may follow, and the draft 0 is accepted
with probability 1; the bonus is drawn from softmax([2.0, 1.9, 1.8, 1.7]).
"""

import random
import sys

import torch
from eagle.model.utils import evaluate_posterior, prepare_logits_processor

random.seed(0)
torch.manual_seed(0)
K, V = 1, 4
logits = torch.tensor([[2.0, 1.9, 1.8, 1.7]] * (K + 1))[None]  # one path, K + 1 positions
candidates = torch.tensor([[0, 0]])  # root, then draft token 0
cart = torch.tensor([[1.0, 1.0]])  # the draft law is a point mass on 0
op = [torch.eye(V)[0][None]]
processor = prepare_logits_processor(temperature=1.0, top_k=1)
bonus = []
for _ in range(200):
    best, accept_length, sample_p = evaluate_posterior(logits, candidates, processor, cart, op, [[0, 0]],
                                                       candidates, [[[], []]])
    assert int(accept_length) == 1
    bonus.append(int(torch.multinomial(sample_p, 1)))
print("sample_p after full acceptance:", [round(float(x), 4) for x in sample_p])
print("bonus tokens drawn:", sorted(set(bonus)), "(top_k = 1 allows only 0)")
bad = set(bonus) != {0}
print("finding reproduced" if bad else "not reproduced")
sys.exit(1 if bad else 0)
