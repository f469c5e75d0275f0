"""How often each decoder keeps the reference trajectory: by domain, over time, pairwise, per decoder."""

from __future__ import annotations

import numpy as np
import pandas as pd

from orthrus.contracts import CONTROLS, PRECISION_RANK, SPECULATIVE
from orthrus.decoders import names
from orthrus.plotting import pyplot
from orthrus.report.figures.base import _empty, _errbar, _legend

# a model's own AR trajectory, drawn dashed beside its speculative loops
VIEWS = names(role="view")


def fig_match_by_domain(mbd: pd.DataFrame):
    plt = pyplot()
    d = mbd[mbd["decoder"].isin(SPECULATIVE)] if len(mbd) else mbd
    attentions = sorted(d["attention"].unique()) if len(d) else []
    fig, axes = plt.subplots(1, max(1, len(attentions)), figsize=(6.5 * max(1, len(attentions)), 4.2), squeeze=False)
    if not attentions:
        _empty(axes[0, 0], "no speculative-decoder match results")
        axes[0, 0].set_title("Exact trajectory match by domain")
        return fig
    for ax, att in zip(axes[0], attentions):
        g = d[d["attention"] == att]
        domains = sorted(g["domain"].unique())
        x = np.arange(len(domains))
        series = list(g.groupby(["decoder", "model", "precision"], sort=True))
        width = 0.6 / max(1, len(series))
        for i, ((decoder, model, prec), s) in enumerate(series):
            s = s.set_index("domain").reindex(domains)
            off = (i - (len(series) - 1) / 2) * width
            ax.errorbar(
                x + off,
                s["match_rate"],
                yerr=_errbar(s["match_rate"], s["ci_low"], s["ci_high"]),
                fmt="o",
                capsize=3,
                label=f"{decoder} {model} {prec}",
            )
        ax.set_xticks(x, domains, rotation=45, ha="right")
        ax.set_ylim(-0.03, 1.03)
        ax.set_ylabel("exact match rate (Wilson 95% CI)")
        ax.set_title(f"Speculative decoders vs AR reference, attention={att}")
        _legend(ax, len(series))
    fig.tight_layout()
    return fig


def survival_curve(first_div, match, t_max: int) -> tuple[np.ndarray, np.ndarray]:
    """t = 0..t_max and the fraction of trajectories whose first t tokens all match."""
    fd = np.array([np.inf if (mm or pd.isna(f)) else float(f) for f, mm in zip(first_div, match)])
    t = np.arange(t_max + 1)
    if fd.size == 0:
        return t, np.full(t.shape, np.nan)
    return t, (fd[None, :] >= t[:, None]).mean(axis=1)


