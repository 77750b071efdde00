"""The EAGLE reference implementation's ``evaluate_posterior``, one tree path as a chain.

What runs
---------
``eagle.model.utils.evaluate_posterior(logits, candidates, logits_processor,
cart_candidates_prob, op, p_indices, tree_candidates, b_indices) -> (best_candidate,
accept_length, sample_p)`` (``eagle-llm`` 1.2.1, the authors' package; pure torch, one
sequence). For a sampling ``logits_processor`` it walks the tree depth by depth: at depth
``i`` it processes the target logits of the accepted prefix with ``logits_processor``,
``softmax``, and accepts candidate ``x`` when ``random.random() <= p(x) / q(x)`` (Python's
``random``); on a rejection the target law becomes ``max(p - q, 0)`` renormalised and the
next sibling is tried. The caller (``update_inference_inputs``) then draws the next token
with ``torch.multinomial(sample_p, 1)`` (torch's global RNG); with ``logits_processor=None``
(temperature 0) it verifies greedily and takes ``argmax``.

What the adapter translates
---------------------------
A chain of ``K`` drafts is a tree with one path: ``candidates = [[root, d_1 .. d_K]]``,
``logits = [[target logits after 0 .. K drafts]]``, ``cart_candidates_prob[0, i] =
q_{i-1}(d_i)``, ``op[i-1] = [q_{i-1}]`` (the draft law at depth ``i``), ``p_indices =
[[0] * (K+1)]``, ``b_indices = [[[]] * (K+1)]`` (no siblings). Rows go one by one (EAGLE
takes one sequence). Randomness: Python's ``random`` and torch's global RNG, both seeded
once per call from the passed generator and restored afterwards.

Two levels:

- :data:`verify` (``--sampler eagle``), probability level: ``logits = log(target_probs)``
  and ``logits_processor = LogitsProcessorList()`` (empty: the laws are already processed).
- :data:`verify_logits_level` (``--sampler eagle-logits``), logits level: the raw target
  logits and EAGLE's own ``prepare_logits_processor(temperature, top_p=..., top_k=...)``
  (order: temperature, top-p, top-k; ``None`` below temperature 1e-5: greedy). Its
  repetition penalty is called with ``input_ids=None`` by ``evaluate_posterior`` and cannot
  work; EAGLE has no frequency / presence penalty or min-p, so cases that need those are
  skipped. ``evaluate_posterior`` draws the bonus token (all drafts accepted) from
  ``softmax`` of the *unprocessed* logits, and so does the logits-level audit see it.
"""

from __future__ import annotations

import contextlib
import random
from typing import Iterator

import torch

from specexact.decoders.processing import LogitsProcessing
from specexact.decoders.rejection_sampling import PLACEHOLDER_ID

from .protocol import Capabilities, LogitsVerifyInputs, probs_to_logits

__all__ = ["EagleEvaluatePosterior", "EagleLogitsLevel", "EAGLE_PROCESSING", "verify", "verify_logits_level",
           "TESTED_VERSIONS", "seeded_python_and_torch_rng"]

TESTED_VERSIONS = ("1.2.1",)
"""``eagle-llm`` versions this adapter was run against."""

EAGLE_PROCESSING = LogitsProcessing(order=("temperature", "top_p", "top_k"), repetition_penalty_scope="output",
                                    greedy=True)
"""What ``prepare_logits_processor`` + ``evaluate_posterior`` apply to the draft positions."""


@contextlib.contextmanager
def seeded_python_and_torch_rng(generator: torch.Generator | None) -> Iterator[int]:
    """Python's ``random`` and torch's CPU RNG seeded from one draw of ``generator``; both
    restored on exit. Yields the seed (replay: ``random.seed(s); torch.manual_seed(s)``)."""
    gen_device = generator.device if generator is not None else torch.device("cpu")
    seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=gen_device).item())
    state = random.getstate()
    try:
        with torch.random.fork_rng(devices=[]):
            random.seed(seed)
            torch.manual_seed(seed)
            yield seed
    finally:
        random.setstate(state)


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("eagle-llm")
    except metadata.PackageNotFoundError:
        return "unknown"


