"""What transformers' early exit and universal assisted generation need from the tiny models.

transformers' ``generate`` has two more drafting methods that run on the tiny Llama pair
(:mod:`specexact.decoders.engines.transformers` runs them):

- **early exit** (``early_exit``): ``GenerationConfig(assistant_early_exit=k)``; the target
  drafts with itself cut after its first ``k`` decoder layers (``EarlyExitCandidateGenerator``
  sets ``config.num_hidden_layers = k`` around the assistant's ``generate``; Llama's forward
  runs ``self.layers[: config.num_hidden_layers]``, then the final norm and ``lm_head``). It
  needs nothing more: :data:`EARLY_EXIT_LAYERS` is ``k``.
- **universal assisted generation** (``uag``): ``generate(assistant_model=draft,
  tokenizer=..., assistant_tokenizer=...)`` with a draft whose vocabulary differs from the
  target's. transformers refuses ``assistant_tokenizer`` when the two vocabulary sizes are
  equal (``GenerationMixin._validate_generation_mode``), and it translates through text, so
  both need real tokenizer objects. The tiny models have none: :func:`word_tokenizers` builds
  two word-level ``PreTrainedTokenizerFast`` in memory (token ``i`` of the target is the word
  ``t<i>``; the draft has the same words under other ids, a fixed permutation, and
  :data:`UAG_EXTRA_TOKENS` more, two-word tokens the target does not have), and
  :func:`renumber_draft` writes the pair's draft in that numbering (its embedding and
  ``lm_head`` rows permuted, zero rows for the extra tokens), so in the target's words it is
  the same model as the pair's draft.

Nothing here changes what transformers does with them; the engine's draft law and the
translation are transformers' own.
"""

from __future__ import annotations

import torch

__all__ = ["EARLY_EXIT_LAYERS", "UAG_EXTRA_TOKENS", "UAG_PERMUTATION_SEED", "draft_permutation", "renumber_draft",
           "word_tokenizers"]

EARLY_EXIT_LAYERS = 1
"""``assistant_early_exit``: the tiny Llama target has 2 decoder layers, it drafts with the first."""

UAG_EXTRA_TOKENS = 8
"""Tokens the draft's vocabulary has beyond the target's words (two-word tokens ``"t<a> t<b>"``):
the draft's vocabulary is then not a subset of the target's, the case transformers handles by
pruning the draft's ``lm_head`` to the shared tokens (``AssistantToTargetTranslator``)."""

UAG_PERMUTATION_SEED = 0
"""Seed of the permutation that numbers the target's words in the draft's vocabulary."""


def draft_permutation(vocab_size: int, seed: int = UAG_PERMUTATION_SEED) -> torch.Tensor:
    """The draft id of each target id: ``perm[i]`` is the draft's id of the word ``t<i>``.

    Parameters
    ----------
    vocab_size : int
        The target's vocabulary size ``V``.
    seed : int

    Returns
    -------
    torch.Tensor
        ``[V]`` int64, a permutation of ``0 .. V-1``.
    """
    return torch.randperm(int(vocab_size), generator=torch.Generator().manual_seed(int(seed)))


def word_tokenizers(vocab_size: int, extra: int = UAG_EXTRA_TOKENS, seed: int = UAG_PERMUTATION_SEED):
    """The target's and the draft's tokenizers: word-level, whitespace-split, no special tokens.

    Parameters
    ----------
    vocab_size : int
        The target's vocabulary size ``V``: its word ``t<i>`` is token ``i``.
    extra : int
        Draft tokens beyond the target's words: id ``V + k`` is the two-word string
        ``"t<2+k> t<3+k>"`` (never produced when encoding, whitespace splits first; decoded,
        the target reads it as two tokens).
    seed : int
        Seed of :func:`draft_permutation`.

    Returns
    -------
    (PreTrainedTokenizerFast, PreTrainedTokenizerFast)
        The target's (``V`` tokens) and the draft's (``V + extra`` tokens).

    Raises
    ------
    ValueError
        ``vocab_size < 4`` or ``extra`` outside ``[0, V - 3]``.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    V, extra = int(vocab_size), int(extra)
    if V < 4 or not 0 <= extra <= V - 3:
        raise ValueError(f"need vocab_size >= 4 and 0 <= extra <= vocab_size - 3, got {vocab_size!r}, {extra!r}")

    def make(vocab: dict) -> PreTrainedTokenizerFast:
        tok = Tokenizer(models.WordLevel(vocab, unk_token=None))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        return PreTrainedTokenizerFast(tokenizer_object=tok)

    perm = draft_permutation(V, seed)
    draft_vocab = {f"t{i}": int(perm[i]) for i in range(V)}
    draft_vocab.update({f"t{2 + k} t{3 + k}": V + k for k in range(extra)})
    return make({f"t{i}": i for i in range(V)}), make(draft_vocab)


def renumber_draft(draft, vocab_size: int, extra: int = UAG_EXTRA_TOKENS, seed: int = UAG_PERMUTATION_SEED) -> None:
    """Write ``draft`` (a loaded ``LlamaForCausalLM`` of the target's vocabulary) in the draft
    tokenizer's numbering, in place: row ``perm[i]`` of its input embedding and ``lm_head``
    becomes the old row ``i``, and ``extra`` zero rows are appended (``vocab_size + extra``).

    Raises
    ------
    ValueError
        The draft's vocabulary size is not ``vocab_size``.
    """
    V = int(vocab_size)
    if draft.config.vocab_size != V:
        raise ValueError(f"the draft must have the target's vocabulary ({V}), got {draft.config.vocab_size}")
    inverse = torch.argsort(draft_permutation(V, seed))
    draft.resize_token_embeddings(V + int(extra), mean_resizing=False)
    with torch.no_grad():
        for weight in (draft.get_input_embeddings().weight, draft.get_output_embeddings().weight):
            weight[:V] = weight[:V][inverse].clone()
            weight[V:] = 0.0
