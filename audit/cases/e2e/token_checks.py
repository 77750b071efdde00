"""Per-token checks of a long end-to-end case: every emitted token against its conditional law.

A long case (:attr:`E2ECase.position_bands <specexact.audit.cases.e2e.case.E2ECase>` set)
has outputs far too long to enumerate (48 tokens of V=64). Each emitted token ``x_j`` of
each output is mapped to its randomised PIT under the target's processed law given the
request's prompt and the output's own prefix ``x_{<j}``
(:func:`~specexact.decoders.tiny_models.conditional_laws`, float64, with the engine's
declared processing: penalties over the prompt and output so far, the ``min_tokens`` EOS
mask, truncation), ``U_j = F(x_j-) + W_j p(x_j)`` with tokens ordered by id and ``W``
drawn from a generator seeded from the case's seed, the path and the class (never from the
engine). For an exact engine every ``U_j`` is ``Uniform(0, 1)`` given everything before it.

The slots are fixed before sampling: every request of every class times every position of
a band below the class's ``max_tokens``; a position past the end of an output (after its
EOS) holds its ``W`` alone, an independent uniform filler
(:mod:`specexact.exactness.pit`). Per path (``token_law`` on the speculative outputs,
``plain_token_law`` on the engine's plain sampling) and per band ``[a, b)`` one
:func:`~specexact.exactness.pit.pit_uniformity_check` named ``token_law[positions a-(b-1)]``,
at the chi-square level of the case's checks; its detectable TV is that of the binned PIT
law of the band's emitted tokens. A token of probability 0 under its law (outside the
support: truncation, the ``min_tokens`` mask) fails its band's check exactly (p-value 0).

Shapes: outputs ``[N, L]`` int64, ``-1`` after their end (classes interleaved, ``N = b C r``
rows of ``b`` calls of ``C`` classes and ``r`` requests per class).
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

import numpy as np
import torch

from specexact.audit.cases.e2e.case import E2ECase
from specexact.audit.cases.e2e.laws import case_models
from specexact.audit.core.levels import CHI2_TAIL_INFLATION
from specexact.decoders.engines.protocol import EngineCapabilities
from specexact.decoders.tiny_models import conditional_laws
from specexact.exactness.pit import FINE_CELLS, fine_cell_counts, pit_uniformity_check
from specexact.exactness.results import CheckResult

__all__ = ["TOKEN_PATHS", "band_name", "token_pits", "band_checks"]

TOKEN_PATHS = (("token_law", True), ("plain_token_law", False))
"""The per-token check types and whether each reads the speculative outputs."""


def band_name(path: str, band: tuple[int, int]) -> str:
    """The check name of ``path``'s band ``[a, b)``: ``token_law[positions a-(b-1)]``."""
    return f"{path}[positions {band[0]}-{band[1] - 1}]"


def _uniforms(seed: int, path: str, class_id: int, shape: tuple[int, int]) -> torch.Tensor:
    """The PIT's ``W`` of one class on one path: ``[N, L]`` float64 uniforms from a generator
    seeded from the case's seed, the path and the class (independent of the engine)."""
    digest = hashlib.sha256(f"specexact-token-pit/{int(seed)}/{path}/{int(class_id)}".encode()).digest()
    gen = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)
    return torch.rand(shape, generator=gen, dtype=torch.float64)


def token_pits(case: E2ECase, c: int, caps: EngineCapabilities, outputs: torch.Tensor, seed: int, path: str):
    """The slots of class ``c``'s outputs on ``path``.

    Parameters
    ----------
    case : E2ECase
    c : int
        The class's index in ``case.row_classes``.
    caps : EngineCapabilities
        The engine's declared processing is the law's.
    outputs : torch.LongTensor
        ``[n, >= max_tokens]`` the class's outputs, ``-1`` after their end.
    seed : int
        The case's seed (the PIT's ``W``).
    path : str
        The check type (``W`` differs per path).

    Returns
    -------
    slots : torch.Tensor
        ``[n, max_tokens]`` float64: the PIT of each emitted token, the filler ``W`` past the end.
    events : torch.BoolTensor
        ``[n, max_tokens]``: positions that hold an emitted token.
    zero : torch.BoolTensor
        ``[n, max_tokens]``: emitted tokens of probability 0 under their law.
    """
    rc = case.row_classes[c]
    seqs = outputs[:, : rc.max_tokens].to(torch.int64)
    target, _ = case_models(case)
    laws = conditional_laws(target, rc.prompt, seqs, rc.params, caps.processing, min_tokens=rc.min_tokens,
                            eos_token_id=rc.eos_id(target.eos_token_id))
    w = _uniforms(seed, path, case.class_id(c), tuple(seqs.shape))
    events = laws.valid
    u = torch.where(events, laws.pit(w), w)
    zero = events & (laws.token_probs() <= 0.0)
    return u, events, zero


def band_checks(case: E2ECase, caps: EngineCapabilities, spec: torch.Tensor, plain: torch.Tensor, seed: int,
                alpha: float, min_expected: float) -> list[CheckResult]:
    """The case's per-token checks: one per path of :data:`TOKEN_PATHS` and band of
    ``case.position_bands`` (module docstring), in that order.

    Parameters
    ----------
    case : E2ECase
        A long case (``position_bands`` set).
    caps : EngineCapabilities
    spec, plain : torch.LongTensor
        ``[N, L]`` the speculative and plain outputs, classes interleaved (row ``i`` is class
        ``i % C``).
    seed : int
        The case's seed.
    alpha : float
        The per-check false-fail rate (the Pearson checks run at ``alpha / CHI2_TAIL_INFLATION``).
    min_expected : float

    Returns
    -------
    list of CheckResult
        ``2 * len(case.position_bands)`` checks.
    """
    C = len(case.row_classes)
    bands = case.position_bands or ()
    out = []
    for path, speculative in TOKEN_PATHS:
        outputs = spec if speculative else plain
        per_class = [token_pits(case, c, caps, outputs[c::C], seed, path) for c in range(C)]
        for a, b in bands:
            fine = np.zeros(FINE_CELLS, dtype=np.int64)
            events, zeros, classes = 0, [], []
            for c, (u, ev, zero) in enumerate(per_class):
                stop = min(b, case.row_classes[c].max_tokens)
                if a >= stop:
                    continue
                classes.append(case.class_id(c))
                fine += fine_cell_counts(u[:, a:stop].reshape(-1))
                events += int(ev[:, a:stop].sum())
                for r, j in zero[:, a:stop].nonzero().tolist():
                    zeros.append((case.class_id(c), r, a + j, int(outputs[c::C][r, a + j])))
            name = band_name(path, (a, b))
            chk = pit_uniformity_check(fine, num_events=events, false_fail_rate=alpha / CHI2_TAIL_INFLATION,
                                       min_expected=min_expected, name=name, what="emitted tokens",
                                       details={"positions": [a, b], "classes": classes,
                                                "speculative": speculative})
            if zeros:
                cls, r, j, tok = zeros[0]
                msg = (f"{len(zeros)} emitted token(s) of probability 0 under their law; first: class {cls}, "
                       f"request {r}, position {j}, token {tok}")
                chk = replace(chk, method="exact", pvalue=0.0, passed=False,
                              details={**chk.details, "support_failures": len(zeros), "message": msg},
                              description=chk.description + "; " + msg + " (an exact failure)")
            out.append(chk)
    return out