class EagleEvaluatePosterior:
    """Probability level; call it like :func:`specexact.decoders.verify`.

    Raises
    ------
    ImportError
        ``eagle-llm`` (or transformers) is not installed.
    """

    name = "eagle"

    def __init__(self) -> None:
        from eagle.model.utils import evaluate_posterior
        from transformers import LogitsProcessorList

        self.function = evaluate_posterior
        self.identity = LogitsProcessorList()
        self.version = _version()
        self.capabilities = Capabilities(
            max_batch_size=1, dtypes=(torch.float32,), devices=("cpu",), randomness="global_rng",
            notes="eagle.model.utils.evaluate_posterior on a one-path tree, empty LogitsProcessorList, then "
                  "torch.multinomial(sample_p) as update_inference_inputs; Python random + torch global RNG "
                  "seeded from the generator and restored",
        )

    def metadata(self) -> dict:
        """Library, version, wrapped function, capabilities."""
        return {
            "adapter": f"{__name__}:{type(self).__name__}",
            "library": "eagle-llm",
            "version": self.version,
            "version_tested": self.version in TESTED_VERSIONS,
            "tested_versions": list(TESTED_VERSIONS),
            "function": "eagle.model.utils.evaluate_posterior",
            "capabilities": self.capabilities.to_dict(),
        }

    def row(self, drafts: torch.Tensor, draft_probs: torch.Tensor, logits: torch.Tensor, processor) -> list[int]:
        """One sequence: ``drafts [K]``, ``draft_probs [K, V]``, target ``logits [K+1, V]``
        -> the emitted tokens (accepted drafts, then the sampled one)."""
        K = drafts.shape[0]
        candidates = torch.cat([torch.zeros(1, dtype=torch.long), drafts.long()])[None]  # [1, K+1]
        cart = torch.ones(1, K + 1, dtype=torch.float32)
        cart[0, 1:] = draft_probs.gather(1, drafts.long()[:, None])[:, 0]
        op = [draft_probs[i][None] for i in range(K)]
        p_indices = [[0] * (K + 1)]
        b_indices = [[[] for _ in range(K + 1)]]
        best, accept_length, sample_p = self.function(logits[None], candidates, processor, cart, op, p_indices,
                                                      candidates, b_indices)
        n = int(accept_length)
        if processor is not None:
            token = int(torch.multinomial(sample_p, 1))
        else:
            token = int(torch.argmax(sample_p))
        return drafts[:n].tolist() + [token]

    def verify_rows(self, draft_token_ids, draft_probs, target_probs) -> torch.Tensor:
        """All rows on the RNGs as they stand: ``-> [B, K+1]`` int64."""
        B, K = draft_token_ids.shape
        logits = probs_to_logits(target_probs.detach().cpu(), torch.float32)
        q = draft_probs.detach().to(torch.float32).cpu()
        ids = draft_token_ids.detach().cpu()
        out = torch.full((B, K + 1), PLACEHOLDER_ID, dtype=torch.int64)
        for b in range(B):
            tokens = self.row(ids[b], q[b], logits[b], self.identity)
            out[b, : len(tokens)] = torch.tensor(tokens)
        return out.to(draft_token_ids.device)

    def __call__(self, draft_token_ids, draft_probs, target_probs, generator=None) -> torch.Tensor:
        """The ``verify`` protocol: ``[B, K], [B, K, V], [B, K+1, V], generator -> [B, K+1]``."""
        with torch.inference_mode(), seeded_python_and_torch_rng(generator):
            return self.verify_rows(draft_token_ids, draft_probs, target_probs)

    def __repr__(self) -> str:
        return f"<EagleEvaluatePosterior eagle-llm {self.version}>"


class EagleLogitsLevel(EagleEvaluatePosterior):
    """Logits level: the raw target logits with EAGLE's ``prepare_logits_processor``.

    Raises
    ------
    ImportError
        ``eagle-llm`` is not installed.
    """

    name = "eagle-logits"

    def __init__(self) -> None:
        super().__init__()
        from eagle.model.utils import prepare_logits_processor

        self.prepare = prepare_logits_processor
        self.capabilities = Capabilities(
            max_batch_size=1, dtypes=(torch.float32,), devices=("cpu",), randomness="global_rng",
            logits_level=True, order_of_operations=EAGLE_PROCESSING.order,
            repetition_penalty_scope=EAGLE_PROCESSING.repetition_penalty_scope, greedy=EAGLE_PROCESSING.greedy,
            notes="raw target logits and eagle.model.utils.prepare_logits_processor(temperature, top_p, top_k) "
                  "into evaluate_posterior (one-path tree); rows one by one",
        )

    def metadata(self) -> dict:
        meta = super().metadata()
        meta.update({"adapter": f"{__name__}:{type(self).__name__}",
                     "processors_from": "eagle.model.utils.prepare_logits_processor",
                     "processing": EAGLE_PROCESSING.to_dict(), "capabilities": self.capabilities.to_dict()})
        return meta

    def processor(self, params):
        """EAGLE's processor for a row (``None``: greedy).

        Raises
        ------
        ValueError
            The row needs an operation EAGLE cannot apply (penalties, min-p).
        """
        bad = EAGLE_PROCESSING.unsupported(params)
        if bad:
            raise ValueError(f"EAGLE's evaluate_posterior cannot apply {', '.join(bad)}")
        return self.prepare(temperature=float(params.temperature), top_p=float(params.top_p),
                            top_k=int(params.top_k))

    def verify_logits(self, inputs: LogitsVerifyInputs, generator: torch.Generator | None = None) -> torch.Tensor:
        """The logits-level protocol: ``-> LongTensor [B, K+1]``."""
        B, K = inputs.batch_size, inputs.num_draft_tokens
        processors = [self.processor(p) for p in inputs.target_params]
        logits = inputs.target_logits.detach().to(torch.float32).cpu()
        q = inputs.draft_probs.detach().to(torch.float32).cpu()
        ids = inputs.draft_token_ids.detach().cpu()
        out = torch.full((B, K + 1), PLACEHOLDER_ID, dtype=torch.int64)
        with torch.inference_mode(), seeded_python_and_torch_rng(generator):
            for b in range(B):
                tokens = self.row(ids[b], q[b], logits[b].clone(), processors[b])
                out[b, : len(tokens)] = torch.tensor(tokens)
        return out.to(inputs.draft_token_ids.device)

    def __repr__(self) -> str:
        return f"<EagleLogitsLevel eagle-llm {self.version}>"


def __getattr__(attr: str):
    """``verify`` / ``verify_logits_level`` are built on first use (PEP 562), so this module
    imports without ``eagle-llm``."""
    global verify, verify_logits_level
    if attr == "verify":
        verify = EagleEvaluatePosterior()
        return verify
    if attr == "verify_logits_level":
        verify_logits_level = EagleLogitsLevel()
        return verify_logits_level
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
