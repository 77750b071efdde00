"""Replay: ``llama_cpp.Llama(seed=0)`` is not seeded: seed 0 becomes llama.cpp's "random seed".

Run in the llamacpp-e2e environment (``.tox/llamacpp-e2e/bin/python
scripts/replays/llamacpp_seed_zero_unseeded.py``); exit status 1 when it reproduces. Found by
reading the source while writing the adapter, not by the audit: the adapter seeds every request
with ``Llama.set_seed(seed)``, which keeps 0 (its audits pass), so the audited path does not
reach it. A defect of the seed bookkeeping, not of the law: every output still follows the
target's law; two ``Llama`` objects made with ``seed=0`` do not reproduce each other.

Engine code path (llama-cpp-python 0.3.16, ``llama_cpp/llama.py``): ``Llama.__init__`` stores
``self._seed = seed or llama_cpp.LLAMA_DEFAULT_SEED``, so ``seed=0`` (falsy) becomes
``LLAMA_DEFAULT_SEED`` (0xFFFFFFFF); ``generate`` -> ``_init_sampler`` ->
``sampler.add_dist(self._seed)`` -> llama.cpp's ``llama_sampler_init_dist``, whose
``get_rng_seed`` (``src/llama-sampling.cpp``) replaces ``LLAMA_DEFAULT_SEED`` by a
``std::random_device`` draw. ``set_seed(0)`` stores 0 as given, and ``create_completion(seed=0)``
calls ``set_seed``: only the constructor loses it. The API reference documents ``seed`` as
"RNG seed, -1 for random"; 0 was llama-cpp-python's "random" in 2023 (abetlen/llama-cpp-python
#386, #632 asks whether ``seed=0`` makes outputs reproducible), and the constructor still
treats it so. Here: the tiny Llama as GGUF, two ``Llama``
objects with ``seed=0`` and two with ``seed=1``, each sampling 16 tokens at temperature 1 from
the same prompt: the ``seed=1`` pair agrees, the ``seed=0`` pair (a 16-token match has
probability far below 1e-9 for independent draws here) does not.
"""

import sys

import llama_cpp

from specexact.decoders.tiny_models import catalog_pair
from specexact.decoders.tiny_models.gguf_export import gguf_model

path = str(gguf_model(catalog_pair("llama-v64")[0]))
prompt = [5, 6, 7, 8]


def sample(seed: int) -> list[int]:
    llm = llama_cpp.Llama(model_path=path, n_ctx=64, n_threads=1, seed=seed, verbose=False)
    try:
        print(f"Llama(seed={seed}): stored seed {llm._seed:#x}")
        out = []
        for token in llm.generate(prompt, top_k=0, top_p=1.0, min_p=0.0, temp=1.0):
            out.append(int(token))
            if len(out) == 16:
                break
        return out
    finally:
        llm.close()


same = {seed: sample(seed) == sample(seed) for seed in (1, 0)}
print(f"seed=1 twice: same outputs {same[1]}; seed=0 twice: same outputs {same[0]}")
reproduced = same[1] and not same[0]
print("finding reproduced" if reproduced else "not reproduced")
sys.exit(1 if reproduced else 0)
