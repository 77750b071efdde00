"""What a third-party sampler adapter declares, and the helpers adapters share.

Two protocol levels
-------------------
*Probability level* (implemented): the adapter is a callable with the
:func:`~specexact.decoders.verify` protocol::

    adapter(draft_token_ids [B, K] long, draft_probs [B, K, V], target_probs [B, K+1, V],
            generator) -> LongTensor [B, K+1]      # -1 after the last emitted token

The built-in decoder has already applied temperature, truncation and penalties on both
sides (per candidate prefix on the target side), so the adapter only sees the laws.

*Logits level*: for samplers that apply their own temperature / top-k / top-p / min-p /
penalties to the target logits inside verification (that is where per-prefix penalty and
truncation bugs live). The adapter has a method::

    adapter.verify_logits(inputs: LogitsVerifyInputs, generator) -> LongTensor [B, K+1]

and receives the drafted tokens, the draft law actually sampled, the *raw* target logits
after all γ+1 candidate prefixes, each row's :class:`~specexact.decoders.SamplingParams`
and its token history (prompt and generated tokens; the drafts are the candidate
prefixes' extra tokens). It must apply the processing itself, per candidate prefix. It
declares the order in which it applies the operations
(:attr:`Capabilities.order_of_operations`, :attr:`Capabilities.processing`), and the audit
computes its reference laws (exact enumeration and naive sampling) with that order.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass
from typing import Iterator, Literal, Protocol, runtime_checkable

import torch

from specexact.decoders.params import SamplingParams
from specexact.decoders.processing import (
    BUILTIN_PROCESSING,
    OPERATIONS as _ORDER_OPERATIONS,
    SEMANTICS_FIELDS,
    LogitsProcessing,
)

__all__ = [
    "Capabilities",
    "SamplerAdapter",
    "LogitsSamplerAdapter",
    "LogitsVerifyInputs",
    "is_logits_level",
    "processing_of",
    "declared_processing",
    "RANDOMNESS",
    "OPERATIONS",
    "SCHEMES",
    "PROTOCOLS",
    "TREE_DRAFTING",
    "scheme_of",
    "protocol_of",
    "tree_drafting_of",
    "takes_uniforms",
    "check_supplied_uniforms",
    "uniforms_dtype_of",
    "check_auditable",
    "probs_to_logits",
    "seeded_global_rng",
]

Randomness = Literal["generator", "uniforms", "global_rng"]

RANDOMNESS = ("generator", "uniforms", "global_rng")
"""How randomness enters a sampler:

- ``"generator"``: it takes the ``torch.Generator`` passed to ``verify`` (like the built-in);
- ``"uniforms"``: it takes pre-drawn uniforms, which the adapter draws from the generator;
- ``"global_rng"``: it uses torch's global RNG; the adapter seeds that RNG from the passed
  generator for the call and restores its previous state afterwards
  (:func:`seeded_global_rng`).
"""

SCHEMES = ("tokenwise", "sample_compare", "block", "multi_draft", "tree", "lossy")
"""Verification schemes a sampler may declare (:attr:`Capabilities.scheme`); the audit
takes each scheme's own reference for the accepted length, and the emitted law is the
target's for every scheme but ``"lossy"``:

- ``"tokenwise"``: modified rejection sampling, draft by draft (Leviathan et al. 2023):
  a draft is accepted with probability ``min(1, p/q)``, so ``sum_v min(p, q)`` per draft;
- ``"sample_compare"``: the target samples its own token at each position and the draft
  is kept while they agree (mlx-lm, llama.cpp): exact, accepting ``sum_v p q`` per draft;
- ``"block"``: block verification (Sun et al., arXiv:2403.10444): exact, accepting at
  least as much as token-wise;
- ``"multi_draft"``: several draft chains per row, recursive rejection sampling
  (SpecInfer, Miao et al. 2024);
