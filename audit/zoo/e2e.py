"""Planted end-to-end faults: the built-in engine with one bug of an engine's generate loop each.

Each class wraps :class:`~specexact.decoders.engines.builtin.BuiltinEngine` (a correct
engine) and breaks one thing that lives outside the verification function — where the
end-to-end audit (:mod:`specexact.audit.cases.e2e`) must find it:

- :class:`LogitsOnePositionOff`: the speculative path reads the target's logits one position
  too early (the law after ``x[:t]`` used for the token after ``x[:t+1]``);
- :class:`TemperatureOnDraftsOnly`: the request's temperature reaches the draft model but
  the target is verified at temperature 1;
- :class:`SeedIgnored`: every call draws fresh randomness, whatever the requests' seeds;
- :class:`BonusFromWrongPosition`: on full acceptance the bonus token comes from ``p_γ``
  (the last draft's position) instead of ``p_{γ+1}``;
- :class:`TemperatureLostFromPosition16`: the target's temperature is not applied to the
  tokens of output position 16 on (the speculative path verifies them at temperature 1; the
  drafts keep it): only the long case (:func:`~specexact.audit.cases.e2e.catalog.long_case`)
  reaches those positions, and its per-token checks place the fault in the bands from 16 on;
- :class:`LogprobsOfDraftLaw`: the outputs are right, but an accepted draft's reported logprob
  is the draft's ``log q(d)`` instead of the target's ``log p(d)`` (the law the token has in
  the output; vLLM #34497 reported logprobs that differ under speculative decoding): the
  logprob checks (:mod:`~specexact.audit.cases.e2e.logprob_checks`) find it on the
  speculative path only;
- the faults only generated scenarios reach (:data:`E2E_WRONG_SCENARIO`,
  :mod:`specexact.audit.cases.e2e.scenarios`): :class:`UnmaskedLeftPadding` (a shorter
  prompt left-padded to the call's longest one, the padding attended: its tokens sit at the
  wrong positions), :class:`PenaltiesOncePerRound` (the penalty counts updated once per
  round, not per accepted token: the drafts of a verify window are not counted for the
  prefixes after them, SGLang PR #33643), :class:`FourthWindowPositionMisread` (the
  fourth position of a verify window reads the third's logits: only γ ≥ 3 shows it),
  :class:`MinTokensCheckedPerRound` (``min_tokens`` checked at a round's start for the whole
  verify window) and :class:`TokensPastStopInWindow` (the tokens a window emits after an
  accepted stop token kept, SGLang #31599: the output protocol, not a law, catches it); the
  last two need a stop inside a window, which the scenarios' stop tokens make frequent
  (``EngineCapabilities.stop_tokens``);
- the seed faults (:mod:`~specexact.audit.cases.e2e.seed_checks`):
  :class:`SharedUnseededStream` (every unseeded request of a call draws the engine's stream
  from the same state: identical requests give identical outputs, TensorRT-LLM #19487) and
  :class:`SeedStreamByPlace` (a seeded group's stream seeded from its requests' places in the
  call as well as their seeds: the same call reproduces, another mix does not) and
  :class:`SeededStreamOfTheBatch` (promises a seeded request alone, but its stream is its
  batch's: ``reproducible_alone``);
- :class:`CrashesOnTopK`: a speculative call holding a top-k request raises, and the engine
  raises on every call after that until it is loaded again (what vLLM 0.32's CPU route does,
  ``scripts/replays/vllm_e2e_topk_crash.py``): the audit must name the classes that crash
  and audit the others.

:data:`E2E_WRONG` maps names to the classes; ``tests/audit/zoo/test_e2e.py`` asserts each is
caught, with the tier and the check that names it. :data:`E2E_WRONG_LONG` holds the faults
only the long case reaches (``tests/audit/zoo/test_e2e_long.py``), :data:`E2E_WRONG_SCENARIO`
those the generated scenarios reach (``tests/audit/zoo/test_e2e_scenarios.py``).
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import torch

from specexact.audit.zoo import bonus_from_last_draft_position
from specexact.decoders.adapters.builtin_logits import LogitsLevelVerifier, candidate_histories
from specexact.decoders.adapters.protocol import LogitsVerifyInputs
from specexact.decoders.engines.builtin import BuiltinEngine, MinTokensModel, group_seed
from specexact.decoders.law_table import shared_laws
from specexact.decoders.params import SamplingParams, batch_params

__all__ = ["LogitsOnePositionOff", "TemperatureOnDraftsOnly", "SeedIgnored", "BonusFromWrongPosition", "CrashesOnTopK",
           "LogprobsOfDraftLaw", "TemperatureLostFromPosition16", "UnmaskedLeftPadding", "PenaltiesOncePerRound",
           "FourthWindowPositionMisread", "MinTokensCheckedPerRound", "TokensPastStopInWindow", "SharedUnseededStream", "SeededStreamOfTheBatch", "SeedStreamByPlace", "E2E_WRONG", "E2E_WRONG_LONG", "E2E_WRONG_SCENARIO"]


class _Shifted:
    """``model`` whose logits at position ``t`` are those at ``t - 1`` (clamped at 0)."""

    def __init__(self, model) -> None:
        self.model, self.vocab_size, self.device = model, model.vocab_size, model.device

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        if positions is None:
            positions = torch.arange(input_ids.shape[1])[None].expand(input_ids.shape[0], -1)
        return self.model(input_ids, (positions - 1).clamp_min(0))


class LogitsOnePositionOff(BuiltinEngine):
    """The target's logits aligned one position early in the speculative path."""

    name = "zoo-e2e:logits_one_position_off"

    def speculative_target(self, target):
        return _Shifted(target)


