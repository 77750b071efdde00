"""The report's tables of acceptance and lossy measurements: observed vs expected
accepted lengths for plots (:func:`accepted_length_histograms`), every accepted-length
check's means beside its scheme's law and the token-wise optimum (:func:`acceptance_rows`),
and a lossy sampler's measured TVs (:func:`lossy_measurements`).
"""

from __future__ import annotations

import re
from typing import Sequence

__all__ = ["accepted_length_histograms", "acceptance_rows", "lossy_measurements"]

_N_LABEL = re.compile(r"^N=(\d+)")


def accepted_length_histograms(checks: Sequence[dict]) -> list[dict]:
    """Observed vs expected counts of every ``accepted_length`` check, for plots.

    Uses the raw per-``N`` counts when the check's ``details`` hold ``observed_counts``
    and ``expected_probs`` (unbinned, ``source: "details"``); otherwise the check's binned
    ``worst`` entries when they cover all its bins (``source: "binned"``: labels such as
    ``N=3 (+1 more)`` are bins that merged rare lengths). Checks whose law is a single bin
    (e.g. greedy rows) have nothing to show and are listed with empty counts.
    """
    out = []
    for chk in checks:
        if not chk["name"].startswith("accepted_length"):
            continue
        details = chk.get("details") or {}
        entry = {"case": chk["case"], "check": chk["name"], "passed": bool(chk["passed"]), "pvalue": chk["pvalue"],
                 "labels": [], "observed": [], "expected": [], "source": "none"}
        if isinstance(details.get("observed_counts"), list) and isinstance(details.get("expected_probs"), list):
            obs = [float(x) for x in details["observed_counts"]]
            n = sum(obs)
            entry.update(labels=[f"N={k}" for k in range(len(obs))], observed=obs,
                         expected=[n * float(p) for p in details["expected_probs"]], source="details")
        else:
            worst = [w for w in chk.get("worst", []) if isinstance(w[1], (int, float)) and isinstance(w[2], (int, float))]
            bins = details.get("num_bins")
            if worst and bins is not None and len(worst) == bins and all(_N_LABEL.match(w[0]) for w in worst):
                worst.sort(key=lambda w: int(_N_LABEL.match(w[0]).group(1)))
                entry.update(labels=[w[0] for w in worst], observed=[float(w[1]) for w in worst],
                             expected=[float(w[2]) for w in worst], source="binned")
        out.append(entry)
    return out


def acceptance_rows(checks: Sequence[dict]) -> list[dict]:
    """Every accepted-length check's means: observed, the declared scheme's law and the
    token-wise optimum (chain cases), with a note where a sampler that is exact for its scheme
    accepts less than token-wise verification would (``sample_compare``, by design)."""
    rows = []
    for chk in checks:
        if not chk["name"].startswith("accepted_length"):
            continue
        d = chk.get("details") or {}
        mean, own = d.get("mean_accepted_length"), d.get("expected_mean_accepted_length")
        optimum = d.get("tokenwise_optimum_mean_accepted_length")
        note = None
        if chk["passed"] and isinstance(own, (int, float)) and isinstance(optimum, (int, float)) \
                and own < optimum - 1e-9:
            note = (f"exact for its scheme {d.get('scheme')!r}, which accepts less than token-wise verification: "
                    f"mean accepted length {mean:.4g} (its law {own:.4g}) vs the token-wise optimum {optimum:.4g}")
        rows.append({"case": chk["case"], "check": chk["name"], "scheme": d.get("scheme", "tokenwise"),
                     "passed": bool(chk["passed"]), "measured": bool(d.get("measured", False)),
                     "mean_accepted_length": mean, "expected_mean_accepted_length": own,
                     "tokenwise_optimum_mean_accepted_length": optimum, "note": note})
    return rows


def lossy_measurements(checks: Sequence[dict]) -> list[dict]:
    """The measured TVs of a lossy sampler (checks whose ``details`` hold ``lossy_tv``)."""
    out = []
    for chk in checks:
        tv = (chk.get("details") or {}).get("lossy_tv")
        if isinstance(tv, dict):
            out.append({"case": chk["case"], "check": chk["name"],
                        **{k: tv.get(k) for k in ("estimate", "lower", "upper", "delta", "n", "num_cells", "law")}})
    return out
