"""`orthrus figures`: the study's figures from the tables `orthrus analyze` wrote.

    orthrus figures --tables results/tables --out-dir results/figures

Always writes exactly `figure_files(out_dir)`: every name in FIGURES as PNG and PDF. A figure
whose data are empty (no divergences at all in fp32, no perplexities, no forensics) is an
annotated empty panel, never a crash or a missing file.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from orthrus.contracts import FIGURE_FORMATS as FORMATS
from orthrus.contracts import FIGURES, PRECISION_RANK, SPECULATIVE
from orthrus.io import save_figure

_STR_COLS = {c: str for c in ("model", "decoder", "precision", "attention", "domain",
                              "a_model", "a_decoder", "a_precision", "a_attention",
                              "b_model", "b_decoder", "b_precision", "b_attention")}


class FigureError(ValueError):
    pass


def figure_files(out_dir) -> list[Path]:
    out_dir = Path(out_dir)
    return [out_dir / f"{name}.{fmt}" for name in FIGURES for fmt in FORMATS]


# ---- helpers ---------------------------------------------------------------------------
def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _empty(ax, msg: str) -> None:
    ax.text(0.5, 0.5, msg, ha="center", va="center", transform=ax.transAxes, fontsize=11, color="0.3",
            wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def _read_table(tables_dir: Path, name: str, required: bool):
    path = tables_dir / name
    if not path.exists():
        if required:
            raise FigureError(f"table {path} does not exist (run `orthrus analyze` first)")
        return None
    if name.endswith(".parquet"):
        return pd.read_parquet(path)
    return pd.read_csv(path, dtype=_STR_COLS)


def _need(df: pd.DataFrame, cols, name: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise FigureError(f"table {name} lacks column(s) {', '.join(map(repr, missing))}")


def _errbar(rate, low, high):
    rate, low, high = (np.asarray(x, dtype=float) for x in (rate, low, high))
    return np.vstack([np.clip(rate - low, 0, None), np.clip(high - rate, 0, None)])


# ---- figures ---------------------------------------------------------------------------
def fig_match_by_domain(mbd: pd.DataFrame):
    plt = _plt()
    d = mbd[mbd["decoder"].isin(SPECULATIVE)] if len(mbd) else mbd
    attentions = sorted(d["attention"].unique()) if len(d) else []
    fig, axes = plt.subplots(1, max(1, len(attentions)), figsize=(6.5 * max(1, len(attentions)), 4.2),
                             squeeze=False)
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
            ax.errorbar(x + off, s["match_rate"], yerr=_errbar(s["match_rate"], s["ci_low"], s["ci_high"]),
                        fmt="o", capsize=3, label=f"{decoder} {model} {prec}")
        ax.set_xticks(x, domains, rotation=45, ha="right")
        ax.set_ylim(-0.03, 1.03)
        ax.set_ylabel("exact match rate (Wilson 95% CI)")
        ax.set_title(f"Speculative decoders vs AR reference, attention={att}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


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
    plt = _plt()
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
        line = ax.errorbar(xs, ys, yerr=_errbar(ys, lo, hi), fmt="o", capsize=3,
                           label=f"{decoder} {model} {prec} {att} (n={len(g)})")
        fit = curves.get((model, decoder, prec, att))
        if fit is not None:
            grid = np.linspace(lp.min(), lp.max(), 200)
            ax.plot(np.exp(grid), 1 / (1 + np.exp(-(fit[0] + fit[1] * grid))), "-",
                    color=line[0].get_color(), lw=1.2)
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


def survival_curve(first_div, match, t_max: int) -> tuple[np.ndarray, np.ndarray]:
    """t = 0..t_max and the fraction of trajectories whose first t tokens all match."""
    fd = np.array([np.inf if (mm or pd.isna(f)) else float(f) for f, mm in zip(first_div, match)])
    t = np.arange(t_max + 1)
    if fd.size == 0:
        return t, np.full(t.shape, np.nan)
    return t, (fd[None, :] >= t[:, None]).mean(axis=1)


def fig_survival(traj: pd.DataFrame):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ax.set_title("Trajectories still identical to the AR reference")
    if not len(traj):
        _empty(ax, "no trajectory comparisons")
        return fig
    for key, g in traj.groupby(["model", "decoder", "precision", "attention"], sort=True):
        t_max = int(max(g["n_tokens"].max(), g["ref_n_tokens"].max(), 1))
        t, s = survival_curve(g["first_divergence"], g["match"].to_numpy(bool), t_max)
        ax.step(t, s, where="post", label="/".join(key), ls="--" if key[1] == "ar" else "-")
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("t (generated tokens)")
    ax.set_ylabel("fraction matching the first t tokens")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def fig_first_divergence_hist(traj: pd.DataFrame):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ax.set_title("Position of the first divergence")
    d = traj[~traj["match"].astype(bool)] if len(traj) else traj
    if not len(d):
        _empty(ax, "no divergences: every trajectory matches its reference")
        return fig
    hi = int(d["first_divergence"].max())
    bins = np.linspace(0, hi + 1, min(40, hi + 2))
    for key, g in d.groupby(["model", "decoder", "precision", "attention"], sort=True):
        ax.hist(g["first_divergence"].astype(float), bins=bins, histtype="step", lw=1.5,
                label=f"{'/'.join(key)} (n={len(g)})")
    ax.set_xlabel("first diverging token position")
    ax.set_ylabel("prompts")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def fig_tpf_by_domain(tpf: pd.DataFrame):
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(19, 4.2), squeeze=False)
    cols = [("tpf_verify", "tokens / (prefill + verify)"), ("tpf_all", "tokens / (prefill + diffusion + verify)"),
            ("tpf_authors", "(1 + accepted) / (1 + verify), the follow-up paper's")]
    for ax, (col, ylabel) in zip(axes[0], cols):
        ax.set_title(f"Tokens per forward: {ylabel}")
        d = tpf.dropna(subset=[col]) if len(tpf) else tpf
        if not len(d):
            _empty(ax, "no speculative decoding results" if col != "tpf_authors" else "no Orthrus decoding results")
            continue
        domains = sorted(x for x in d["domain"].unique() if x != "all")
        domains += ["all"] if "all" in set(d["domain"]) else []
        x = np.arange(len(domains))
        run = [c for c in ("message", "max_new_tokens") if c in d.columns]
        keys = ["decoder", "model", "precision", "attention"] if "decoder" in d.columns else ["model", "precision", "attention"]
        series = list(d.groupby([*keys, *run], sort=True, dropna=False))
        width = 0.5 / max(1, len(series))
        for i, (key, s) in enumerate(series):
            s = s.set_index("domain").reindex(domains)
            off = (i - (len(series) - 1) / 2) * width
            ax.errorbar(x + off, s[col], yerr=s[f"{col}_ci"].fillna(0).to_numpy(float), fmt="o", capsize=3,
                        label=" ".join(str(k) for k in key if not pd.isna(k)))
        ax.set_xticks(x, domains, rotation=45, ha="right")
        ax.set_ylabel(f"{col} (95% t CI)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def fig_margin_at_divergence(fx: pd.DataFrame | None, near_tie: float | None = None):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ax.set_title("AR top-1/top-2 logit margin at the first divergence")
    d = fx.dropna(subset=["margin_native"]) if fx is not None and len(fx) else None
    if d is None or not len(d):
        _empty(ax, "no divergences with forensics" if fx is not None else "no forensics data")
        return fig
    hi = float(d["margin_native"].max())
    bins = np.linspace(0, hi if hi > 0 else 1.0, 30)
    for key, g in d.groupby(["model", "decoder", "precision", "attention"], sort=True):
        ax.hist(g["margin_native"].astype(float), bins=bins, histtype="step", lw=1.5,
                label=f"{'/'.join(key)} (n={len(g)})")
    if near_tie is not None and math.isfinite(near_tie):
        ax.axvline(near_tie, color="0.4", ls="--", lw=1, label=f"near-tie threshold {near_tie:g}")
    ax.set_xlabel("margin (logits, native precision)")
    ax.set_ylabel("divergences")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def fig_pairwise_match(pw: pd.DataFrame):
    plt = _plt()
    keys = ["model", "decoder", "precision", "attention"]
    if not len(pw):
        fig, ax = plt.subplots(figsize=(6.5, 5))
        ax.set_title("Pairwise exact-match rate")
        _empty(ax, "no decoding results")
        return fig
    a = pw.apply(lambda r: "/".join(str(r[f"a_{k}"]) for k in keys), axis=1)
    b = pw.apply(lambda r: "/".join(str(r[f"b_{k}"]) for k in keys), axis=1)
    labels = sorted(set(a) | set(b))
    mat = pd.DataFrame({"a": a, "b": b, "r": pw["match_rate"].astype(float)}).pivot_table(
        index="a", columns="b", values="r", aggfunc="mean").reindex(index=labels, columns=labels)
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
                    ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7,
                            color="black" if v > 0.6 else "white")
    fig.colorbar(im, ax=ax, label="exact match rate")
    ax.set_title("Pairwise exact-match rate")
    fig.tight_layout()
    return fig


def fig_match_vs_uncertainty(mbd: pd.DataFrame, unc: pd.DataFrame | None):
    """Does a domain's match rate follow how often its teacher meets near-ties? One point per
    domain and reduced-precision Orthrus configuration."""
    plt = _plt()
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
        ax.errorbar(x, g["match_rate"], yerr=_errbar(g["match_rate"], g["ci_low"], g["ci_high"]), fmt="o",
                    capsize=2, alpha=0.8, label=f"{decoder} {model} {prec} {att}")
    for dom, x in ties.drop("all", errors="ignore").items():
        ax.annotate(dom, (x, 1.0), xytext=(0, 4), textcoords="offset points", rotation=60, fontsize=7,
                    ha="left", va="bottom")
    thr = unc["near_tie_threshold"].iloc[0]
    ax.set_xlabel(f"near-ties per response: greedy steps with top-1/top-2 margin < {thr:g} (teacher, "
                  f"{unc['scored_precision'].iloc[0]})")
    ax.set_ylabel("exact match rate (Wilson 95% CI)")
    ax.set_ylim(-0.03, 1.25)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    return fig


def fig_decoders(dec: pd.DataFrame):
    """How lossless is each decoder: match rate per precision, decoders side by side, Wilson CI;
    one panel per attention kernel."""
    plt = _plt()
    attentions = sorted(dec["attention"].unique()) if len(dec) else []
    fig, axes = plt.subplots(1, max(1, len(attentions)), figsize=(5.5 * max(1, len(attentions)), 4.2),
                             squeeze=False, sharey=True)
    if not attentions:
        _empty(axes[0, 0], "no speculative-decoder match results")
        axes[0, 0].set_title("How lossless is each decoder?")
        return fig
    precisions = sorted(dec["precision"].unique(), key=lambda p: PRECISION_RANK.get(p, len(PRECISION_RANK)))
    series = sorted(dec.groupby(["decoder", "model"]).groups, key=lambda k: (SPECULATIVE.index(k[0])
                                                                              if k[0] in SPECULATIVE else 9, k[1]))
    width = 0.7 / max(1, len(series))
    x = np.arange(len(precisions))
    for ax, att in zip(axes[0], attentions):
        for i, (decoder, model) in enumerate(series):
            s = dec[(dec["attention"] == att) & (dec["decoder"] == decoder) & (dec["model"] == model)]
            s = s.set_index("precision").reindex(precisions)
            off = (i - (len(series) - 1) / 2) * width
            ax.bar(x + off, s["match_rate"], width * 0.9, yerr=_errbar(s["match_rate"], s["ci_low"], s["ci_high"]),
                   capsize=3, label=f"{decoder} ({model})")
        ax.set_xticks(x, precisions)
        ax.set_ylim(0, 1.05)
        ax.set_title(f"attention={att}")
        ax.set_xlabel("precision")
    axes[0, 0].set_ylabel("trajectories identical to AR (Wilson 95% CI)")
    axes[0, -1].legend(fontsize=8, loc="lower left")
    fig.suptitle("How lossless is each decoder?")
    fig.tight_layout()
    return fig


def fig_benchmarks(df: pd.DataFrame):
    """lm-eval benchmark scores (`orthrus lm-eval table`, Table 7; saved there, not by
    `make_figures`): one panel per task/metric (the primary metrics, when any are marked),
    model/decoder groups, a bar per precision/attention, stderr error bars."""
    plt = _plt()
    d = df[df["primary"]] if len(df) and df["primary"].any() else df
    panels = list(dict.fromkeys(zip(d["task"], d["metric"]))) if len(d) else []
    ncol = max(1, min(3, len(panels)))
    nrow = max(1, math.ceil(len(panels) / ncol))
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.6 * ncol, 3.4 * nrow), squeeze=False)
    if not panels:
        ax = axes[0][0]
        ax.text(0.5, 0.5, "no benchmark results", ha="center", va="center", transform=ax.transAxes, color="0.3")
        ax.set_xticks([])
        ax.set_yticks([])
    for ax, (task, metric) in zip(axes.flat, panels):
        p = d[(d["task"] == task) & (d["metric"] == metric)]
        groups = list(dict.fromkeys(p["model"] + "/" + p["decoder"]))
        order = {"bf16": 0, "fp16": 1, "fp32": 2}
        series = sorted(dict.fromkeys(p["precision"] + "/" + p["attention"]),
                        key=lambda s: (order.get(s.split("/")[0], 9), s))
        width = 0.8 / max(1, len(series))
        x = np.arange(len(groups))
        for i, s in enumerate(series):
            q = p[(p["precision"] + "/" + p["attention"]) == s]
            lookup = {g: r for g, r in zip(q["model"] + "/" + q["decoder"], q.itertuples())}
            vals = [lookup[g].value if g in lookup else np.nan for g in groups]
            errs = [lookup[g].stderr if g in lookup else np.nan for g in groups]
            ax.bar(x + (i - (len(series) - 1) / 2) * width, vals, width, yerr=np.nan_to_num(errs), capsize=2, label=s)
        ax.set_xticks(x)
        ax.set_xticklabels(groups, rotation=30, ha="right", fontsize=8)
        ax.set_title(f"{task}\n{metric}", fontsize=9)
        ax.set_ylim(0, 1.05)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels) or 1:]:
        ax.axis("off")
    fig.tight_layout()
    return fig


# ---- driver ----------------------------------------------------------------------------
def make_figures(tables_dir, out_dir) -> list[Path]:
    plt = _plt()
    tables_dir, out_dir = Path(tables_dir), Path(out_dir)
    traj = _read_table(tables_dir, "trajectories.parquet", True)
    _need(traj, ["model", "decoder", "precision", "attention", "match", "first_divergence",
                 "n_tokens", "ref_n_tokens", "ppl"], "trajectories.parquet")
    mbd = _read_table(tables_dir, "match_by_domain.csv", True)
    _need(mbd, ["model", "decoder", "precision", "attention", "domain", "match_rate", "ci_low", "ci_high"],
          "match_by_domain.csv")
    tpf = _read_table(tables_dir, "tpf_by_domain.csv", True)
    _need(tpf, ["model", "precision", "attention", "domain", "tpf_verify", "tpf_verify_ci", "tpf_all",
                "tpf_all_ci", "tpf_authors", "tpf_authors_ci"], "tpf_by_domain.csv")
    pw = _read_table(tables_dir, "pairwise_match.csv", True)
    _need(pw, ["a_model", "a_decoder", "a_precision", "a_attention", "b_model", "b_decoder",
               "b_precision", "b_attention", "match_rate"], "pairwise_match.csv")
    dec = _read_table(tables_dir, "decoders.csv", True)
    _need(dec, ["decoder", "model", "precision", "attention", "match_rate", "ci_low", "ci_high"], "decoders.csv")
    fx = _read_table(tables_dir, "forensics_rows.parquet", False)
    if fx is not None:
        _need(fx, ["model", "decoder", "precision", "attention", "margin_native"], "forensics_rows.parquet")
        fx["margin_native"] = pd.to_numeric(fx["margin_native"], errors="coerce")
    unc = _read_table(tables_dir, "uncertainty_by_domain.csv", False)
    if unc is not None:
        _need(unc, ["domain", "near_ties_per_prompt", "near_tie_threshold", "scored_precision"], "uncertainty_by_domain.csv")
    fsum = _read_table(tables_dir, "forensics.csv", False)
    near_tie = None
    if fsum is not None and "near_tie_threshold" in fsum.columns and len(fsum):
        near_tie = float(fsum["near_tie_threshold"].iloc[0])
    traj["match"] = traj["match"].astype(bool)
    traj["ppl"] = pd.to_numeric(traj["ppl"], errors="coerce")

    builders = {
        "match_by_domain": lambda: fig_match_by_domain(mbd),
        "match_vs_ppl": lambda: fig_match_vs_ppl(traj, _read_table(tables_dir, "ppl_logit.csv", True)),
        "survival": lambda: fig_survival(traj),
        "first_divergence_hist": lambda: fig_first_divergence_hist(traj),
        "tpf_by_domain": lambda: fig_tpf_by_domain(tpf),
        "margin_at_divergence": lambda: fig_margin_at_divergence(fx, near_tie),
        "pairwise_match": lambda: fig_pairwise_match(pw),
        "match_vs_uncertainty": lambda: fig_match_vs_uncertainty(mbd, unc),
        "decoders": lambda: fig_decoders(dec),
    }
    assert list(builders) == list(FIGURES)
    written = []
    for name in FIGURES:
        fig = builders[name]()
        written += save_figure(fig, out_dir / name)
        plt.close(fig)
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="orthrus figures", description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", required=True, help="directory written by `orthrus analyze`")
    ap.add_argument("--out-dir", required=True, help="directory for the figures (PNG and PDF)")
    ap.add_argument("--list", action="store_true", help="print the files that would be written and exit")
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join(map(str, figure_files(args.out_dir))))
        return 0
    try:
        written = make_figures(args.tables, args.out_dir)
    except FigureError as exc:
        sys.stderr.write(f"orthrus figures: error: {exc}\n")
        return 2
    for p in written:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