class TemperatureOnDraftsOnly(BuiltinEngine):
    """The draft is sampled at the request's temperature, the target verified at 1."""

    name = "zoo-e2e:temperature_on_drafts_only"

    def speculative_params(self, params):
        target_params, draft_params = super().speculative_params(params)
        d = {f: getattr(target_params, f) for f in target_params.__dataclass_fields__}
        return SamplingParams(**{**d, "temperature": 1.0}), draft_params


class SeedIgnored(BuiltinEngine):
    """Fresh randomness every call: the same seeds do not give the same output."""

    name = "zoo-e2e:seed_ignored"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._calls = itertools.count(1)

    def generator(self, seeds):
        return torch.Generator().manual_seed(0x5EED0000 + next(self._calls))


class BonusFromWrongPosition(BuiltinEngine):
    """The bonus token drawn from the last draft's position (the zoo's verify-level fault
    :func:`~specexact.audit.zoo.bonus_from_last_draft_position`, inside the engine's loop)."""

    name = "zoo-e2e:bonus_from_wrong_position"

    @property
    def verifier(self):
        return bonus_from_last_draft_position


class _TemperatureLostFrom(LogitsLevelVerifier):
    """The built-in processing per candidate prefix, but at temperature 1 for the prefixes
    that predict output position ``position`` or later (a sampled row's temperature only)."""

    def __init__(self, position: int) -> None:
        super().__init__(name=f"temperature_lost_from_{position}")
        self.position = int(position)

    def target_probs(self, inputs: LogitsVerifyInputs) -> torch.Tensor:
        """Shape: ``-> [B, K+1, V]``; prefix ``i`` of row ``b`` predicts output position
        ``generated[b] + i`` (``generated``: the row's tokens so far)."""
        B, K = inputs.draft_token_ids.shape
        V, device = inputs.vocab_size, inputs.target_logits.device
        generated = (inputs.output_token_ids >= 0).sum(1).tolist()  # [B]
        params = [p if generated[b] + i < self.position or not p.temperature else replace(p, temperature=1.0)
                  for b, p in enumerate(inputs.target_params) for i in range(K + 1)]
        table = shared_laws(inputs.target_logits.reshape(B * (K + 1), V), batch_params(params, B * (K + 1), device),
                            self.candidate_histories(inputs).reshape(B * (K + 1), -1), process=self.processing,
                            extra=(inputs.prompt_token_ids.repeat_interleave(K + 1, dim=0),))
        return table.rows().reshape(B, K + 1, V)


