"""The sampler under fuzzing, as the fuzz phase sees it, and one call of it.

:class:`Subject` gathers once what the generators and rules need: the protocol level,
the declared :class:`~specexact.decoders.adapters.Capabilities` (or those of the
``verify`` protocol for a plain callable), whether acceptance uniforms can be supplied
and on which grid, and the reference processing of a logits-level sampler.
:class:`Call` is one call (entry point, inputs, supplied uniforms, generator seed), what a
finding records and its replay repeats.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import torch

from specexact.decoders.adapters.builtin_logits import LogitsLevelVerifier
from specexact.decoders.adapters.protocol import (
    Capabilities,
    LogitsVerifyInputs,
    is_logits_level,
    processing_of,
    protocol_of,
    scheme_of,
    takes_uniforms,
    uniforms_dtype_of,
)
from specexact.decoders.processing import LogitsProcessing

from specexact.fuzz.examples import ProbInputs

__all__ = ["Subject", "Call", "CallTimeout", "PROTOCOL_DTYPES"]

PROTOCOL_DTYPES = ("float32", "float64", "float16", "bfloat16")
"""Probability dtypes the ``verify`` protocol accepts (those of the built-in ``verify``):
what a sampler that declares no capabilities is fuzzed with."""


class CallTimeout(Exception):
    """A call of the sampler ran past the per-call time limit."""


@contextmanager
def _time_limit(seconds: float | None) -> Iterator[None]:
    """Raise :class:`CallTimeout` in the block after ``seconds`` (main thread, POSIX only;
    elsewhere no limit). A hang inside C code is interrupted only when it returns to Python."""
    usable = (seconds is not None and hasattr(signal, "setitimer")
              and threading.current_thread() is threading.main_thread())
    if not usable:
        yield
        return

    def _raise(signum, frame):
        raise CallTimeout(f"no result within {seconds:g} s")

    old = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@dataclass(frozen=True)
class Call:
    """One call of the sampler.

    Attributes
    ----------
    entry : {"verify", "verify_with_uniforms", "verify_logits", "verify_logits_with_uniforms", "verify_tree"}
    inputs : ProbInputs, LogitsVerifyInputs or TreeProbInputs
    uniforms : torch.Tensor or None
        ``[B, K]`` float64 acceptance uniforms (the ``*_with_uniforms`` entries).
    generator_seed : int
        The call's generator is ``torch.Generator().manual_seed(generator_seed)``.
    source : str
        Python that rebuilds ``inputs`` from the example's recipe (replays of large inputs).
    """

    entry: str
    inputs: object
    uniforms: torch.Tensor | None = None
    generator_seed: int = 0
    source: str = ""

    @property
    def vocab_size(self) -> int:
        x = self.inputs
        return int(x.target_logits.shape[-1] if isinstance(x, LogitsVerifyInputs) else x.target_probs.shape[-1])

    @property
    def draft_token_ids(self) -> torch.Tensor:
        return self.inputs.draft_token_ids

    def generator(self, device: torch.device | str = "cpu") -> torch.Generator:
        return torch.Generator(device=device).manual_seed(self.generator_seed)


@dataclass(frozen=True)
class Subject:
    """What the fuzz phase knows of a sampler (built by :meth:`of`).

    Attributes
    ----------
    sampler : object
        A callable with the ``verify`` protocol or a logits-level adapter.
    name : str
        Its ``--sampler`` name.
    level : {"probability", "logits"}
    capabilities : Capabilities or None
        As declared (None: a plain callable, fuzzed within the ``verify`` protocol).
    randomness : str
        Declared randomness (``"generator"`` when undeclared).
    input_dtypes : tuple of str
        Probability dtypes it is fed: its declared ``dtypes``, or :data:`PROTOCOL_DTYPES`.
    rounding_dtype : torch.dtype
        The dtype whose rounding the acceptance rule allows: its first declared dtype
        (float32 when undeclared: the decoder's laws).
    uniforms : bool
        Whether acceptance uniforms can be supplied (:func:`~specexact.decoders.adapters.takes_uniforms`).
    uniforms_dtype : torch.dtype or None
        The grid the supplied uniforms land on.
    processing : LogitsProcessing
        The reference processing (logits level: the declared order).
    device : torch.device
    call_timeout_s : float or None
        Per-call time limit.
    scheme : str
        The declared verification scheme (``"tokenwise"`` when undeclared): the
        acceptance-rule probes and the rule ``uses_generator`` judge the token-wise rule
        only (:func:`~specexact.fuzz.families.not_applicable`).
    protocol : str
        The declared call protocol (``"chain"`` when undeclared): chain ``verify`` inputs,
        or draft trees for ``"tree"`` (:mod:`specexact.fuzz.trees`).
    """

    sampler: object
    name: str
    level: str
    capabilities: Capabilities | None
    randomness: str
    input_dtypes: tuple[str, ...]
    rounding_dtype: torch.dtype
    uniforms: bool
    uniforms_dtype: torch.dtype | None
    processing: LogitsProcessing
    device: torch.device
    call_timeout_s: float | None = 30.0
    scheme: str = "tokenwise"
    protocol: str = "chain"

    @classmethod
    def of(cls, sampler, name: str = "sampler", *, device: torch.device | str = "cpu",
           call_timeout_s: float | None = 30.0) -> "Subject":
        """The subject of ``sampler``.

        Raises
        ------
        TypeError
            ``sampler`` is neither callable nor a logits-level adapter, or declares a
            uniforms dtype that is not a floating torch dtype.
        """
        caps = getattr(sampler, "capabilities", None)
        caps = caps if isinstance(caps, Capabilities) else None
        logits = is_logits_level(sampler)
        if logits and not callable(getattr(sampler, "verify_logits", None)):
            raise TypeError(f"{name!r} declares logits_level=True but has no verify_logits method")
        if not logits and not callable(sampler):
            raise TypeError(f"sampler {name!r} is not callable (the verify protocol)")
        dtypes = tuple(str(d).removeprefix("torch.") for d in caps.dtypes) if caps else PROTOCOL_DTYPES
        dtypes = tuple(d for d in dtypes if d in PROTOCOL_DTYPES) or ("float32",)
        uni = takes_uniforms(sampler)
        return cls(sampler=sampler, name=name, level="logits" if logits else "probability", capabilities=caps,
                   randomness=caps.randomness if caps else "generator", input_dtypes=dtypes,
                   rounding_dtype=caps.dtypes[0] if caps else torch.float32, uniforms=uni,
                   uniforms_dtype=uniforms_dtype_of(sampler) if uni else None, processing=processing_of(sampler),
                   device=torch.device(device), call_timeout_s=call_timeout_s, scheme=scheme_of(sampler),
                   protocol=protocol_of(sampler))

    @property
    def logits_level(self) -> bool:
        return self.level == "logits"

    def operations_allow(self, params) -> bool:
        """Whether the declared processing implements every operation ``params`` needs."""
        return not self.processing.unsupported(params)

    def reference_target_probs(self, inputs: LogitsVerifyInputs) -> torch.Tensor:
        """``[B, K+1, V]``: the target law after each candidate prefix under the declared
        processing (the built-in pipeline per prefix, :class:`LogitsLevelVerifier`)."""
        return LogitsLevelVerifier(self.processing).target_probs(inputs)

    def _on_device(self, x):
        """The call's inputs on :attr:`device` (the examples are built on the CPU; on the CPU
        they are passed as they are, so the rule ``inputs_unmodified`` sees what the sampler
        got)."""
        if self.device.type == "cpu":
            return x
        if isinstance(x, ProbInputs):
            return ProbInputs(x.draft_token_ids.to(self.device), x.draft_probs.to(self.device),
                              x.target_probs.to(self.device))
        from dataclasses import replace

        if not isinstance(x, LogitsVerifyInputs):  # the tree inputs (specexact.fuzz.trees.TreeProbInputs)
            return type(x)(*(getattr(x, k).to(self.device) for k in x.FIELDS))
        return replace(x, **{k: getattr(x, k).to(self.device) for k in (
            "draft_token_ids", "draft_probs", "target_logits", "prompt_token_ids", "output_token_ids")})

    def run(self, call: Call, generator: torch.Generator | None = None) -> torch.Tensor:
        """Make ``call`` (with ``generator``, default the call's own) within the time limit.

        Raises
        ------
        CallTimeout
            Past :attr:`call_timeout_s`.
        Exception
            Whatever the sampler raises.
        """
        gen = call.generator(self.device) if generator is None else generator
        x = self._on_device(call.inputs)
        uniforms = None if call.uniforms is None else call.uniforms.to(self.device)
        with _time_limit(self.call_timeout_s):
            if call.entry == "verify":
                return self.sampler(x.draft_token_ids, x.draft_probs, x.target_probs, gen)
            if call.entry == "verify_with_uniforms":
                return self.sampler.verify_with_uniforms(x.draft_token_ids, x.draft_probs, x.target_probs,
                                                         uniforms, gen)
            if call.entry == "verify_logits":
                return self.sampler.verify_logits(x, gen)
            if call.entry == "verify_logits_with_uniforms":
                return self.sampler.verify_logits_with_uniforms(x, uniforms, gen)
            if call.entry == "verify_tree":
                return self.sampler(x.draft_token_ids, x.parent_ids, x.draft_probs, x.target_probs, gen)
        raise ValueError(f"unknown entry {call.entry!r}")
