"""Audit cases: which models, prompts, sampling parameters and lengths an audit runs.

A case is a batch layout: ``row_classes`` are interleaved across the batch (row ``r`` is
of class ``r % C``), so every batch holds rows with different laws (bugs that mix rows
show), and every class has many rows (each class's law is checked on its own). The
checked length ``length`` exceeds ``num_draft_tokens + 1``, so every sequence spans
several rounds (bugs past the γ-th token or in later rounds show).

Here: the decoder-level case :class:`AuditCase` and the built-in cases (:func:`default_cases`,
:func:`quick_cases`); :class:`RowClass` and :func:`checked_keep`, shared by every kind of case,
live in :mod:`~specexact.audit.cases.base` and are re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from specexact.audit.cases.base import InterleavedCase, RowClass, checked_keep
from specexact.decoders import SamplingParams, ToyLMConfig

__all__ = ["RowClass", "AuditCase", "checked_keep", "default_cases", "quick_cases"]


@dataclass(frozen=True)
class AuditCase(InterleavedCase):
    """One audited configuration (its row classes interleaved in every batch).

    Parameters
    ----------
    name, model, mismatch, row_classes
        As in :class:`~specexact.audit.cases.base.InterleavedCase`.
    num_draft_tokens : int
        γ.
    length : int
        Generated tokens per sequence whose joint law is checked (``max_new_tokens``).
    batch_size : int
        Rows per decoder call; a multiple of ``4 * C`` (quads of same-class rows).
    exact : bool
        True: the sequence law is enumerated and checked exactly (small ``V ** length``).
        False: the first token is checked against its exact law and the sequences against
        naive samples (two-sample).
    class_ids : tuple of int, optional
        The classes' numbers in check names (``sequence_law[class 2]``); default
        ``0..C-1``. A case restricted to some of its classes (:meth:`restricted`) keeps
        the original numbers, so a check means the same class in every report.
    required_first_token_tv : float, optional
        A budgeted audit's floor for this case (``exact=False`` only): the planner reserves
        the decoder calls that make the *planned* detectable TV of every class's
        ``first_token_law`` check (stand-in bins, :func:`~specexact.audit.run.plan.first_token_bins`)
        at most this, within :data:`~specexact.audit.run.plan.FLOOR_SHARE` of the first plan's
        sampling time, before it shares out the rest
        (:func:`~specexact.audit.run.plan.floor_batches`), and the case runs them however long
        they take; the report's own ``detectable_tv`` of the check is exact. None: no floor
        (the plan alone decides).
    """

    num_draft_tokens: int
    length: int
    batch_size: int = 2048
    exact: bool = True
    description: str = ""
    weight: float = 1.0
    tags: tuple[str, ...] = field(default_factory=tuple)
    class_ids: tuple[int, ...] | None = None
    required_first_token_tv: float | None = None

    def __post_init__(self) -> None:
        C = len(self.row_classes)
        if C == 0:
            raise ValueError(f"case {self.name!r}: row_classes is empty")
        if self.batch_size % (4 * C):
            raise ValueError(f"case {self.name!r}: batch_size={self.batch_size} is not a multiple of 4*C={4 * C} "
                             "(the independence checks compare rows in groups of four per class)")
        if self.num_draft_tokens < 1 or self.length < 1:
            raise ValueError(f"case {self.name!r}: num_draft_tokens and length must be >= 1")
        plens = {len(rc.prompt) for rc in self.row_classes}
        if len(plens) != 1:
            raise ValueError(f"case {self.name!r}: prompts must have one length, got {sorted(plens)}")
        tv = self.required_first_token_tv
        if tv is not None and (self.exact or not 0 < tv < 1):
            raise ValueError(f"case {self.name!r}: required_first_token_tv={tv!r} needs exact=False and a value "
                             "in (0, 1) (the floor sizes a decoder-level two-sample case's first_token_law checks)")
        if self.class_ids is not None and len(self.class_ids) != C:
            raise ValueError(f"case {self.name!r}: class_ids has {len(self.class_ids)} entries for {C} classes")


def _sp(**kw) -> SamplingParams:
    return SamplingParams(**kw)


def default_cases() -> list[AuditCase]:
    """The built-in audit: exact cases over several vocabularies, truncations, penalties,
    EOS and ``max_new_tokens`` cut, and one larger-vocabulary case."""
    plain = _sp()
    return [
        AuditCase(
            name="v8-plain",
            description="T=1 both sides, no truncation; two prompts; sequences span 2+ rounds",
            model=ToyLMConfig(vocab_size=8, seed=11, zipf_exponent=1.0, context_strength=2.0),
            mismatch=0.8,
            row_classes=(
                RowClass((1, 2), plain, plain),
                RowClass((5, 0), plain, _sp(temperature=1.3)),
            ),
            num_draft_tokens=2,
            length=5,
        ),
        AuditCase(
            name="v6-trunc-penalties",
            description="top-p/top-k/min-p on both sides with repetition, presence and frequency "
                        "penalties re-applied per candidate prefix; EOS",
            model=ToyLMConfig(vocab_size=6, seed=5, zipf_exponent=0.8, context_strength=2.5,
                              eos_token_id=5, eos_logit=-2.0),
            mismatch=0.6,
            row_classes=(
                RowClass((1, 2), _sp(temperature=0.8, top_p=0.85, repetition_penalty=1.5),
                         _sp(temperature=1.2, top_k=4)),
                RowClass((3, 3), _sp(temperature=1.1, min_p=0.08, presence_penalty=0.7),
                         _sp(temperature=0.7, frequency_penalty=0.4)),
                RowClass((0, 4), _sp(top_k=3, frequency_penalty=0.5, repetition_penalty=0.8),
                         _sp(top_p=0.7, presence_penalty=0.3)),
            ),
            num_draft_tokens=3,
            length=6,
            batch_size=1536,
        ),
        AuditCase(
            name="v7-rep-order",
            description="repetition penalty re-applied per candidate prefix with top-p and min-p together "
                        "(their order changes the law), with top-k, and with top-k alone (the leanest "
                        "engines' operations)",
            model=ToyLMConfig(vocab_size=7, seed=23, zipf_exponent=0.9, context_strength=2.5),
            mismatch=0.7,
            row_classes=(
                RowClass((1, 2), _sp(temperature=1.2, top_p=0.9, min_p=0.1, repetition_penalty=1.6),
                         _sp(temperature=1.1)),
                RowClass((3, 1), _sp(temperature=1.3, top_k=4, min_p=0.1, repetition_penalty=0.7),
                         _sp(top_p=0.9, presence_penalty=0.3)),
                # Only repetition penalty, temperature and top-k: what the leanest engines
                # implement, so their per-prefix penalty bugs meet a truncation here too.
                RowClass((2, 5), _sp(temperature=0.9, top_k=3, repetition_penalty=1.5), _sp(temperature=1.2)),
            ),
            num_draft_tokens=2,
            length=5,
            batch_size=1536,
        ),
        AuditCase(
            name="v12-eos-cut",
            description="EOS likely and max_new_tokens shorter than a full round (γ+1 > length): "
                        "rounds are cut, no bonus past the cut",
            model=ToyLMConfig(vocab_size=12, seed=7, zipf_exponent=1.2, context_strength=2.0,
                              eos_token_id=0, eos_logit=-0.5),
            mismatch=1.0,
            row_classes=(
                RowClass((3,), _sp(temperature=0.9), _sp(temperature=1.0)),
                RowClass((4,), _sp(top_k=6), _sp(temperature=1.5, top_k=8)),
            ),
            num_draft_tokens=4,
            length=4,
        ),
        AuditCase(
            name="v4-greedy-mix",
            description="greedy rows (T=0) beside sampled rows in one batch; long sequences",
            model=ToyLMConfig(vocab_size=4, seed=3, zipf_exponent=0.6, context_strength=2.0),
            mismatch=0.5,
            row_classes=(
                RowClass((1,), _sp(temperature=0), _sp(temperature=0)),
                RowClass((2,), _sp(temperature=0.6), _sp(temperature=0)),
                RowClass((0,), _sp(temperature=1.0, repetition_penalty=1.3), _sp(temperature=0.6)),
            ),
            num_draft_tokens=1,
            length=7,
            batch_size=1536,
        ),
        AuditCase(
            name="v8-near-draft",
            description="draft within ~1e-3 of the target (a quantised copy of the target as draft): "
                        "rejections are rare, their residual nearly empty, and p(d) ~ q(d) at most drafts, "
                        "where a verifier that rounds or renormalises the laws differently breaks the exact rules",
            model=ToyLMConfig(vocab_size=8, seed=29, zipf_exponent=0.9, context_strength=2.0),
            mismatch=0.0005,
            row_classes=(
                RowClass((1, 3), plain, plain),
                RowClass((4, 2), _sp(temperature=0.9, top_p=0.9, repetition_penalty=1.2),
                         _sp(temperature=0.9, top_p=0.9, repetition_penalty=1.2)),
            ),
            num_draft_tokens=3,
            length=5,
        ),
        AuditCase(
            name="v4096-zipf",
            description="V=4096 Zipf head with top-p: first token exact, sequences two-sample "
                        "against naive sampling",
            model=ToyLMConfig(vocab_size=4096, seed=17, zipf_exponent=1.1, context_strength=1.5,
                              eos_token_id=4095, eos_logit=-3.0),
            mismatch=0.4,
            row_classes=(
                RowClass((7, 8), _sp(temperature=0.9, top_p=0.95), _sp(temperature=1.0)),
                RowClass((9, 1), _sp(temperature=1.0, min_p=0.01, presence_penalty=0.5),
                         _sp(temperature=0.8, top_k=50)),
            ),
            num_draft_tokens=3,
            length=3,
            batch_size=512,
            exact=False,
            weight=2.0,
        ),
        AuditCase(
            name="v8193-tile-trunc-penalties",
            description="V=8193 (one past a 2**13 tile) through the whole decoder: top-k, top-p and min-p with "
                        "repetition and presence penalties re-applied per candidate prefix, a top-k draft; one "
                        "class with a narrow law (few bins: a small detectable TV per sample); first token "
                        "exact, sequences two-sample against naive sampling",
            model=ToyLMConfig(vocab_size=8193, seed=29, zipf_exponent=1.1, context_strength=1.5,
                              eos_token_id=8192, eos_logit=-3.0),
            mismatch=0.4,
            row_classes=(
                RowClass((7, 8), _sp(temperature=0.9, top_k=20, top_p=0.95, min_p=0.01, repetition_penalty=1.3,
                                     presence_penalty=0.4),
                         _sp(temperature=1.0, top_k=40)),
            ),
            num_draft_tokens=3,
            length=3,
            batch_size=2048,
            exact=False,
            weight=2.0,
            required_first_token_tv=0.02,
        ),
    ]


def quick_cases() -> list[AuditCase]:
    """A small subset for fast tests: the exact cases with smaller batches."""
    return [replace(c, batch_size=c.batch_size // 4 if c.exact else c.batch_size)
            for c in default_cases() if c.exact]
