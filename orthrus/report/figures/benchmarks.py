"""The benchmark figure (Table 7): lm-eval scores per run, drawn by `orthrus lm-eval table`."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from orthrus.plotting import pyplot


def fig_benchmarks(df: pd.DataFrame):
    """lm-eval benchmark scores (`orthrus lm-eval table`, Table 7; saved there, not by
    `make_figures`): one panel per task/metric (the primary metrics, when any are marked),
    model/decoder groups, a bar per precision/attention, stderr error bars."""
    plt = pyplot()
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
        series = sorted(
            dict.fromkeys(p["precision"] + "/" + p["attention"]), key=lambda s: (order.get(s.split("/")[0], 9), s)
        )
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
    for ax in list(axes.flat)[len(panels) or 1 :]:
        ax.axis("off")
    fig.tight_layout()
    return fig