def fig_survival(traj: pd.DataFrame):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ax.set_title("Trajectories still identical to the AR reference")
    if not len(traj):
        _empty(ax, "no trajectory comparisons")
        return fig
    for key, g in traj.groupby(["model", "decoder", "precision", "attention"], sort=True):
        t_max = int(max(g["n_tokens"].max(), g["ref_n_tokens"].max(), 1))
        t, s = survival_curve(g["first_divergence"], g["match"].to_numpy(bool), t_max)
        ax.step(t, s, where="post", label="/".join(key), ls="--" if key[1] in VIEWS else "-")
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("t (generated tokens)")
    ax.set_ylabel("fraction matching the first t tokens")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def fig_first_divergence_hist(traj: pd.DataFrame):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ax.set_title("Position of the first divergence")
    d = traj[~traj["match"].astype(bool)] if len(traj) else traj
    if not len(d):
        _empty(ax, "no divergences: every trajectory matches its reference")
        return fig
    hi = int(d["first_divergence"].max())
    bins = np.linspace(0, hi + 1, min(40, hi + 2))
    for key, g in d.groupby(["model", "decoder", "precision", "attention"], sort=True):
        ax.hist(
            g["first_divergence"].astype(float),
            bins=bins,
            histtype="step",
            lw=1.5,
            label=f"{'/'.join(key)} (n={len(g)})",
        )
    ax.set_xlabel("first diverging token position")
    ax.set_ylabel("prompts")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def fig_pairwise_match(pw: pd.DataFrame):
    plt = pyplot()
    keys = ["model", "decoder", "precision", "attention"]
    if not len(pw):
        fig, ax = plt.subplots(figsize=(6.5, 5))
        ax.set_title("Pairwise exact-match rate")
        _empty(ax, "no decoding results")
        return fig
    a = pw.apply(lambda r: "/".join(str(r[f"a_{k}"]) for k in keys), axis=1)
    b = pw.apply(lambda r: "/".join(str(r[f"b_{k}"]) for k in keys), axis=1)
    labels = sorted(set(a) | set(b))
    mat = (
        pd.DataFrame({"a": a, "b": b, "r": pw["match_rate"].astype(float)})
        .pivot_table(index="a", columns="b", values="r", aggfunc="mean")
        .reindex(index=labels, columns=labels)
    )
    size = max(5.0, 0.55 * len(labels) + 3)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    im = ax.imshow(mat.to_numpy(float), vmin=0, vmax=1, cmap="viridis")
    ax.set_xticks(range(len(labels)), labels, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    if len(labels) <= 20:
        for i in range(len(labels)):
            for j in range(len(labels)):
                v = mat.iat[i, j]
                if np.isfinite(v):
                    ax.text(
                        j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="black" if v > 0.6 else "white"
                    )
    fig.colorbar(im, ax=ax, label="exact match rate")
    ax.set_title("Pairwise exact-match rate")
    fig.tight_layout()
    return fig


def fig_decoders(dec: pd.DataFrame):
    """How lossless is each decoder: match rate per precision, decoders and the audit's controls
    (hatched) side by side, Wilson CI; one panel per attention kernel."""
    plt = pyplot()
    attentions = sorted(dec["attention"].unique()) if len(dec) else []
    fig, axes = plt.subplots(
        1, max(1, len(attentions)), figsize=(5.5 * max(1, len(attentions)), 4.2), squeeze=False, sharey=True
    )
    if not attentions:
        _empty(axes[0, 0], "no speculative-decoder match results")
        axes[0, 0].set_title("How lossless is each decoder?")
        return fig
    precisions = sorted(dec["precision"].unique(), key=lambda p: PRECISION_RANK.get(p, len(PRECISION_RANK)))
    order = SPECULATIVE + CONTROLS  # the controls last, hatched
    series = sorted(
        dec.groupby(["decoder", "model"]).groups,
        key=lambda k: (order.index(k[0]) if k[0] in order else len(order), k[1]),
    )
    width = 0.7 / max(1, len(series))
    x = np.arange(len(precisions))
    for ax, att in zip(axes[0], attentions):
        for i, (decoder, model) in enumerate(series):
            s = dec[(dec["attention"] == att) & (dec["decoder"] == decoder) & (dec["model"] == model)]
            s = s.set_index("precision").reindex(precisions)
            off = (i - (len(series) - 1) / 2) * width
            control = decoder in CONTROLS
            ax.bar(
                x + off,
                s["match_rate"],
                width * 0.9,
                yerr=_errbar(s["match_rate"], s["ci_low"], s["ci_high"]),
                capsize=3,
                hatch="//" if control else None,
                label=f"{decoder} ({model}){' control' if control else ''}",
            )
        ax.set_xticks(x, precisions)
        ax.set_ylim(0, 1.05)
        ax.set_title(f"attention={att}")
        ax.set_xlabel("precision")
    axes[0, 0].set_ylabel("trajectories identical to AR (Wilson 95% CI)")
    # outside, right of the last panel: the bars reach from 0 to 1 at every precision
    axes[0, -1].legend(
        fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, ncol=1 + len(series) // 24
    )
    fig.suptitle("How lossless is each decoder?")
    fig.tight_layout()
    return fig
