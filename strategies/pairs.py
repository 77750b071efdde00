"""Draft/target pairs for the ``verify`` protocol, in the families that break verifiers.

A :class:`VerifyCase` holds the recipe of one ``verify`` input (family, shapes, seed, a
few shape numbers) and builds, on first access, ``draft_token_ids [B, K]``,
``draft_probs [B, K, V]``, ``target_probs [B, K+1, V]`` and ``sampled_probs [B, K, V]``,
the law the drafts were *actually* drawn from. ``sampled_probs`` equals ``draft_probs``
except in the two dishonest families (``zero_draft_prob``, ``misreported``), where the
reported ``draft_probs`` is not the law that produced the drafts: there the emitted law is
not the target's, which makes them negative controls for statistical checks.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cached_property
from typing import ClassVar

import numpy as np
import torch
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from specexact.decoders import SamplingParams, batch_params, process_logits

from ._validation import InvalidArgument, check_families, check_int, check_real, int_or_strategy
from .laws import DTYPES, PROB_FAMILIES, ProbsCase, affine_permutations, zipf_logits
from .truncation import params_repr
from .vocab import vocab_sizes

__all__ = [
    "DISHONEST_PAIR_FAMILIES",
    "HONEST_PAIR_FAMILIES",
    "PAIR_FAMILIES",
    "VerifyCase",
    "draft_target_pairs",
    "first_token_law",
]

#: Every family of :func:`draft_target_pairs`.
PAIR_FAMILIES: tuple[str, ...] = (
    "independent", "identical", "rounding", "disjoint", "target_removed",
    "zero_draft_prob", "one_hot_draft", "one_hot_target", "greedy", "truncated",
    "misreported",
)
#: Families whose drafts are drawn from the reported ``draft_probs`` (the emitted law is
#: the target's).
HONEST_PAIR_FAMILIES: tuple[str, ...] = tuple(
    f for f in PAIR_FAMILIES if f not in ("zero_draft_prob", "misreported")
)
#: Families whose reported ``draft_probs`` differs from the law the drafts came from.
DISHONEST_PAIR_FAMILIES: tuple[str, ...] = ("zero_draft_prob", "misreported")
# Families that need two distinct tokens.
_NEED_TWO = ("disjoint", "target_removed", "zero_draft_prob", "misreported")

_SEED_MAX = 2**32 - 1


def _normalise(p: torch.Tensor) -> torch.Tensor:
    return p / p.sum(-1, keepdim=True)


def _restrict(p: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``p`` zeroed outside ``mask`` and renormalised (float64); a row left with no mass
    becomes uniform on its mask."""
    p = torch.where(mask, p.to(torch.float64), 0.0)
    empty = p.sum(-1, keepdim=True) <= 0
    p = torch.where(empty, mask.to(torch.float64), p)
    return _normalise(p)


def first_token_law(target_row, draft_row, sampled_row) -> np.ndarray:
    """Exact law of the first token ``verify`` emits, for one batch row.

    The drafted token ``d ~ sampled_row`` is accepted with probability
    ``min(1, p(d) / q(d))`` (for ``q(d) = 0``: 1 if ``p(d) > 0`` else 0, the documented
    guard); on rejection the token comes from the residual ``max(p - q, 0)`` normalised, or
    from ``p`` when the residual has no mass. Here ``p = target_row`` and
    ``q = draft_row`` as given (not renormalised), ``sampled_row`` is normalised.

    Parameters
    ----------
    target_row, draft_row, sampled_row : array_like
        Shape ``[V]``: ``target_probs[b, 0]``, ``draft_probs[b, 0]``, ``sampled_probs[b, 0]``.

    Returns
    -------
    numpy.ndarray
        Shape ``[V]``, float64, sums to 1. For honest, normalised inputs it equals
        ``target_row``; in general its TV distance to ``p / sum(p)`` is at most
        ``|sum(p) - sum(q)| / sum(q)`` when ``sampled = q / sum(q)``.
    """
    p = np.asarray(torch.as_tensor(target_row).double().cpu(), dtype=np.float64)
    q = np.asarray(torch.as_tensor(draft_row).double().cpu(), dtype=np.float64)
    r = np.asarray(torch.as_tensor(sampled_row).double().cpu(), dtype=np.float64)
    r = r / r.sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        accept = np.where(q > 0, np.minimum(1.0, p / np.where(q > 0, q, 1.0)), (p > 0).astype(float))
    accepted = r * accept
    reject = max(0.0, 1.0 - accepted.sum())
    residual = np.maximum(p - q, 0.0)
    if residual.sum() <= 0:
        residual = p
    law = accepted + reject * residual / residual.sum()
    return law / law.sum()