- ``"tree"``: a draft tree verified against the target law after each node;
- ``"lossy"``: knowingly inexact acceptance (e.g. Medusa's typical acceptance); its
  parameters go in :attr:`Capabilities.scheme_params`, and the audit measures its TV
  from the target law instead of failing it.
"""

PROTOCOLS = ("chain", "tree")
"""Call protocols a sampler may declare (:attr:`Capabilities.protocol`):

- ``"chain"``: ``verify(draft_token_ids [B, K], draft_probs [B, K, V], target_probs
  [B, K+1, V], generator) -> LongTensor [B, K+1]`` (or ``verify_logits`` at the logits level);
  the audit drives it with the chain decoder's cases;
- ``"tree"``: the tree / multi-draft protocol of :mod:`specexact.decoders.tree.protocol`
  (``draft_token_ids [B, N]``, ``parent_ids [B, N]``, ``draft_probs [B, N, V]``,
  ``target_probs [B, N+1, V]`` -> ``TreeVerifyOutput(tokens [B, D+1], accepted_nodes [B, D])``);
  the audit drives it with the tree decoder's cases (:mod:`specexact.audit.cases.tree_case`).
"""

TREE_DRAFTING = ("iid", "without_replacement", "top_k")
"""The tree decoder's drafting rules (:data:`specexact.decoders.tree.DRAFTING`; kept here
so that this module does not import the tree package), for :attr:`Capabilities.tree_drafting`."""

OPERATIONS = ("penalties",) + _ORDER_OPERATIONS
"""Names allowed in :attr:`Capabilities.order_of_operations` (logits-level samplers);
``"penalties"`` stands for repetition, frequency and presence in that order."""


@dataclass(frozen=True)
class Capabilities:
    """What a sampler adapter needs and does, stated so the audit and its report can show it.

    Parameters
    ----------
    max_batch_size : int or None
        Rows the wrapped sampler takes per call (``None``: any). An adapter with a limit
        loops or chunks internally; the limit is reported, not enforced by the caller.
    dtypes : tuple of torch.dtype
        Floating dtypes the wrapped sampler computes in; the adapter casts its inputs to
        ``dtypes[0]``.
    devices : tuple of str
        Device types the adapter has been run on (``"cpu"``, ``"cuda"``).
    randomness : {"generator", "uniforms", "global_rng"}
        How randomness enters (see :data:`RANDOMNESS`).
    logits_level : bool
        True for samplers that take raw target logits and apply their own sampling
        parameters (they implement ``verify_logits``); False for the probability level.
    order_of_operations : tuple of str
        For logits-level samplers (required there), the order in which they apply
        :data:`OPERATIONS`; an operation left out is one they do not implement, and audit
        cases whose parameters need it are skipped. Empty for probability-level samplers.
    repetition_penalty_scope : {"output", "prompt_and_output"}
        Logits level: whether the repetition penalty also counts the prompt's tokens.
    greedy : bool
        Logits level: whether ``temperature == 0`` is supported.
    semantics : dict
        Logits level: the variant of each operation the sampler implements where it is not
        the built-in's, by the names of :data:`~specexact.decoders.processing.SEMANTICS_FIELDS`
        (e.g. ``{"top_k_ties": "exactly_k", "top_p_boundary": "exclusive"}``; see
        :class:`~specexact.decoders.LogitsProcessing`); the reference laws use them. Stored
        as sorted ``(name, value)`` pairs. Empty (the default): the built-in semantics.
    notes : str
        Anything else a reader of the report needs (e.g. flags the adapter fixes).
    scheme : str
        The verification scheme the sampler implements (:data:`SCHEMES`, default
        ``"tokenwise"``); the audit judges its accepted length by that scheme's optimum.
    scheme_params : tuple of (str, float) pairs
        Parameters of the scheme (e.g. ``(("threshold", 0.3),)`` for a lossy one).
    protocol : {"chain", "tree"}
        The call protocol (:data:`PROTOCOLS`, default ``"chain"``): the audit runs the chain
        decoder's cases for a chain sampler and the tree decoder's for a tree sampler.
    tree_drafting : tuple of str
        Tree protocol: the drafting rules (:data:`TREE_DRAFTING`) the sampler is audited
        under; empty (the default): all of them. A verifier that is exact only for some
        trees declares those (e.g. SGLang's target-only rule needs distinct sibling tokens and
        matches recursive rejection sampling's accepted length only on deterministic trees:
        ``("top_k",)``); tree cases with another drafting rule are skipped, with the reason.

    Raises
    ------
    TypeError
        ``logits_level`` / ``greedy`` not a bool, ``order_of_operations`` /
        ``tree_drafting`` not a tuple, malformed ``scheme_params``, ``semantics`` not a
        mapping.
    ValueError
        Unknown ``randomness``, operation, ``scheme``, ``protocol`` or drafting rule, an
        unknown or undeclarable ``semantics`` entry (named, with the reason), ``semantics``
        on a probability-level sampler,
        ``max_batch_size < 1``, no dtype / device, a non-floating dtype, an order of
        operations on a probability-level sampler, a logits-level sampler without one, a
        logits-level tree sampler, or ``tree_drafting`` on a chain sampler.
    """

    max_batch_size: int | None
    dtypes: tuple[torch.dtype, ...]
    devices: tuple[str, ...]
    randomness: Randomness
    logits_level: bool = False
    order_of_operations: tuple[str, ...] = ()
    repetition_penalty_scope: Literal["output", "prompt_and_output"] = "output"
    greedy: bool = True
    semantics: tuple[tuple[str, object], ...] = ()
    notes: str = ""
    scheme: str = "tokenwise"
    scheme_params: tuple[tuple[str, float], ...] = ()
    protocol: str = "chain"
    tree_drafting: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("logits_level", "greedy"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if not isinstance(self.order_of_operations, (tuple, list)):
            raise TypeError(f"order_of_operations must be a tuple of operation names, got {self.order_of_operations!r}")
        if self.randomness not in RANDOMNESS:
            raise ValueError(f"randomness must be one of {RANDOMNESS}, got {self.randomness!r}")
        if self.max_batch_size is not None and (int(self.max_batch_size) != self.max_batch_size
                                                or self.max_batch_size < 1):
            raise ValueError(f"max_batch_size must be None or an integer >= 1, got {self.max_batch_size!r}")
        if not self.dtypes or not all(isinstance(d, torch.dtype) and d.is_floating_point for d in self.dtypes):
            raise ValueError(f"dtypes must be a non-empty tuple of floating torch dtypes, got {self.dtypes!r}")
        if not self.devices:
            raise ValueError("devices must name at least one device type")
        unknown = [op for op in self.order_of_operations if op not in OPERATIONS]
        if unknown:
            raise ValueError(f"unknown operations {unknown}; allowed: {OPERATIONS}")
        if self.order_of_operations and not self.logits_level:
            raise ValueError("order_of_operations applies to logits-level samplers only")
        if self.logits_level and not self.order_of_operations:
            raise ValueError("a logits-level sampler must declare its order_of_operations")
        if self.scheme not in SCHEMES:
            raise ValueError(f"scheme must be one of {SCHEMES}, got {self.scheme!r}")
        if not isinstance(self.scheme_params, tuple) or not all(
                isinstance(kv, tuple) and len(kv) == 2 and isinstance(kv[0], str) for kv in self.scheme_params):
            raise TypeError(f"scheme_params must be a tuple of (name, value) pairs, got {self.scheme_params!r}")
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {self.protocol!r}")
        if not isinstance(self.tree_drafting, tuple):
            raise TypeError(f"tree_drafting must be a tuple of drafting rules, got {self.tree_drafting!r}")
        unknown_drafting = [d for d in self.tree_drafting if d not in TREE_DRAFTING]
        if unknown_drafting:
            raise ValueError(f"unknown tree_drafting {unknown_drafting}; allowed: {TREE_DRAFTING}")
        if self.tree_drafting and self.protocol != "tree":
            raise ValueError(f"tree_drafting applies to tree-protocol samplers only, got protocol {self.protocol!r}")
        if self.protocol == "tree" and self.logits_level:
            raise ValueError("a tree-protocol sampler is probability level (logits_level=False)")
        semantics = self.semantics
        if isinstance(semantics, dict):
            semantics = tuple(sorted(semantics.items()))
        if not isinstance(semantics, tuple) or not all(
                isinstance(kv, tuple) and len(kv) == 2 and isinstance(kv[0], str) for kv in semantics):
            raise TypeError(f"semantics must be a dict of variant names to values, got {self.semantics!r}")
        unknown_semantics = [k for k, _ in semantics if k not in SEMANTICS_FIELDS]
        if unknown_semantics:
            raise ValueError(f"unknown semantics {unknown_semantics}; allowed: {SEMANTICS_FIELDS}")
        if semantics and not self.logits_level:
            raise ValueError("semantics applies to logits-level samplers only (the probability level receives "
                             "the processed laws)")
        object.__setattr__(self, "semantics", tuple(sorted(semantics)))
        self.processing  # validates the order (repeats), the scope and the semantics

    @property
    def lossless(self) -> bool:
        """False only for a sampler that declares itself lossy."""
        return self.scheme != "lossy"

    @property
    def processing(self) -> LogitsProcessing:
        """The logits processing the audit's reference laws use for this sampler: the
        declared order for a logits-level sampler, the built-in one otherwise."""
        if not self.logits_level:
            return BUILTIN_PROCESSING
        return LogitsProcessing(order=tuple(self.order_of_operations),
                                repetition_penalty_scope=self.repetition_penalty_scope, greedy=self.greedy,
                                **dict(self.semantics))

    def to_dict(self) -> dict:
        """JSON-ready form (dtypes as strings), for the audit report; ``semantics`` (a dict)
        only where some are declared."""
        d = asdict(self)
        d["dtypes"] = [str(t).removeprefix("torch.") for t in self.dtypes]
        d["devices"] = list(self.devices)
        d["order_of_operations"] = list(self.order_of_operations)
        d["scheme_params"] = {k: v for k, v in self.scheme_params}
        d["tree_drafting"] = list(self.tree_drafting)
        semantics = d.pop("semantics")
        if semantics:  # only where declared (the processing in the report's settings shows all)
            d["semantics"] = dict(semantics)
        return d


@runtime_checkable
class SamplerAdapter(Protocol):
    """A third-party sampler behind the probability-level ``verify`` protocol.

    Attributes
    ----------
    name : str
        Short name (the entry-point name, e.g. ``"transformers"``).
    capabilities : Capabilities
    """

    name: str
    capabilities: Capabilities

    def metadata(self) -> dict:
        """JSON-ready facts for the audit report: library, installed version, the wrapped
        function and the signature variant in use, versions tested, capabilities."""
        ...

    def __call__(self, draft_token_ids: torch.Tensor, draft_probs: torch.Tensor,
                 target_probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        ...


@dataclass(frozen=True)
class LogitsVerifyInputs:
    """What a logits-level sampler receives for one verification round.

    Attributes
    ----------
    draft_token_ids : torch.LongTensor
        Shape ``[B, K]``: the drafted tokens.
    draft_probs : torch.Tensor
        Shape ``[B, K, V]``, float32: the law each draft was actually sampled from (after
        the draft's own temperature, truncation and penalties).
    target_logits : torch.Tensor
        Shape ``[B, K+1, V]``, float32: the target's *raw* logits; position ``i`` is the
        next-token logits after the prompt, the generated tokens and ``draft_token_ids[:, :i]``.
    target_params : tuple of SamplingParams
        ``B`` entries: each row's sampling parameters for the target.
    prompt_token_ids : torch.LongTensor
        Shape ``[B, T0]``.
    output_token_ids : torch.LongTensor
        Shape ``[B, H]``: the tokens generated before this round, left-aligned, ``-1``
        after the last (rows have different lengths).

    The penalties of candidate prefix ``i`` count ``output_token_ids`` (and the prompt,
    for a repetition penalty over the prompt) *plus* ``draft_token_ids[:, :i]``.
    """

    draft_token_ids: torch.Tensor
    draft_probs: torch.Tensor
    target_logits: torch.Tensor
    target_params: tuple[SamplingParams, ...]
    prompt_token_ids: torch.Tensor
    output_token_ids: torch.Tensor

    @property
    def batch_size(self) -> int:
        """B, the rows of this round."""
        return int(self.draft_token_ids.shape[0])

    @property
    def num_draft_tokens(self) -> int:
        """K (γ), the drafts per row."""
        return int(self.draft_token_ids.shape[1])

    @property
    def vocab_size(self) -> int:
        """V."""
        return int(self.target_logits.shape[-1])

    def num_output_tokens(self) -> torch.Tensor:
        """Shape ``[B]``: generated tokens before this round, per row."""
        return (self.output_token_ids >= 0).sum(1)

    def candidate_token_ids(self, row: int) -> torch.Tensor:
        """Shape ``[T0 + n + K]``: row ``row``'s prompt, generated tokens and drafts; the
        candidate prefix of position ``i`` is its first ``T0 + n + i`` entries."""
        out = self.output_token_ids[row]
        return torch.cat([self.prompt_token_ids[row], out[out >= 0], self.draft_token_ids[row]])


@runtime_checkable
class LogitsSamplerAdapter(Protocol):
    """A third-party sampler that processes the target logits itself (logits level).

    Attributes
    ----------
    name : str
    capabilities : Capabilities
        With ``logits_level=True`` and the order of operations it applies.
    """

    name: str
    capabilities: Capabilities

    def metadata(self) -> dict:
        """JSON-ready facts for the audit report (library, version, capabilities)."""
        ...

    def verify_logits(self, inputs: LogitsVerifyInputs, generator: torch.Generator | None = None) -> torch.Tensor:
        """``-> LongTensor [B, K+1]``, ``-1`` after the last emitted token (as ``verify``).

        Randomness only from ``generator`` (or as declared in ``capabilities.randomness``).
        Anything it raises is recorded by the audit as a crash (a defect); an output that
        breaks the protocol as a protocol violation.
        """
        ...


def is_logits_level(obj: object) -> bool:
    """True for an adapter that declares ``logits_level=True`` in its capabilities."""
    caps = getattr(obj, "capabilities", None)
    return isinstance(caps, Capabilities) and caps.logits_level


def processing_of(obj: object) -> LogitsProcessing:
    """The logits processing the audit's reference laws use for sampler ``obj``."""
    caps = getattr(obj, "capabilities", None)
    return caps.processing if isinstance(caps, Capabilities) else BUILTIN_PROCESSING


def declared_processing(processing: LogitsProcessing) -> dict:
    """The :class:`Capabilities` keyword arguments that declare ``processing`` (a
    logits-level sampler's ``order_of_operations``, ``repetition_penalty_scope``, ``greedy``
    and ``semantics``): ``Capabilities(..., logits_level=True, **declared_processing(p))``
    has ``.processing == p``."""
    return {"order_of_operations": tuple(processing.order),
            "repetition_penalty_scope": processing.repetition_penalty_scope,
            "greedy": processing.greedy, "semantics": processing.semantics()}


def scheme_of(obj: object) -> str:
    """The verification scheme sampler ``obj`` declares (``"tokenwise"`` when it declares none)."""
    caps = getattr(obj, "capabilities", None)
    return caps.scheme if isinstance(caps, Capabilities) else "tokenwise"


def protocol_of(obj: object) -> str:
    """The call protocol sampler ``obj`` declares (:data:`PROTOCOLS`; ``"chain"`` when it
    declares none)."""
    caps = getattr(obj, "capabilities", None)
    return caps.protocol if isinstance(caps, Capabilities) else "chain"


def tree_drafting_of(obj: object) -> tuple[str, ...]:
    """The drafting rules a tree sampler is audited under (:attr:`Capabilities.tree_drafting`;
    all of :data:`TREE_DRAFTING` when it declares none)."""
    caps = getattr(obj, "capabilities", None)
    declared = caps.tree_drafting if isinstance(caps, Capabilities) else ()
    return declared or TREE_DRAFTING


def takes_uniforms(obj: object) -> bool:
    """True for a sampler whose acceptance uniforms the caller can supply.

    Such a sampler has, beside its usual entry point, the method
    ``verify_with_uniforms(draft_token_ids [B, K], draft_probs [B, K, V], target_probs
    [B, K+1, V], uniforms [B, K], generator) -> LongTensor [B, K+1]`` (probability level) or
    ``verify_logits_with_uniforms(inputs, uniforms, generator)`` (logits level), where
    ``uniforms[b, i]`` (float64 in ``[0, 1)``) is the uniform the sampler compares with the
    acceptance ratio of draft ``i`` of row ``b`` — whatever form its test takes (``u < p/q``,
    ``u q < p``, ``u <= p/q``) — and every other draw (recovered and bonus tokens) comes from
    ``generator``. The sampler casts the uniforms to the dtype its own uniforms have
    (:func:`uniforms_dtype_of`), so a prober knows the grid it probes on. This is what the
    fuzz phase's boundary-uniform probes use.
    """
    name = "verify_logits_with_uniforms" if is_logits_level(obj) else "verify_with_uniforms"
    return callable(getattr(obj, name, None))


def uniforms_dtype_of(obj: object) -> torch.dtype:
    """The dtype of a uniforms-taking sampler's acceptance uniforms (attribute
    ``uniforms_dtype``; float64 when it states none)."""
    dtype = getattr(obj, "uniforms_dtype", torch.float64)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"uniforms_dtype must be a floating torch.dtype, got {dtype!r}")
    return dtype