class TemperatureLostFromPosition16(BuiltinEngine):
    """The target verified at temperature 1 from output position 16 on (the drafts keep the
    request's temperature; the plain path is right)."""

    name = "zoo-e2e:temperature_lost_from_position_16"
    position = 16

    @property
    def verifier(self):
        return _TemperatureLostFrom(self.position)


class LogprobsOfDraftLaw(BuiltinEngine):
    """An accepted draft's logprob reported from the draft's law ``q`` (the recovered and
    bonus tokens', and every plain token's, right)."""

    name = "zoo-e2e:logprobs_of_draft_law"

    def round_logprobs(self, record) -> torch.Tensor:
        right = super().round_logprobs(record)  # [A, γ+1]
        gamma = record.draft_token_ids.shape[1]
        q = record.draft_probs.gather(2, record.draft_token_ids[..., None])[..., 0].to(torch.float64).log()  # [A, γ]
        accepted = torch.arange(gamma)[None] < (record.num_emitted - 1)[:, None]  # [A, γ]
        out = right.clone()
        out[:, :gamma] = torch.where(accepted, q, right[:, :gamma])
        return out


class _LeftPadded:
    """``model`` on inputs left-padded with ``pad`` tokens of id 0 that attention sees.

    Shape: as ``model``: ``input_ids [B, T], positions [B, n] -> logits [B, n, V]``."""

    def __init__(self, model, pad: int) -> None:
        self.model, self.pad, self.vocab_size, self.device = model, int(pad), model.vocab_size, model.device

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        B, T = input_ids.shape
        if positions is None:
            positions = torch.arange(T, device=input_ids.device)[None].expand(B, -1)
        padded = torch.cat([torch.zeros((B, self.pad), dtype=input_ids.dtype, device=input_ids.device), input_ids], 1)
        return self.model(padded, positions + self.pad)


class UnmaskedLeftPadding(BuiltinEngine):
    """In a speculative call holding prompts of different lengths, each shorter prompt's
    target is run left-padded to the call's longest prompt with the padding not masked (as
    an engine that batches a call's rows in one padded tensor and loses the attention mask);
    calls whose prompts all have one length, and the plain path, are right."""

    name = "zoo-e2e:unmasked_left_padding"

    def group_target(self, target, *, prompt_len, requests, speculative):
        longest = max(len(r.prompt_token_ids) for r in requests)
        if not speculative or prompt_len >= longest:
            return target
        return _LeftPadded(target, longest - prompt_len)


class _PenaltiesAtRoundStart(LogitsLevelVerifier):
    """The built-in processing, but every candidate prefix of a verify window is penalised
    with the output as it was at the round's start (the window's drafts not counted)."""

    def __init__(self) -> None:
        super().__init__(name="penalties-once-per-round")

    def candidate_histories(self, inputs: LogitsVerifyInputs) -> torch.Tensor:
        """Shape: ``[B, K+1, H + K]``: the output so far for every prefix, ``-1`` elsewhere."""
        right = candidate_histories(inputs)
        H = inputs.output_token_ids.shape[1]
        out = right.clone()
        out[:, :, H:] = right[:, :1, H:]  # prefix 0's (no drafts) for every prefix
        return out


class PenaltiesOncePerRound(BuiltinEngine):
    """Penalty counts (repetition, presence, frequency) updated once per round instead of
    once per accepted token: the target's law at each prefix of a verify window is
    penalised as at the round's start (SGLang PR #33643's kind of fault). Only the
    speculative path, only with penalties and γ >= 2."""

    name = "zoo-e2e:penalties_once_per_round"

    @property
    def verifier(self):
        return _PenaltiesAtRoundStart()


class _FourthPositionMisread:
    """``model`` whose logits at the fourth requested position of a call of four or more
    (a verify window of γ >= 3) are those of the third."""

    def __init__(self, model) -> None:
        self.model, self.vocab_size, self.device = model, model.vocab_size, model.device

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        logits = self.model(input_ids, positions)
        if positions is not None and positions.shape[1] >= 4:
            logits = logits.clone()
            logits[:, 3] = logits[:, 2]
        return logits