@dataclass(frozen=True)
class VerifyCase:
    """One ``verify`` input of a family (see :func:`draft_target_pairs`), built from a seed.

    Parameters
    ----------
    family : str
        One of :data:`PAIR_FAMILIES`.
    vocab_size, batch_size, num_draft_tokens : int
        V >= 1, B >= 1, K >= 1.
    seed : int
        Seeds every tensor and the drafted ids (``0 <= seed < 2**32``).
    dtype : str
        dtype of ``draft_probs`` and ``target_probs`` (one of ``laws.DTYPES``).
    target_family : str
        Probability family (``laws.PROB_FAMILIES``) of the target rows the family starts
        from.
    mismatch : float
        In [0, 1]: how far the draft is from the target (mixture weight of an independent
        Zipf law; for ``misreported``, the reported law is the sampled one at temperature
        ``1.5 + 3 * mismatch`` plus a quarter of mass on its least probable token).
    num_ulps : int
        For ``rounding``: how many ulps (of the dtype) the target sits below the draft.
    masked_fraction : float
        For ``target_family="masked"``: the fraction of zeroed target tokens, in [0, 1).
    target_params, draft_params : SamplingParams or None
        For ``truncated``: the two pipelines' parameters.

    Notes
    -----
    ``repr(case)`` lists the family, sizes, seed and non-default fields; it rebuilds the
    same tensors bit for bit.
    """

    family: str
    vocab_size: int
    batch_size: int = 1
    num_draft_tokens: int = 1
    seed: int = 0
    dtype: str = "float32"
    target_family: str = "zipf"
    mismatch: float = 0.5
    num_ulps: int = 1
    masked_fraction: float = 0.5
    target_params: SamplingParams | None = None
    draft_params: SamplingParams | None = None

    _always: ClassVar[tuple[str, ...]] = (
        "family", "vocab_size", "batch_size", "num_draft_tokens", "seed", "dtype")

    def __post_init__(self) -> None:
        if self.family not in PAIR_FAMILIES:
            raise InvalidArgument(f"family={self.family!r} must be one of {PAIR_FAMILIES!r}")
        check_int(self.vocab_size, "vocab_size", minimum=1)
        check_int(self.batch_size, "batch_size", minimum=1)
        check_int(self.num_draft_tokens, "num_draft_tokens", minimum=1)
        check_int(self.seed, "seed", minimum=0, maximum=_SEED_MAX)
        if self.dtype not in DTYPES:
            raise InvalidArgument(f"dtype={self.dtype!r} must be one of {DTYPES!r}")
        if self.target_family not in PROB_FAMILIES:
            raise InvalidArgument(
                f"target_family={self.target_family!r} must be one of {PROB_FAMILIES!r}")
        check_real(self.mismatch, "mismatch", low=0.0, high=1.0)
        check_int(self.num_ulps, "num_ulps", minimum=1)
        check_real(self.masked_fraction, "masked_fraction", low=0.0, high=1.0, high_open=True)
        if self.family in _NEED_TWO and self.vocab_size < 2:
            raise InvalidArgument(
                f"family={self.family!r} needs vocab_size >= 2, got vocab_size={self.vocab_size}")
        for name in ("target_params", "draft_params"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, SamplingParams):
                raise InvalidArgument(f"{name}={value!r} must be a SamplingParams or None")

    def __repr__(self) -> str:
        parts = [f"{f}={getattr(self, f)!r}" for f in self._always]
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name not in self._always and value != f.default:
                text = params_repr(value) if isinstance(value, SamplingParams) else repr(value)
                parts.append(f"{f.name}={text}")
        return f"VerifyCase({', '.join(parts)})"

    def _repr_pretty_(self, printer, cycle) -> None:
        """Hypothesis / IPython pretty printing: the copy-pastable ``repr``."""
        printer.text(repr(self))

    # ------------------------------------------------------------------ build
    @property
    def honest(self) -> bool:
        """True when the drafts were drawn from the reported ``draft_probs``."""
        return self.family not in DISHONEST_PAIR_FAMILIES

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    def _gen(self, salt: int) -> torch.Generator:
        return torch.Generator().manual_seed((self.seed * 7_919 + salt) % (2**63))

    def _probs(self, family: str, rows: int, salt: int) -> torch.Tensor:
        return ProbsCase(family=family, vocab_size=self.vocab_size, batch_size=rows,
                         seed=(self.seed + salt) % (_SEED_MAX + 1), dtype="float64").probs

    def _one_hot(self, rows: int, salt: int) -> torch.Tensor:
        hot = torch.randint(self.vocab_size, (rows, 1), generator=self._gen(salt))
        return torch.zeros(rows, self.vocab_size, dtype=torch.float64).scatter_(1, hot, 1.0)

    @cached_property
    def _tensors(self) -> dict[str, torch.Tensor]:
        B, K, V, fam = self.batch_size, self.num_draft_tokens, self.vocab_size, self.family
        dt = self.torch_dtype
        # Target rows start from a probability family (float64 copy of its dtype'd rows).
        base = ProbsCase(family=self.target_family, vocab_size=V, batch_size=B * (K + 1),
                         seed=self.seed, dtype=self.dtype, num_spikes=3,
                         masked_fraction=self.masked_fraction).probs
        target = base.to(torch.float64).reshape(B, K + 1, V)
        other = self._probs("zipf", B * K, salt=1).reshape(B, K, V)
        lam = self.mismatch
        draft = _normalise((1 - lam) * _normalise(target[:, :K]) + lam * other)
        sampled = None
        forced: dict[tuple[int, int], int] = {}

        if fam == "identical":
            draft = target[:, :K].clone()
        elif fam == "rounding":
            draft = target[:, :K].clone()
            lowered = draft.to(dt)
            for _ in range(self.num_ulps):
                lowered = torch.where(lowered > 0,
                                      torch.nextafter(lowered, torch.zeros_like(lowered)), lowered)
            target = target.clone()
            target[:, :K] = lowered.to(torch.float64)
            zero = (target[:, :K].sum(-1) <= 0)
            if bool(zero.any()):  # pragma: no cover - one ulp below a positive number is >= 0
                raise AssertionError("rounding family produced a target row without mass")
        elif fam == "disjoint":
            perm = affine_permutations(V, B, self._gen(2))
            half = (V + 1) // 2
            in_target = torch.zeros(B, V, dtype=torch.bool).scatter_(1, perm[:, :half], True)
            target = _restrict(target, in_target[:, None, :].expand(B, K + 1, V))
            draft = _restrict(other, ~in_target[:, None, :].expand(B, K, V))
        elif fam == "target_removed":
            g = self._gen(3)
            perms = affine_permutations(V, B * (K + 1), g).reshape(B, K + 1, V)
            sizes = torch.randint(1, V, (B, K + 1, 1), generator=g)  # 1 .. V-1 removed
            rank_of = torch.empty_like(perms).scatter_(2, perms, torch.arange(V).expand_as(perms))
            removed = rank_of < sizes
            target = _restrict(target, ~removed)
            on_removed = _restrict(other, removed[:, :K])
            draft = _normalise(0.5 * on_removed + 0.5 * _normalise(draft))
            for b in range(B):  # the first draft lands on a token the target removed
                forced[(b, 0)] = int(torch.argmax(torch.where(removed[b, 0], draft[b, 0], -1.0)))
        elif fam == "zero_draft_prob":
            sampled = other.clone()
        elif fam == "one_hot_draft":
            draft = self._one_hot(B * K, salt=4).reshape(B, K, V)
        elif fam == "one_hot_target":
            target = self._one_hot(B * (K + 1), salt=5).reshape(B, K + 1, V)
        elif fam == "greedy":
            target = self._one_hot(B * (K + 1), salt=5).reshape(B, K + 1, V)
            # Each draft position copies the target's token with probability 1/2.
            own = self._one_hot(B * K, salt=6).reshape(B, K, V)
            copy = torch.rand(B, K, 1, generator=self._gen(7)) < 0.5
            draft = torch.where(copy, target[:, :K], own)
        elif fam == "truncated":
            tp = self.target_params or SamplingParams()
            dp = self.draft_params or SamplingParams()
            logits = zipf_logits(V, B * (K + 1), seed=self.seed, zipf_exponent=1.0 + lam)
            noise = torch.randn(B * (K + 1), V, generator=self._gen(8), dtype=torch.float64)
            t_law = process_logits(logits, batch_params(tp, B * (K + 1)))
            d_law = process_logits(logits + lam * noise, batch_params(dp, B * (K + 1)))
            target = t_law.reshape(B, K + 1, V)
            draft = d_law.reshape(B, K + 1, V)[:, :K]
        elif fam == "misreported":
            # Reported: the sampled law at temperature tau, plus a quarter of mass on its
            # least probable token (so that even flat or one-hot laws are misreported).
            sampled = draft.clone()
            tau = 1.5 + 3.0 * lam
            least = torch.argmin(sampled, dim=-1, keepdim=True)
            bump = torch.zeros_like(sampled).scatter_(2, least, 0.25)
            draft = _normalise(_normalise(sampled ** (1.0 / tau)) + bump)

        target_out = target.to(dt)
        draft_out = draft.to(dt)
        if sampled is None:
            sampled = draft_out.to(torch.float64)
        # Make sure every row keeps positive mass in the dtype (half types can flush).
        for name, t in (("target_probs", target_out), ("draft_probs", draft_out)):
            if not bool((t.to(torch.float64).sum(-1) > 0).all()):  # pragma: no cover
                raise AssertionError(f"{self!r} built a {name} row with no mass")

        ids = self._draw_ids(_normalise(sampled.to(torch.float64)), forced)
        if fam == "zero_draft_prob":
            # Report the sampled law with the drafted token's mass removed: q(d) = 0.
            rep = sampled.clone().scatter_(2, ids[:, :, None], 0.0)
            lonely = rep.sum(-1) <= 0
            if bool(lonely.any()):  # pragma: no cover - zipf rows have full support
                raise AssertionError("zero_draft_prob left a draft row without mass")
            draft_out = _normalise(rep).to(dt)
        return {
            "draft_token_ids": ids,
            "draft_probs": draft_out,
            "target_probs": target_out,
            "sampled_probs": _normalise(sampled.to(torch.float64)),
        }

    def _draw_ids(self, sampled: torch.Tensor, forced: dict[tuple[int, int], int]) -> torch.Tensor:
        rng = np.random.default_rng(self.seed)
        B, K, V = sampled.shape
        ids = np.empty((B, K), dtype=np.int64)
        for b in range(B):
            for i in range(K):
                if (b, i) in forced:
                    ids[b, i] = forced[(b, i)]
                else:
                    ids[b, i] = rng.choice(V, p=sampled[b, i].numpy())
        return torch.from_numpy(ids)

    @property
    def draft_token_ids(self) -> torch.Tensor:
        """``[B, K]`` int64 drafted ids, each in the support of ``sampled_probs``."""
        return self._tensors["draft_token_ids"]

    @property
    def draft_probs(self) -> torch.Tensor:
        """``[B, K, V]`` reported draft law, dtype :attr:`dtype`."""
        return self._tensors["draft_probs"]

    @property
    def target_probs(self) -> torch.Tensor:
        """``[B, K+1, V]`` target law after each prefix, dtype :attr:`dtype`."""
        return self._tensors["target_probs"]

    @property
    def sampled_probs(self) -> torch.Tensor:
        """``[B, K, V]`` float64, normalised: the law the drafts were actually drawn from."""
        return self._tensors["sampled_probs"]

    def first_token_law(self, row: int = 0) -> np.ndarray:
        """Exact law ``[V]`` of the first emitted token of batch row ``row``
        (:func:`first_token_law`)."""
        return first_token_law(self.target_probs[row, 0], self.draft_probs[row, 0],
                               self.sampled_probs[row, 0])

    def sample_drafts(self, rows: int, *, row: int = 0, seed: int = 0) -> torch.Tensor:
        """``[rows, K]`` fresh drafts for ``rows`` copies of batch row ``row``, drawn from
        ``sampled_probs[row]`` with ``numpy.random.default_rng(seed)``."""
        rng = np.random.default_rng(seed)
        laws = self.sampled_probs[row].numpy()
        cols = [rng.choice(self.vocab_size, size=rows, p=laws[i])
                for i in range(self.num_draft_tokens)]
        return torch.from_numpy(np.stack(cols, axis=1).astype(np.int64))

    def repro(self, generator_seed: int | None = None) -> str:
        """Python that rebuilds the case and calls the built-in ``verify`` on it."""
        gen = "None" if generator_seed is None else f"torch.Generator().manual_seed({generator_seed})"
        return (
            "import torch\n"
            "from specexact.decoders import SamplingParams, verify\n"
            "from specexact.strategies import VerifyCase\n"
            f"case = {self!r}\n"
            "out = verify(case.draft_token_ids, case.draft_probs, case.target_probs, "
            f"{gen})"
        )


