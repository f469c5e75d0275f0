"""What divergence goes with: reference perplexity (the reported logit), the margin at the
first divergence, and the teacher's near-ties per domain."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from orthrus.contracts import SPECULATIVE
from orthrus.plotting import pyplot
from orthrus.report.figures.base import _empty, _errbar, _need


def _logit_curves(logit: pd.DataFrame | None) -> dict[tuple, tuple[float, float]]:
    """(model, decoder, precision, attention) -> (curve_intercept, beta1) of each estimated fit
    in ppl_logit.csv: the model `orthrus analyze` reports, drawn at its mean length and domain mix."""
    if logit is None:
        return {}
    keys = ["model", "decoder", "precision", "attention"]
    _need(logit, keys + ["beta1", "curve_intercept"], "ppl_logit.csv")
    out = {}
    for r in logit.to_dict("records"):
        b0, b1 = float(r["curve_intercept"]), float(r["beta1"])
        if math.isfinite(b0) and math.isfinite(b1):
            out[tuple(str(r[k]) for k in keys)] = (b0, b1)
    return out


def fig_match_vs_ppl(traj: pd.DataFrame, logit: pd.DataFrame | None = None, n_bins: int = 8):
    """Binned P(match) against the reference response's PPL, per speculative-decoder
    configuration, with the logistic model of `logit` (ppl_logit.csv) where it was estimated."""
    from orthrus.stats import wilson_ci

    curves = _logit_curves(logit)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ax.set_title("Match probability vs reference-response perplexity")
    d = traj[traj["decoder"].isin(SPECULATIVE) & traj["ppl"].notna() & (traj["ppl"] > 0)] if len(traj) else traj
    if d is None or not len(d):
        _empty(ax, "no perplexities (run analyze with --ppl)")
        return fig
    for (model, decoder, prec, att), g in d.groupby(["model", "decoder", "precision", "attention"], sort=True):
        lp = np.log(g["ppl"].to_numpy(float))
        m = g["match"].to_numpy(bool)
        nb = int(min(n_bins, max(1, len(g) // 10)))
        edges = np.unique(np.quantile(lp, np.linspace(0, 1, nb + 1)))
        idx = np.clip(np.searchsorted(edges, lp, side="right") - 1, 0, max(0, len(edges) - 2))
        xs, ys, lo, hi = [], [], [], []
        for b in np.unique(idx):
            sel = idx == b
            k, n = int(m[sel].sum()), int(sel.sum())
            low, high = wilson_ci(k, n)
            xs.append(float(np.exp(np.median(lp[sel]))))
            ys.append(k / n)
            lo.append(low)
            hi.append(high)
        line = ax.errorbar(
            xs, ys, yerr=_errbar(ys, lo, hi), fmt="o", capsize=3, label=f"{decoder} {model} {prec} {att} (n={len(g)})"
        )
        fit = curves.get((model, decoder, prec, att))
        if fit is not None:
            grid = np.linspace(lp.min(), lp.max(), 200)
            ax.plot(np.exp(grid), 1 / (1 + np.exp(-(fit[0] + fit[1] * grid))), "-", color=line[0].get_color(), lw=1.2)
    ax.set_xscale("log")
    lo, hi = float(d["ppl"].min()), float(d["ppl"].max())
    ticks = np.unique(np.round(np.geomspace(lo, max(hi, lo * 1.01), 6), 2))
    ax.minorticks_off()
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("PPL(y | x) of the reference response (log scale)")
    ax.set_ylabel("P(exact match)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def fig_margin_at_divergence(fx: pd.DataFrame | None, near_tie: float | None = None):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ax.set_title("AR top-1/top-2 logit margin at the first divergence")
    d = fx.dropna(subset=["margin_native"]) if fx is not None and len(fx) else None
    if d is None or not len(d):
        _empty(ax, "no divergences with forensics" if fx is not None else "no forensics data")
        return fig
    hi = float(d["margin_native"].max())
    bins = np.linspace(0, hi if hi > 0 else 1.0, 30)
    for key, g in d.groupby(["model", "decoder", "precision", "attention"], sort=True):
        ax.hist(
            g["margin_native"].astype(float), bins=bins, histtype="step", lw=1.5, label=f"{'/'.join(key)} (n={len(g)})"
        )
    if near_tie is not None and math.isfinite(near_tie):
        ax.axvline(near_tie, color="0.4", ls="--", lw=1, label=f"near-tie threshold {near_tie:g}")
    ax.set_xlabel("margin (logits, native precision)")
    ax.set_ylabel("divergences")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def fig_match_vs_uncertainty(mbd: pd.DataFrame, unc: pd.DataFrame | None):
    """Does a domain's match rate follow how often its teacher meets near-ties? One point per
    domain and reduced-precision Orthrus configuration."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.6))
    ax.set_title("Match rate against the teacher's near-ties per response, per domain")
    d = mbd[mbd["decoder"].isin(SPECULATIVE) & (mbd["precision"] != "fp32")] if len(mbd) else mbd
    if unc is None or not len(unc) or not len(d):
        _empty(ax, "no uncertainty table or no reduced-precision speculative results")
        return fig
    ties = unc.set_index("domain")["near_ties_per_prompt"].astype(float)
    for (model, decoder, prec, att), g in d.groupby(["model", "decoder", "precision", "attention"], sort=True):
        g = g[g["domain"].isin(ties.index)]
        x = ties.reindex(g["domain"]).to_numpy()
        ax.errorbar(
            x,
            g["match_rate"],
            yerr=_errbar(g["match_rate"], g["ci_low"], g["ci_high"]),
            fmt="o",
            capsize=2,
            alpha=0.8,
            label=f"{decoder} {model} {prec} {att}",
        )
    for dom, x in ties.drop("all", errors="ignore").items():
        ax.annotate(
            dom, (x, 1.0), xytext=(0, 4), textcoords="offset points", rotation=60, fontsize=7, ha="left", va="bottom"
        )
    thr = unc["near_tie_threshold"].iloc[0]
    ax.set_xlabel(
        f"near-ties per response: greedy steps with top-1/top-2 margin < {thr:g} (teacher, "
        f"{unc['scored_precision'].iloc[0]})"
    )
    ax.set_ylabel("exact match rate (Wilson 95% CI)")
    ax.set_ylim(-0.03, 1.25)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    return fig
