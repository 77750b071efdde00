"""What a third-party sampler adapter declares, and the helpers adapters share.

Two protocol levels
-------------------
*Probability level* (implemented): the adapter is a callable with the
:func:`~specexact.decoders.verify` protocol::

    adapter(draft_token_ids [B, K] long, draft_probs [B, K, V], target_probs [B, K+1, V],
            generator) -> LongTensor [B, K+1]      # -1 after the last emitted token

The built-in decoder has already applied temperature, truncation and penalties on both
sides (per candidate prefix on the target side), so the adapter only sees the laws.

*Logits level* (planned, not auditable yet): for samplers that apply their own
temperature / top-k / top-p / min-p / penalties inside the verification step (vLLM v1's
rejection sampler is one). Auditing one needs the decoder to hand raw logits and
per-row sampling parameters to the sampler, and the reference law to be built with the
sampler's declared :attr:`Capabilities.order_of_operations`; neither exists yet, so
:func:`check_auditable` refuses adapters that declare ``logits_level=True`` rather than
audit them against the wrong law.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass
from typing import Iterator, Literal, Protocol, runtime_checkable

import torch

__all__ = [
    "Capabilities",
    "SamplerAdapter",
    "RANDOMNESS",
    "OPERATIONS",
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

OPERATIONS = ("penalties", "temperature", "min_p", "top_k", "top_p")
"""Names allowed in :attr:`Capabilities.order_of_operations` (logits-level samplers)."""


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
        True for samplers that take logits and apply their own sampling parameters
        (planned: see the module docstring); False for the probability-level protocol.
    order_of_operations : tuple of str
        For logits-level samplers, the order in which they apply :data:`OPERATIONS`;
        empty for probability-level samplers.
    notes : str
        Anything else a reader of the report needs (e.g. flags the adapter fixes).

    Raises
    ------
    ValueError
        Unknown ``randomness`` or operation, ``max_batch_size < 1``, no dtype / device,
        a non-floating dtype, or an order of operations on a probability-level sampler.
    """

    max_batch_size: int | None
    dtypes: tuple[torch.dtype, ...]
    devices: tuple[str, ...]
    randomness: Randomness
    logits_level: bool = False
    order_of_operations: tuple[str, ...] = ()
    notes: str = ""

    def __post_init__(self) -> None:
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

    def to_dict(self) -> dict:
        """JSON-ready form (dtypes as strings), for the audit report."""
        d = asdict(self)
        d["dtypes"] = [str(t).removeprefix("torch.") for t in self.dtypes]
        d["devices"] = list(self.devices)
        d["order_of_operations"] = list(self.order_of_operations)
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


def check_auditable(obj: object) -> None:
    """Raise ``NotImplementedError`` for an adapter the audit cannot drive correctly yet
    (a logits-level one); do nothing for plain callables and probability-level adapters."""
    caps = getattr(obj, "capabilities", None)
    if isinstance(caps, Capabilities) and caps.logits_level:
        raise NotImplementedError(
            f"{getattr(obj, 'name', obj)!r} is a logits-level sampler; auditing those is planned "
            "(the decoder would have to pass raw logits and sampling parameters)"
        )


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
