"""specexact's own speculative decoder behind the end-to-end engine protocol.

:class:`BuiltinEngine` loads the tiny models (:func:`~specexact.decoders.tiny_models.load_model`)
and runs :func:`~specexact.decoders.speculative_generate` (``speculative=True``) or
:func:`~specexact.decoders.naive_generate` (``speculative=False``) on them: the reference
an end-to-end audit of a real engine is read against, and the correct engine that the planted
end-to-end faults of :mod:`specexact.audit.zoo.e2e` wrap.

Requests of one call are grouped by prompt length, ``max_tokens``, ``min_tokens``, EOS and
whether they are seeded (one decoder call per group). A group of seeded requests runs its rows
in the order of their seeds and draws from one ``torch.Generator`` seeded from those seeds, so
the same requests with the same seeds give the same outputs, in any order and whatever
unseeded requests or requests of other shapes share the call (``per_request_seed=False``: a
seeded request's output depends on the other seeded requests of its shape in the call).
Unseeded requests (``seed=None``) draw from the engine's own stream, one ``torch.Generator``
seeded from the engine's ``seed`` at :meth:`~BuiltinEngine.load` and advanced by every call:
the rows of a group are drawn together (independent draws), and each call draws afresh.
Hence its :class:`~specexact.decoders.engines.seeds.SeedPromise`: ``other_mix`` (the same
seeded requests in another order, without the unseeded ones) and ``unseeded_independent``. ``min_tokens`` is applied by setting EOS's raw logit to ``-inf`` on both models until
that many tokens were generated (before any processing, as vLLM and Hugging Face do).

Logprobs (``logprobs="processed"``): on the speculative path, the log of each emitted token's
probability under the target law the verifier was given at its position (the decoder's
float32 ``target_probs``, read by a round observer); on the plain path, the log of its
probability under the processed law of the target at its prefix, recomputed after sampling in
the models' float64 (:func:`~specexact.decoders.tiny_models.conditional_laws`).

Both models are loaded with a prefix key / value cache
(:mod:`~specexact.decoders.tiny_models.kv_cache`): each call computes only the columns after
those it shares with the model's previous call (the law is unchanged; rounding only).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Sequence

import torch

from .protocol import EngineCapabilities, GenerationRequest, GenerationResult
from .seeds import SeedPromise

__all__ = ["BuiltinEngine", "MinTokensModel", "group_seed"]


class MinTokensModel:
    """``model`` with EOS's raw logit at ``-inf`` while fewer than ``min_tokens`` tokens
    follow a prompt of ``prompt_len`` tokens (position ``t`` predicts generated token
    ``t - prompt_len + 1``).

    Shape: as ``model``: ``input_ids [B, T], positions [B, n] -> logits [B, n, V]``.
    """

    def __init__(self, model, *, prompt_len: int, min_tokens: int, eos_token_id: int) -> None:
        self.model, self.prompt_len, self.min_tokens, self.eos = model, int(prompt_len), int(min_tokens), int(eos_token_id)
        self.vocab_size, self.device = model.vocab_size, model.device

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        logits = self.model(input_ids, positions)
        if positions is None:
            positions = torch.arange(input_ids.shape[1], device=logits.device)[None].expand(input_ids.shape[0], -1)
        generated = positions.to(logits.device) - (self.prompt_len - 1)  # tokens generated before the one predicted
        logits = logits.clone()
        logits[..., self.eos] = torch.where(generated < self.min_tokens, -torch.inf, logits[..., self.eos])
        return logits


def group_seed(seeds: Sequence[int]) -> int:
    """A 63-bit seed that is a stable function of a group's request seeds (in order)."""
    digest = hashlib.sha256(",".join(str(int(s)) for s in seeds).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


class BuiltinEngine:
    """specexact's decoder as an :class:`~specexact.decoders.engines.EndToEndEngine`.

    Parameters
    ----------
    dtype : torch.dtype, default float64
        The models' forward precision.
    seed : int, default 0
        The engine's seed: its stream for unseeded requests starts from it at every
        :meth:`load` (as ``vllm.LLM(seed=...)`` seeds vLLM's global generator).

    Raises
    ------
    ValueError
        ``seed`` not an integer >= 0.

    Notes
    -----
    The hooks :meth:`speculative_target`, :meth:`speculative_params`, :meth:`group_target`,
    :meth:`generator`, :meth:`group_generator`, :meth:`unseeded_generator` and :attr:`verifier`
    are what the planted faults of :mod:`specexact.audit.zoo.e2e` override.
    """

    name = "builtin"

    def __init__(self, dtype: torch.dtype = torch.float64, seed: int = 0) -> None:
        if isinstance(seed, bool) or int(seed) != seed or seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
        self.dtype, self.seed = dtype, int(seed)
        self._stream = torch.Generator().manual_seed(self.seed)
        self.target = self.draft = None
        self.method: str | None = None
        self.num_speculative_tokens = 0

    @property
    def verifier(self):
        """The verification function the decoder calls (:func:`~specexact.decoders.verify`)."""
        from specexact.decoders import verify

        return verify

    def capabilities(self) -> EngineCapabilities:
        from specexact.decoders.processing import BUILTIN_PROCESSING

        return EngineCapabilities(methods=("draft_model", "draft_model_greedy"), processing=BUILTIN_PROCESSING,
                                  per_request_seed=False, reports_acceptance=True, version="specexact",
                                  notes=("one generator per group of requests, seeded from their seeds; no "
                                         "scheduler (scheduler=()): every generate call runs its requests "
                                         "together, arrival steps and scheduler settings do not apply and the "
                                         "law does not depend on them"),
                                  acceptance_scheme="tokenwise", draft_sampling="request",
                                  first_round_after_token=False, logprobs="processed", stop_tokens=True,
                                  seeds=SeedPromise(other_mix=True, unseeded_independent=True,
                                                    source="specexact's BuiltinEngine (module docstring): a "
                                                           "seeded group's rows in seed order, one generator per "
                                                           "group; unseeded rows from the engine's stream"))

    def load(self, target_dir: Path, draft_dir: Path | None, *, method: str, num_speculative_tokens: int) -> None:
        """Load the target and the draft (``draft_dir`` is required: both methods draft with a model).

        Raises
        ------
        ValueError
            A method other than ``draft_model`` / ``draft_model_greedy``, no ``draft_dir``, or
            ``num_speculative_tokens < 1``.
        """
        from specexact.decoders.tiny_models import load_model

        if method not in self.capabilities().methods:
            raise ValueError(f"method must be one of {self.capabilities().methods}, got {method!r}")
        if draft_dir is None:
            raise ValueError(f"draft_dir is required for method {method!r}")
        if int(num_speculative_tokens) < 1:
            raise ValueError(f"num_speculative_tokens must be >= 1, got {num_speculative_tokens!r}")
        # each model resumes its next call from its last one's keys and values (the decoder's
        # calls repeat the columns before the first rejected draft): the same law, fewer columns
        self.target = load_model(target_dir, dtype=self.dtype, kv_cache=True)
        self.draft = load_model(draft_dir, dtype=self.dtype, kv_cache=True)
        self.method, self.num_speculative_tokens = method, int(num_speculative_tokens)
        self._stream = torch.Generator().manual_seed(self.seed)

    def close(self) -> None:
        self.target = self.draft = None
        self.method = None

    # --- hooks (planted faults override them) ------------------------------------------------
    def speculative_target(self, target):
        """The target model the speculative path calls."""
        return target

    def speculative_params(self, params):
        """``(target_params, draft_params)`` of the speculative path for a request's params."""
        from specexact.decoders.params import SamplingParams

        return params, (SamplingParams(temperature=0.0) if self.method == "draft_model_greedy" else params)

    def run_speculative(self, target, draft, prompt_ids: torch.Tensor, target_params, draft_params, **kwargs):
        """A group's speculative call: :func:`~specexact.decoders.speculative_generate` with
        these arguments (``prompt_ids [B, T0]`` int64; ``kwargs`` as it takes them)."""
        from specexact.decoders import speculative_generate

        return speculative_generate(target, draft, prompt_ids, target_params, draft_params, **kwargs)

    def group_target(self, target, *, prompt_len: int, requests: Sequence[GenerationRequest], speculative: bool):
        """The target model a group of requests with prompts of ``prompt_len`` tokens is run
        with, in a call of ``requests`` (before the ``min_tokens`` mask)."""
        return target

    def generator(self, seeds: Sequence[int]) -> torch.Generator:
        """The generator of a group of seeded requests whose seeds are ``seeds`` (in row order)."""
        return torch.Generator().manual_seed(group_seed(seeds))

    def seeded_rows(self, requests: Sequence[GenerationRequest], idx: Sequence[int]) -> list[int]:
        """The order of a seeded group's rows (indices into ``requests``): by seed, then by place."""
        return sorted(idx, key=lambda i: (int(requests[i].seed), i))

    def group_generator(self, requests: Sequence[GenerationRequest], idx: Sequence[int]) -> torch.Generator:
        """The generator of a seeded group whose rows are ``requests[i] for i in idx`` (in
        :meth:`seeded_rows` order): :meth:`generator` of their seeds."""
        return self.generator([int(requests[i].seed) for i in idx])

    def unseeded_generator(self) -> torch.Generator:
        """The generator of a group of unseeded requests: the engine's stream (class docstring)."""
        return self._stream

    def round_logprobs(self, record) -> torch.Tensor:
        """``[A, γ+1]`` float64: the logprob the engine reports for each token of a speculative
        round's output (:class:`~specexact.decoders.RoundRecord`): the log of its probability
        under the target law at its position (meaningless past ``num_emitted``)."""
        out = record.output.clamp_min(0)
        return record.target_probs.gather(2, out[..., None])[..., 0].to(torch.float64).log()

    def _plain_logprobs(self, requests: Sequence[GenerationRequest],
                        outputs: Sequence[tuple[int, ...]]) -> list[tuple[float, ...]]:
        """The plain path's logprobs of ``outputs`` (one per request), one forward per group of
        requests with the same prompt and parameters."""
        from specexact.decoders.processing import BUILTIN_PROCESSING
        from specexact.decoders.tiny_models import conditional_laws

        out: list[tuple[float, ...]] = [()] * len(requests)
        groups: dict[tuple, list[int]] = {}
        for j, r in enumerate(requests):
            if outputs[j]:
                groups.setdefault((r.prompt_token_ids, r.params, r.min_tokens, r.eos_token_id), []).append(j)
        for (prompt, params, min_tokens, eos), idx in groups.items():
            laws = conditional_laws(self.target, prompt, [list(outputs[j]) for j in idx], params, BUILTIN_PROCESSING,
                                    min_tokens=min_tokens if eos is not None else 0, eos_token_id=eos)
            lp = laws.token_probs().log().tolist()
            for row, j in enumerate(idx):
                out[j] = tuple(float(x) for x in lp[row][: len(outputs[j])])
        return out

    # --- generation --------------------------------------------------------------------------
    def generate(self, requests: Sequence[GenerationRequest], *, speculative: bool) -> list[GenerationResult]:
        """Generate every request (module docstring); results in request order.

        Raises
        ------
        RuntimeError
            Called before :meth:`load`.
        """
        from specexact.decoders import naive_generate

        if self.target is None:
            raise RuntimeError("BuiltinEngine.generate called before load")
        groups: dict[tuple, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault((len(r.prompt_token_ids), r.max_tokens, r.min_tokens, r.eos_token_id, r.seed is None),
                              []).append(i)
        results: list[GenerationResult | None] = [None] * len(requests)
        for (T0, max_tokens, min_tokens, eos, unseeded), idx in groups.items():
            if unseeded:
                gen = self.unseeded_generator()
            else:
                idx = self.seeded_rows(requests, idx)
                gen = self.group_generator(requests, idx)
            reqs = [requests[i] for i in idx]
            prompts = torch.tensor([r.prompt_token_ids for r in reqs], dtype=torch.int64)
            target = self.group_target(self.target, prompt_len=T0, requests=requests, speculative=speculative)
            draft = self.draft
            if min_tokens and eos is not None:
                target = MinTokensModel(target, prompt_len=T0, min_tokens=min_tokens, eos_token_id=eos)
                draft = MinTokensModel(draft, prompt_len=T0, min_tokens=min_tokens, eos_token_id=eos)
            logprobs: list[list[float]] = [[] for _ in reqs]

            def observe(record, logprobs=logprobs):
                lp = self.round_logprobs(record).tolist()
                for a, (row, kept) in enumerate(zip(record.rows.tolist(), record.num_kept.tolist())):
                    logprobs[row].extend(lp[a][:kept])

            if speculative:
                pairs = [self.speculative_params(r.params) for r in reqs]
                out = self.run_speculative(self.speculative_target(target), draft, prompts, [p for p, _ in pairs],
                                           [q for _, q in pairs], num_draft_tokens=self.num_speculative_tokens,
                                           max_new_tokens=max_tokens, generator=gen, eos_token_id=eos,
                                           verifier=self.verifier,
                                           observer=observe if any(r.logprobs for r in reqs) else None)
                first = out.accepted_lengths[:, 0].tolist()
            else:
                out = naive_generate(target, prompts, [r.params for r in reqs], max_new_tokens=max_tokens,
                                     generator=gen, eos_token_id=eos)
                first = [None] * len(reqs)
            toks = [tuple(int(t) for t in row.tolist() if t >= 0) for row in out.tokens]
            if not speculative and any(r.logprobs for r in reqs):
                logprobs = self._plain_logprobs(reqs, toks)
            for j, i in enumerate(idx):
                results[i] = GenerationResult(token_ids=toks[j], first_round_accepted=None if first[j] is None
                                              else int(first[j]),
                                              logprobs=tuple(logprobs[j]) if reqs[j].logprobs else None)
        return results  # type: ignore[return-value]
