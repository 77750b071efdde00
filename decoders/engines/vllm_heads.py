"""vLLM's head-drafted and model-free speculative methods: their ``speculative_config`` and
the tiny heads they load (issue 34).

Keys of vLLM's ``SpeculativeConfig`` (``vllm/config/speculative.py``, vLLM 0.32.0):

- ``eagle`` / ``eagle3``: ``{"method": m, "model": head_dir, "num_speculative_tokens": K,
  "draft_sample_method": "greedy"}`` with an EAGLE / EAGLE-3 head of the Llama target
  (:func:`~specexact.decoders.tiny_models.heads.make_head`). The proposer
  (``vllm/v1/spec_decode/llm_base_proposer.py``, ``_sample_draft_tokens``) takes the argmax
  of the head's logits unless ``draft_sample_method`` is ``"probabilistic"``: point-mass
  drafts, declared ``draft_sampling="greedy"``;
- ``medusa``: ``{"method": "medusa", "model": head_dir, "num_speculative_tokens": K}`` with
  K Medusa heads (vLLM sets the head count to K); ``MedusaProposer.propose``
  (``vllm/v1/spec_decode/medusa.py``) stacks each head's ``argmax``: point-mass drafts;
- ``mtp``: ``{"method": "mtp", "num_speculative_tokens": K}`` with vLLM started on a
  MiMo-layout *target* that carries the MTP layer (the Qwen2 target's own tensors plus the
  layer: :func:`~specexact.decoders.tiny_models.heads.make_head` ``"mtp"``); drafted by the
  same proposer as EAGLE (argmax);
- ``suffix``: ``{"method": "suffix", "num_speculative_tokens": K,
  "suffix_decoding_max_cached_requests": 0}``: suffix trees over the request's own prompt and
  output (needs the ``arctic-inference`` package; ``SuffixDecodingProposer.propose`` in
  ``vllm/v1/spec_decode/suffix_decoding.py`` returns token ids only: point-mass drafts, at
  most K, fewer where the tree has no confident continuation). The global tree over earlier
  requests' outputs is off (0 cached requests): with it a request's drafts, hence which
  sample its seed gives, depend on what ran before, and the reproducibility check would
  read that as a defect.

A head is made from the target folder's spec (its ``specexact.json``), in the model cache
beside it, so every engine process derives the same bytes from the same target.
"""

from __future__ import annotations

from pathlib import Path

from specexact.decoders.tiny_models.heads import make_head, spec_of

__all__ = ["HEAD_METHODS", "MODEL_FREE_METHODS", "head_speculative_config"]

HEAD_METHODS = ("eagle", "eagle3", "medusa", "mtp")
"""Methods drafted by a head that reads the target's hidden states (made by specexact)."""

MODEL_FREE_METHODS = ("suffix",)
"""Methods drafted from the context without a model, beside vLLM's ``ngram``."""


def head_speculative_config(method: str, target_dir: Path, num_speculative_tokens: int) -> tuple[Path, dict]:
    """The folder vLLM loads as its target and the ``speculative_config`` of ``method``.

    Parameters
    ----------
    method : str
        One of :data:`HEAD_METHODS` or :data:`MODEL_FREE_METHODS`.
    target_dir : Path
        A target folder made by the tiny-model zoo (its ``specexact.json`` names the spec).
    num_speculative_tokens : int
        K, already checked ``>= 1``.

    Returns
    -------
    (Path, dict)
        ``target_dir`` itself, except for ``mtp``: the MiMo-layout folder holding the same
        target tensors and the MTP layer.

    Raises
    ------
    ValueError
        An unknown ``method``, a target not made by the zoo, or a target of another
        architecture than the head needs; the message names the argument and its value.
    """
    k = int(num_speculative_tokens)
    if method in MODEL_FREE_METHODS:
        return Path(target_dir), {"method": method, "num_speculative_tokens": k, "suffix_decoding_max_cached_requests": 0}
    if method not in HEAD_METHODS:
        raise ValueError(f"method must be one of {HEAD_METHODS + MODEL_FREE_METHODS}, got {method!r}")
    target_dir = Path(target_dir)
    spec = spec_of(target_dir)
    cache = target_dir.parent
    if method == "mtp":
        return make_head("mtp", spec, cache), {"method": "mtp", "num_speculative_tokens": k}
    if method == "medusa":
        head = make_head("medusa", spec, cache, num_heads=k)
        return target_dir, {"method": "medusa", "model": str(head), "num_speculative_tokens": k}
    head = make_head(method, spec, cache)
    return target_dir, {"method": method, "model": str(head), "num_speculative_tokens": k,
                        "draft_sample_method": "greedy"}
