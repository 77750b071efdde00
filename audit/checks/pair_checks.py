"""Shared-randomness checks on outcome codes: rows of one call and one row in two calls
must agree no more often than control pairs (a different call and a different row)."""

from __future__ import annotations

import numpy as np

from specexact.exactness.independence import pair_agreement_vs_control_check
from specexact.exactness.results import CheckResult

__all__ = ["pair_checks"]


def pair_checks(codes: np.ndarray, alpha: float, label: str) -> list[CheckResult]:
    """Shared-randomness checks on one class's outcome codes ``[nb, R]`` (R rows per call).

    Rows come in quads ``(a, b, c, d)`` and calls in pairs ``(x, y)``; the pairs compared
    use distinct draws: suspect ``(a,x)-(b,x)`` (same call), suspect ``(c,x)-(c,y)`` (same
    row, successive calls), control ``(d,x)-(b,y)`` (different call and row).
    """
    nb = codes.shape[0] - codes.shape[0] % 2
    R = codes.shape[1] - codes.shape[1] % 4
    x, y = codes[0:nb:2, :R], codes[1:nb:2, :R]
    a, b, c, d = (slice(k, R, 4) for k in range(4))
    within = x[:, a] == x[:, b]
    across = x[:, c] == y[:, c]
    control = x[:, d] == y[:, b]
    n_ctrl, e_ctrl = int(control.size), int(control.sum())
    return [
        pair_agreement_vs_control_check(int(within.sum()), int(within.size), e_ctrl, n_ctrl,
                                        false_fail_rate=alpha, name=f"independent_rows[{label}]"),
        pair_agreement_vs_control_check(int(across.sum()), int(across.size), e_ctrl, n_ctrl,
                                        false_fail_rate=alpha, name=f"independent_calls[{label}]"),
    ]