_TRUNCATIONS = st.sampled_from([
    SamplingParams(),
    SamplingParams(top_k=1),
    SamplingParams(top_k=3),
    SamplingParams(top_p=0.5),
    SamplingParams(top_p=0.9),
    SamplingParams(min_p=0.2),
    SamplingParams(temperature=0.5, top_k=5, top_p=0.8),
    SamplingParams(temperature=2.0, min_p=0.05),
])


@st.composite
def _pairs(draw, families, vocab_size, batch_size, num_draft_tokens, dtypes, target_families,
           fixed_vocab):
    family = draw(st.sampled_from(families))
    if family in _NEED_TWO and fixed_vocab is not None and fixed_vocab < 2:
        # V = 1 was asked for: families that need two tokens fall back to the first
        # family that does not (the eager check guarantees there is one).
        family = next(f for f in families if f not in _NEED_TWO)
    if family in _NEED_TWO:
        V = max(2, draw(vocab_size))  # a drawn V = 1 becomes 2
    else:
        V = draw(vocab_size)
    B = draw(batch_size)
    K = draw(num_draft_tokens)
    kwargs: dict = {}
    if family in ("independent", "identical", "rounding", "target_removed", "zero_draft_prob",
                  "one_hot_draft", "misreported"):
        kwargs["target_family"] = draw(st.sampled_from(target_families))
        if kwargs["target_family"] == "masked":
            kwargs["masked_fraction"] = draw(st.one_of(st.sampled_from([0.5, 0.999]),
                                                       st.floats(0.0, 0.999)))
    if family in ("independent", "disjoint", "target_removed", "one_hot_target",
                  "truncated", "misreported"):
        kwargs["mismatch"] = draw(st.one_of(st.sampled_from([0.0, 0.5, 1.0]), st.floats(0, 1)))
    if family == "rounding":
        kwargs["num_ulps"] = draw(st.integers(1, 4))
    if family == "truncated":
        kwargs["target_params"] = draw(_TRUNCATIONS)
        kwargs["draft_params"] = draw(_TRUNCATIONS)
    dtype = "float32" if family == "truncated" else draw(st.sampled_from(dtypes))
    seed = draw(st.integers(0, _SEED_MAX))
    return VerifyCase(family=family, vocab_size=V, batch_size=B, num_draft_tokens=K,
                      seed=seed, dtype=dtype, **kwargs)


