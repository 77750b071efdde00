"""Hugging Face transformers' ``_speculative_sampling`` behind the ``verify`` protocol.

transformers verifies an assistant model's candidate tokens in
``transformers.generation.utils._speculative_sampling`` (assisted generation with
``do_sample=True``). It takes *processed logits* (its logits processors have already
run on both sides), one sequence at a time, draws from torch's global RNG, and returns
``(valid_tokens [1, n+1], n_matches)``. This adapter:

- feeds ``log(draft_probs)`` and ``log(target_probs)`` in float32 as the candidate and
  target logits (``softmax(log p) = p``; zero probabilities become ``-inf`` and come back
  as exact zeros; float32 is what transformers' own generation loop passes);
- loops over the rows (transformers takes batch size 1);
- seeds torch's global RNG from the passed generator once per call and restores it
  afterwards (:func:`~specexact.decoders.adapters.protocol.seeded_global_rng`);
- detects the installed signature with :mod:`inspect`:

  ==========================================  ==========================================
  parameters after ``new_logits``              passed by the adapter
  ==========================================  ==========================================
  ``is_done_candidate`` (4.x, early 5.x; tested ``is_done_candidate=False``
  4.45.2, 4.57.6)
  ``is_done_candidate,                         ``is_done_candidate=False``; the weight
  assistant_ensemble_weight=None`` (tested     stays ``None`` (the lossless rule)
  5.17.0)
  ``assistant_ensemble_weight=None`` (tested   nothing (``None``: the lossless rule, no
  5.24.0)                                      ensemble relaxation)
  ==========================================  ==========================================

  ``is_done_candidate=True`` makes 4.x drop the bonus token when every candidate is
  accepted; the built-in decoder cuts rounds at EOS / ``max_new_tokens`` itself, so the
  adapter always passes ``False``. Any other signature is refused at import with a
  message naming it.

How transformers handles zeros (observed with every tested version):
``-inf`` logits give exact zero probabilities. A drafted token with draft probability 0
(impossible through the decoder) has ratio ``p/0 = inf`` (accepted) or ``0/0 = nan``
(rejected), the same convention as the built-in. The acceptance test is
``r <= p/q`` with ``r = torch.rand_like(...)`` in float32, so ``r == 0`` (probability
``2**-24`` per draw on CPU) accepts a draft whose *target probability is zero*:
:data:`ZERO_PROBABILITY_ACCEPTANCE` holds a deterministic reproduction. If rounding leaves
the residual ``max(p - q, 0)`` with no mass after a rejection (draft and target equal up
to an ulp), the lossless path divides 0 by 0 and ``torch.multinomial`` raises
``RuntimeError`` (the built-in falls back to the target row):
:data:`ZERO_MASS_RESIDUAL_CRASH`. Neither shows in a statistical audit (each has
probability about ``2**-24`` per affected draft); both were found by reading the code and
pinned with seeds searched for offline; the fuzz phase (:mod:`specexact.fuzz`) finds both
by itself through the uniforms the adapter supplies (below).

Supplying the acceptance uniforms (:meth:`TransformersSpeculativeSampling.verify_with_uniforms`):
the adapter owns the call, so for the boundary-uniform probes it intercepts the one uniform
draw of ``_speculative_sampling``, ``r_i = torch.rand_like(probability_ratio)``: for the
duration of the call the function's global ``torch`` is a thin proxy whose ``rand_like``
returns the caller's uniforms (cast to the ratio's dtype, float32, and shape) and forwards
every other attribute to torch. Nothing else changes: transformers still computes its own
ratio, compares ``r_i <= probability_ratio`` itself and draws its recovered / bonus token
with ``torch.multinomial`` from the (seeded) global RNG. The proxy checks that
``rand_like`` is called exactly once with ``K`` entries, so a transformers version that
draws differently is refused rather than probed wrongly.
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Iterator


import torch
import transformers
from transformers.generation import utils as _hf_generation_utils

from specexact.decoders.rejection_sampling import PLACEHOLDER_ID
from specexact.decoders.verify_inputs import validate_verify_inputs

from .protocol import Capabilities, probs_to_logits, seeded_global_rng

__all__ = [
    "TransformersSpeculativeSampling",
    "verify",
    "adapter_version",
    "TESTED_VERSIONS",
    "ZERO_PROBABILITY_ACCEPTANCE",
    "ZERO_MASS_RESIDUAL_CRASH",
    "FINDINGS",
    "affects",
    "supplied_uniforms",
]

TESTED_VERSIONS = ("4.45.2", "4.57.6", "5.17.0", "5.24.0", "5.25.0")
"""transformers versions whose ``_speculative_sampling`` this adapter was run against."""

_BASE = ("candidate_input_ids", "candidate_logits", "candidate_length", "new_logits")
_VARIANTS = {
    _BASE + ("is_done_candidate",): ("is_done_candidate", {"is_done_candidate": False}),
    _BASE + ("is_done_candidate", "assistant_ensemble_weight"): ("is_done_candidate+assistant_ensemble_weight",
                                                                 {"is_done_candidate": False}),
    _BASE + ("assistant_ensemble_weight",): ("assistant_ensemble_weight", {}),
}


class _TorchWithUniforms:
    """``torch`` as ``_speculative_sampling`` sees it while the adapter supplies its uniforms:
    ``rand_like`` returns the given values, every other attribute is torch's."""

    def __init__(self, values: torch.Tensor) -> None:
        self._values = values
        self.calls = 0

    def rand_like(self, like: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        self.calls += 1
        if self.calls > 1 or like.numel() != self._values.numel():
            raise RuntimeError(
                f"cannot supply the acceptance uniforms: _speculative_sampling drew rand_like a "
                f"{'second time' if self.calls > 1 else f'with {like.numel()} entries for {self._values.numel()} drafts'}")
        return self._values.to(dtype=like.dtype, device=like.device).reshape(like.shape)

    def __getattr__(self, name: str):
        return getattr(torch, name)


@contextlib.contextmanager
def supplied_uniforms(function, values: torch.Tensor) -> Iterator[_TorchWithUniforms]:
    """Within the block, ``function``'s uniform draw ``torch.rand_like`` returns ``values``.

    ``function`` must be a Python function whose module refers to ``torch`` by that global
    name (transformers' ``_speculative_sampling``); its globals are restored on exit.

    Raises
    ------
    TypeError
        If ``function`` has no Python globals holding ``torch`` (nothing to intercept).
    """
    namespace = getattr(function, "__globals__", None)
    if not isinstance(namespace, dict) or namespace.get("torch") is not torch:
        raise TypeError(f"cannot supply uniforms to {function!r}: it does not draw through a global 'torch'")
    proxy = _TorchWithUniforms(values)
    namespace["torch"] = proxy
    try:
        yield proxy
    finally:
        namespace["torch"] = torch


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """One intra-op thread for a row loop: each transformers call works on a ``[1, K+1, V]``
    tensor, and on a busy machine thread hand-offs cost milliseconds per softmax."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class TransformersSpeculativeSampling:
    """The adapter; call it like :func:`specexact.decoders.verify`.

    Parameters
    ----------
    function : callable, optional
        The function to wrap (default: the installed
        ``transformers.generation.utils._speculative_sampling``).
    dtype : torch.dtype
        Dtype of the logits handed to transformers (default float32, as in its
        generation loop).

    Raises
    ------
    TypeError
        If ``function``'s signature is none of the supported variants.
    """

    name = "transformers"

    def __init__(self, function=None, *, dtype: torch.dtype = torch.float32) -> None:
        self.function = function if function is not None else _hf_generation_utils._speculative_sampling
        params = tuple(inspect.signature(self.function).parameters)
        if params not in _VARIANTS:
            raise TypeError(
                f"unsupported signature of transformers' _speculative_sampling {params} "
                f"(transformers {transformers.__version__}); supported: {sorted(_VARIANTS)}; "
                f"tested versions: {', '.join(TESTED_VERSIONS)}"
            )
        self.variant, self._extra = _VARIANTS[params]
        self.signature = str(inspect.signature(self.function))
        self.dtype = dtype
        self.uniforms_dtype = dtype  # r_i = torch.rand_like(probability_ratio): the ratio's dtype
        self.capabilities = Capabilities(
            max_batch_size=1,
            dtypes=(dtype,),
            devices=("cpu",),
            randomness="global_rng",
            logits_level=False,
            notes="probability level: log-probabilities are fed as logits; rows are verified one "
                  "by one; " + (f"called with {self._extra}" if self._extra else "no optional flags passed"),
        )

    def metadata(self) -> dict:
        """Library, installed version, wrapped function, signature variant, tested versions."""
        version = transformers.__version__
        return {
            "adapter": f"{__name__}:{type(self).__name__}",
            "library": "transformers",
            "version": version,
            "version_tested": version in TESTED_VERSIONS,
            "tested_versions": list(TESTED_VERSIONS),
            "function": f"{self.function.__module__}.{self.function.__qualname__}",
            "signature": self.signature,
            "variant": self.variant,
            "fixed_arguments": {k: v for k, v in self._extra.items()},
            "capabilities": self.capabilities.to_dict(),
        }

    def verify_rows(self, draft_token_ids: torch.Tensor, draft_probs: torch.Tensor,
                    target_probs: torch.Tensor, uniforms: torch.Tensor | None = None) -> torch.Tensor:
        """The rows one by one through transformers, on torch's *global* RNG as it stands.

        Shape: ``[B, K], [B, K, V], [B, K+1, V] -> [B, K+1]``. For reproductions:
        ``torch.manual_seed(seed); verify_rows(...)`` replays a call exactly. With
        ``uniforms [B, K]``, row ``b``'s acceptance uniforms are ``uniforms[b]`` (module
        docstring) instead of transformers' own draw.
        """
        B, K = draft_token_ids.shape
        ids = draft_token_ids.long()
        q_logits = probs_to_logits(draft_probs, self.dtype)
        p_logits = probs_to_logits(target_probs, self.dtype)
        out = torch.full((B, K + 1), PLACEHOLDER_ID, dtype=torch.int64, device=ids.device)
        with one_thread():
            for b in range(B):
                valid = self.call_row(ids[b:b + 1], q_logits[b:b + 1], K, p_logits[b:b + 1], row=b,
                                      uniforms=None if uniforms is None else uniforms[b])
                out[b, : valid.numel()] = valid.to(out.device)
        return out

    def call_row(self, candidate_input_ids: torch.Tensor, candidate_logits: torch.Tensor, candidate_length: int,
                 new_logits: torch.Tensor, *, row: int, uniforms: torch.Tensor | None = None) -> torch.Tensor:
        """One ``_speculative_sampling`` call (batch 1) -> its valid tokens ``[n+1]``.

        ``uniforms [K]``, if given, replace transformers' acceptance uniforms for this call
        (:func:`supplied_uniforms`).

        Raises
        ------
        RuntimeError
            If transformers returns a token count that disagrees with its ``n_matches``, or
            (with ``uniforms``) draws its uniforms otherwise than one ``rand_like`` of K entries.
        """
        if uniforms is None:
            valid, n_matches = self.function(candidate_input_ids, candidate_logits, candidate_length, new_logits,
                                             **self._extra)
        else:
            with supplied_uniforms(self.function, uniforms) as proxy:
                valid, n_matches = self.function(candidate_input_ids, candidate_logits, candidate_length,
                                                 new_logits, **self._extra)
            if proxy.calls != 1:
                raise RuntimeError(f"cannot supply the acceptance uniforms: _speculative_sampling drew "
                                   f"rand_like {proxy.calls} times in row {row}")
        valid = valid.reshape(-1)
        n = int(n_matches)
        if valid.numel() != n + 1:
            raise RuntimeError(f"transformers returned {valid.numel()} tokens with n_matches={n} in row {row}")
        return valid

    def __call__(self, draft_token_ids: torch.Tensor, draft_probs: torch.Tensor,
                 target_probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """The ``verify`` protocol: ``[B, K], [B, K, V], [B, K+1, V], generator -> [B, K+1]``.

        One seed is drawn from ``generator`` per call; torch's global RNG is seeded with it
        for the call and restored afterwards.

        Raises
        ------
        TypeError, ValueError
            Invalid inputs (:func:`~specexact.decoders.validate_verify_inputs`, as the
            built-in ``verify``), checked before transformers sees them; a generator that
            is not a ``torch.Generator``.
        """
        _check_inputs(draft_token_ids, draft_probs, target_probs, generator)
        with seeded_global_rng(generator, target_probs.device):
            return self.verify_rows(draft_token_ids, draft_probs, target_probs)

    def verify_with_uniforms(self, draft_token_ids: torch.Tensor, draft_probs: torch.Tensor,
                             target_probs: torch.Tensor, uniforms: torch.Tensor,
                             generator: torch.Generator | None = None) -> torch.Tensor:
        """The uniforms-injection protocol (:func:`~specexact.decoders.adapters.takes_uniforms`).

        Shape: ``[B, K], [B, K, V], [B, K+1, V], uniforms [B, K] -> [B, K+1]``. As
        ``__call__``, but draft ``i`` of row ``b`` is judged by transformers' own rule
        ``r <= p/q`` with ``r = uniforms[b, i]`` cast to float32 (:attr:`uniforms_dtype`);
        the recovered / bonus token still comes from the global RNG seeded from
        ``generator``. ``uniforms`` should lie on the float32 grid of ``[0, 1)``.

        Raises
        ------
        TypeError, ValueError
            As ``__call__``; ``uniforms`` not a floating tensor of shape ``[B, K]`` in ``[0, 1]``.
        """
        _check_inputs(draft_token_ids, draft_probs, target_probs, generator)
        _check_uniforms(uniforms, draft_token_ids)
        with seeded_global_rng(generator, target_probs.device):
            return self.verify_rows(draft_token_ids, draft_probs, target_probs, uniforms=uniforms)

    def __repr__(self) -> str:
        return f"<TransformersSpeculativeSampling transformers {transformers.__version__} ({self.variant})>"


def _check_inputs(draft_token_ids, draft_probs, target_probs, generator) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    validate_verify_inputs(draft_token_ids, draft_probs, target_probs)


def _check_uniforms(uniforms, draft_token_ids) -> None:
    if not isinstance(uniforms, torch.Tensor) or not uniforms.is_floating_point():
        raise TypeError(f"uniforms must be a floating torch.Tensor, got "
                        f"{getattr(uniforms, 'dtype', type(uniforms).__name__)}")
    if tuple(uniforms.shape) != tuple(draft_token_ids.shape):
        raise ValueError(f"uniforms must have shape {tuple(draft_token_ids.shape)}, got {tuple(uniforms.shape)}")
    if not bool(((uniforms >= 0) & (uniforms <= 1)).all()):
        raise ValueError("uniforms must lie in [0, 1]")


verify = TransformersSpeculativeSampling()
"""The entry point ``specexact.samplers: transformers``."""


def adapter_version() -> dict:
    """``verify.metadata()``: what the audit should record in its report."""
    return verify.metadata()


ZERO_PROBABILITY_ACCEPTANCE = {
    "id": "transformers-zero-probability-acceptance",
    "kind": "deterministic",
    "sampler": "transformers",
    "versions": ["4.45.2", "4.57.6", "5.17.0", "5.24.0"],
    # 5.25.0 tests `r_i < probability_ratio` (its comment: a strict `<` never accepts a token
    # of target probability 0): the evidence test now checks that it stays fixed.
    "fixed_in": "5.25.0",
    "summary": (
        "_speculative_sampling accepts a drafted token whose target probability is 0 when its "
        "float32 uniform is exactly 0 (test `r <= p/q`, here 0 <= 0): probability 2**-24 per such "
        "draft on CPU, so a token removed by top-k / top-p / min-p / a ban can be emitted"
    ),
    "global_seed": 5528393,  # torch.manual_seed(5528393); torch.rand(1) == 0.0 on CPU
    "draft_token_ids": [[1]],
    "draft_probs": [[[0.5, 0.5]]],
    "target_probs": [[[1.0, 0.0], [0.5, 0.5]]],
    "forbidden": {"row": 0, "position": 0, "token": 1},
    "expected": "position 0 never holds token 1 (target probability 0 after the context)",
    "fuzz_rule": "zero_probability_token",  # the rule of specexact.fuzz that finds it
}
"""The smallest reproduction found (B=1, K=1, V=2); see
:func:`specexact.audit.verdict.reproduce.reproduction_script`."""

ZERO_MASS_RESIDUAL_CRASH = {
    "id": "transformers-zero-mass-residual-crash",
    "kind": "deterministic",
    "sampler": "transformers",
    "versions": list(TESTED_VERSIONS),
    "summary": (
        "draft law = target law except one ulp more on the drafted token: the ratio is 1 - 2**-23, "
        "the float32 uniform 1 - 2**-24 rejects, max(p - q, 0) has no mass, 0/0 gives NaN and "
        "torch.multinomial raises RuntimeError (the built-in falls back to the target row)"
    ),
    "global_seed": 22771378,  # torch.manual_seed(22771378); torch.rand(1) == 1 - 2**-24 on CPU
    "draft_token_ids": [[0]],
    "draft_probs": [[[0.1487746238708496, 0.29212382435798645, 0.5591016411781311]]],
    "target_probs": [[[0.14877460896968842, 0.29212382435798645, 0.5591016411781311],
                      [0.14877460896968842, 0.29212382435798645, 0.5591016411781311]]],
    "forbidden": None,
    "expected": "a token from the target row (the residual is empty up to rounding), not an exception",
    "fuzz_rule": "no_crash",
    "fuzz_message": "probability tensor contains",
    "fuzz_level": "probability",  # at the logits level a NaN can also come from overflowing logits
}
"""A crash (B=1, K=1, V=3): float32 values are exact in the lists above."""

FINDINGS = (ZERO_PROBABILITY_ACCEPTANCE, ZERO_MASS_RESIDUAL_CRASH)
"""Deterministic findings on transformers' ``_speculative_sampling`` (tested versions; a
finding with ``fixed_in`` is gone from that version on: :func:`affects`)."""


def affects(finding: dict, version: str | None = None) -> bool:
    """Whether ``finding`` (one of :data:`FINDINGS`) holds for transformers ``version``
    (default: the installed one): every version before its ``fixed_in``, if it has one.

    Raises
    ------
    ImportError
        ``version`` is None and transformers is not installed.
    """
    from packaging.version import Version

    if version is None:
        import transformers

        version = transformers.__version__
    fixed = finding.get("fixed_in")
    return fixed is None or Version(version) < Version(fixed)