def check_supplied_uniforms(uniforms: torch.Tensor, batch_size: int, num_draft_tokens: int) -> None:
    """Check the acceptance uniforms handed to an adapter's ``verify_with_uniforms`` /
    ``verify_logits_with_uniforms``: shape ``[B, K]``, every value in ``[0, 1)``.

    Raises
    ------
    ValueError
        ``uniforms`` has another shape, or a value outside ``[0, 1)``.
    """
    shape = (int(batch_size), int(num_draft_tokens))
    if tuple(uniforms.shape) != shape:
        raise ValueError(f"uniforms must have shape {shape}, got {tuple(uniforms.shape)}")
    if not bool(((uniforms >= 0) & (uniforms < 1)).all()):
        raise ValueError("uniforms must lie in [0, 1)")


def check_auditable(obj: object) -> None:
    """Raise ``TypeError`` for an object the audit cannot drive: a logits-level adapter
    without a callable ``verify_logits``, or a probability-level one that is not callable."""
    name = getattr(obj, "name", obj)
    if is_logits_level(obj):
        if not callable(getattr(obj, "verify_logits", None)):
            raise TypeError(f"{name!r} declares logits_level=True but has no verify_logits(inputs, generator) method")
    elif not callable(obj):
        raise TypeError(f"sampler {name!r} is not callable (the verify protocol)")


def probs_to_logits(probs: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``log(probs)`` in ``dtype``; zero probabilities become ``-inf``.

    ``softmax(probs_to_logits(p)) == p / p.sum()`` up to rounding in ``dtype``, and every
    zero of ``p`` stays an exact zero.
    """
    return torch.log(probs.to(dtype))


@contextlib.contextmanager
def seeded_global_rng(generator: torch.Generator | None, device: torch.device | str = "cpu") -> Iterator[int]:
    """Run a block on torch's global RNG seeded from ``generator``; restore it afterwards.

    One 62-bit seed is drawn from ``generator`` (from torch's default generator when
    ``None``; it is drawn *before* the state is saved, so successive calls get different
    seeds), torch's global RNG (CPU, and ``device`` when it is a CUDA device) is saved,
    seeded with it, and restored on exit. The block's draws are then a function of the
    passed generator only, and code outside sees the global RNG untouched.

    Yields
    ------
    int
        The seed used (for reproductions: ``torch.manual_seed(seed)`` replays the block).
    """
    gen_device = generator.device if generator is not None else torch.device("cpu")
    seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=gen_device).item())
    device = torch.device(device)
    cuda = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(seed)
        yield seed