def draft_target_pairs(
    *,
    vocab_size: int | SearchStrategy[int] | None = None,
    batch_size: int | SearchStrategy[int] | None = None,
    num_draft_tokens: int | SearchStrategy[int] | None = None,
    families: tuple[str, ...] | None = None,
    dtypes: tuple[str, ...] | None = None,
    target_families: tuple[str, ...] | None = None,
) -> SearchStrategy[VerifyCase]:
    """Inputs of the ``verify`` protocol in the draft/target families that break verifiers.

    Parameters
    ----------
    vocab_size : int or SearchStrategy[int], keyword-only
        V (default :func:`~specexact.strategies.vocab_sizes` up to 262145). Families that
        need two tokens (``disjoint``, ``target_removed``, ``zero_draft_prob``,
        ``misreported``) turn a drawn V = 1 into V = 2; when V = 1 is given as an int they
        fall back to another chosen family.
    batch_size : int or SearchStrategy[int], keyword-only
        B (default 1..3).
    num_draft_tokens : int or SearchStrategy[int], keyword-only
        K (default 1..4).
    families : sequence of str, keyword-only
        Subset of :data:`PAIR_FAMILIES` (default all; :data:`HONEST_PAIR_FAMILIES` for
        exactness checks).
    dtypes : sequence of str, keyword-only
        dtypes of the probability tensors (default all of ``laws.DTYPES``; ``truncated``
        is always float32, the pipeline's output).
    target_families : sequence of str, keyword-only
        Probability families the target rows start from (default all of
        ``laws.PROB_FAMILIES``).

    Returns
    -------
    SearchStrategy[VerifyCase]
        ``draft_token_ids [B, K]`` (int64), ``draft_probs [B, K, V]``,
        ``target_probs [B, K+1, V]``, ``sampled_probs [B, K, V]`` (float64). Families:

        - ``independent``: draft = mixture of the target and an independent Zipf law;
        - ``identical``: draft equals the target rows bit for bit;
        - ``rounding``: the target is the draft ``num_ulps`` ulps lower on every positive
          entry, so ``max(target - draft, 0)`` is exactly zero (the residual fallback);
        - ``disjoint``: target and draft supports are disjoint (every draft is rejected);
        - ``target_removed``: the target zeroes a random set the draft puts half its mass
          on; the first draft of every row lies in it (``p(d) = 0``);
        - ``zero_draft_prob`` (dishonest): the reported draft law has ``q(d) = 0`` at the
          drafted token;
        - ``one_hot_draft`` / ``one_hot_target``: a point mass on one side;
        - ``greedy``: both sides one-hot, the draft copying the target's token with
          probability 1/2 per position (the output is the argmax path);
        - ``truncated``: both laws from :func:`~specexact.decoders.process_logits` of
          related logits with different truncations;
        - ``misreported`` (dishonest negative control): drafts from ``sampled_probs``,
          reported ``draft_probs`` the same law at temperature ``1.5 + 3 * mismatch``
          with a quarter of extra mass on its least probable token (V >= 2).

        The family is drawn uniformly among the available ones, then the target family
        (with ``masked_fraction`` in [0, 0.999], 1/2 and 0.999 favoured, for ``masked``),
        mismatch (0, 1/2, 1 favoured), ``num_ulps`` in 1..4, truncations, dtype and a
        32-bit seed. Every family is reachable (``tests/strategies/test_pairs.py``; the
        generation is adaptive, not uniform, and how often each is drawn is not promised).

    Raises
    ------
    InvalidArgument
        On bad sizes or unknown / repeated names, or V = 1 with only families that need
        two tokens.
    """
    V = int_or_strategy(vocab_size if vocab_size is not None else vocab_sizes(), "vocab_size",
                        minimum=1)
    B = int_or_strategy(batch_size if batch_size is not None else st.integers(1, 3),
                        "batch_size", minimum=1)
    K = int_or_strategy(num_draft_tokens if num_draft_tokens is not None else st.integers(1, 4),
                        "num_draft_tokens", minimum=1)
    fams = check_families(families, "families", PAIR_FAMILIES)
    dts = check_families(dtypes, "dtypes", DTYPES)
    tfams = check_families(target_families, "target_families", PROB_FAMILIES)
    if isinstance(vocab_size, int) and vocab_size < 2 and all(f in _NEED_TWO for f in fams):
        raise InvalidArgument(
            f"families={fams!r} all need vocab_size >= 2, got vocab_size={vocab_size}")
    fixed = vocab_size if isinstance(vocab_size, int) else None
    return _pairs(fams, V, B, K, dts, tfams, fixed)
