"""Plots of an audit report, as PNG bytes (matplotlib, Agg, no pyplot global state).

Every function returns ``None`` when it has nothing to draw. Text drawn into the images
(sampler, case and outcome labels) is never parsed as mathtext, so a ``$`` in a name
cannot break a plot.
"""

from __future__ import annotations

import io
import math
from typing import Sequence

import numpy as np

__all__ = ["qq_plot", "worst_checks_plot", "accepted_length_plot", "trend_plot", "MAX_WORST_CHECKS"]

#: How many of the lowest-p-value checks get an observed-vs-expected panel.
MAX_WORST_CHECKS = 6

_BLUE, _GREY, _RED, _INK = "#2f6db5", "#9aa3ad", "#c62828", "#222222"
_RC = {
    "text.parse_math": False,
    "font.size": 9,
    "axes.titlesize": 9.5,
    "axes.labelsize": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.fontsize": 8,
    "legend.frameon": False,
}


def _figure(w: float, h: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()


def _num(x) -> float:
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return float(x)
    return math.inf if x == "inf" else (-math.inf if x == "-inf" else math.nan)


def _short(text: str, width: int) -> str:
    text = str(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def _rc():
    import matplotlib

    return matplotlib.rc_context(_RC)


def qq_plot(checks: Sequence[dict], per_check_rate: float) -> bytes | None:
    """QQ plot of all p-values against Uniform(0, 1), on -log10 axes, with a 99 % band."""
    from scipy import stats

    p = np.array([_num(c["pvalue"]) for c in checks], dtype=float)
    passed = np.array([bool(c["passed"]) for c in checks])
    keep = np.isfinite(p)
    p, passed = p[keep], passed[keep]
    m = p.size
    if m == 0:
        return None
    order = np.argsort(p, kind="stable")
    p, passed = p[order], passed[order]
    i = np.arange(1, m + 1)
    expected = -np.log10(i / (m + 1))
    threshold = -math.log10(per_check_rate)
    floor = 10 ** -(threshold + 2)
    observed = -np.log10(np.maximum(p, floor))
    lo = -np.log10(stats.beta.ppf(0.995, i, m - i + 1))
    hi = -np.log10(stats.beta.ppf(0.005, i, m - i + 1))
    with _rc():
        fig = _figure(5.6, 4.8)
        ax = fig.add_subplot()
        ax.fill_between(expected, lo, hi, color=_GREY, alpha=0.3, lw=0, label="99 % band if exact (pointwise)")
        right = max(float(expected.max()), 1.0)
        ymax = max(float(observed.max()), float(hi.max()), right) * 1.15
        # The fail line is far above the data when everything passes; draw it only if it is
        # near, and say where it is otherwise (a squashed plot reads badly).
        if threshold <= ymax * 1.6:
            ymax = max(ymax, threshold * 1.08)
            ax.axhline(threshold, color=_RED, ls="--", lw=1, label=f"fail line: p = {per_check_rate:.2g} (per check)")
        else:
            ax.text(0.02, 0.97, f"fail line at -log10(p) = {threshold:.1f}, above the plot "
                    f"(p = {per_check_rate:.2g} per check)", transform=ax.transAxes, va="top", ha="left",
                    color=_RED, fontsize=8)
        ax.plot([0, right], [0, right], color=_GREY, lw=1)
        ax.scatter(expected[passed], observed[passed], s=14, color=_BLUE, label="check passed", zorder=3)
        if (~passed).any():
            ax.scatter(expected[~passed], observed[~passed], s=26, color=_RED, marker="D", label="check failed",
                       zorder=4)
        ax.set_xlabel("expected -log10(p)  (Uniform(0, 1) order statistics)")
        ax.set_ylabel("observed -log10(p)")
        ax.set_title(f"All {m} p-values against Uniform(0, 1)")
        ax.set_ylim(0, ymax)
        ax.set_xlim(0, right * 1.03)
        handles, labels = ax.get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncols=2)
        return _png(fig)


def worst_checks_plot(checks: Sequence[dict], k: int = MAX_WORST_CHECKS) -> bytes | None:
    """Observed vs expected counts of the worst bins of the ``k`` lowest-p-value checks."""
    chosen = [c for c in checks if c.get("worst")]
    chosen.sort(key=lambda c: (_num(c["pvalue"]), c["case"], c["name"]))
    chosen = chosen[:k]
    if not chosen:
        return None
    cols = 2 if len(chosen) > 1 else 1
    rows = math.ceil(len(chosen) / cols)
    with _rc():
        fig = _figure(11.5 if cols == 2 else 6.0, 2.75 * rows + 0.6)
        axes = fig.subplots(rows, cols, squeeze=False).ravel()
        for ax, chk in zip(axes, chosen):
            details = chk.get("details") or {}
            color = _RED if not chk["passed"] else _BLUE
            if "suspect_pairs" in details and "control_pairs" in details:
                _agreement_panel(ax, details, color)
            else:
                _counts_panel(ax, chk["worst"], color)
            verdict = "FAIL" if not chk["passed"] else "pass"
            ax.set_title(f"{_short(chk['case'] + ' / ' + chk['name'], 58)}\np = {_num(chk['pvalue']):.3g} ({verdict})",
                         loc="left", color=_RED if not chk["passed"] else _INK, fontsize=9)
        for ax in axes[len(chosen):]:
            ax.set_visible(False)
        from matplotlib.patches import Patch

        handles = [Patch(color=_BLUE, label="observed")]
        if any(not c["passed"] for c in chosen):
            handles.append(Patch(color=_RED, label="observed (failed check)"))
        handles.append(Patch(color=_GREY, label="expected: exact law, naive sampler or control pairs"))
        fig.legend(handles=handles, loc="outside upper center", ncols=len(handles))
        return _png(fig)


def _counts_panel(ax, worst, color) -> None:
    labels = [_short(w[0], 30) for w in worst]
    obs = np.array([_num(w[1]) for w in worst])
    exp = np.array([_num(w[2]) for w in worst])
    y = np.arange(len(worst))[::-1]
    ax.barh(y + 0.2, obs, height=0.38, color=color)
    ax.barh(y - 0.2, exp, height=0.38, color=_GREY)
    ax.set_yticks(y, labels)
    right = float(np.nanmax(np.concatenate([obs, exp]))) if len(obs) else 1.0
    for yy, o, e in zip(y, obs, exp):
        if e > 0:
            text = f"z = {(o - e) / math.sqrt(e):+.1f}"
        else:
            text = "probability 0!" if o > 0 else ""
        ax.text(max(o, e) + right * 0.02, yy, text, va="center", fontsize=7.5, color=_INK)
    ax.set_xlim(0, right * 1.25 if right > 0 else 1)
    ax.set_xlabel("count (z = (observed - expected) / sqrt(expected))")


def _agreement_panel(ax, details, color) -> None:
    from matplotlib.ticker import PercentFormatter

    se, sp = int(details["suspect_equal"]), int(details["suspect_pairs"])
    ce, cpairs = int(details["control_equal"]), int(details["control_pairs"])
    rates = [se / sp if sp else 0.0, ce / cpairs if cpairs else 0.0]
    y = np.array([1, 0])
    ax.barh(y, rates, height=0.6, color=[color, _GREY])
    ax.set_yticks(y, ["suspect pairs", "control pairs"])
    right = max(max(rates), 1e-3)
    for yy, r, e, n in zip(y, rates, (se, ce), (sp, cpairs)):
        ax.text(r + right * 0.02, yy, f"{e:,} / {n:,} equal", va="center", fontsize=7.5, color=_INK)
    ax.set_xlim(0, right * 1.45)
    ax.xaxis.set_major_formatter(PercentFormatter(1.0, decimals=None))
    ax.xaxis.set_major_locator(__import__("matplotlib.ticker", fromlist=["MaxNLocator"]).MaxNLocator(4))
    ax.set_xlabel("share of pairs that agree")


def accepted_length_plot(hists: Sequence[dict]) -> bytes | None:
    """Accepted-length histograms (round 1) against the analytic law, one panel per class."""
    shown = [h for h in hists if h.get("observed")]
    if not shown:
        return None
    cols = min(4, len(shown))
    rows = math.ceil(len(shown) / cols)
    with _rc():
        fig = _figure(2.9 * cols + 0.4, 2.6 * rows + 0.6)
        axes = fig.subplots(rows, cols, squeeze=False).ravel()
        for ax, h in zip(axes, shown):
            obs = np.array(h["observed"], dtype=float)
            exp = np.array(h["expected"], dtype=float)
            n = obs.sum()
            x = np.arange(len(obs))
            failed = h.get("passed") is False
            ax.bar(x, obs, width=0.7, color=_RED if failed else _BLUE, label="observed")
            sd = np.sqrt(np.maximum(exp * (1 - exp / n), 0)) if n > 0 else np.zeros_like(exp)
            ax.errorbar(x, exp, yerr=2 * sd, fmt="D", ms=4, color=_INK, ecolor=_INK, capsize=3, lw=1,
                        label="analytic law ± 2 sd")
            ax.set_xticks(x, [_short(lbl, 14) for lbl in h["labels"]], fontsize=7.5)
            top = max(float(obs.max()), float((exp + 2 * sd).max()))
            for xi, o, e, d in zip(x, obs, exp, sd):
                z = "p=0!" if (e == 0 and o > 0) else ("" if d == 0 else f"{(o - e) / d:+.1f}")
                ax.text(xi, max(o, e + 2 * d) + top * 0.02, z, ha="center", va="bottom", fontsize=6.5,
                        color=_RED if (z == "p=0!" or (d > 0 and abs((o - e) / d) > 3)) else _INK)
            label = h["check"].replace("accepted_length", "").strip("[]") or h["check"]
            title = _short(f"{h['case']} · {label}", 40)
            if "pvalue" in h:
                title += f"\np = {_num(h['pvalue']):.3g}" + (" (FAIL)" if failed else "")
            ax.set_title(title, loc="left", color=_RED if failed else _INK)
            ax.set_ylim(0, top * 1.16)
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside upper center", ncols=2)
        for ax in axes[len(shown):]:
            ax.set_visible(False)
        fig.supxlabel("drafts accepted in the first round (N); binned labels merge rare lengths", fontsize=8.5)
        return _png(fig)


def trend_plot(history: Sequence[dict], current: dict, per_check_rate: float) -> bytes | None:
    """Each check's -log10(p) and detectable TV over the earlier reports and this one.

    ``history`` and ``current`` are :func:`specexact.reports.trend.summarize` summaries;
    rows are the current report's checks, columns the runs (oldest left).
    """
    import matplotlib
    from matplotlib.colors import LogNorm, Normalize
    from matplotlib.ticker import FuncFormatter, NullFormatter

    runs = list(history) + [current]
    if len(runs) < 2:
        return None
    keys = list(current["checks"])
    if not keys:
        return None
    P = np.full((len(keys), len(runs)), np.nan)
    T = np.full_like(P, np.nan)
    F = np.zeros_like(P, dtype=bool)
    for j, run in enumerate(runs):
        for r, key in enumerate(keys):
            c = run["checks"].get(key)
            if c is None:
                continue
            P[r, j] = c["pvalue"]
            T[r, j] = c["detectable_tv"]
            F[r, j] = not c["passed"]
    threshold = -math.log10(per_check_rate)
    L = -np.log10(np.clip(P, 10 ** -(threshold * 1.5), 1.0))
    T[~np.isfinite(T)] = np.nan
    col_labels = [str(run["started_at"])[5:16].replace("T", " ") for run in runs]
    fmt = FuncFormatter(lambda v, _: f"{v:.2g}")
    panel_w = max(2.2, 0.28 * len(runs))
    with _rc():
        fig = _figure(3.6 + 2 * panel_w + 1.6, max(3.0, 0.16 * len(keys) + 1.9))
        gs = fig.add_gridspec(1, 2, width_ratios=[1, 1])
        ax1 = fig.add_subplot(gs[0, 0])
        ax2 = fig.add_subplot(gs[0, 1], sharey=ax1)
        cmap1 = matplotlib.colormaps["Reds"].with_extremes(bad="#eeeeee")
        im1 = ax1.imshow(np.ma.masked_invalid(L), aspect="auto", cmap=cmap1, norm=Normalize(0, threshold),
                         interpolation="nearest")
        rr, cc = np.nonzero(F)
        if rr.size:
            ax1.scatter(cc, rr, marker="x", color="black", s=22, lw=1.3)
        cmap2 = matplotlib.colormaps["viridis"].with_extremes(bad="#eeeeee")
        # A detectable TV of 0 (an exact check: a crash or defect detects any discrepancy)
        # has no place on a log scale: it is drawn at the smallest positive one.
        finite = T[np.isfinite(T) & (T > 0)]
        if finite.size:
            T = np.where(np.isfinite(T) & (T <= 0), finite.min(), T)
        norm = (LogNorm(vmin=float(finite.min()), vmax=max(float(finite.max()), float(finite.min()) * 1.01))
                if finite.size else Normalize(0, 1))
        im2 = ax2.imshow(np.ma.masked_invalid(T), aspect="auto", cmap=cmap2, norm=norm, interpolation="nearest")
        for ax, title in ((ax1, "-log10(p)  (x = failed)"), (ax2, "detectable TV  (grey = none)")):
            ax.set_xticks(range(len(runs)), col_labels, rotation=60, ha="right", fontsize=7)
            ax.set_title(title, loc="left")
            for j, run in enumerate(runs):
                if run.get("verdict") == "fail":
                    ax.get_xticklabels()[j].set_color(_RED)
            ax.set_xticks(np.arange(-0.5, len(runs)), minor=True)
            ax.set_yticks(np.arange(-0.5, len(keys)), minor=True)
            ax.grid(which="minor", color="white", lw=0.6)
            ax.tick_params(which="minor", length=0)
        ax1.set_yticks(range(len(keys)), [_short(k, 50) for k in keys], fontsize=7)
        ax2.tick_params(labelleft=False)
        cb1 = fig.colorbar(im1, ax=ax1, shrink=0.5, aspect=25, pad=0.02)
        cb1.set_label(f"-log10(p); fails at {threshold:.1f}")
        cb2 = fig.colorbar(im2, ax=ax2, shrink=0.5, aspect=25, pad=0.02)
        cb2.set_label("detectable TV")
        if finite.size and norm.vmax > norm.vmin:
            cb2.set_ticks(np.geomspace(norm.vmin, norm.vmax, 5))
        for cb in (cb1, cb2):
            cb.ax.yaxis.set_major_formatter(fmt)
            cb.ax.yaxis.set_minor_formatter(NullFormatter())
        fig.supxlabel("report start (UTC; red = failed audit; rightmost = this report)", fontsize=8)
        return _png(fig)