class FourthWindowPositionMisread(BuiltinEngine):
    """The speculative path's target reads the logits of the third position of a verify
    window for its fourth (an off-by-one in a window's gather that γ <= 2 never reaches)."""

    name = "zoo-e2e:fourth_window_position_misread"

    def speculative_target(self, target):
        return _FourthPositionMisread(target)


class _MinTokensAtRoundStart:
    """``model`` with EOS masked at every position of a call while the row's output, as it
    was when the call's first requested position was reached, is shorter than ``min_tokens``:
    the ``min_tokens`` rule evaluated once per verify window (at its start) instead of per
    position. Shape: as ``model``."""

    def __init__(self, model, *, prompt_len: int, min_tokens: int, eos_token_id: int) -> None:
        self.model, self.prompt_len, self.min_tokens, self.eos = model, int(prompt_len), int(min_tokens), int(eos_token_id)
        self.vocab_size, self.device = model.vocab_size, model.device

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        logits = self.model(input_ids, positions)
        if positions is None:
            positions = torch.arange(input_ids.shape[1], device=logits.device)[None].expand(input_ids.shape[0], -1)
        at_start = positions.to(logits.device).min(1, keepdim=True).values - (self.prompt_len - 1)  # [B, 1]
        logits = logits.clone()
        logits[..., self.eos] = torch.where(at_start < self.min_tokens, -torch.inf, logits[..., self.eos])
        return logits


class MinTokensCheckedPerRound(BuiltinEngine):
    """``min_tokens`` checked once per round: EOS stays masked on every position of a verify
    window whose round started with fewer than ``min_tokens`` tokens generated, so an EOS that
    ``min_tokens`` allows inside the window is never emitted there (the ``min_new_tokens``
    bookkeeping counting rounds, not tokens). Only the speculative path (plain sampling asks
    one position per call), only with ``min_tokens`` and EOS in the same request, and only
    where ``min_tokens`` falls inside a window (γ >= 1, ``min_tokens`` not a multiple of the
    accepted lengths)."""

    name = "zoo-e2e:min_tokens_checked_per_round"

    def speculative_target(self, target):
        if isinstance(target, MinTokensModel):
            return _MinTokensAtRoundStart(target.model, prompt_len=target.prompt_len, min_tokens=target.min_tokens,
                                          eos_token_id=target.eos)
        return target


class TokensPastStopInWindow(BuiltinEngine):
    """The tokens a verify window emits after an accepted stop token are kept: the round
    that emits EOS (or the request's stop token) among its accepted drafts appends the
    window's later accepted drafts and its recovered or bonus token as well, and the request
    ends with that round (a bonus token leaking past an accepted EOS, SGLang #31599). Only
    the speculative path; only where a stop is accepted before a window's last token."""

    name = "zoo-e2e:tokens_past_stop_in_window"

    def run_speculative(self, target, draft, prompt_ids, target_params, draft_params, *, eos_token_id=None,
                        observer=None, **kwargs):
        if eos_token_id is None:
            return super().run_speculative(target, draft, prompt_ids, target_params, draft_params,
                                           eos_token_id=None, observer=observer, **kwargs)
        B = prompt_ids.shape[0]
        end = [None] * B  # per row: the end of the round that first kept the stop token

        def cut(record):
            for a, row in enumerate(record.rows.tolist()):
                kept = record.output[a, : int(record.num_kept[a])].tolist()
                if end[row] is None and eos_token_id in kept:
                    end[row] = int(record.num_generated[a]) + len(kept)
            if observer is not None:
                observer(record)

        out = super().run_speculative(target, draft, prompt_ids, target_params, draft_params, eos_token_id=None,
                                      observer=cut, **kwargs)
        tokens = out.tokens.clone()
        for row, e in enumerate(end):
            if e is not None:
                tokens[row, e:] = -1
        return replace(out, tokens=tokens, num_tokens=(tokens >= 0).sum(1))


class SharedUnseededStream(BuiltinEngine):
    """Every unseeded request of a call starts from the same state of the engine's stream
    (one engine-wide seed per call, as TensorRT-LLM #19487's unseeded requests shared one
    stream): unseeded requests with the same prompt, parameters and limits get the same
    output; calls differ from each other. Seeded requests are right."""

    name = "zoo-e2e:shared_unseeded_stream"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._calls = itertools.count(1)

    def generate(self, requests, *, speculative):
        call_seed = 0xC0FFEE00 + next(self._calls)
        results = [None] * len(requests)
        seeded = [i for i, r in enumerate(requests) if r.seed is not None]
        if seeded:
            for i, res in zip(seeded, super().generate([requests[i] for i in seeded], speculative=speculative)):
                results[i] = res
        shared: dict = {}  # an unseeded request's shape -> the one draw all of that shape get
        for i, r in enumerate(requests):
            if r.seed is None:
                key = (r.prompt_token_ids, r.params, r.max_tokens, r.min_tokens, r.eos_token_id, r.logprobs)
                if key not in shared:
                    shared[key] = super().generate([replace(r, seed=call_seed)], speculative=speculative)[0]
                results[i] = shared[key]
        return results


class SeedStreamByPlace(BuiltinEngine):
    """A seeded group's generator is seeded from its requests' seeds *and their places in the
    call* (rows in call order): the same call again reproduces, the same seeded requests in
    another order or among other requests do not (the engine promises they do)."""

    name = "zoo-e2e:seed_stream_by_place"

    def seeded_rows(self, requests, idx):
        return list(idx)

    def group_generator(self, requests, idx):
        return torch.Generator().manual_seed(group_seed([int(requests[i].seed) for i in idx] + list(idx)))


class SeededStreamOfTheBatch(BuiltinEngine):
    """Promises that a seeded request reproduces alone (``SeedPromise.alone``), but keeps the
    built-in engine's scheme: one generator per group of seeded requests of one shape, seeded
    from all their seeds, so a request alone in its call draws another stream (a seeded output
    that depends on the batch it came in)."""

    name = "zoo-e2e:seeded_stream_of_the_batch"

    def capabilities(self):
        caps = super().capabilities()
        return replace(caps, seeds=replace(caps.seeds, alone=True))


class CrashesOnTopK(BuiltinEngine):
    """Speculative calls with a top-k request raise; every call raises after a crash until
    :meth:`load` runs again (a broken engine state)."""

    name = "zoo-e2e:crashes_on_top_k"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.broken = False

    def load(self, *args, **kwargs) -> None:
        self.broken = False
        super().load(*args, **kwargs)

    def generate(self, requests, *, speculative):
        if self.broken:
            raise RuntimeError("engine state broken by an earlier crash")
        if speculative and any(r.params.top_k for r in requests):
            self.broken = True
            raise RuntimeError("index 1592825856 is out of bounds for dimension 1 with size 64")
        return super().generate(requests, speculative=speculative)


E2E_WRONG = {
    "logits_one_position_off": LogitsOnePositionOff,
    "temperature_on_drafts_only": TemperatureOnDraftsOnly,
    "seed_ignored": SeedIgnored,
    "bonus_from_wrong_position": BonusFromWrongPosition,
    "crashes_on_top_k": CrashesOnTopK,
    "logprobs_of_draft_law": LogprobsOfDraftLaw,
    "shared_unseeded_stream": SharedUnseededStream,
    "seed_stream_by_place": SeedStreamByPlace,
    "seeded_stream_of_the_batch": SeededStreamOfTheBatch,
}
"""The planted end-to-end faults by name (each caught by the enumerable case)."""

E2E_WRONG_LONG = {
    "temperature_lost_from_position_16": TemperatureLostFromPosition16,
}
"""The planted faults that only the long case reaches (past output position 16), by name."""

E2E_WRONG_SCENARIO = {
    "unmasked_left_padding": UnmaskedLeftPadding,
    "penalties_once_per_round": PenaltiesOncePerRound,
    "fourth_window_position_misread": FourthWindowPositionMisread,
    "min_tokens_checked_per_round": MinTokensCheckedPerRound,
    "tokens_past_stop_in_window": TokensPastStopInWindow,
}
"""The planted faults that the generated scenarios reach (mixed prompt lengths in one call,
penalties across a verify window, γ >= 3), by name."""
